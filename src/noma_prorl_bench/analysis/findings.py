"""Findings from saved runs: the per-configuration details (one value per seed, mean and spread)
and the A0/A1 cost-model check. Pure functions of `runlog.Run` objects; report.py renders them,
and the generated conclusion that quotes them (conclusion.py: `answer`, `headline`,
`conclusion`, re-exported here for report.py).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from noma_prorl_bench.analysis.conclusion import answer as answer  # re-exported: report.py imports
from noma_prorl_bench.analysis.conclusion import conclusion as conclusion  # these three from here
from noma_prorl_bench.analysis.conclusion import headline as headline
from noma_prorl_bench.analysis.runlog import (
    Run,
    config_key,
    reduce_key,
    run_stats,
    threshold_curve,
)

#: per-run metric (runlog.run_stats) -> matrix column header
COLUMNS = {
    "final_val": "final val reward",
    "steps_to_thr": "steps to threshold",
    "kl_mean": "KL mean",
    "kl_max": "KL max",
    "kl_spike": "KL spike after reset",
    "ref_fwd": "ref fwd / step",
    "step_time": "median step time (s)",
    "tokens_per_s": "policy tokens/s",
    "peak_mem": "peak RSS (MB)",
}


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

    def fmt(self, decimals: int = 3, counts: bool = False, unit: str = "") -> str:
        """'mean ± std' with fixed decimals (and a unit); '—' without values; `counts` adds
        [n/N] (values that are finite out of all runs)."""
        u = f" {unit}" if unit else ""
        if self.n == 0:
            text = "—"
        elif self.n == 1:
            text = f"{self.mean:.{decimals}f}{u}"
        else:
            text = f"{self.mean:.{decimals}f} ± {self.std:.{decimals}f}{u}"
        return f"{text} [{self.n}/{self.n_total}]" if counts else text


# ---------------------------------------------------------------- matrix


def threshold_source(runs: Sequence[Run]) -> str:
    """'val' when every run logged `reward/val`, else 'train'."""
    return "val" if runs and all(r.has("reward/val") for r in runs) else "train"


def best_final(groups: dict[str, list[Run]], source: str, window: int = 10) -> tuple[str | None, float]:
    """(label, value) of the configuration with the highest mean (over seeds) last value of the
    threshold curve (final val reward, or final trailing-mean train reward); (None, NaN) if none."""

    def final(run: Run) -> float:
        values = threshold_curve(run, source, window)[1]
        return float(values[-1]) if values.size else math.nan

    finals = {label: Stat.of([final(r) for r in rs]).mean for label, rs in groups.items()}
    finals = {label: f for label, f in finals.items() if math.isfinite(f)}
    if not finals:
        return None, math.nan
    label = max(finals, key=lambda k: finals[k])
    return label, finals[label]


def default_threshold(groups: dict[str, list[Run]], source: str, window: int = 10) -> float:
    """0.8 x the best configuration's mean (over seeds) last value of the threshold curve
    (`best_final`); NaN if none is positive."""
    best = best_final(groups, source, window)[1]
    return round(0.8 * best, 4) if math.isfinite(best) and best > 0 else math.nan


def threshold_origin(groups: dict[str, list[Run]], source: str, window: int, settings: dict) -> tuple[str, str]:
    """Where the steps-to-threshold threshold comes from: (how, the configuration it was taken from,
    or ''); ('', '') when there is none."""
    if "reward_threshold" in settings:
        return "the report's reward_threshold setting", ""
    label, best = best_final(groups, source, window)
    if label is None or not best > 0:
        return "", ""
    return f"0.8 x {best:.3f}, the best configuration's mean final value: ", label


def result_matrix(
    groups: dict[str, list[Run]], *, threshold: float, source: str, window: int = 10, k: int = 10
) -> dict[str, dict[str, Stat]]:
    """Configuration label -> metric -> Stat over that configuration's seeds."""
    matrix = {}
    for label, runs in groups.items():
        per_run = [run_stats(r, threshold=threshold, source=source, window=window, k=k) for r in runs]
        matrix[label] = {m: Stat.of([p[m] for p in per_run]) for m in COLUMNS}
    return matrix


# ---------------------------------------------------------------- comparisons


def _keys(groups: dict[str, list[Run]]) -> dict[str, dict[str, str]]:
    return {label: config_key(runs[0].config) for label, runs in groups.items()}


def _variant(key: dict[str, str]) -> str:
    return json.loads(key["variant"]).split()[0]  # "A0", "A1", "A2", "B"


def closest(
    key: dict[str, str], candidates: dict[str, dict[str, str]], ignore: frozenset = frozenset({"variant"})
) -> tuple[str, list[str]] | None:
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
        m = {
            f"{s}{i}": _group_means(rs, f"time/{s}")
            for i, rs in ((0, r0), (1, r1))
            for s in ("rollout", "ref", "train", "step")
        }
        unit = "tokens_ref" if all(r.has("count/tokens_ref") for r in r0 + r1) else "ref_fwd"
        u0, u1 = _group_means(r0, f"count/{unit}"), _group_means(r1, f"count/{unit}")
        pred_ref = u0 * m["ref1"] / u1 if u1 > 0 else math.nan
        pred_step = m["step1"] - m["ref1"] + pred_ref
        e_m = int(r0[0].config.get("ppo_epochs", 1)) * int(r0[0].config.get("minibatches", 1))
        out.append(
            dict(
                a0=lab0,
                a1=lab1,
                differs_in=diff,
                unit=unit,
                expected_ref_fwd=e_m,
                ref_fwd_a0=_group_means(r0, "count/ref_fwd"),
                ref_fwd_a1=_group_means(r1, "count/ref_fwd"),
                **m,
                predicted_a0_step=pred_step,
                predicted_ratio=pred_step / m["step1"],
                measured_ratio=m["step0"] / m["step1"],
                ratio_noise=2 * math.hypot(_sem(r0, "time/step"), _sem(r1, "time/step")) / m["step1"],
            )
        )
    return out
