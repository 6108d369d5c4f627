"""Plateau statistics: does a run's greedy score still climb over its last third, and where is its
policy's KL to the initial policy there?

For one run: the least-squares slope (per 100 RL steps) of the greedy validation score
`reward/val` and of `kl/to_init` over the evaluations in the last third of the run (steps >= 2/3 of
its last step), and their means there. For two arms paired by seed (a reset arm against the no-reset
arm of the same beta): the per-seed difference of the score slopes, its mean with a 95% paired
interval and the sign-flip p. The report's sentence calls the no-reset arm's tail a plateau only when
its score slope's 95% interval over seeds holds 0, the KL "pinned" only when its slope is under
KL_PINNED of its level per 100 steps, and says the reset arm climbs faster only when the paired
difference is positive at sign-flip p < 0.05. The section opens with ONE sentence over the
comparisons of a reset arm against the no-reset arm (plateau_headline): per comparison "goes on"
(plateau, KL pinned, the reset arm faster), "no plateau", or "ambiguous", with the numbers.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from noma_prorl_bench.analysis.runlog import Run
from noma_prorl_bench.analysis.stats import paired_interval, sign_flip_p, t_ci
from noma_prorl_bench.analysis.untrusted import md_text

PER = 100.0  # slopes are per 100 RL steps
KL_PINNED = 0.1  # |KL slope| per 100 steps below this fraction of the KL's level: "pinned"


def tail_slope(steps: np.ndarray, values: np.ndarray, frac: float = 1 / 3) -> tuple[float, float, int]:
    """(slope per 100 steps, mean, points) of `values` over steps >= (1 - frac) * the last step;
    NaN slope with fewer than 3 points."""
    steps, values = np.asarray(steps, dtype=float), np.asarray(values, dtype=float)
    ok = np.isfinite(values)
    steps, values = steps[ok], values[ok]
    if steps.size == 0:
        return math.nan, math.nan, 0
    tail = steps >= (1 - frac) * steps.max() * (1 - 1e-12)  # 2/3 of 300 is step 200, not above it
    x, y = steps[tail], values[tail]
    if x.size < 3 or np.ptp(x) == 0:
        return math.nan, float(y.mean()) if y.size else math.nan, int(x.size)
    slope = float(np.polyfit(x, y, 1)[0]) * PER
    return slope, float(y.mean()), int(x.size)


def run_plateau(run: Run) -> dict[str, float]:
    """The run's tail statistics: score_slope, score_tail, kl_slope, kl_tail, points."""
    s_slope, s_mean, n = tail_slope(*run.series("reward/val"))
    k_slope, k_mean, _ = tail_slope(*run.series("kl/to_init"))
    return {"score_slope": s_slope, "score_tail": s_mean, "kl_slope": k_slope, "kl_tail": k_mean, "points": n}


def _fmt(x: float) -> str:
    return f"{x:+.3f}"


def _nanmean(xs: Sequence[float]) -> float:
    ok = [x for x in xs if math.isfinite(x)]
    return float(np.mean(ok)) if ok else math.nan


def arm_plateau(stats: Sequence[dict[str, float]]) -> dict[str, float]:
    """Seed means of one arm's tail statistics, with a 95% t interval of the score slope."""
    sl = [s["score_slope"] for s in stats if math.isfinite(s["score_slope"])]
    lo, hi = t_ci(sl) if len(sl) >= 2 else (math.nan, math.nan)
    mean = {k: _nanmean([s[k] for s in stats]) for k in ("kl_slope", "kl_tail")}
    return {"score_slope": float(np.mean(sl)) if sl else math.nan, "lo": lo, "hi": hi, "n": len(sl), **mean}


def flat(arm: dict[str, float]) -> bool:
    """The score slope's 95% interval holds 0: no detectable climb (or fall) over the last third."""
    return math.isfinite(arm["lo"]) and arm["lo"] <= 0 <= arm["hi"]


def kl_still(arm: dict[str, float]) -> bool:
    """kl/to_init moves by less than KL_PINNED of its level per 100 steps over the last third."""
    return math.isfinite(arm["kl_slope"]) and abs(arm["kl_slope"]) < KL_PINNED * max(abs(arm["kl_tail"]), 1e-12)


def tail_words(arm: dict[str, float], name: str) -> str:
    """What the arm's tail does, in words."""
    if not math.isfinite(arm["lo"]):
        return f"{name} has too few seeds to tell"
    if not flat(arm):
        return f"{name} still {'climbs' if arm['lo'] > 0 else 'falls'}"
    pin = (
        "with the KL to the initial policy pinned"
        if kl_still(arm)
        else "while its KL to the initial policy still moves"
    )
    return f"{name} shows no detectable climb (a plateau) {pin}"


def plateau_sentence(
    none: dict[int, dict[str, float]], reset: dict[int, dict[str, float]], none_name: str, reset_name: str
) -> tuple[str, dict]:
    """One sentence on the no-reset arm's tail against the reset arm's (per-seed stats keyed by seed)
    and the numbers behind it."""
    a, b = arm_plateau(list(none.values())), arm_plateau(list(reset.values()))
    seeds = sorted(set(none) & set(reset))
    d = [reset[s]["score_slope"] - none[s]["score_slope"] for s in seeds]
    d = [x for x in d if math.isfinite(x)]
    p = sign_flip_p(d) if d else math.nan
    dlo, dhi = paired_interval(d) if len(d) >= 2 else (math.nan, math.nan)
    diff = float(np.mean(d)) if d else math.nan
    res: dict = {"none": a, "reset": b, "diff": diff, "lo": dlo, "hi": dhi, "p": p}
    res["n_pairs"] = len(d)
    goes_on = bool(d) and float(np.mean(d)) > 0 and p < 0.05
    res["goes_on"] = goes_on
    head = tail_words(a, none_name)
    tail = f"{reset_name} climbs detectably faster" if goes_on else f"{reset_name} does not climb detectably faster"
    text = (
        f"Over the last third of the run, {head} (greedy score {_fmt(a['score_slope'])} per 100 steps "
        f"[{_fmt(a['lo'])}, {_fmt(a['hi'])}], kl/to_init {a['kl_tail']:.3f} moving {_fmt(a['kl_slope'])}), and "
        f"{tail} (score {_fmt(b['score_slope'])} per 100 steps; the difference {_fmt(diff)} "
        f"[{_fmt(dlo)}, {_fmt(dhi)}], sign-flip p {p:.3f}, {len(d)} pairs)."
    )
    return text, res


def plateau_verdict(res: dict) -> str:
    """plateau_sentence's numbers -> "goes on" (the no-reset arm plateaus with its KL pinned and the
    reset arm climbs detectably faster), "no plateau" (the no-reset arm's score slope interval
    excludes 0) or "ambiguous" (too few seeds; a plateau whose KL still moves; a pinned plateau
    the reset arm does not detectably outclimb)."""
    a = res["none"]
    if not math.isfinite(a["lo"]):
        return "ambiguous"
    if not flat(a):
        return "no plateau"
    return "goes on" if kl_still(a) and res["goes_on"] else "ambiguous"


def _why_ambiguous(res: dict) -> str:
    a = res["none"]
    if not math.isfinite(a["lo"]):
        return "too few seeds"
    if not kl_still(a):
        return "a plateau, but its KL still moves"
    return "a plateau with the KL pinned, but the reset arm is not detectably faster"


def plateau_headline(cases: Sequence[tuple[str, dict]]) -> str:
    """ONE sentence over a task's no-reset-vs-reset comparisons ((label, plateau_sentence's numbers)
    per comparison): does the no-reset arm plateau with its KL pinned while the reset arm goes on,
    with the slopes and their intervals."""
    parts = []
    for label, res in cases:
        a, v = res["none"], plateau_verdict(res)
        score = f"score slope {_fmt(a['score_slope'])} [{_fmt(a['lo'])}, {_fmt(a['hi'])}]"
        kl = f"kl/to_init {a['kl_tail']:.3f} moving {_fmt(a['kl_slope'])}"
        gap = f"reset minus no reset {_fmt(res['diff'])} [{_fmt(res['lo'])}, {_fmt(res['hi'])}], p {res['p']:.3f}"
        if v == "goes on":
            parts.append(f"{label}: it plateaus ({score}) with the KL pinned ({kl}) and the reset arm goes on ({gap})")
        elif v == "no plateau":
            parts.append(f"{label}: it does not plateau ({score})")
        else:
            parts.append(f"{label}: ambiguous, {_why_ambiguous(res)} ({score}; {kl}; {gap})")
    n = sum(plateau_verdict(res) == "goes on" for _, res in cases)
    return (
        "Over the last third of the runs (slopes per 100 steps, 95% intervals), the no-reset arm plateaus "
        f"with its KL pinned while the reset arm goes on in {n} of {len(cases)} comparisons: " + "; ".join(parts) + "."
    )


def _resets(runs: dict) -> list[int]:
    return [int(r.config.get("reset_every") or 0) for r in runs.values()]


def plateau_lines(arms: dict[str, dict], rows: Sequence[dict]) -> list[str]:
    """The report's section: one sentence per comparison whose two arms log `reward/val` and
    `kl/to_init` (the arm against its baseline, paired by seed)."""
    lines: list[str] = []
    cases: list[tuple[str, dict]] = []  # the no-reset arm as baseline, a reset arm against it
    seen = set()
    for row in rows:
        if (row.get("arm"), row.get("baseline")) in seen:
            continue  # one sentence per comparison, not one per metric (score, timing rows)
        seen.add((row.get("arm"), row.get("baseline")))
        a, b = arms.get(row.get("baseline", "")), arms.get(row.get("arm", ""))
        if not a or not b or not all(r.has("reward/val") and r.has("kl/to_init") for r in [*a.values(), *b.values()]):
            continue
        stats = [{s: run_plateau(r) for s, r in arm.items()} for arm in (a, b)]
        text, res = plateau_sentence(stats[0], stats[1], md_text(row["baseline"], 120), md_text(row["arm"], 120))
        lines.append(f"- {md_text(row['name'], 160)}: {text}")  # names from the directory: untrusted text
        if not any(_resets(a)) and all(_resets(b)):
            cases.append((md_text(row["name"], 160), res))
    if not lines:
        return []
    head = [
        "## The last third of each run",
        "",
        "Slopes of the greedy score and of `kl/to_init` over the evaluations in the last third of each run "
        "(per 100 steps, least squares), means over seeds with 95% t intervals; the paired difference of the "
        "score slopes with a sign-flip p (src/noma_prorl_bench/analysis/plateau.py).",
        "",
    ]
    if cases:
        head += [f"**In one sentence.** {plateau_headline(cases)}", ""]
    return head + lines + [""]
