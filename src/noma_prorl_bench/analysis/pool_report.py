"""`prorl-bench pool`'s numbers and files: every question of the run sets (analysis/pool_sets.py)
pooled over their machines (analysis/pooled.py), in one Holm family per study, written as
OUT/pooled.json and OUT/pooled.md.

The study's family is every question it asks (the quick suite: both betas' questions together, 4):
Holm over all of them is the primary answer. The suite's own families (one per beta) are kept as a
labelled secondary view: a smaller family is a lower bar. Each machine's own answer is given too, in
the study's family, with its margin: the verdicts a single machine's 8 seeds gave, and how many of
its seeds they rest on.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from noma_prorl_bench.analysis import pooled, power, stats
from noma_prorl_bench.analysis.pool_sets import UNRECORDED, RunSet
from noma_prorl_bench.analysis.tables import markdown_table
from noma_prorl_bench.analysis.untrusted import md_code, md_text


def _strata(sets: Sequence[RunSet], q: dict[str, str]) -> dict[str, dict[str, float]]:
    """machine label -> pair -> difference of question q; sets of one machine merge (a seed run
    twice on one machine would count twice: ValueError)."""
    out: dict[str, dict[str, float]] = {}
    for i, s in enumerate(sets):
        arm, base = s.scores.get(q["arm"], {}), s.scores.get(q["baseline"], {})
        label = machine_labels(sets)[i]
        col = out.setdefault(label, {})
        for pair in sorted(set(arm) & set(base)):
            if pair in col:
                raise ValueError(f"{s.path}: seed pair {pair} of {q['name']!r} ran twice on one machine")
            col[pair] = arm[pair] - base[pair]
    return out


def machine_labels(sets: Sequence[RunSet]) -> list[str]:
    """M1, M2, ... per distinct recorded machine line, in the order of first appearance; every
    set whose machine is unrecorded gets a label of its own (nothing says it is another's)."""
    keys = [s.machine if s.machine != UNRECORDED else f"{UNRECORDED} {i}" for i, s in enumerate(sets)]
    order = list(dict.fromkeys(keys))
    return [f"M{order.index(k) + 1}" for k in keys]


def _finite(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {k: _finite(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_finite(x) for x in v]
    return v


def _one_machine(tabs: list[np.ndarray], j: int, res: float) -> list[dict[str, Any]]:
    """Every question on machine column j alone, Holm over the study's family, with margins."""
    cols = [t[:, [j]][np.isfinite(t[:, j])] for t in tabs]
    ps = [pooled.pooled_p(c)[0] if c.size else math.nan for c in cols]
    diffs = [float(c.mean()) if c.size else math.nan for c in cols]
    verdicts = pooled.family_verdicts(ps, diffs)
    out = []
    for i, c in enumerate(cols):
        lo, hi = stats.paired_interval(c[:, 0], resolution=res or None) if c.size else (math.nan, math.nan)
        mg, exact = pooled.margin(cols, i) if c.size else (None, False)
        out.append(
            dict(
                n=int(c.size),
                diff=diffs[i],
                ci95=[lo, hi],
                p=ps[i],
                p_holm=stats.holm(ps)[i],
                verdict=verdicts[i],
                margin=mg,
                margin_exact=exact,
                fragile=mg is not None and mg <= 1,
            )
        )
    return out


def _pooled_row(tabs: list[np.ndarray], i: int, res: float, effect: float | None = None) -> dict[str, Any]:
    """Question i pooled: effect, interval, stratified p, margin, heterogeneity and power (its
    Holm p and verdicts are set by `analyse`, which sees the whole family)."""
    tab = tabs[i]
    est, lo, hi = pooled.pooled_interval(tab, resolution=res or 1e-3)
    mg, exact = pooled.margin(tabs, i)
    sd = pooled.within_sd(tab)
    p, p_exact = pooled.pooled_p(tab)
    counts = tuple(int(c) for c in np.isfinite(tab).sum(axis=1))
    target = abs(est) if effect is None else abs(effect)
    return dict(
        n_pairs=int(np.isfinite(tab).sum()),
        n_seeds=len(counts),
        diff=est,
        ci95=[lo, hi],
        p=p,
        p_exact=p_exact,
        margin=mg,
        margin_exact=exact,
        fragile=mg is not None and mg <= 1,
        p_independent=pooled.flip_p(tab[np.isfinite(tab)])[0],
        heterogeneity_p=pooled.heterogeneity_p(tab),
        sd_within=sd,
        mde90=power.mde(sd, counts, len(tabs)),
        effect_for_90=target,
        pairs_for_90=power.pairs_needed(sd, target, len(tabs)) if math.isfinite(target) else math.nan,
    )


def analyse(sets: Sequence[RunSet], effect: float | None = None) -> dict[str, Any]:
    """pooled.json's content: machines, then per question the per-machine answers and the pooled
    one (module docstring); `effect`: the effect the pairs for 90% power are sized for (default
    each question's |pooled diff|)."""
    questions = sets[0].questions
    res = max(s.resolution for s in sets)
    strata = [_strata(sets, q) for q in questions]
    tabs = [pooled.table(st)[2] for st in strata]
    columns = list(strata[0])
    per_machine = {lab: _one_machine(tabs, j, res) for j, lab in enumerate(columns)}
    rows = [dict(q, **_pooled_row(tabs, i, res, effect)) for i, q in enumerate(questions)]
    ps, diffs = [r["p"] for r in rows], [r["diff"] for r in rows]
    fam_holm, fam_verdict = _family_view(questions, ps, diffs)
    for i, (row, p_adj, verdict) in enumerate(zip(rows, stats.holm(ps), pooled.family_verdicts(ps, diffs))):
        row.update(
            machines={lab: per_machine[lab][i] for lab in columns},
            p_holm=p_adj,
            family_size=len(rows),
            verdict=verdict,
            p_holm_suite_family=fam_holm[i],
            verdict_suite_family=fam_verdict[i],
        )
    machines = [
        dict(label=lab, machine=s.machine, dir=s.path, source=s.source, runs=s.runs, commits=s.commits)
        for lab, s in zip(machine_labels(sets), sets)
    ]
    return _finite(
        dict(
            machines=machines,
            k=sets[0].k,
            resolution=res,
            family="every question of the study",
            family_size=len(rows),
            alpha=stats.ALPHA,
            effect=effect,
            questions=rows,
        )
    )


def _family_view(questions: Sequence[dict], ps: Sequence[float], diffs: Sequence[float]) -> tuple[list, list]:
    """Holm p and verdict of each question within its suite's own family (one per beta)."""
    p_adj, verdict = [math.nan] * len(ps), [""] * len(ps)
    for fam in dict.fromkeys(q["family"] for q in questions):
        idx = [i for i, q in enumerate(questions) if q["family"] == fam]
        adj = stats.holm([ps[i] for i in idx])
        for i, a in zip(idx, adj):
            p_adj[i], verdict[i] = a, stats.verdict(diffs[i], a)
    return p_adj, verdict


def _num(v: Any, dec: int = 3) -> str:
    return f"{v:+.{dec}f}" if isinstance(v, (int, float)) and math.isfinite(v) else "—"


def _p(v: Any) -> str:
    if not isinstance(v, (int, float)):
        return "—"
    return "< 0.0001" if v < 1e-4 else f"{v:.4f}"


def _ci(row: dict) -> str:
    lo, hi = row["ci95"]
    return f"{_num(row['diff'])} [{_num(lo)}, {_num(hi)}]"


def _margin(row: dict) -> str:
    mg = row.get("margin")
    # not exact: no set of 1 or 2 changes the verdict, the greedy search found `mg`: 3 to mg
    span = f"{mg}" if row.get("margin_exact") or mg == 3 else f"3-{mg}"
    text = "none found" if mg is None else span + ("" if row.get("margin_exact") else " (greedy bound)")
    return text + (" **fragile**" if row.get("fragile") else "")


def _mde(row: dict) -> str:
    v = row.get("mde90")
    return "∞" if v is None and row.get("sd_within") is not None else f"{v:.3f}" if v is not None else "—"


def pooled_answer(data: dict) -> str:
    """The opening sentence: each question's pooled verdict, effect [CI], Holm p in the study's family."""
    parts = []
    for r in data["questions"]:
        hetero = r.get("heterogeneity_p")
        parts.append(
            f"{md_text(r['name'], 80)}: **{r['verdict']}**, {_ci(r)} reward, p_holm {_p(r['p_holm'])}, "
            f"margin {_margin(r)}"
            + (f"; machines differ (heterogeneity p {hetero:.3f})" if hetero is not None and hetero < 0.05 else "")
        )
    return (
        f"**Answer** ({len(data['machines'])} run sets, {data['family_size']} questions in one Holm family). "
        + "; ".join(parts)
        + "."
    )


def _target(data: dict) -> str:
    e = data.get("effect")
    return "the pooled effect" if e is None else f"an effect of {e:g} reward"


def _sets_lines(data: dict) -> list[str]:
    return ["## Run sets", ""] + markdown_table(
        ["label", "machine (as the runs record it)", "folder", "read from", "runs", "trained at"],
        [
            [
                m["label"],
                md_text(m["machine"], 240),
                md_text(m["dir"], 120),
                m["source"] + (" (scores to 0.001)" if m["source"] == "report table" else ""),
                m["runs"],
                md_text(", ".join(c[:7] for c in m["commits"]) or "unrecorded", 80),
            ]
            for m in data["machines"]
        ],
    )


POOLED_HEADER = ["pooled diff [95% CI]", "p", "p (Holm, all)", "verdict", "margin", "heterogeneity p", "mde90"]


def _pooled_lines(data: dict) -> list[str]:
    res, m = data.get("resolution") or 0, data["family_size"]
    labels = list(dict.fromkeys(x["label"] for x in data["machines"]))
    text = (
        f"Score = mean validation reward over the last {data['k']} evaluations; effect = mean of every "
        "paired difference (arm − baseline, each run pair once); p = sign-flip test with each seed's "
        "differences flipped together on every machine (exact); Holm over every question of the study; "
        "margin = the fewest differences whose sign flip or removal changes the verdict (**fragile** at "
        "1); heterogeneity p = within-seed permutation test of the machines' means; mde90 = the effect "
        f"this design detects with 90% power at 0.05/{m}; pairs for 90% = the pairs a one-machine study "
        f"needs to detect {_target(data)} with 90% power in this family. Methods: "
        "`src/noma_prorl_bench/analysis/pooled.py`, docs/statistics.md."
        + (f" Scores read from report tables are rounded to {res:g}." if res else "")
    )
    body = [
        [md_text(r["name"], 80)]
        + [f"{r['machines'][lab]['n']}: {_num(r['machines'][lab]['diff'])}" for lab in labels]
        + [_ci(r), _p(r["p"]), _p(r["p_holm"]), r["verdict"], _margin(r), _p(r["heterogeneity_p"]), _mde(r)]
        + [f"{r['pairs_for_90']:.0f}" if r.get("pairs_for_90") is not None else f"> {power.MAX_PAIRS}"]
        for r in data["questions"]
    ]
    header = ["question"] + [f"{lab} n: diff" for lab in labels] + POOLED_HEADER + ["pairs for 90%"]
    return [f"## Pooled answers: one family of {m} questions", "", text, ""] + markdown_table(header, body)


def _machine_lines(data: dict) -> list[str]:
    intro = "The same family (every question), one machine's seeds: its own verdict and the seeds it rests on."
    return ["## Each machine alone, in the study's family", "", intro, ""] + markdown_table(
        ["question", "machine", "n", "diff [95% CI]", "p", "p (Holm, all)", "verdict", "margin"],
        [
            [md_text(r["name"], 80), lab, a["n"], _ci(a), _p(a["p"]), _p(a["p_holm"]), a["verdict"], _margin(a)]
            for r in data["questions"]
            for lab, a in r["machines"].items()
        ],
    )


def _secondary_lines(data: dict) -> list[str]:
    intro = (
        "Holm within each of the suite's families (one per beta): a smaller family, a lower bar. The last "
        "column is the sign-flip p with every run pair flipped on its own, as if one seed's runs on two "
        "machines were independent; they share the seed's warm start and data, and their scores correlate "
        "across machines, so the pooled p flips a seed's differences together."
    )
    return ["## Secondary view: the suite's own families", "", intro, ""] + markdown_table(
        ["question", "family", "p (Holm, family)", "verdict (family)", "verdict (all)", "p if seeds were independent"],
        [
            [md_text(r["name"], 80), md_text(r["family"], 40), _p(r["p_holm_suite_family"])]
            + [r["verdict_suite_family"], r["verdict"], _p(r["p_independent"])]
            for r in data["questions"]
        ],
    )


def pool_lines(data: dict, command: str = "") -> list[str]:
    """pooled.md: the answer, the machines, the pooled table, each machine's own answers, the
    suite's per-beta families as the secondary view, and what the numbers are."""
    lines = ["# Pooled over machines", "", pooled_answer(data), ""]
    if command:
        lines += [f"Made with {md_code(command, 600)}.", ""]
    for part in (_sets_lines, _pooled_lines, _machine_lines, _secondary_lines):
        lines += part(data) + [""]
    return lines


def write_pool(outdir: str, data: dict, command: str = "") -> list[str]:
    """OUT/pooled.json and OUT/pooled.md (safe_files: no link followed); their paths."""
    import os  # noqa: PLC0415

    from noma_prorl_bench.io.safe_files import makedirs, write_json, write_text  # noqa: PLC0415

    makedirs(outdir)
    paths = [os.path.join(outdir, "pooled.json"), os.path.join(outdir, "pooled.md")]
    write_json(paths[0], dict(data, command=command))
    write_text(paths[1], "\n".join(pool_lines(data, command)))
    return paths
