"""Findings from saved runs: the result matrix (one value per seed, mean and spread per
configuration), the A0/A1 cost-model check, the B-vs-A criterion, the reset ranking and the
generated conclusion. Pure functions of `runlog.Run` objects; report.py renders them.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from noma_prorl_bench.analysis.runlog import (
    Run,
    config_key,
    reduce_key,
    run_stats,
    threshold_curve,
)

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
