"""The result report: paired comparisons between a suite's arms (mean difference, 95% bootstrap
CI, Holm-corrected p-value, verdict), the B-vs-A share of the RL gain, per-arm numbers, the
A0/A1 cost-model check, sample rollouts, and appendices with every per-seed number.

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
from noma_prorl_bench.analysis.findings import (
    Stat,
    conclusion,
    cost_model_check,
    default_threshold,
    result_matrix,
    threshold_source,
)
from noma_prorl_bench.analysis.sections import (
    _cell,
    _table,
    arm_lines,
    comparison_lines,
    cost_lines,
    details_lines,
    gain_lines,
    per_seed_lines,
    provenance_lines,
)
from noma_prorl_bench.analysis.plots import save_summary
from noma_prorl_bench.analysis.runlog import (
    NOT_CONFIG,
    Run,
    group_runs,
    load_runs,
)
from noma_prorl_bench.io import safe_files


# a recorded command printed as is: this tool's own entry point, then only characters no shell acts on
_SHELL_SAFE = re.compile(r"(\S*/)?(prorl-bench|python[0-9.]*)( [A-Za-z0-9_./=:,@%+-]+)*")


def as_data(text: Any, limit: int = 300) -> str:
    """Text read from a run or suite directory (untrusted), made safe to print inside a one-line
    markdown code span: newlines and other unprintable characters escaped (`\\n`, `\\u2028`),
    backticks replaced by `'` (so the span cannot be closed early)."""
    s = "".join(c if c.isprintable() else json.dumps(c)[1:-1] for c in str(text)).replace("`", "'")
    return s if len(s) <= limit else s[: limit - 1] + "…"


def _provenance_as_data(settings: dict) -> dict:
    """`settings` with commit, machine and command rendered as data: a commit that is not a hex id
    is escaped, and a command with shell metacharacters is shown as one single-quoted word (so
    pasting it into a shell runs nothing)."""
    out = dict(settings)
    for key in ("commit", "machine"):
        if key in out:
            out[key] = as_data(out[key], 80)
    if "command" in out:
        cmd = str(out["command"])
        out["command"] = cmd if _SHELL_SAFE.fullmatch(cmd) else shlex.quote(as_data(cmd, 2000))
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
        steps = sorted({s.get("step") for s in run.samples if isinstance(s.get("step"), int)})
        for step in dict.fromkeys([steps[0], steps[-1]] if steps else []):
            for s in [s for s in run.samples if s.get("step") == step][:per_end]:
                rows.append([_cell(label, 40), step, _cell(s.get("prompt", "")),
                             _cell(s.get("response", "")), _cell(s.get("answer", "")),
                             _cell(_num(s.get("reward", "")))])
    return rows


def _settings_lines(runs: Sequence[Run], settings: dict | None) -> list[str]:
    lines = ["## Settings", ""]
    if settings:
        lines += _table(["setting", "value"], [[_cell(as_data(k)), f"`{_cell(as_data(json.dumps(v)), 200)}`"]
                                               for k, v in settings.items()]) + [""]
    common = {k: v for k, v in runs[0].config.items() if k not in NOT_CONFIG
              and all(json.dumps(r.config.get(k)) == json.dumps(v) for r in runs)}
    lines += ["Configuration shared by every run (the matrix labels name what varies):", ""]
    lines += [f"`{_cell(as_data(json.dumps(common, sort_keys=True), 10_000), 10_000)}`", ""]
    seeds = sorted({json.dumps(r.seed) for r in runs})
    versions = runs[0].config.get("versions")
    lines += [f"Seeds: {as_data(', '.join(seeds))}.  Versions: `{as_data(json.dumps(versions))}`.", ""]
    return lines


def write_report(run_dirs: Sequence[str | Path], out_md: str | Path, figures_dir: str | Path,
                 settings: dict | None = None, suite: dict | None = None) -> Path:
    """Write `out_md`, `summary.json` and `report.json` beside it, and the figures under
    `figures_dir`. `settings` may hold `score_evals` (K, default 10), `reward_threshold`,
    `smooth_window` (10), `spike_window` (10), `evidence` (False: a smoke run), `caveats` (a
    string or list printed first in the conclusion) and anything to
    print (preset, command, commit, machine). `suite` is a suite.json (arms, pairs,
    comparisons); without it arms are configurations and pairs are seeds."""
    settings = dict(settings or {})
    runs = load_runs(run_dirs)
    if not runs:
        raise ValueError("write_report: no run directories given")
    groups = dict(sorted(group_runs(runs).items()))       # configurations: A0, A1, A2, B, ...
    runs = [r for rs in groups.values() for r in sorted(rs, key=lambda r: json.dumps(r.seed))]
    k = int(settings.get("score_evals", cmp.DEFAULT_K))
    arms = cmp.arm_table(runs, suite)
    for arm, members in arms.items():                     # figures: one line per arm (A1-aa apart from A1)
        for run in members.values():
            run.arm = arm if suite else ""
    comparisons = (suite or {}).get("comparisons") or cmp.default_comparisons(arms)
    rows = cmp.compare(arms, comparisons, k)
    gains = cmp.gain_kept(arms, rows, k)
    cost = cost_model_check(groups)
    evidence = bool(settings.get("evidence", True))
    window, spike = int(settings.get("smooth_window", 10)), int(settings.get("spike_window", 10))
    source = threshold_source(runs)
    threshold = float(settings.get("reward_threshold", default_threshold(groups, source, window)))
    matrix = result_matrix(groups, threshold=threshold, source=source, window=window, k=spike)
    detail = (matrix, threshold, source, window, spike)
    out = Path(out_md)
    safe_files.makedirs(str(out.parent))
    summary_png, ref_png = save_summary(runs, Path(figures_dir) / "summary.png",
                                        by_config=any(len(rs) > 1 for rs in groups.values()))
    rel = lambda p: Path(os.path.relpath(p, out.parent)).as_posix()  # noqa: E731
    n_pairs = min((r["n_pairs"] for r in rows), default=0)
    partial = sum(not r.complete for r in runs)
    lines = ["# Result report", ""] + provenance_lines(_provenance_as_data(settings), len(runs), len(arms), k,
                                                       evidence)
    caveats = settings.get("caveats") or []
    lines += ["## Conclusion", ""] + [f"- {c}" for c in conclusion(
        cost, rows, gains, n_pairs, partial, evidence, [caveats] if isinstance(caveats, str) else caveats)]
    lines += [""] + comparison_lines(rows) + gain_lines(gains) + arm_lines(arms, k)
    lines += [f"![Training summary]({rel(summary_png)})", "", f"![Reference cost]({rel(ref_png)})",
              ""] + cost_lines(cost)
    lines += _appendix(runs, groups, arms, settings, k, rel, detail)
    safe_files.write_text(str(out), "\n".join(lines))       # never through a symlink
    _write_numbers(out, rows, gains, arms, cost, matrix, settings, k, evidence)
    return out


def _appendix(runs, groups, arms, settings, k, rel, detail) -> list[str]:
    lines = ["# Appendix", ""] + per_seed_lines(arms, k) + details_lines(groups, *detail)
    lines += ["## Sample rollouts (earliest and latest logged step)", ""]
    samples = sample_rows(groups)
    lines += (_table(["configuration", "step", "prompt", "response", "answer", "reward"], samples)
              if samples else ["No samples.jsonl in these runs."]) + [""]
    lines += _settings_lines(runs, settings)
    return lines + ["## Runs", ""] + _table(
        ["directory", "label", "steps", "complete", "dropped lines"],
        [[f"`{as_data(rel(r.path))}`", _cell(r.label, 80), len(r.steps), r.complete, len(r.dropped)]
         for r in runs]) + [""]


def _write_numbers(out: Path, rows, gains, arms, cost, matrix, settings, k, evidence) -> None:
    """summary.json (the comparisons contract) and report.json (every number) beside out."""
    keys = ("name", "metric", "n_pairs", "diff", "ci95", "p_holm", "verdict")
    nums = {a: [cmp.run_numbers(r, k) for r in rs.values()] for a, rs in arms.items()}
    summary = {
        "comparisons": [{**{key: r[key] for key in keys}, "unit": cmp.METRICS[r["metric"]][1],
                         "arm": r["arm"], "baseline": r["baseline"], "p": r["p"]} for r in rows],
        "gain_kept": gains,
        "score": {"definition": "mean reward/val over the last K evaluations of a run", "k": k},
        "alpha": 0.05, "holm_family_size": sum(math.isfinite(r["p"]) for r in rows),
        "evidence": evidence,
        "arms": {a: {m: Stat.of([n[m] for n in ns]).mean for m in ("score", "warm", "final_val",
                                                                     "s_step", "s_token")}
                 | {"runs": len(ns)} for a, ns in nums.items()},
        "provenance": {key: settings.get(key) for key in ("commit", "command", "machine", "preset")},
    }
    text = json.dumps(summary, indent=1, default=str)
    safe_files.write_json(str(out.parent / "summary.json"), _nan_to_none(json.loads(text)), indent=1)
    numbers = dict(matrix={g: {m: asdict(st) for m, st in row.items()} for g, row in matrix.items()},
                   cost_model=cost, comparisons=rows, gain_kept=gains)
    safe_files.write_json(str(out.with_suffix(".json")), numbers, indent=1, default=str)


def _nan_to_none(obj: Any) -> Any:
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _nan_to_none(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_nan_to_none(v) for v in obj]
    return obj
