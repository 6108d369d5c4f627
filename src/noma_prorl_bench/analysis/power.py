"""Power of the pooled sign-flip test (analysis/pooled.py) by simulation: the smallest effect a design
detects with a given power (`mde`), and the pairs a one-machine study needs for it (`pairs_needed`).

A design is the shape of a question's table: how many machines ran each seed (`counts`, one entry
per seed; a one-machine study of n pairs is (1,) * n). A simulated study draws N(delta, sd) for
every run pair, sums each seed's differences (the units the test flips) and applies the sign-flip
test at `level`; power = the share of MDE_STUDIES studies (seed MDE_SEED) that reject. The test's
p is exact (every pattern) up to EXACT_UNITS seeds, else from MC_FLIPS random patterns shared by all
studies (seed MDE_SEED + 1; p = (k + 1)/(R + 1), so p < 0.0125 is resolved to 1/(R + 1) = 0.0005).
The same normal draws serve every delta, so power grows with delta and bisection finds it to 0.5%.
Above SIM_MAX_UNITS seeds a one-machine design's mde is the paired t test's (`stats.mde80_t`: the
two agree within 2% there, as docs/statistics.md shows for mde80). An estimate: the observed sd
stands in for the true one, the shape is normal, and machines are taken as independent given the
seed (a positive correlation between machines lowers the power of a design with shared seeds).

`holm_families`: what a wider Holm family (a task's every question, a whole map) keeps, the question
a design's power is chosen for; used by the grid map and the README's cross-task sentence.
"""

from __future__ import annotations

import functools
import itertools
import math
from typing import Any

import numpy as np

from noma_prorl_bench.analysis import stats

MDE_STUDIES, MDE_SEED, EXACT_UNITS, MC_FLIPS, SIM_MAX_UNITS = 2_000, 0, 14, 2_000, 40
MAX_PAIRS = 400  # `pairs_needed` looks no further
POWER = 0.9


def _patterns(j: int) -> np.ndarray:
    if j <= EXACT_UNITS:
        half = np.array(list(itertools.product((1.0, -1.0), repeat=j - 1)))
        return np.hstack([np.ones((half.shape[0], 1)), half])
    return np.random.default_rng(MDE_SEED + 1).choice((1.0, -1.0), size=(MC_FLIPS, j))


def _rejects(u: np.ndarray, signs: np.ndarray, level: float, exact: bool) -> np.ndarray:
    obs = np.abs(u.sum(axis=1))
    tol = 1e-9 * np.maximum(1.0, np.abs(u).sum(axis=1))
    k = np.zeros(u.shape[0])
    for i in range(0, signs.shape[0], 500):
        k += (np.abs(u @ signs[i : i + 500].T) >= (obs - tol)[:, None]).sum(axis=1)
    p = k / signs.shape[0] if exact else (k + 1) / (signs.shape[0] + 1)
    return p < level


@functools.lru_cache(maxsize=64)
def _factor(counts: tuple[int, ...], level: float, power: float) -> float:
    """delta / sd at which the design `counts` reaches `power` at `level`; inf if unreachable."""
    j, n = len(counts), sum(counts)
    if j < 1 or 2.0 ** (1 - j) >= level:
        return math.inf
    z = np.random.default_rng(MDE_SEED).standard_normal((MDE_STUDIES, n))
    owner = np.repeat(np.arange(j), counts)
    base = np.zeros((MDE_STUDIES, j))
    np.add.at(base.T, owner, z.T)
    c = np.asarray(counts, dtype=float)
    signs, exact = _patterns(j), j <= EXACT_UNITS

    def share(delta: float) -> float:
        return float(np.mean(_rejects(base + delta * c, signs, level, exact)))

    lo, hi = 0.0, 1.0
    while share(hi) < power:
        lo, hi = hi, hi * 2
        if hi > 64:
            return math.inf
    while hi - lo > 0.005 * hi:
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if share(mid) >= power else (mid, hi)
    return hi


def mde(sd: float, counts: tuple[int, ...], m: int = 1, alpha: float = stats.ALPHA, power: float = POWER) -> float:
    """Smallest |mean difference| the design detects with `power` at Holm's first level alpha/m
    (module docstring); inf when the test cannot reach it; NaN for an unusable sd."""
    if not math.isfinite(sd) or m < 1 or not counts:
        return math.nan
    if len(counts) > SIM_MAX_UNITS and set(counts) == {1}:
        return stats.mde80_t(sd, len(counts), m, alpha, power)
    return float(_factor(tuple(int(c) for c in counts), alpha / m, power) * sd)


def pairs_needed(
    sd: float, effect: float, m: int = 1, alpha: float = stats.ALPHA, power: float = POWER, max_n: int = MAX_PAIRS
) -> float:
    """Smallest n whose one-machine design of n pairs has `mde` <= |effect|; inf beyond `max_n`
    or for a zero effect, NaN for an unusable sd. The search starts at the t formula's n
    (`stats.mde80_t`, cheap) and walks from there with the simulated `mde`."""
    effect = abs(effect)
    settled = stats.settled_without_search(sd, effect)
    if settled is not None:
        return settled
    n = 2
    while n <= max_n and not stats.mde80_t(sd, n, m, alpha, power) <= effect:
        n += 1
    n = min(n, max_n)
    while n <= max_n and not mde(sd, (1,) * n, m, alpha, power) <= effect:
        n += 1
    while n > 2 and mde(sd, (1,) * (n - 1), m, alpha, power) <= effect:
        n -= 1
    return float(n) if n <= max_n else math.inf


def holm_families(families: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Holm within each family of question rows (each with its raw sign-flip `p`, `diff` and `n_pairs`;
    higher is better): {family: {"m": questions, "min_pairs", "survivors": the rows that keep a verdict,
    each with its `p_holm` and `verdict` added}}."""
    out = {}
    for name, rows in families.items():
        judged = [
            {**r, "p_holm": a, "verdict": stats.verdict(r["diff"], a)}
            for r, a in zip(rows, stats.holm([r["p"] for r in rows]))
        ]
        survivors = [r for r in judged if r["verdict"] != stats.VERDICTS[2]]
        out[name] = {"m": len(rows), "min_pairs": min((r["n_pairs"] for r in rows), default=0), "survivors": survivors}
    return out
