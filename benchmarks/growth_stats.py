"""Paired statistics for the growth benchmarks: bootstrap CI, sign-flip p-value, Holm, verdict.

For one comparison ``arm - baseline`` over the same seeds (differences ``d_i``):

* ``diff``  = mean(d);
* ``ci95``  = 95% bootstrap CI of the mean (``scipy.stats.bootstrap``, BCa, 10,000 resamples,
  paired because the resampling unit is the seed's difference); ``[0, 0]`` when every d_i is 0;
* ``p``     = two-sided paired sign-flip permutation p-value of the mean (exact over all 2^n sign
  patterns for n <= 16, else 20,000 random patterns; Good 2005, "Permutation, Parametric and
  Bootstrap Tests of Hypotheses"): under H0 (no effect) each d_i is as likely to be -d_i;
* ``p_holm`` = Holm's step-down adjustment across every comparison of the report (Holm 1979);
* ``verdict`` = ``better`` / ``worse`` (sign of diff and whether lower is better) when
  p_holm < 0.05, else ``no detectable difference``.
"""

from __future__ import annotations

import itertools

import numpy as np
from scipy import stats

ALPHA = 0.05


def sign_flip_p(d: np.ndarray, n_random: int = 20_000, seed: int = 0) -> float:
    """Two-sided p-value of mean(d) under random sign flips (exact for len(d) <= 16)."""
    d = np.asarray(d, dtype=float)
    obs = abs(d.mean())
    if obs == 0.0:
        return 1.0
    if len(d) <= 16:
        signs = np.array(list(itertools.product((1.0, -1.0), repeat=len(d))))
    else:
        signs = np.random.default_rng(seed).choice((1.0, -1.0), size=(n_random, len(d)))
    means = np.abs((signs * d).mean(1))
    return float((means >= obs - 1e-12 * max(1.0, obs)).mean())


def bootstrap_ci(d: np.ndarray, seed: int = 0) -> tuple[float, float]:
    """95% BCa bootstrap CI of mean(d); degenerate (all equal) samples give [d0, d0]."""
    d = np.asarray(d, dtype=float)
    if np.all(d == d[0]):
        return float(d[0]), float(d[0])
    res = stats.bootstrap((d,), np.mean, n_resamples=10_000, confidence_level=0.95, method="BCa",
                          random_state=np.random.default_rng(seed))
    lo, hi = res.confidence_interval
    if not (np.isfinite(lo) and np.isfinite(hi)):       # BCa can fail on tiny, lumpy samples
        res = stats.bootstrap((d,), np.mean, n_resamples=10_000, method="percentile",
                              random_state=np.random.default_rng(seed))
        lo, hi = res.confidence_interval
    return float(lo), float(hi)


def holm(pvals: list[float]) -> list[float]:
    """Holm-adjusted p-values (monotone, capped at 1), in the input order."""
    m = len(pvals)
    order = np.argsort(pvals)
    adj, running = [0.0] * m, 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * pvals[i]))
        adj[i] = running
    return adj


def compare(name: str, metric: str, arm: list[float], base: list[float], lower_is_better: bool) -> dict:
    """One paired comparison (arm - base), before the Holm adjustment."""
    d = np.asarray(arm, dtype=float) - np.asarray(base, dtype=float)
    lo, hi = bootstrap_ci(d)
    return {"name": name, "metric": metric, "n_pairs": len(d), "diff": float(d.mean()),
            "ci95": [lo, hi], "p": sign_flip_p(d), "lower_is_better": lower_is_better,
            "arm_mean": float(np.mean(arm)), "base_mean": float(np.mean(base))}


def finish(comparisons: list[dict]) -> list[dict]:
    """Holm across all comparisons, then the verdict of each (in place; returns the list)."""
    for c, p in zip(comparisons, holm([c["p"] for c in comparisons])):
        c["p_holm"] = p
        if p >= ALPHA or c["diff"] == 0.0:
            c["verdict"] = "no detectable difference"
        else:
            c["verdict"] = "better" if (c["diff"] < 0) == c["lower_is_better"] else "worse"
    return comparisons
