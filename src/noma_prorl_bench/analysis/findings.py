"""Findings from saved runs: the per-configuration details (one value per seed, mean and spread),
the A0/A1 cost-model check and the generated conclusion, which states only what the paired
comparisons of `compare.py` (paired interval, sign-flip test Holm-corrected per family) support. Pure
functions of `runlog.Run` objects; report.py renders them. The sentences are markdown: names and
caveats read from a suite or its settings.json go in through `untrusted.md_text` / `md_code`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from noma_prorl_bench.analysis.compare import METRICS
from noma_prorl_bench.analysis.runlog import (
    Run,
    config_key,
    reduce_key,
    run_stats,
    threshold_curve,
)
from noma_prorl_bench.analysis.untrusted import md_code, md_text

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


# ---------------------------------------------------------------- conclusion


def _cost_sentences(cost: list[dict]) -> list[str]:
    lines = []
    for c in cost:
        r, p = c["measured_ratio"], c["predicted_ratio"]
        size = (
            f"took {r:.2f}× A1's step time"
            if abs(r - 1) > max(c["ratio_noise"], 0.02)
            else f"showed no measurable step-time difference from A1 ({r:.2f}×, timing noise ±{c['ratio_noise']:.2f})"
        )
        lines.append(
            f"Reference cost: A0 ({c['ref_fwd_a0']:.3g} reference forwards per step "
            f"against A1's {c['ref_fwd_a1']:.3g}) {size}; the stage-time cost model "
            f"predicted {p:.2f}× ({p / r - 1:+.0%} off)."
        )
    return lines


def _fmt_diff(row: dict) -> str:
    _, unit, _, scale, dec = METRICS[row["metric"]]
    lo, hi = (v * scale for v in row["ci95"])
    ci = f"95% CI {lo:+.{dec}f} to {hi:+.{dec}f}" if math.isfinite(lo) and math.isfinite(hi) else "no CI with < 2 pairs"
    return f"{row['diff'] * scale:+.{dec}f} {unit} ({ci}, n = {row['n_pairs']}, p_holm = {row['p_holm']:.3f})"


def _short_diff(row: dict) -> str:
    """'+0.017 reward [+0.011, +0.026], p_holm 0.010'."""
    _, unit, _, scale, dec = METRICS[row["metric"]]
    lo, hi = (v * scale for v in row["ci95"])
    ci = f" [{lo:+.{dec}f}, {hi:+.{dec}f}]" if math.isfinite(lo) and math.isfinite(hi) else ""
    return f"{row['diff'] * scale:+.{dec}f} {unit}{ci}, p_holm {row['p_holm']:.3f}"


def fmt_mde(row: dict) -> str:
    """'mde80 0.021 reward' (in the metric's unit), '∞' when undetectable at this n."""
    _, unit, _, scale, dec = METRICS[row["metric"]]
    v = row.get("mde80", math.nan)
    if v == math.inf:
        return f"mde80 ∞: {row['n_pairs']} pairs cannot reach p < 0.05/{row.get('family_size', 1)}"
    return f"mde80 {v * scale:.{dec}f} {unit}" if math.isfinite(v) else "mde80 —"


_WHAT = {"score": "validation score", "s_step": "step time", "s_token": "time per generated token"}


def _is_aa(row: dict) -> bool:
    return row["name"].startswith("A/A") or row["arm"].startswith("AA-")


def _comparison_sentences(rows: list[dict]) -> list[str]:
    """The A/A control first, then every verdict, then the null results in one sentence, each
    with the smallest effect it could have detected (mde80)."""
    lines = []
    for row in rows:
        if _is_aa(row):
            lines.append(
                f"A/A control ({md_text(row['arm'], 60)} vs {md_text(row['baseline'], 60)}: "
                f"identical settings, different seeds), {_WHAT[row['metric']]}: {row['verdict']}, "
                f"{_fmt_diff(row)}, {fmt_mde(row)}."
            )
    for row in rows:
        if row["verdict"] != "no detectable difference":
            lines.append(
                f"{md_text(row['name'], 60)}, {_WHAT[row['metric']]}: {md_text(row['arm'], 60)} is "
                f"{row['verdict']} than {md_text(row['baseline'], 60)}, {_fmt_diff(row)}."
            )
    nulls = [
        f"{md_text(r['name'], 60)} ({_WHAT[r['metric']]}, {fmt_mde(r)}"
        + ("; its own 95% CI excludes 0 before the family correction" if r.get("ci_excludes_0") else "")
        + ")"
        for r in rows
        if r["verdict"] == "no detectable difference" and not _is_aa(r)
    ]
    if nulls:
        lines.append(
            "No detectable difference (p_holm >= 0.05; effects and CIs in the table "
            "below; mde80 = the effect each could have detected with 80% power): " + "; ".join(nulls) + "."
        )
    return lines


def _null_power(nulls: list[dict]) -> str:
    """'; with 80% power they could have detected effects of A to B reward (...)' and how many
    could detect nothing (too few pairs for the sign-flip test) or have no SD (< 2 pairs)."""
    spans, inf, unknown = [], 0, 0
    for unit in dict.fromkeys(METRICS[r["metric"]][1] for r in nulls):
        _, _, _, scale, dec = next(v for v in METRICS.values() if v[1] == unit)
        vals = [r.get("mde80", math.nan) * scale for r in nulls if METRICS[r["metric"]][1] == unit]
        fin = [v for v in vals if math.isfinite(v)]
        inf += sum(v == math.inf for v in vals)
        unknown += sum(math.isnan(v) for v in vals)
        if fin:
            spans.append(
                f"{min(fin):.{dec}f} {unit}"
                if min(fin) == max(fin)
                else f"{min(fin):.{dec}f} to {max(fin):.{dec}f} {unit}"
            )
    parts = []
    if spans:
        parts.append(
            "with 80% power they could have detected effects of "
            + "; ".join(spans)
            + " (mde80 per row below), so smaller effects are not ruled out"
        )
    if inf:
        parts.append(
            f"{inf} of them could detect no effect at all (too few pairs for the sign-flip test to reach 0.05/m)"
        )
    if unknown:
        parts.append(f"{unknown} of them have no mde80 (fewer than 2 pairs)")
    return ("; " + "; ".join(parts) if parts else "") + "."


def _effect(row: dict) -> str:
    """'-0.025 [-0.035, -0.014]' in the metric's printed units."""
    _, _, _, scale, dec = METRICS[row["metric"]]
    lo, hi = (v * scale for v in row["ci95"])
    ci = f" [{lo:+.{dec}f}, {hi:+.{dec}f}]" if math.isfinite(lo) and math.isfinite(hi) else ""
    return f"{row['diff'] * scale:+.{dec}f}{ci}"


def answer(rows: list[dict], evidence: bool = True) -> str:
    """The report's opening, one or two sentences a reader can quote: each question that reached
    a verdict, with where (its family, when the family is a beta) and its effect [95% CI]; then how
    many found no detectable difference and the smallest effects they could have detected."""
    questions = [r for r in rows if not _is_aa(r)]
    if not questions:
        return ""
    found: dict[str, dict[str, list[str]]] = {}
    for r in questions:
        if r["verdict"] == "no detectable difference":
            continue
        fam, name = str(r["family"]), str(r["name"])
        label = name[len(fam) + 2 :] if name.startswith(fam + ": ") else name
        where = f" at {fam}" if name.startswith(fam + ": ") else ""
        what = label + (f" ({_WHAT[r['metric']]})" if r["metric"] != "score" else "")
        found.setdefault(what, {}).setdefault(r["verdict"], []).append(f"{where} ({_effect(r)})")
    parts = []
    for what, by_verdict in found.items():
        said = [
            verdict + (",".join(places[:-1]) + " and" if len(places) > 1 else "") + places[-1]
            for verdict, places in by_verdict.items()
        ]
        parts.append(md_text(what, 80) + ": " + ", ".join(said))
    nulls = [r for r in questions if r["verdict"] == "no detectable difference"]
    mdes = [
        r["mde80"] * METRICS[r["metric"]][3]
        for r in nulls
        if r["metric"] == "score" and math.isfinite(r.get("mde80", math.nan))
    ]
    rest = f"{len(nulls)} of {len(questions)} questions found no detectable difference" + (
        f" (effects below mde80 {min(mdes):.3f}{f'-{max(mdes):.3f}' if max(mdes) > min(mdes) else ''} "
        "reward not ruled out)"
        if mdes
        else ""
    )
    smoke = "" if evidence else " (a smoke run: its sizes check the pipeline, not the questions)"
    if not parts:
        return f"**Answer{smoke}.** No question reached a verdict: {rest}."
    return f"**Answer{smoke}.** " + "; ".join(parts) + f". {rest[0].upper() + rest[1:]}."


def headline(rows: list[dict], checks: Sequence[dict], evidence: bool = True) -> str:
    """The report's first paragraph: what it found and how sure it is (verdicts with effect and
    CI; nulls with the range of their mde80; the identity checks)."""
    questions = [r for r in rows if not _is_aa(r)]
    fams = list(dict.fromkeys(r["family"] for r in questions))
    if not questions:
        text = "This report makes no comparison (fewer than two arms)."
    else:
        found = [r for r in questions if r["verdict"] != "no detectable difference"]
        n_aa = len(rows) - len(questions)
        text = (
            f"**What it found.** {len(questions)} question{'s' * (len(questions) != 1)}"
            + (f" (plus {n_aa} A/A control row{'s' * (n_aa != 1)})" if n_aa else "")
            + f" in {len(fams)} Holm famil{'ies' if len(fams) != 1 else 'y'} "
            f"({', '.join(md_code(f, 60) for f in fams)}; family-wise error 5% within "
            f"{'each' if len(fams) != 1 else 'it'}); {len(found)} reached a verdict"
        )
        text += (
            ": "
            + "; ".join(
                md_text(r["name"], 60)
                + (f" ({_WHAT[r['metric']]})" if r["metric"] != "score" else "")
                + f": **{r['verdict']}**, {_short_diff(r)}"
                for r in found
            )
            + "."
            if found
            else "."
        )
        nulls = [r for r in questions if r["verdict"] == "no detectable difference"]
        if nulls:
            text += f" {len(nulls)} found no detectable difference" + _null_power(nulls)
    if checks:
        bad = [md_text(c["name"], 60) for c in checks if c["identical"] is False]
        ok = sum(c["identical"] is True for c in checks)
        text += (
            f" **ERROR: identical-by-construction check failed: {', '.join(bad)}.**"
            if bad
            else f" Identical-by-construction checks: {ok} of {len(checks)} identical: yes."
        )
    if not evidence:
        text += " This is a smoke run: its sizes check the pipeline, not the questions."
    return text


def _gain_sentences(gains: list[dict]) -> list[str]:
    lines = []
    for g in gains:
        if not math.isfinite(g["share"]):
            lines.append(
                f"{md_text(g['b'], 60)} vs {md_text(g['a'], 60)}: the share of the RL gain cannot be computed "
                f"({md_text(g['a'], 60)}'s mean gain over the warm-start score is "
                f"{g['gain_a']:+.3f}, not positive)."
            )
            continue
        lo, hi = g["ci95"]
        ci = (
            f"95% Fieller interval {lo:.0%} to {hi:.0%}"
            if math.isfinite(lo) and math.isfinite(hi)
            else "95% Fieller interval unbounded: A's gain is not clearly above 0"
            if lo == -math.inf
            else "no interval with < 2 pairs"
        )
        lines.append(
            f"{md_text(g['b'], 60)} kept {g['share']:.0%} of {md_text(g['a'], 60)}'s RL gain over the "
            f"warm-start score {g['warm']:.3f} ({ci}, n = {g['n_pairs']}; "
            f"gains {g['gain_b']:+.3f} vs {g['gain_a']:+.3f}); B's step time: "
            f"{g['speed']}. Criterion 'keeps >= 80% at lower step time': "
            f"{g['held_80']}; '>= 90%': {g['held_90']}."
        )
    return lines


def conclusion(
    cost: list[dict],
    rows: list[dict],
    gains: list[dict],
    n_pairs: int,
    partial: int = 0,
    evidence: bool = True,
    caveats: Sequence[str] = (),
) -> list[str]:
    """Short statements, each backed by a number computed above, plus caveats (`caveats`: what
    the person who ran the suite knows and the logs do not, e.g. machine load, printed first, as
    data: `untrusted.md_text`, at most 1000 characters each)."""
    lines = (
        []
        if evidence
        else [
            "This is a smoke run, not evidence: its preset is sized to check that the pipeline "
            "works, not to detect effects (see the `full` preset)."
        ]
    )
    lines += [f"Caveat: {md_text(c, 1000)}" for c in caveats]
    lines += _cost_sentences(cost) + _gain_sentences(gains) + _comparison_sentences(rows)
    if n_pairs < 10:
        lines.append(
            f"Caveat: as few as {n_pairs} paired seed(s) per comparison; with n pairs "
            f"the smallest possible p-value is 2/2^n ({2 / 2 ** max(n_pairs, 1):.3f}), "
            "so small effects cannot be detected."
        )
    if partial:
        lines.append(
            f"Caveat: {partial} run(s) are incomplete (no summary.json); their numbers cover the steps logged so far."
        )
    return lines
