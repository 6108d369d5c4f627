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
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from .plots import save_summary
from .runlog import (NOT_CONFIG, Run, config_key, find_run_dirs, group_runs, load_runs, reduce_key,
                     run_stats, threshold_curve)

#: per-run metric (runlog.run_stats) -> matrix column header
COLUMNS = {
    "final_val": "final val reward", "steps_to_thr": "steps to threshold",
    "kl_mean": "KL mean", "kl_max": "KL max", "kl_spike": "KL spike after reset",
    "ref_fwd": "ref fwd / step", "step_time": "median step time (s)",
    "tokens_per_s": "policy tokens/s", "peak_mem": "peak RSS (MB)",
}
#: fields not counted as differences when pairing B with an A configuration: B has no reference,
#: so neither its KL term nor reference resets apply (they only break ties between A configs)
B_IGNORE = frozenset({"variant", "beta", "kl_estimator", "k2_mode", "kl_in", "target_kl",
                      "kl_horizon", "reset_every", "opt_reset", "soft_factor", "reset_to",
                      "ref_update", "ref_mix_alpha", "reset_kl_above", "reset_kl_min_gap",
                      "reset_on_stall", "stall_min_delta", "reset_opt_step",
                      "reset_lr_schedule", "reset_kl_coef", "preset"})


@dataclass
class Stat:
    """Spread over seeds of one per-run number: n counts finite values, n_total all runs."""

    mean: float
    std: float
    min: float
    max: float
    n: int
    n_total: int

    @classmethod
    def of(cls, values: Sequence[float]) -> "Stat":
        v = np.asarray([x for x in values if x is not None and math.isfinite(x)], dtype=float)
        if v.size == 0:
            return cls(math.nan, math.nan, math.nan, math.nan, 0, len(values))
        std = float(v.std(ddof=1)) if v.size > 1 else math.nan
        return cls(float(v.mean()), std, float(v.min()), float(v.max()), int(v.size), len(values))

    def fmt(self, counts: bool = False) -> str:
        if self.n == 0:
            text = "—"
        elif self.n == 1:
            text = f"{self.mean:.4g}"
        else:
            text = f"{self.mean:.4g} ± {self.std:.2g} ({self.min:.4g}–{self.max:.4g})"
        return f"{text} [{self.n}/{self.n_total}]" if counts else text


# ---------------------------------------------------------------- matrix


def threshold_source(runs: Sequence[Run]) -> str:
    """'val' when every run logged `reward/val`, else 'train'."""
    return "val" if runs and all(r.has("reward/val") for r in runs) else "train"


def default_threshold(groups: dict[str, list[Run]], source: str, window: int = 10) -> float:
    """0.8 x the best configuration's mean (over seeds) last value of the threshold curve
    (final val reward, or final trailing-mean train reward); NaN if none is positive."""
    def final(run: Run) -> float:
        values = threshold_curve(run, source, window)[1]
        return float(values[-1]) if values.size else math.nan

    finals = [Stat.of([final(r) for r in rs]).mean for rs in groups.values()]
    finals = [f for f in finals if math.isfinite(f)]
    best = max(finals, default=math.nan)
    return round(0.8 * best, 4) if math.isfinite(best) and best > 0 else math.nan


def result_matrix(groups: dict[str, list[Run]], *, threshold: float, source: str,
                  window: int = 10, k: int = 10) -> dict[str, dict[str, Stat]]:
    """Configuration label -> metric -> Stat over that configuration's seeds."""
    matrix = {}
    for label, runs in groups.items():
        per_run = [run_stats(r, threshold=threshold, source=source, window=window, k=k)
                   for r in runs]
        matrix[label] = {m: Stat.of([p[m] for p in per_run]) for m in COLUMNS}
    return matrix


# ---------------------------------------------------------------- comparisons


def _keys(groups: dict[str, list[Run]]) -> dict[str, dict[str, str]]:
    return {label: config_key(runs[0].config) for label, runs in groups.items()}


def _variant(key: dict[str, str]) -> str:
    return json.loads(key["variant"]).split()[0]          # "A0", "A1", "A2", "B"


def closest(key: dict[str, str], candidates: dict[str, dict[str, str]],
            ignore: frozenset = frozenset({"variant"})) -> tuple[str, list[str]] | None:
    """Candidate label differing from `key` in the fewest fields outside `ignore` (ties: fewest
    differing ignored fields, then the first candidate), and those non-ignored fields.
    None without candidates."""
    best, best_score = None, None
    for label, other in candidates.items():
        diff = sorted(n for n in set(key) | set(other) if key.get(n) != other.get(n))
        counted = [n for n in diff if n not in ignore]
        score = (len(counted), len(diff) - len(counted))
        if best_score is None or score < best_score:
            best, best_score = (label, counted), score
    return best


def _group_means(runs: Sequence[Run], key: str) -> float:
    return Stat.of([reduce_key(r, key, np.mean) for r in runs]).mean


def _sem(runs: Sequence[Run], key: str) -> float:
    """Standard error of the mean of `key` over all logged steps of `runs` (pooled)."""
    v = np.concatenate([r.series(key)[1] for r in runs])
    return float(v.std(ddof=1) / math.sqrt(v.size)) if v.size > 1 else math.nan


def cost_model_check(groups: dict[str, list[Run]]) -> list[dict[str, Any]]:
    """For each A0 configuration and its closest A1 one (means over steps, then over seeds):
      f_tok       = A1 time/ref ÷ A1 count/tokens_ref            (seconds per reference token)
      predicted A0 step = A1 (rollout + train + other) + A0 count/tokens_ref × f_tok,
                  other = step − rollout − ref − train
      predicted ratio = predicted A0 step ÷ A1 step;  measured ratio = A0 step ÷ A1 step.
    `ratio_noise` = 2 × the pooled per-step standard error of (A0 step − A1 step) ÷ A1 step,
    a rough timing-noise scale (steps are not independent, so it understates the noise).
    Tokens make the model independent of how forwards are chunked (A0 runs E×M forwards over
    minibatches, E×N×T tokens); without token counters it falls back to forwards
    (count/ref_fwd)."""
    keys = _keys(groups)
    a1 = {lab: k for lab, k in keys.items() if _variant(k) == "A1"}
    out = []
    for lab0, k0 in keys.items():
        match = closest(k0, a1) if _variant(k0) == "A0" else None
        if match is None:
            continue
        lab1, diff = match
        r0, r1 = groups[lab0], groups[lab1]
        m = {f"{s}{i}": _group_means(rs, f"time/{s}") for i, rs in ((0, r0), (1, r1))
             for s in ("rollout", "ref", "train", "step")}
        unit = "tokens_ref" if all(r.has("count/tokens_ref") for r in r0 + r1) else "ref_fwd"
        u0, u1 = _group_means(r0, f"count/{unit}"), _group_means(r1, f"count/{unit}")
        pred_ref = u0 * m["ref1"] / u1 if u1 > 0 else math.nan
        pred_step = m["step1"] - m["ref1"] + pred_ref
        e_m = int(r0[0].config.get("ppo_epochs", 1)) * int(r0[0].config.get("minibatches", 1))
        out.append(dict(a0=lab0, a1=lab1, differs_in=diff, unit=unit, expected_ref_fwd=e_m,
                        ref_fwd_a0=_group_means(r0, "count/ref_fwd"),
                        ref_fwd_a1=_group_means(r1, "count/ref_fwd"), **m,
                        predicted_a0_step=pred_step, predicted_ratio=pred_step / m["step1"],
                        measured_ratio=m["step0"] / m["step1"],
                        ratio_noise=2 * math.hypot(_sem(r0, "time/step"), _sem(r1, "time/step"))
                        / m["step1"]))
    return out


def b_vs_a(groups: dict[str, list[Run]], matrix: dict[str, dict[str, Stat]]) -> list[dict]:
    """Each B configuration against its closest A configuration (A1 preferred, then A2, A0):
    fraction of A's mean final val reward kept and the change in median step time; the seed's
    criterion holds at level L when fraction >= L and B's step time is lower."""
    keys = _keys(groups)
    order = {"A1": 0, "A2": 1, "A0": 2}
    a_keys = dict(sorted(((lab, k) for lab, k in keys.items() if _variant(k) in order),
                         key=lambda item: order[_variant(item[1])]))
    out = []
    for lab_b, kb in keys.items():
        match = closest(kb, a_keys, B_IGNORE) if _variant(kb) == "B" else None
        if match is None:
            continue
        lab_a, diff = match
        vb, va = matrix[lab_b]["final_val"].mean, matrix[lab_a]["final_val"].mean
        tb, ta = matrix[lab_b]["step_time"].mean, matrix[lab_a]["step_time"].mean
        frac = vb / va if va > 0 else math.nan
        faster = tb < ta
        out.append(dict(b=lab_b, a=lab_a, differs_in=diff, val_b=vb, val_a=va, fraction=frac,
                        step_b=tb, step_a=ta, step_change=tb / ta - 1.0,
                        held_80=bool(frac >= 0.8 and faster), held_90=bool(frac >= 0.9 and faster)))
    return out


def separated(a: Stat, b: Stat) -> bool | None:
    """True when the seed ranges [min, max] do not overlap; None with fewer than 2 seeds."""
    if a.n < 2 or b.n < 2:
        return None
    return a.max < b.min or b.max < a.min


def reset_ranking(groups: dict[str, list[Run]], matrix: dict[str, dict[str, Stat]]) -> list[dict]:
    """Configurations that differ only in `opt_reset` (variant A), ranked by mean final val;
    for each the separation of the best from every other (seed ranges overlap or not)."""
    buckets: dict[str, list[tuple[str, str]]] = {}
    for lab, key in _keys(groups).items():
        if _variant(key) == "B" or "opt_reset" not in key:
            continue
        rest = json.dumps({n: v for n, v in key.items() if n != "opt_reset"}, sort_keys=True)
        buckets.setdefault(rest, []).append((json.loads(key["opt_reset"]), lab))
    out = []
    for members in buckets.values():
        if len({sem for sem, _ in members}) < 2:
            continue
        ranked = sorted(members, key=lambda m: -np.nan_to_num(matrix[m[1]]["final_val"].mean,
                                                               nan=-np.inf))
        best = matrix[ranked[0][1]]["final_val"]
        rows = [dict(semantics=sem, label=lab, final_val=matrix[lab]["final_val"],
                     separated_from_best=None if i == 0 else
                     separated(best, matrix[lab]["final_val"]))
                for i, (sem, lab) in enumerate(ranked)]
        out.append(dict(members=rows))
    return out


# ---------------------------------------------------------------- conclusion


def _cost_sentences(cost: list[dict]) -> list[str]:
    lines = []
    for c in cost:
        r, p = c["measured_ratio"], c["predicted_ratio"]
        size = (f"took {r:.2f}× A1's step time" if abs(r - 1) > max(c["ratio_noise"], 0.02) else
                f"showed no measurable step-time difference from A1 ({r:.2f}×, timing noise "
                f"±{c['ratio_noise']:.2f})")
        lines.append(f"Reference cost: A0 ({c['ref_fwd_a0']:.3g} reference forwards per step "
                     f"against A1's {c['ref_fwd_a1']:.3g}) {size}; the stage-time cost model "
                     f"predicted {p:.2f}× ({p / r - 1:+.0%} off).")
    return lines


def _bva_sentences(bva: list[dict]) -> list[str]:
    lines = []
    for b in bva:
        if not math.isfinite(b["fraction"]):
            lines.append(f"B vs A: cannot be judged ({b['a']} has no positive final val reward).")
            continue
        verdict = ("held at both the 80% and 90% levels" if b["held_90"] else
                   "held at 80% but not at 90%" if b["held_80"] else "did not hold")
        speed = (f"{-b['step_change']:.0%} lower" if b["step_change"] < 0 else
                 f"{b['step_change']:.0%} higher (B was not faster)")
        lines.append(f"No-reference (B) kept {b['fraction']:.0%} of {b['a']}'s final validation "
                     f"reward with {speed} median step time: the success criterion {verdict}.")
    if any(math.isfinite(b["fraction"]) for b in bva):
        held = any(b["held_80"] for b in bva)
        lines.append(f"Wedge A (\"no-ref preserves most gains\"): "
                     f"{'supported' if held else 'not supported'} by these runs.")
    return lines


def _ranking_sentences(ranking: list[dict]) -> list[str]:
    lines, sep_any = [], False
    for bucket in ranking:
        rows = bucket["members"]
        seps = [r["separated_from_best"] for r in rows[1:]]
        order = " > ".join(f"{r['semantics']} {r['final_val'].mean:.3g}" for r in rows)
        if any(s is None for s in seps):
            lines.append(f"Reset semantics ({order}): too few seeds to judge against seed noise.")
        elif any(seps):
            sep_any = True
            beaten = ", ".join(r["semantics"] for r in rows[1:] if r["separated_from_best"])
            lines.append(f"Reset semantics ({order}): {rows[0]['semantics']} beats {beaten} "
                         "beyond the seed spread (seed ranges do not overlap).")
        else:
            lines.append(f"Reset semantics ({order}): differences between reset semantics "
                         "are within seed noise (seed ranges overlap).")
    if ranking:
        lines.append(f"Wedge B (\"optimizer reset semantics matter\"): "
                     f"{'supported' if sep_any else 'not supported'} by these runs.")
    return lines


def conclusion(cost: list[dict], bva: list[dict], ranking: list[dict],
               groups: dict[str, list[Run]]) -> list[str]:
    """Short statements, each backed by a number computed above, plus caveats."""
    lines = _cost_sentences(cost) + _bva_sentences(bva) + _ranking_sentences(ranking)
    n_seeds = min(len(rs) for rs in groups.values()) if groups else 0
    if n_seeds < 3:
        lines.append(f"Caveat: as few as {n_seeds} seed(s) per configuration; spreads are rough.")
    partial = sum(not r.complete for rs in groups.values() for r in rs)
    if partial:
        lines.append(f"Caveat: {partial} run(s) are incomplete (no summary.json); their numbers "
                     "cover the steps logged so far.")
    return lines


# ---------------------------------------------------------------- markdown


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
                 settings: dict | None = None) -> Path:
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
