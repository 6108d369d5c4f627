"""The cross-task map: several grid or atlas suites (one per task) read as one beta x treatment map.

    prorl-bench map runs/grid_reverse runs/grid_sort --outdir docs/grid

Each DIR is a suite folder whose suite.json names arms b{beta}-{treatment} (the `grid` or `atlas`
preset, analysis/atlas.py); its task is the `task` field of its runs' config.json (one task per
suite, one suite per task). Per task and beta the map shows the questions the suite's report tests:
reset + keep vs no reset, and each other treatment (hard, soft, asym, step) vs keep. A cell's
numbers are the report's own (`report.suite_rows`, then `atlas.effect_cells`): mean paired effect
on the score with its 95% interval (`stats.paired_interval`), the sign-flip p Holm-adjusted within
the beta's family of that suite, the verdict, mde80, and the pairs it rests on beside the pairs
suite.json lists (a suite still running has cells on fewer pairs; they say so). It writes
OUT/map.md (a plain answer first, then one table per question, each suite's machine from its runs'
machine records, then the Holm families: the reports' per task and beta, and wider ones per task
over every beta x treatment and over the whole map, with what survives them), OUT/map.json
(every number) and OUT/map.png (effect against beta, one line per task). Everything read from a
suite (task names, machine records, arm names) is untrusted text (`untrusted`); files are read
with `safe_files` (no link followed, never a FIFO or device).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Sequence

import numpy as np
from matplotlib.figure import Figure

from noma_prorl_bench.analysis import power, stats
from noma_prorl_bench.analysis.gridmap_read import OTHERS, SuiteMap
from noma_prorl_bench.analysis.plots import check_outputs
from noma_prorl_bench.analysis.tables import markdown_table
from noma_prorl_bench.analysis.untrusted import md_code, md_text, plot_text
from noma_prorl_bench.io import safe_files

SHORT = {"better": "better", "worse": "worse", "no detectable difference": "n.d."}
OUTPUTS = ("map.md", "map.json", "map.png")


# ---------------------------------------------------------------- the numbers


def _finite(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, list):
        return [_finite(x) for x in v]
    return v


def map_data(maps: Sequence[SuiteMap]) -> dict[str, Any]:
    """map.json: per suite its task, K, runs, machines and cells; the answer's text."""
    return {
        "score": "mean reward/val over a run's last K evaluations (K per suite)",
        "interval": "95% paired interval (stats.paired_interval); p: sign-flip, Holm within the beta's family",
        "answer": map_answer(maps),
        "wider_families": wide_holm(maps),
        "suites": [
            {
                "name": m.name,
                "task": m.task,
                "preset": m.preset,
                "commit": m.commit,
                "k": m.k,
                "complete_runs": m.runs,
                "listed_runs": m.listed,
                "machines": [{"machine": line, "runs": n} for line, n in m.machines],
                "cells": [{key: _finite(v) for key, v in c.items()} for c in m.cells.values()],
            }
            for m in maps
        ],
    }


def _betas(maps: Sequence[SuiteMap]) -> list[str]:
    return sorted({b for m in maps for b, _ in m.cells}, key=float)


def _short(cell: dict | None) -> str:
    if cell is None or cell["verdict"] is None:
        return "not tested"
    return SHORT.get(cell["verdict"], str(cell["verdict"]))


def _span(chosen: Sequence[str], tested: Sequence[str]) -> str:
    """'≥ 1' when `chosen` is every tested beta from its smallest up (two or more), '≤ 0.2' when
    every one up to its largest, else the list '0.1, 0.5'."""
    chosen = sorted(chosen, key=float)
    if len(chosen) > 1 and chosen == [b for b in tested if float(b) >= float(chosen[0])]:
        return f"≥ {chosen[0]}"
    if len(chosen) > 1 and chosen == [b for b in tested if float(b) <= float(chosen[-1])]:
        return f"≤ {chosen[-1]}"
    return ", ".join(chosen)


def _per_task(m: SuiteMap, tested: Sequence[str]) -> str:
    by: dict[str, list[str]] = {}
    for b in tested:
        by.setdefault(_short(m.cells.get((b, "keep"))), []).append(b)
    parts = [f"{v} at beta {_span(by[v], tested)}" for v in ("worse", "n.d.", "better") if v in by]
    return md_text(m.task, 60) + ": " + ", ".join(parts)


def map_answer(maps: Sequence[SuiteMap]) -> str:
    """The map's opening: where reset + keep beats, loses to or cannot be told from no reset on
    every task, where the tasks differ, and what the optimizer treatments did against keep."""
    if not maps:
        return ""
    betas = _betas(maps)
    tested = [b for b in betas if all(_short(m.cells.get((b, "keep"))) != "not tested" for m in maps)]
    names = ", ".join(md_text(m.task, 60) for m in maps)
    where = f"on {'both' if len(maps) == 2 else 'all ' + str(len(maps))} tasks ({names})" if len(maps) > 1 else ""
    where = where or f"on {names}"
    agree: dict[str, list[str]] = {}
    differ = []
    for b in tested:
        vs = {_short(m.cells[(b, "keep")]) for m in maps}
        if len(vs) == 1:
            agree.setdefault(vs.pop(), []).append(b)
        else:
            differ.append(b)
    said: list[str] = []
    for verdict, verb in (("better", "beats {}"), ("worse", "loses to {}"), ("n.d.", "cannot be told from {}")):
        if verdict in agree:
            betas_said = _span(agree[verdict], tested) if verdict != "n.d." else ", ".join(agree[verdict])
            said.append(verb.format("it" if said else "no reset") + f" at beta {betas_said}")
    where = where[0].upper() + where[1:]
    if said:
        first = f"**{where}, reset + keep {' and '.join(said)}**"
    elif tested:
        first = f"{where}, reset + keep reaches the same verdict against no reset at no beta"
    else:
        first = f"{where}, reset + keep vs no reset is tested at no beta yet"
    if len(maps) > 1 and differ:
        first += f"; the tasks differ at beta {', '.join(differ)}"
    if tested and len(maps) > 1:
        first += " (" + "; ".join(_per_task(m, tested) for m in maps) + ")"
    first += "."
    untested = [b for b in betas if b not in tested]
    if untested and tested:
        first += f" Beta {', '.join(untested)}: not tested {'on every task' if len(maps) > 1 else 'yet'}."
    return first + " " + _treatments_sentence(maps) + _partial_sentence(maps)


def _treatments_sentence(maps: Sequence[SuiteMap]) -> str:
    """Against keep: a treatment with one verdict in every tested cell is said once; the others
    list their verdicts' places."""
    same: dict[tuple[str, int, int], list[str]] = {}
    mixed, running = [], []
    for t in OTHERS:
        planned = [(m, c) for m in maps for (b, tt), c in m.cells.items() if tt == t]
        # only cells on all their listed pairs speak: a running cell's "n.d." is a lack of seeds
        cells = [(m, c) for m, c in planned if c["verdict"] is not None and c["n_pairs"] >= c["n_listed"]]
        if not cells:
            if any(c["verdict"] is not None or c["n_pairs"] for _, c in planned):
                running.append(f"`{t}`")
            continue
        verdicts = {_short(c) for _, c in cells}
        if len(verdicts) == 1:
            same.setdefault((verdicts.pop(), len(cells), len(planned)), []).append(f"`{t}`")
        else:
            places = [
                f"{_short(c)} on {md_text(m.task, 60)} at beta {c['beta']}" for m, c in cells if _short(c) != "n.d."
            ]
            mixed.append(f"`{t}` is {', '.join(places)} and not distinguishable elsewhere")
    words = {"better": "better than", "worse": "worse than", "n.d.": "not distinguishable from"}
    every = "every task" if len(maps) > 1 else md_text(maps[0].task, 60) if maps else ""
    parts = [
        f"{_join(ts)} {'is' if len(ts) == 1 else 'are'} {words[v]} keep "
        + (f"at every beta on {every}" if n == n_planned else f"in the {n} of {n_planned} cells run on all their pairs")
        for (v, n, n_planned), ts in same.items()
    ]
    later = f" {_join(running)}: too few pairs yet to say." if running else ""
    if not parts and not mixed:
        return ("No optimizer treatment was compared with keep on all its pairs yet." + later).strip()
    return "Against keep: " + "; ".join(parts + mixed) + "." + later


def _join(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _partial_sentence(maps: Sequence[SuiteMap]) -> str:
    short = [c for m in maps for c in m.cells.values() if c["n_pairs"] < c["n_listed"]]
    if not short:
        return ""
    return f" {len(short)} cell{'s' * (len(short) != 1)} rest on fewer pairs than their suite lists (marked)."


def wide_holm(maps: Sequence[SuiteMap]) -> dict[str, dict[str, Any]]:
    """Holm over wider families than the reports' (one per task and beta), from the cells' raw
    sign-flip p: per task over every tested beta x treatment cell of that task, and over every
    tested cell of the map. {family: {"m": questions, "min_pairs", "survivors": [cell numbers]}}."""
    keys = ("task", "beta", "treatment", "baseline", "diff", "p", "p_holm", "verdict")
    tested = [{**c, "task": m.task} for m in maps for c in m.cells.values() if math.isfinite(c.get("p", math.nan))]
    families = {f"task {m.task}": [c for c in tested if c["task"] == m.task] for m in maps}
    if len(maps) > 1:
        families["whole map"] = tested
    out = power.holm_families(families)
    for fam in out.values():
        fam["survivors"] = [{k: c[k] for k in keys} for c in fam["survivors"]]
    return out


def wide_holm_lines(maps: Sequence[SuiteMap]) -> list[str]:
    """map.md's section on the Holm families: the reports' (per task and beta), then wider ones."""
    lines = [
        "## Holm families",
        "",
        "The tables' verdicts are their suites' reports': one Holm family per task and beta (the questions "
        "at that beta: keep vs none, each other treatment vs keep). Over wider families, from the same raw "
        "sign-flip p-values (family-wise 5%; map.json `wider_families`):",
        "",
    ]
    for name, fam in wide_holm(maps).items():
        said = "; ".join(
            f"{md_text(c['task'], 60)} beta {c['beta']} {c['treatment']} vs {c['baseline']} {SHORT[c['verdict']]} "
            f"({_num(c['diff'])}, p {c['p']:.4f}, p_holm {c['p_holm']:.3f})"
            for c in fam["survivors"]
        )
        n, m = fam["min_pairs"], fam["m"]
        floor = 2.0 / 2**n if 0 < n <= stats.EXACT_MAX_N else 0.0  # the smallest exact sign-flip p
        why = (
            f" (with {n} pairs the smallest sign-flip p is 2/2^{n} = {floor:.4f}, and {m} x {floor:.4f} >= 0.05: "
            "no question of this family can survive; it needs more seeds)"
            if floor and m * floor >= stats.ALPHA
            else ""
        )
        where = "the whole map" if name == "whole map" else md_text(name[len("task ") :], 60)
        lines.append(
            f"- {where}, one family of {m} questions: "
            + (
                f"{len(fam['survivors'])} {'survive' if len(fam['survivors']) > 1 else 'survives'}: {said}."
                if said
                else f"none survives{why}."
            )
        )
    return lines + [""]


# ---------------------------------------------------------------- markdown


def _num(v: float) -> str:
    return f"{v:+.3f}" if isinstance(v, float) and math.isfinite(v) else "—"


def cell_text(c: dict | None) -> str:
    """'+0.024 [+0.012, +0.036] better (p_holm 0.010, 10 pairs)'; 'n.d. (..., mde80 0.020)';
    a cell on fewer pairs than listed says '7 of 10 pairs'."""
    if c is None:
        return "—"
    pairs = f"{c['n_pairs']} pairs" if c["n_pairs"] >= c["n_listed"] else f"**{c['n_pairs']} of {c['n_listed']} pairs**"
    if c["verdict"] is None:
        return f"not tested ({pairs})"
    lo, hi = c["ci95"]
    mde = ""
    if c["verdict"] == "no detectable difference":
        mde = (
            ", mde80 ∞" if c["mde80"] == math.inf else f", mde80 {c['mde80']:.3f}" if math.isfinite(c["mde80"]) else ""
        )
    p = f"p_holm {c['p_holm']:.3f}" if math.isfinite(c["p_holm"]) else "p_holm —"
    # a verdict whose skew-widened interval reaches 0 says so (the report's own mark)
    reaches = (
        "; CI includes 0"
        if c["verdict"] in ("better", "worse") and all(math.isfinite(v) for v in (lo, hi)) and lo <= 0 <= hi
        else ""
    )
    return (
        f"{_num(c['diff'])} [{_num(lo)}, {_num(hi)}] {SHORT.get(c['verdict'], c['verdict'])} "
        f"({p}{mde}{reaches}, {pairs})"
    )


def map_lines(maps: Sequence[SuiteMap], figure: str = "map.png") -> list[str]:
    """map.md: the answer, the suites with their machines, the keep-vs-none table, the
    treatment-vs-keep table, the figure."""
    betas = _betas(maps)
    tasks = [md_text(m.task, 60) for m in maps]
    lines = ["# Cross-task map: reference resets x beta", "", map_answer(maps), ""]
    lines += [
        "Each cell is one question a suite's report tests, with that report's numbers: the mean paired "
        "effect on the score (a run's mean validation reward over its last K evaluations) [95% interval], "
        "the verdict at family-wise 5% (sign-flip p, Holm within the beta's family of that suite; `n.d.` = "
        "no detectable difference, with the effect it could have detected at 80% power, mde80), and the "
        "pairs of seeds it rests on (in bold when fewer than the suite lists: a suite still running).",
        "",
        "## Suites",
        "",
    ]
    for m in maps:
        machines = "; ".join(f"{md_text(line, 240)} ({n} run{'s' * (n != 1)})" for line, n in m.machines)
        lines.append(
            f"- {md_text(m.task, 60)}: suite {md_code(m.name, 80)} (preset {md_code(m.preset, 40)}"
            + (f", commit {md_code(m.commit[:12], 20)}" if m.commit else "")
            + f"), K = {m.k}, {m.runs} complete runs of {m.listed} listed; machine: {machines or 'no complete run'}"
        )
    lines += ["", "## Reset + keep vs no reset", ""]
    lines += markdown_table(
        ["beta", *tasks], [[b, *(cell_text(m.cells.get((b, "keep"))) for m in maps)] for b in betas]
    )
    lines += ["", "## Each optimizer treatment vs keep (both arms reset the reference at the same cadence)", ""]
    rows = [
        [f"{t}", b, *(cell_text(m.cells.get((b, t))) for m in maps)]
        for t in OTHERS
        for b in betas
        if any((b, t) in m.cells for m in maps)
    ]
    lines += markdown_table(["treatment", "beta", *tasks], rows) if rows else ["No optimizer treatment was run."]
    lines += [""] + wide_holm_lines(maps)
    lines += [f"![Effect against beta, one line per task]({figure})", ""]
    return lines


# ---------------------------------------------------------------- figure


def _series(m: SuiteMap, t: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str]]:
    cells = sorted(
        (c for (b, tt), c in m.cells.items() if tt == t and c["verdict"] is not None), key=lambda c: float(c["beta"])
    )
    x = np.array([float(c["beta"]) for c in cells])
    y = np.array([c["diff"] for c in cells], dtype=float)
    err = np.array([[c["diff"] - c["ci95"][0], c["ci95"][1] - c["diff"]] for c in cells], dtype=float).reshape(-1, 2).T
    return x, y, np.nan_to_num(err), [c["verdict"] for c in cells]


def map_figure(maps: Sequence[SuiteMap]) -> Figure:
    """Top: reset + keep vs no reset against beta (log x), one line per task with its 95%
    intervals; filled markers where the verdict is better or worse, open where not. Bottom: one
    small panel per optimizer treatment vs keep, the same way."""
    others = [t for t in OTHERS if any(tt == t for m in maps for _, tt in m.cells)]
    fig = Figure(figsize=(max(10.0, 3.2 * len(others)), 8.5))
    gs = fig.add_gridspec(2, max(1, len(others)), height_ratios=(1.4, 1.0))
    top = fig.add_subplot(gs[0, :])
    bottom = [fig.add_subplot(gs[1, j]) for j in range(len(others))]
    for ax in bottom[1:]:
        ax.sharey(bottom[0])  # the treatments on one scale
    panels = [(top, "keep", "reset + keep vs no reset")] + [
        (ax, t, f"{t} vs keep (both reset)") for ax, t in zip(bottom, others)
    ]
    for ax, t, title in panels:
        for i, m in enumerate(maps):
            x, y, err, verdicts = _series(m, t)
            if not x.size:
                continue
            color, shift = f"C{i}", 1.0 + 0.03 * (i - (len(maps) - 1) / 2)  # side by side at one beta
            ax.errorbar(x * shift, y, yerr=err, color=color, marker="", capsize=3, label=plot_text(m.task, 40))
            found = np.array([v in ("better", "worse") for v in verdicts])
            ax.plot((x * shift)[found], y[found], "o", color=color, markersize=7)
            ax.plot((x * shift)[~found], y[~found], "o", color=color, markerfacecolor="white", markersize=7)
        ax.axhline(0.0, color="gray", linewidth=0.9)
        ax.set_xscale("log")
        betas = _betas(maps)
        ax.set_xticks([float(b) for b in betas], betas)
        ax.minorticks_off()
        ax.set_xlabel("beta (KL coefficient, log scale)")
        ax.set_ylabel("score effect [95% CI]" if t == "keep" else "effect")
        ax.set_title(title, fontsize=10 if t != "keep" else 11)
        ax.grid(alpha=0.3)
    top.legend(title="task (filled: better or worse; open: no detectable difference)", fontsize=8, title_fontsize=8)
    fig.suptitle("Reference resets across tasks: mean paired effect on the score against beta", fontsize=12)
    fig.tight_layout(rect=(0, 0, 1, 0.96))
    return fig


def write_map(maps: Sequence[SuiteMap], outdir: str | Path) -> list[Path]:
    """Write map.md, map.json and map.png into `outdir` (every path checked first: no link, no
    directory or FIFO in their place) from the suites' maps (`read_suites`)."""
    out = Path(outdir)
    paths = [out / name for name in OUTPUTS]
    check_outputs(paths, "--outdir")
    safe_files.makedirs(str(out))
    safe_files.save_figure(map_figure(maps), str(paths[2]), dpi=110, bbox_inches="tight")
    safe_files.write_json(str(paths[1]), map_data(maps), indent=1)
    safe_files.write_text(str(paths[0]), "\n".join(map_lines(maps, paths[2].name)))
    return paths
