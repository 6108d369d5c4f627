"""Paired statistics for the growth benchmarks: a thin layer over ``noma_prorl_bench.analysis.stats``.

For one comparison ``arm - baseline`` over the same seeds (differences ``d_i``, n pairs):

* ``diff``  = mean(d);
* ``ci95``  = Student t interval of mean(d), mean(d) +- t(0.975, n-1) sd(d) / sqrt(n)
  (``stats.t_ci``; ``[d, d]`` when every d_i is equal). Not the BCa bootstrap these reports
  used before: simulated in this project, BCa was too narrow at 5-20 pairs and the t interval
  covers 95% there (docs/statistics.md has the coverage table; analysis/stats.py);
* ``p``     = two-sided paired sign-flip permutation p-value of mean(d) (``stats.sign_flip_p``:
  exact over all 2^n sign patterns for n <= 16): under H0 each d_i is as likely to be -d_i;
* ``p_holm`` = Holm's step-down adjustment across every comparison of the report (``stats.holm``);
* ``verdict`` = ``better`` / ``worse`` (sign of diff and whether lower is better) when
  p_holm < 0.05, else ``no detectable difference`` (``stats.verdict``);
* ``mde80`` = the smallest |mean diff| this design detects with 80% power after the report's
  Holm correction (``stats.mde80(sd(d), n, m)``, m = number of comparisons in the report).

The per-row CI is the comparison's own 95% interval, before the family correction; the verdict
is after it, so a CI that excludes 0 can still come with "no detectable difference".
"""

from __future__ import annotations

import numpy as np

from noma_prorl_bench.analysis import stats

ALPHA = stats.ALPHA


def compare(name: str, metric: str, arm: list[float], base: list[float], lower_is_better: bool) -> dict:
    """One paired comparison (arm - base), before the Holm adjustment."""
    d = np.asarray(arm, dtype=float) - np.asarray(base, dtype=float)
    lo, hi = stats.t_ci(d)
    return {
        "name": name,
        "metric": metric,
        "n_pairs": len(d),
        "diff": float(d.mean()),
        "ci95": [lo, hi],
        "p": stats.sign_flip_p(d),
        "lower_is_better": lower_is_better,
        "sd": float(d.std(ddof=1)) if len(d) > 1 else float("nan"),
        "arm_mean": float(np.mean(arm)),
        "base_mean": float(np.mean(base)),
    }


def finish(comparisons: list[dict]) -> list[dict]:
    """Holm across all comparisons, then the verdict and mde80 of each (in place; returns the list)."""
    m = len(comparisons)
    for c, p in zip(comparisons, stats.holm([c["p"] for c in comparisons])):
        c["p_holm"] = p
        c["verdict"] = stats.verdict(c["diff"], p, higher_is_better=not c["lower_is_better"])
        c["mde80"] = stats.mde80(c["sd"], c["n_pairs"], m)
    return comparisons
