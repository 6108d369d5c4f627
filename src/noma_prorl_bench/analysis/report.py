"""The result report: a matrix over configurations x seeds, the A0/A1 cost-model check, the
B-vs-A success criterion, the reset-semantics ranking, sample rollouts and a conclusion.

Reads saved run directories only (via `runlog`). The numbers are pure functions of `Run`
objects, so a test can recompute each one from `metrics.jsonl`:

    runs = load_runs(dirs); groups = group_runs(runs)
    rows = result_matrix(groups, threshold=0.5, source="val")   # label -> {metric: Stat}
    write_report(dirs, "out/report.md", "out/figures", settings={"preset": "quick"})

Each seed gives one value per metric (`runlog.run_stats`, definitions there); a matrix cell is
mean ± std (min–max) over seeds, std with ddof=1; NaN values (e.g. a threshold never reached)
are left out and counted. The threshold source is "val" when every run logged `reward/val`.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any, Sequence

from noma_prorl_bench.analysis.findings import (
    COLUMNS,
    Stat,
    b_vs_a,
    conclusion,
    cost_model_check,
    default_threshold,
    reset_ranking,
    result_matrix,
    threshold_source,
)
from noma_prorl_bench.analysis.plots import save_summary
from noma_prorl_bench.analysis.runlog import (
    NOT_CONFIG,
    Run,
    find_run_dirs,
    group_runs,
    load_runs,
)


def _cell(text: Any, limit: int = 60) -> str:
    s = " ".join(str(text).split()).replace("|", "\\|")
    return s if len(s) <= limit else s[: limit - 1] + "…"


def _num(x: Any) -> Any:
    return f"{x:.4g}" if isinstance(x, float) else x


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return out + ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]


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
        lines += _table(["setting", "value"], [[_cell(k), f"`{_cell(json.dumps(v), 200)}`"]
                                               for k, v in settings.items()]) + [""]
    common = {k: v for k, v in runs[0].config.items() if k not in NOT_CONFIG
              and all(json.dumps(r.config.get(k)) == json.dumps(v) for r in runs)}
    lines += ["Configuration shared by every run (the matrix labels name what varies):", ""]
    lines += [f"`{_cell(json.dumps(common, sort_keys=True), 10_000)}`", ""]
    seeds = sorted({json.dumps(r.seed) for r in runs})
    versions = runs[0].config.get("versions")
    lines += [f"Seeds: {', '.join(seeds)}.  Versions: `{json.dumps(versions)}`.", ""]
    return lines


def _matrix_lines(groups, matrix, threshold, source, window, k) -> list[str]:
    what = ("validation reward (`reward/val`)" if source == "val" else
            f"train reward (`reward/mean`, trailing mean over {window} steps)")
    reach = (f"first step where the {what} reaches {threshold:.4g}" if math.isfinite(threshold)
             else "not computed (no positive reward to set a threshold)")
    lines = ["## Result matrix", "",
             f"Mean ± std (min–max) over seeds; `[n/N]` = seeds that reached the threshold. "
             f"Steps to threshold: {reach}. KL = the estimate used in the loss (for B: to the "
             f"old policy, not a reference); spike = max KL within {k} steps after a reset. "
             "Step time and policy tokens/s (`count/tokens_policy` ÷ `time/step`; reference "
             "tokens are not counted as throughput) are per-run medians; peak RSS is the per-run "
             "max.", ""]
    header = ["configuration", "seeds", "complete"] + list(COLUMNS.values())
    rows = []
    for label, runs in groups.items():
        cells = [m.fmt(counts=(name == "steps_to_thr")) for name, m in matrix[label].items()]
        rows.append([_cell(label, 80), len(runs), sum(r.complete for r in runs)] + cells)
    return lines + _table(header, rows) + [""]


def _section(title: str, intro: str, header: Sequence[str], rows: list, empty: str) -> list[str]:
    body = _table(header, rows) if rows else [empty]
    return [f"## {title}", "", intro, ""] + body + [""]


def _yes(flag: bool | None) -> str:
    return {None: "too few seeds", True: "yes", False: "no"}[flag]


def _comparison_lines(cost: list[dict], bva: list[dict], ranking: list[dict]) -> list[str]:
    """The cost-model, B-vs-A and reset-ranking sections."""
    lines = _section(
        "Cost model check (A0 vs A1)",
        "predicted A0 step = A1 (rollout + train + other) + A0 reference units per step × "
        "(A1 `time/ref` ÷ A1 reference units per step), with units = `count/tokens_ref` (or "
        "`count/ref_fwd` when token counters are missing) and other = step − rollout − ref − "
        "train; predicted ratio = predicted A0 step ÷ measured A1 step; measured ratio = A0 "
        "step ÷ A1 step (means over steps, then over seeds).",
        ["A0", "A1", "unit", "E×M", "A0 ref fwd/step", "predicted ratio", "measured ratio",
         "timing noise (2 SE)", "configs also differ in"],
        [[_cell(c["a0"], 40), _cell(c["a1"], 40), c["unit"], c["expected_ref_fwd"],
          f"{c['ref_fwd_a0']:.3g}", f"{c['predicted_ratio']:.3f}", f"{c['measured_ratio']:.3f}",
          f"±{c['ratio_noise']:.3f}", ", ".join(c["differs_in"]) or "—"] for c in cost],
        "No A0/A1 pair in these runs.")
    lines += _section(
        "B (no reference) vs A",
        "Criterion (seed 000): B keeps ≥ 80% (and ≥ 90%) of A's final validation reward at "
        "lower median step time.",
        ["B", "A", "B final val", "A final val", "kept", "step time change", "≥80% held",
         "≥90% held", "configs also differ in"],
        [[_cell(b["b"], 40), _cell(b["a"], 40), f"{b['val_b']:.4g}", f"{b['val_a']:.4g}",
          f"{b['fraction']:.1%}", f"{b['step_change']:+.1%}", _yes(b["held_80"]),
          _yes(b["held_90"]), ", ".join(b["differs_in"]) or "—"] for b in bva],
        "No B run in these runs.")
    rows = [[i + 1, m["semantics"], _cell(m["label"], 60), m["final_val"].fmt(),
             "best" if i == 0 else _yes(m["separated_from_best"])]
            for bucket in ranking for i, m in enumerate(bucket["members"])]
    return lines + _section(
        "Reset semantics ranking",
        "By mean final validation reward within each set of configurations that differ only in "
        "`opt_reset`; 'beyond seed spread' = the seed ranges of this semantics and the best one "
        "do not overlap.",
        ["rank", "opt_reset", "configuration", "final val reward",
         "below best beyond seed spread"], rows,
        "No configurations differing only in `opt_reset`.")


def write_report(run_dirs: Sequence[str | Path], out_md: str | Path, figures_dir: str | Path,
                 settings: dict | None = None, suite: dict | None = None) -> Path:
    """Write `out_md` (+ the same numbers as JSON beside it) and the figures under `figures_dir`.
    `settings` may hold `reward_threshold`, `smooth_window` (10), `spike_window` (10) and
    anything to print (preset, commands)."""
    settings = dict(settings or {})
    runs = load_runs(run_dirs)
    if not runs:
        raise ValueError("write_report: no run directories given")
    groups = dict(sorted(group_runs(runs).items()))       # A0, A1, A2, B, ... by label
    runs = [r for rs in groups.values() for r in sorted(rs, key=lambda r: json.dumps(r.seed))]
    window, k = int(settings.get("smooth_window", 10)), int(settings.get("spike_window", 10))
    source = threshold_source(runs)
    threshold = float(settings.get("reward_threshold", default_threshold(groups, source, window)))
    matrix = result_matrix(groups, threshold=threshold, source=source, window=window, k=k)
    cost, bva = cost_model_check(groups), b_vs_a(groups, matrix)
    ranking = reset_ranking(groups, matrix)
    out = Path(out_md)
    out.parent.mkdir(parents=True, exist_ok=True)
    summary_png, ref_png = save_summary(runs, Path(figures_dir) / "summary.png",
                                        by_config=any(len(rs) > 1 for rs in groups.values()))
    rel = lambda p: Path(os.path.relpath(p, out.parent)).as_posix()  # noqa: E731
    lines = ["# Result report", "", f"{len(runs)} runs in {len(groups)} configurations.", ""]
    lines += ["## Conclusion", ""] + [f"- {c}" for c in conclusion(cost, bva, ranking, groups)]
    lines += ["", f"![Training summary]({rel(summary_png)})", "",
              f"![Reference cost]({rel(ref_png)})", ""]
    lines += _matrix_lines(groups, matrix, threshold, source, window, k)
    lines += _comparison_lines(cost, bva, ranking)
    lines += ["## Sample rollouts (earliest and latest logged step)", ""]
    samples = sample_rows(groups)
    lines += (_table(["configuration", "step", "prompt", "response", "answer", "reward"], samples)
              if samples else ["No samples.jsonl in these runs."]) + [""]
    lines += _settings_lines(runs, settings)
    lines += ["## Runs", ""] + _table(
        ["directory", "label", "steps", "complete", "dropped lines"],
        [[f"`{rel(r.path)}`", _cell(r.label, 80), len(r.steps), r.complete, len(r.dropped)]
         for r in runs]) + [""]
    out.write_text("\n".join(lines), encoding="utf-8")
    numbers = dict(threshold=threshold, threshold_source=source, smooth_window=window,
                   spike_window=k, matrix={g: {m: asdict(s) for m, s in row.items()}
                                           for g, row in matrix.items()},
                   cost_model=cost, b_vs_a=bva, reset_ranking=ranking)
    out.with_suffix(".json").write_text(json.dumps(numbers, indent=1, default=lambda o: (
        asdict(o) if isinstance(o, Stat) else str(o))))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """`prorl-bench report DIR...`: regenerate report.md from saved logs only."""
    import argparse

    parser = argparse.ArgumentParser(prog="prorl-bench report", description=(
        "Write report.md (and report.json, figures/) from saved run directories."))
    parser.add_argument("dirs", nargs="+", metavar="DIR",
                        help="a suite folder (searched for run directories) or run directories")
    parser.add_argument("--out", help="report path (default: DIR/report.md for a single DIR)")
    parser.add_argument("--figures", help="figure folder (default: figures/ beside the report)")
    parser.add_argument("--settings", help="JSON settings to print (default: DIR/settings.json "
                                           "when it exists)")
    parser.add_argument("--threshold", type=float, help="reward threshold (default: 0.8 x best "
                                                        "mean final val reward)")
    args = parser.parse_args(argv)
    run_dirs = []
    for d in map(Path, args.dirs):
        found = [d] if (d / "config.json").is_file() else find_run_dirs(d) if d.is_dir() else []
        if not found:
            parser.error(f"DIR: {d} is not a run directory and holds none")
        run_dirs += found
    if args.out is None and len(args.dirs) > 1:
        parser.error("--out is required with several DIR arguments")
    out = Path(args.out or Path(args.dirs[0]) / "report.md")
    settings_file = Path(args.settings) if args.settings else Path(args.dirs[0]) / "settings.json"
    try:
        settings = json.loads(settings_file.read_text()) if settings_file.is_file() else {}
    except json.JSONDecodeError as err:
        parser.error(f"--settings: {settings_file}: {err}")
    if args.threshold is not None:
        settings["reward_threshold"] = args.threshold
    try:
        path = write_report(run_dirs, out, args.figures or out.parent / "figures", settings)
    except (OSError, ValueError) as err:
        parser.error(str(err))
    print(f"wrote {path}")
    return 0
