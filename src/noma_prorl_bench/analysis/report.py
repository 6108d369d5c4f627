"""The result report: what it found first (verdicts with effect and CI, nulls with the effect
they could have detected), the identical-by-construction checks, paired comparisons between a
suite's arms per Holm family (mean difference, 95% paired interval, Holm-corrected p-value, verdict,
mde80), the B-vs-A share of the RL gain, per-arm numbers, the atlas map (beta x reference
treatment) when the arms are named b{beta}-{treatment}, the A0/A1 cost-model check (interleaved
runs only), sample rollouts, and appendices with every per-seed number.

Reads saved run directories only (via `runlog`); the statistics are pure functions of `Run`
objects (`compare.py`, `stats.py`), so a test can recompute each one from `metrics.jsonl`:

    write_report(dirs, "out/report.md", "out/figures", settings={"preset": "quick"},
                 suite=json.load(open("suite/suite.json")))     # also writes summary.json

A run's score is its mean validation reward over its last K evaluations (`settings`
"score_evals", default 10). Tables print fixed decimals with units, at most 8 columns.
"""

from __future__ import annotations

import json
import math
import os
import re
import shlex
from dataclasses import asdict
from pathlib import Path
from typing import Any, Sequence

from noma_prorl_bench.analysis import compare as cmp
from noma_prorl_bench.analysis.atlas import atlas_section, figure_paths, parse_arms
from noma_prorl_bench.analysis.findings import (
    Stat,
    answer,
    conclusion,
    cost_model_check,
    default_threshold,
    headline,
    result_matrix,
    threshold_origin,
    threshold_source,
)
from noma_prorl_bench.analysis.plateau import plateau_lines
from noma_prorl_bench.analysis.plots import check_outputs, save_summary
from noma_prorl_bench.analysis.runlog import (
    NOT_CONFIG,
    Run,
    base_label,
    group_runs,
    load_runs,
)
from noma_prorl_bench.analysis.sections import (
    _cell,
    arm_lines,
    check_lines,
    comparison_lines,
    cost_lines,
    details_lines,
    gain_lines,
    per_seed_lines,
    provenance_lines,
)
from noma_prorl_bench.analysis.tables import markdown_table, whole_words
from noma_prorl_bench.analysis.untrusted import md_code, md_text, visible
from noma_prorl_bench.io import safe_files

# a recorded command printed as is: this tool's own entry point, then only characters no shell acts on
_SHELL_SAFE = re.compile(r"(\S*/)?(prorl-bench|python[0-9.]*)( [A-Za-z0-9_./=:,@%+-]+)*")


def _provenance_as_data(settings: dict) -> dict:
    """`settings` with commit, machine and command rendered as data: the commit as a code span,
    the machine as escaped text (`untrusted`), and a command with shell metacharacters (or
    unprintable characters, or over 2000 characters) as one single-quoted word, so pasting it
    into a shell runs nothing."""
    out = dict(settings)
    if "commit" in out:
        out["commit"] = md_code(out["commit"], 80)
    if "machine" in out:
        out["machine"] = md_text(out["machine"], 240)
    if "command" in out:
        cmd = str(out["command"])
        safe = len(cmd) <= 2000 and cmd.isprintable() and _SHELL_SAFE.fullmatch(cmd)
        out["command"] = cmd if safe else shlex.quote(visible(cmd, 2000))
    return out


def _num(x: Any) -> Any:
    return f"{x:.3f}" if isinstance(x, float) else x


def sample_rows(groups: dict[str, list[Run]], per_end: int | None = None) -> list[list[Any]]:
    """From each configuration's first run with samples: the first `per_end` samples (2, or 1
    past 6 configurations) of its earliest sample step and of its latest one."""
    per_end = per_end or (2 if len(groups) <= 6 else 1)
    rows = []
    for label, runs in groups.items():
        run = next((r for r in runs if r.samples), None)
        if run is None:
            continue
        steps = sorted({s["step"] for s in run.samples if isinstance(s.get("step"), int)})
        for step in dict.fromkeys([steps[0], steps[-1]] if steps else []):
            for s in [s for s in run.samples if s.get("step") == step][:per_end]:
                rows.append(
                    [
                        _cell(whole_words(label, 80), 80),
                        step,
                        _cell(s.get("prompt", "")),
                        _cell(s.get("response", "")),
                        _cell(s.get("answer", "")),
                        _cell(_num(s.get("reward", ""))),
                    ]
                )
    return rows


def _settings_lines(runs: Sequence[Run], settings: dict | None) -> list[str]:
    lines = ["## Settings", ""]
    if settings:
        lines += markdown_table(
            ["setting", "value"], [[_cell(k, 80), md_code(json.dumps(v), 200)] for k, v in settings.items()]
        ) + [""]
    common = {
        k: v
        for k, v in runs[0].config.items()
        if k not in NOT_CONFIG and all(json.dumps(r.config.get(k)) == json.dumps(v) for r in runs)
    }
    lines += ["Configuration shared by every run (the matrix labels name what varies):", ""]
    lines += [md_code(json.dumps(common, sort_keys=True), 10_000), ""]
    seeds = sorted({json.dumps(r.seed) for r in runs})
    versions = runs[0].config.get("versions")
    lines += [f"Seeds: {md_text(', '.join(seeds))}.  Versions: {md_code(json.dumps(versions))}.", ""]
    return lines


def portable(value: Any, base: Path) -> Any:
    """`value` with no machine path (strings, also inside `--flag=PATH` and command lines; lists
    and dicts recursively): an absolute path inside `base` (the report's folder) becomes relative
    to it, one inside the working directory relative to that, any other its last component."""
    if isinstance(value, dict):
        return {k: portable(v, base) for k, v in value.items()}
    if isinstance(value, list):
        return [portable(v, base) for v in value]
    if not isinstance(value, str) or os.sep not in value:
        return value

    def rel(token: str) -> str:
        head, eq, tail = token.rpartition("=") if token.startswith("-") else ("", "", token)
        if not os.path.isabs(tail):
            return token
        for root in (base, Path.cwd()):
            if Path(tail).resolve().is_relative_to(root.resolve()):
                return head + eq + Path(os.path.relpath(tail, root)).as_posix()
        return head + eq + Path(tail).name

    return " ".join(rel(t) for t in value.split(" "))


def failed_checks(report_md: str | Path) -> list[str]:
    """Names of the identical-by-construction checks that failed, from the summary.json beside
    `report_md` (the suite's exit code)."""
    summary = json.loads(safe_files.read_bytes(str(Path(report_md).parent / "summary.json")))
    return [c["name"] for c in summary.get("checks", []) if c.get("identical") is False]


TIMING_NOTE = (
    "No step-time or per-token comparisons: these arms did not run interleaved in "
    "time (arms run at different times see different machine loads, so their timings "
    "would compare the machine, not the method). The `cost` preset runs A0, A1, A2 "
    "and B alternating seed by seed in one job for that."
)


# long: the report's steps in reading order (numbers, outputs checked, figures, markdown, JSON) share its locals
def write_report(
    run_dirs: Sequence[str | Path],
    out_md: str | Path,
    figures_dir: str | Path,
    settings: dict | None = None,
    suite: dict | None = None,
) -> Path:
    """Write `out_md`, `summary.json` and `report.json` beside it, and the figures under
    `figures_dir`. `settings` may hold `score_evals` (K, default 10), `reward_threshold`,
    `smooth_window` (10), `spike_window` (10), `evidence` (False: a smoke run), `interleaved`
    (True: arms alternated in time: timing rows and the cost-model check are made), `caveats`
    (printed first in the conclusion) and anything to print (preset, command, commit, machine;
    absolute paths made relative). `suite` is a suite.json (arms, pairs, comparisons, families,
    checks); without it arms are configurations, pairs seeds, and the family "outcome"."""
    out = Path(out_md)
    settings = portable(dict(settings or {}), out.parent.resolve())
    runs = load_runs(run_dirs)
    if not runs:
        raise ValueError("write_report: no run directories given")
    # the commits the runs were trained at (each run's config.json), beside the report's own
    made = {str((r.config.get("versions") or {}).get("git_commit")) for r in runs} - {"None"}
    if made:
        settings["run_commits"] = sorted(made)
    groups, runs, k, arms, rows = suite_rows(runs, settings, suite)
    for arm, members in arms.items():  # figures: one line per arm (A1-aa apart from A1)
        for run in members.values():
            run.arm = arm if suite else ""
    checks = [list(c) for c in (suite or {}).get("checks") or []]
    interleaved = bool(settings.get("interleaved", False))
    check_rows = [cmp.identity_check(arms, *c) for c in checks]
    gains = cmp.gain_kept(arms, rows, k)
    cost = cost_model_check(groups) if interleaved else []
    evidence = bool(settings.get("evidence", True))
    window, spike = int(settings.get("smooth_window", 10)), int(settings.get("spike_window", 10))
    source = threshold_source(runs)
    threshold = float(settings.get("reward_threshold", default_threshold(groups, source, window)))
    matrix = result_matrix(groups, threshold=threshold, source=source, window=window, k=spike)
    detail = (matrix, threshold, source, window, spike, threshold_origin(groups, source, window, settings))
    figs, grid = Path(figures_dir), parse_arms(arms)
    check_outputs([out, out.parent / "summary.json", out.with_suffix(".json")])  # all before writing any
    # the reference-cost figure only where the arms differ in how they get the reference log-probs
    ref_kinds = sorted({base_label(r.config) for r in runs})
    with_ref = len(ref_kinds) > 1
    check_outputs(
        [
            figs / "summary.png",
            *([figs / "ref_cost.png"] if with_ref else []),
            *(figure_paths(grid, figs) if grid else []),
        ],
        "--figures",
    )
    safe_files.makedirs(str(out.parent))
    twins = {c["arm"]: c["baseline"] for c in check_rows if c["identical"]}
    in_arms = [r for members in arms.values() for r in members.values()]
    ordered = in_arms + [r for r in runs if all(r is not x for x in in_arms)]  # matrix order
    figures = save_summary(
        ordered,
        Path(figures_dir) / "summary.png",
        by_config=any(len(rs) > 1 for rs in groups.values()),
        throughput=interleaved,
        twins=twins,
        ref_cost=with_ref,
    )
    rel = lambda p: Path(os.path.relpath(p, out.parent)).as_posix()  # noqa: E731
    n_pairs = min((r["n_pairs"] for r in rows), default=0)
    partial = sum(not r.complete for r in runs)
    opening = answer(rows, evidence)
    lines = ["# Result report", ""] + ([opening, ""] if opening else []) + [headline(rows, check_rows, evidence), ""]
    lines += provenance_lines(_provenance_as_data(settings), len(runs), len(arms), k, evidence)
    caveats = settings.get("caveats") or []
    lines += ["## Conclusion", ""] + [
        f"- {c}"
        for c in conclusion(
            cost, rows, gains, n_pairs, partial, evidence, [caveats] if isinstance(caveats, str) else caveats
        )
    ]
    lines += [""] + check_lines(check_rows)
    lines += atlas_section(arms, rows, k, Path(figures_dir), rel)
    lines += comparison_lines(rows, "" if interleaved else TIMING_NOTE)
    lines += plateau_lines(arms, rows)
    lines += gain_lines(gains) + arm_lines(arms, k)
    lines += [f"![Training summary]({rel(figures[0])})", ""]
    lines += (
        [f"![Reference cost]({rel(figures[1])})", ""]
        if with_ref
        else [f"No reference-cost figure: every arm gets its reference log-probs the same way ({ref_kinds[0]}).", ""]
    )
    lines += cost_lines(cost, interleaved) if any(base_label(r.config).startswith("A0") for r in runs) else []
    lines += _appendix(runs, groups, arms, settings, k, rel, detail)
    safe_files.write_text(str(out), "\n".join(lines))  # never through a symlink
    _write_numbers(out, rows, check_rows, gains, arms, cost, matrix, settings, k, evidence)
    return out


def suite_rows(
    runs: Sequence[Run], settings: dict, suite: dict | None
) -> tuple[dict[str, list[Run]], list[Run], int, dict[str, dict[Any, Run]], list[dict[str, Any]]]:
    """(configurations, runs in their order, K, arms, comparison rows) of loaded runs: the numbers a
    report of these runs prints (every reader of a suite's statistics, the cross-task map too, gets
    them here, so the same runs give the same numbers). `settings` gives `score_evals` (K) and
    `interleaved`; `suite` the arms, pairs, comparisons, families and checks (write_report)."""
    groups = dict(sorted(group_runs(runs).items()))  # configurations: A0, A1, A2, B, ...
    runs = [r for rs in groups.values() for r in sorted(rs, key=lambda r: json.dumps(r.seed))]
    k = int(settings.get("score_evals", cmp.DEFAULT_K))
    arms = _matrix_order(cmp.arm_table(runs, suite), suite)
    listed = (suite or {}).get("comparisons") or cmp.default_comparisons(arms)
    comparisons = list({json.dumps(c): c for c in listed}.values())  # one row per comparison, however often listed
    checks = [list(c) for c in (suite or {}).get("checks") or []]
    interleaved = bool(settings.get("interleaved", False))
    rows = cmp.compare(arms, comparisons, k, (suite or {}).get("families"), checks, interleaved)
    return groups, runs, k, arms, rows


def _matrix_order(arms: dict, suite: dict | None) -> dict:
    """`arms` in the order suite.json lists them (the matrix's order); unlisted arms last."""
    order = list(dict.fromkeys(r["arm"] for r in (suite or {}).get("runs", [])))
    return {a: arms[a] for a in sorted(arms, key=lambda a: order.index(a) if a in order else len(order))}


def _appendix(runs, groups, arms, settings, k, rel, detail) -> list[str]:
    lines = ["# Appendix", ""] + per_seed_lines(arms, k) + details_lines(groups, *detail)
    lines += ["## Sample rollouts (earliest and latest logged step)", ""]
    samples = sample_rows(groups)
    lines += (
        markdown_table(["configuration", "step", "prompt", "response", "answer", "reward"], samples)
        if samples
        else ["No samples.jsonl in these runs."]
    ) + [""]
    lines += _settings_lines(runs, settings)
    return (
        lines
        + ["## Runs", ""]
        + markdown_table(
            ["directory", "label", "steps", "complete", "dropped lines"],
            [[md_code(rel(r.path)), _cell(r.label, 80), len(r.steps), r.complete, len(r.dropped)] for r in runs],
        )
        + [""]
    )


#: keys of a summary.json comparison (the contract every suite's summary.json follows)
SUMMARY_KEYS = tuple("name family beta metric n_pairs diff ci95 p p_holm verdict mde80 margin fragile".split())
PROVENANCE_KEYS = (
    "commit",
    "run_commits",
    "command",
    "machine",
    "machine_info",
    "preset",
    "interleaved",
    "seeds",
    "steps",
    "jobs",
    "score_evals",
    "wall_seconds_this_invocation",
)


def _write_numbers(out: Path, rows, check_rows, gains, arms, cost, matrix, settings, k, evidence) -> None:
    """summary.json (the comparisons contract) and report.json (every number) beside out."""
    nums = {a: [cmp.run_numbers(r, k) for r in rs.values()] for a, rs in arms.items()}
    fams = {}
    for r in rows:
        fams[r["family"]] = r["family_size"]
    summary = {
        "comparisons": [
            {
                **{key: r.get(key) for key in SUMMARY_KEYS},
                "unit": cmp.METRICS[r["metric"]][1],
                "arm": r["arm"],
                "baseline": r["baseline"],
                "ci_excludes_0_uncorrected": r["ci_excludes_0"],
                "mde80_reachable": r["mde80"] != math.inf,
            }
            for r in rows
        ],
        "checks": [
            {
                "name": c["name"],
                "identical": c["identical"],
                "arm": c["arm"],
                "baseline": c["baseline"],
                "pairs": c["pairs"],
                "first_difference": c["first_difference"],
            }
            for c in check_rows
        ],
        "provenance": {
            key: settings.get(key)
            for key in PROVENANCE_KEYS
            if key in settings or key in ("commit", "command", "machine", "preset")
        },
        "gain_kept": gains,
        "score": {"definition": "mean reward/val over the last K evaluations of a run", "k": k},
        "alpha": 0.05,
        "families": fams,
        "holm_family_size": max(fams.values(), default=0),
        "evidence": evidence,
        "arms": {
            a: {m: Stat.of([n[m] for n in ns]).mean for m in ("score", "warm", "final_val", "s_step", "s_token")}
            | {"runs": len(ns)}
            for a, ns in nums.items()
        },
    }
    text = json.dumps(summary, indent=1, default=str)
    safe_files.write_json(str(out.parent / "summary.json"), _nan_to_none(json.loads(text)), indent=1)
    numbers = dict(
        matrix={g: {m: asdict(st) for m, st in row.items()} for g, row in matrix.items()},
        cost_model=cost,
        comparisons=rows,
        checks=check_rows,
        gain_kept=gains,
    )
    safe_files.write_json(str(out.with_suffix(".json")), numbers, indent=1, default=str)


def _nan_to_none(obj: Any) -> Any:
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _nan_to_none(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_nan_to_none(v) for v in obj]
    return obj
