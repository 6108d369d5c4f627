"""Paired statistics for the suite report: confidence intervals that cover, an exact sign-flip
permutation test, Holm's correction within a family of questions, the verdict that follows, the
smallest effect the design could have detected, and the number of seeds a question needs.

Every comparison in a report is paired: arm X and arm Y ran the same seeds, so the unit of
evidence is the per-seed difference d_i = x_i - y_i (n pairs). For each comparison:

    diff     = mean(d)                                   (the effect, in the metric's units)
    ci95     = `paired_interval`: the Student t interval of mean(d), widened on either side to
               the bootstrap-t interval where that one reaches further,
                 t:           mean(d) +- t(0.975, n-1) sd(d) / sqrt(n)
                 bootstrap-t: [mean - q(0.975) se, mean - q(0.025) se], q the quantiles of
                              T* = (mean* - mean) / se* over 9 999 paired resamples (seed 0,
                              so a report reproduces), se = sd(d) / sqrt(n)
               lo = min of the two lower ends, hi = max of the two upper ends. The t interval
               alone under-covers when d is skewed (at n = 10: 0.90 under shifted-exponential
               differences, 0.84 under lognormal ones); the bootstrap-t follows the skew but
               under-covers a little under heavy symmetric tails (0.92 under t3); their union
               keeps the t interval's coverage where d is symmetric and the bootstrap-t's where
               it is skewed. benchmarks/studies/interval_coverage.py simulates it (docs/statistics.md
               has the table); tests/slow/test_interval_coverage.py asserts it. All d_i equal:
               the t interval with sd(d) replaced by `resolution` (the precision the values are
               recorded at), never a zero-width interval from finite data
    p        = two-sided paired permutation (sign-flip) test of mean(d) = 0: under H0 each d_i
               is as likely to be -d_i, so p = share of the 2^n sign patterns whose |mean| is
               >= the observed |mean| (exact for n <= 16, else 20 000 random patterns, (k+1)/(N+1))
    p_holm   = Holm's step-down adjustment within the comparison's family (a family is the set
               of questions one reader asks together: the suite's outcome questions; one family
               per beta in the atlas; timing rows in a family of their own). Family-wise 5%.
    verdict  = "better" / "worse" when p_holm < 0.05 (direction from diff and whether higher is
               better for the metric), else "no detectable difference"
    mde80    = minimal detectable effect at 80% power for n pairs in a family of m questions,
               for the test the verdict uses: the smallest mean difference delta at which the
               sign-flip test (above) reaches p < 0.05/m in 80% of 2 000 simulated studies of n
               normal differences with mean delta and sd sd(d) (seeded: the same n and m give
               the same number). The level 0.05/m is Holm's first step (the bar a question must
               clear when the family's others are null). An estimate: it plugs in the observed
               sd(d) and a normal shape, and its Monte-Carlo error is about 1% of its value.
               Above 16 pairs (where the sign-flip test turns to random patterns, and it and
               the t test agree within 2%) it is the t test's (t(1 - 0.05/(2m), n-1) +
               t(0.8, n-1)) sd(d) / sqrt(n). Infinite
               when the sign-flip test cannot reach 0.05/m at all (2/2^n >= 0.05/m: n <= 5 for
               one question, n <= 8 among 17)

The per-row CI is the question's own 95% interval, before the family correction; the verdict is
after it. A row whose CI excludes 0 but whose p_holm >= 0.05 says so (report.py), rather than
printing an interval that disagrees with its verdict without comment.

The share of A's gain that B keeps, mean(num) / mean(den), gets Fieller's interval with t(n-1)
(`ratio_ci`, the paired form with the covariance of num and den): it has no resampling, so its
verdict cannot move with a resampler seed; it is unbounded (undecided) when mean(den) is not
clearly above zero. The bootstrap remains only for other statistics passed to `bootstrap_ci`
(none in the report).

Sources: Student 1908 / any text for the t interval; Efron & Tibshirani 1993, *An Introduction
to the Bootstrap*, ch. 12, and Hall 1992, *The Bootstrap and Edgeworth Expansion*, for the
bootstrap-t (studentized) interval and why it corrects for skew; Fieller 1954, "Some problems in interval
estimation" (JRSS B 16); Good, *Permutation Tests* (2000) for the paired sign-flip test; Holm
1979, "A simple sequentially rejective multiple test procedure"; Cohen 1988 for the power
formula. With n pairs the smallest attainable sign-flip p is 2 / 2^n (0.25 at n = 3, 0.002 at
n = 10), so a 3-seed run can never reach a verdict other than "no detectable difference".
"""

from __future__ import annotations

import functools
import itertools
import math
import warnings
from typing import Callable, Sequence, Union

import numpy as np

ALPHA = 0.05
VERDICTS = ("better", "worse", "no detectable difference")
N_RESAMPLES = 10_000
EXACT_MAX_N = 16
MIN_BOOTSTRAP_N = 10  # fewer pairs: no interval for statistics other than mean(d)
N_BOOT_T, BOOT_T_SEED = 9_999, 0  # bootstrap-t resamples of `paired_interval`
MIN_BOOT_T_N = 5  # fewer pairs: the t interval alone (a resample of 4 or fewer is too often constant)
MDE_STUDIES, MDE_SEED, MDE_SIM_MAX_N = 2_000, 0, EXACT_MAX_N  # simulated power of `mde80`
Values = Union[Sequence[float], np.ndarray]  # a sample: a list of floats or a 1-D float array


def _clean(x: Values, y: Values) -> tuple[np.ndarray, np.ndarray]:
    """Pairs where both values are finite."""
    xa, ya = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if xa.shape != ya.shape:
        raise ValueError(f"paired samples need equal lengths, got {xa.shape} and {ya.shape}")
    ok = np.isfinite(xa) & np.isfinite(ya)
    return xa[ok], ya[ok]


def mean_diff(a: np.ndarray, b: np.ndarray, axis: int = -1) -> np.ndarray:
    """mean(a - b) along `axis` (vectorised, for scipy.stats.bootstrap)."""
    return np.mean(a - b, axis=axis)


def t_ci(values: Values, level: float = 0.95) -> tuple[float, float]:
    """Student t interval of mean(d): mean +- t((1 + level)/2, n-1) sd(d) / sqrt(n). NaN bounds
    with fewer than 2 finite values; [d, d] when every d_i is equal."""
    from scipy import stats as sps  # noqa: PLC0415  (scipy loads only for a bootstrap)

    d = np.asarray([v for v in values if math.isfinite(v)], dtype=float)
    if d.size < 2:
        return math.nan, math.nan
    if np.ptp(d) == 0:
        return float(d[0]), float(d[0])
    half = float(sps.t.ppf(0.5 + level / 2, d.size - 1) * d.std(ddof=1) / math.sqrt(d.size))
    return float(d.mean()) - half, float(d.mean()) + half


#: relative spread below which differences count as equal: float64 rounding of sums and means of
#: values near 1 leaves spreads of a few 1e-16 between numbers that are equal by construction
FLOAT_NOISE = 1e-12


def _boot_t_quantiles(d: np.ndarray, level: float, res: float = 0.0) -> tuple[float, float] | None:
    """The (1 - level)/2 and (1 + level)/2 quantiles of T* = (mean* - mean) / se* over N_BOOT_T
    paired resamples of d (seed BOOT_T_SEED); resamples whose values spread by no more than `res`
    (equal up to float rounding: se* ~ 0 would blow T* up) are left out; None when fewer than half
    the resamples are left."""
    rng = np.random.default_rng(BOOT_T_SEED)
    n, mean, ts = d.size, float(d.mean()), []
    for size in [2_000] * (N_BOOT_T // 2_000) + [N_BOOT_T % 2_000]:
        x = d[rng.integers(0, n, (size, n))]
        se = x.std(axis=1, ddof=1) / math.sqrt(n)
        ok = np.ptp(x, axis=1) > res
        ts.append((x.mean(axis=1)[ok] - mean) / se[ok])
    t = np.concatenate(ts)
    if t.size < N_BOOT_T / 2:
        return None
    lo, hi = np.quantile(t, [0.5 - level / 2, 0.5 + level / 2])
    return float(lo), float(hi)


def paired_interval(differences: Values, level: float = 0.95, resolution: float | None = None) -> tuple[float, float]:
    """The report's interval for the mean of paired differences (module docstring): the t
    interval widened to the bootstrap-t interval on the side where that one reaches further
    (the t interval alone below MIN_BOOT_T_N pairs). Deterministic (seeded resamples). When
    every difference is equal (up to float rounding: a spread of at most FLOAT_NOISE x max|d|), the
    t interval with sd replaced by `resolution` (default 1e-6 x max(1, |mean d|)): data recorded at
    a finite precision cannot show a spread below it, so the interval is never of zero width.
    Resamples equal up to float rounding are left out of the bootstrap (a spread of 1e-16 would
    otherwise make their T* enormous). NaN bounds with fewer than 2 finite values."""
    from scipy import stats as sps  # noqa: PLC0415  (scipy loads only for an interval)

    d = np.asarray([v for v in differences if math.isfinite(v)], dtype=float)
    if d.size < 2:
        return math.nan, math.nan
    n, mean = d.size, float(d.mean())
    q = float(sps.t.ppf(0.5 + level / 2, n - 1))
    noise = FLOAT_NOISE * max(1.0, float(np.max(np.abs(d))))  # a spread float rounding alone can make
    if np.ptp(d) <= noise:
        res = resolution if resolution is not None and resolution > 0 else 1e-6 * max(1.0, abs(mean))
        return mean - q * res / math.sqrt(n), mean + q * res / math.sqrt(n)
    se = float(d.std(ddof=1)) / math.sqrt(n)
    lo, hi = mean - q * se, mean + q * se
    boot = _boot_t_quantiles(d, level, noise) if n >= MIN_BOOT_T_N else None
    if boot is not None:
        lo, hi = min(lo, mean - boot[1] * se), max(hi, mean - boot[0] * se)
    return lo, hi


def bootstrap_ci(
    x: Values,
    y: Values,
    statistic: Callable = mean_diff,
    level: float = 0.95,
    seed: int = 0,
    resolution: float | None = None,
) -> tuple[float, float]:
    """CI of `statistic(x, y, axis)` over the (x_i, y_i) pairs. For the default, mean(x - y),
    `paired_interval` of the differences (`resolution` passed on; `seed` is then unused). Any
    other vectorised statistic gets a paired BCa bootstrap (10 000 resamples, percentile when
    BCa is undefined), and NaN bounds below MIN_BOOTSTRAP_N pairs. NaN bounds with fewer than
    2 pairs."""
    from scipy import stats as sps  # noqa: PLC0415  (scipy loads only for a bootstrap)

    xa, ya = _clean(x, y)
    if xa.size < 2:
        return math.nan, math.nan
    if statistic is mean_diff:
        return paired_interval(xa - ya, level, resolution)
    if xa.size < MIN_BOOTSTRAP_N:
        return math.nan, math.nan
    for method in ("BCa", "percentile"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = sps.bootstrap(
                (xa, ya),
                statistic,
                paired=True,
                vectorized=True,
                n_resamples=N_RESAMPLES,
                confidence_level=level,
                method=method,
                random_state=np.random.default_rng(seed),
            )
        lo, hi = float(res.confidence_interval.low), float(res.confidence_interval.high)
        if math.isfinite(lo) and math.isfinite(hi):
            return lo, hi
    return math.nan, math.nan


def sign_flip_p(values: Values, seed: int = 0, n_random: int = 20_000) -> float:
    """Two-sided paired permutation p-value of mean(d) = 0 (module docstring). 1.0 when every
    d_i is 0; NaN without data."""
    d = np.asarray([v for v in values if math.isfinite(v)], dtype=float)
    if d.size == 0:
        return math.nan
    observed = abs(d.mean())
    if observed == 0:
        return 1.0
    tol = 1e-12 * max(1.0, float(np.abs(d).max()))
    if d.size <= EXACT_MAX_N:
        signs = np.array(list(itertools.product((1.0, -1.0), repeat=d.size)))
        return float(np.mean(np.abs(signs @ d) / d.size >= observed - tol))
    rng = np.random.default_rng(seed)
    signs = rng.choice((1.0, -1.0), size=(n_random, d.size))
    k = int(np.sum(np.abs(signs @ d) / d.size >= observed - tol))
    return (k + 1) / (n_random + 1)


def holm(pvalues: Values) -> list[float]:
    """Holm-adjusted p-values (same order as given; NaN stays NaN and is not counted in m)."""
    p = np.asarray(pvalues, dtype=float)
    idx = [i for i in np.argsort(p, kind="stable") if math.isfinite(p[i])]
    m, out, running = len(idx), [math.nan] * len(p), 0.0
    for rank, i in enumerate(idx):
        running = max(running, min(1.0, (m - rank) * float(p[i])))
        out[i] = running
    return out


def verdict(diff: float, p_holm: float, higher_is_better: bool = True, alpha: float = ALPHA) -> str:
    """'better' / 'worse' for the first arm when p_holm < alpha, else 'no detectable difference'."""
    if not (math.isfinite(p_holm) and math.isfinite(diff)) or p_holm >= alpha or diff == 0:
        return VERDICTS[2]
    return VERDICTS[0] if (diff > 0) == higher_is_better else VERDICTS[1]


def fieller_ci(num: Values, den: Values, level: float = 0.95) -> tuple[float, float]:
    """Fieller's interval for mean(num) / mean(den) from paired samples, with t(n-1): the set of
    rho with (a - rho b)^2 <= t^2 (V11 - 2 rho V12 + rho^2 V22), a = mean(num), b = mean(den),
    V11 = var(num)/n, V22 = var(den)/n, V12 = cov(num, den)/n (ddof 1). Its ends are the roots
    of  A rho^2 - 2 B rho + C = 0,  A = b^2 - t^2 V22,  B = a b - t^2 V12,  C = a^2 - t^2 V11.
    When A <= 0 (mean(den) is not distinguishable from 0 at this level) the set is unbounded:
    (-inf, inf). NaN bounds with fewer than 2 pairs."""
    from scipy import stats as sps  # noqa: PLC0415  (scipy loads only for a bootstrap)

    x, y = _clean(num, den)
    n = x.size
    if n < 2:
        return math.nan, math.nan
    a, b = float(x.mean()), float(y.mean())
    cov = np.cov(x, y, ddof=1) / n
    v11, v12, v22 = float(cov[0, 0]), float(cov[0, 1]), float(cov[1, 1])
    t2 = float(sps.t.ppf(0.5 + level / 2, n - 1)) ** 2
    big_a, big_b, big_c = b * b - t2 * v22, a * b - t2 * v12, a * a - t2 * v11
    if big_a <= 0:
        return -math.inf, math.inf
    root = math.sqrt(max(0.0, big_b * big_b - big_a * big_c))  # >= 0 up to rounding when A > 0
    return (big_b - root) / big_a, (big_b + root) / big_a


def ratio_ci(num: Values, den: Values, level: float = 0.95, seed: int = 0) -> tuple[float, float, float]:
    """mean(num) / mean(den) and its Fieller interval (`fieller_ci`; e.g. the share of A's gain
    B keeps, num_i = B's gain on seed i, den_i = A's). NaN point when mean(den) <= 0. `seed` is
    kept for callers and unused: nothing is resampled, so the verdict read from the interval
    cannot depend on a seed."""
    num_a, den_a = _clean(num, den)
    if num_a.size == 0 or den_a.mean() <= 0:
        return math.nan, math.nan, math.nan
    lo, hi = fieller_ci(num_a, den_a, level)
    return float(num_a.mean() / den_a.mean()), lo, hi


def _sign_flip_rejects(d: np.ndarray, signs: np.ndarray, level: float) -> np.ndarray:
    """For each row of d (one study), whether the exact `sign_flip_p` of it is < level: `signs`
    holds the half of the 2^n patterns whose first sign is +."""
    obs = np.abs(d.sum(axis=1))
    tol = 1e-12 * np.maximum(1.0, np.abs(d).max(axis=1))
    out = np.empty(d.shape[0], dtype=bool)
    for i in range(0, d.shape[0], 250):
        k = (np.abs(d[i : i + 250] @ signs.T) >= (obs - tol)[i : i + 250, None]).sum(axis=1)
        out[i : i + 250] = k / signs.shape[0] < level
    return out


@functools.lru_cache(maxsize=256)
def _mde_factor(n: int, level: float, power: float) -> float:
    """The delta (in units of the sd) at which the sign-flip test reaches p < `level` in a
    `power` share of MDE_STUDIES simulated studies of n N(delta, 1) differences. The same
    normal draws serve every delta (seed MDE_SEED), so the share grows with delta: it is
    evaluated on a grid of deltas 4% of the t test's value apart around that value (widened
    until it brackets `power`) and read off by linear interpolation between the two grid points
    that bracket it."""
    from scipy import stats as sps  # noqa: PLC0415  (scipy loads only for an interval)

    z = np.random.default_rng(MDE_SEED).standard_normal((MDE_STUDIES, n))
    signs = np.array(list(itertools.product((1.0, -1.0), repeat=n - 1)))
    signs = np.hstack([np.ones((signs.shape[0], 1)), signs])  # half the patterns: |s.d| = |-s.d|
    t_guess = float(sps.t.ppf(1 - level / 2, n - 1) + sps.t.ppf(power, n - 1)) / math.sqrt(n)

    def share(k: int) -> float:
        return float(np.mean(_sign_flip_rejects(z + t_guess * (1 + 0.04 * k), signs, level)))

    k, here = 0, share(0)
    step = 1 if here < power else -1
    while True:
        nxt = share(k + step)
        if (nxt >= power) != (here >= power) or k + step <= -24:
            break
        k, here = k + step, nxt
    (k0, p0), (k1, p1) = sorted([(k, here), (k + step, nxt)])
    frac = (power - p0) / (p1 - p0) if p1 != p0 else 0.0
    return t_guess * (1 + 0.04 * (k0 + min(1.0, max(0.0, frac)) * (k1 - k0)))


def mde80_t(sd: float, n: int, m: int = 1, alpha: float = ALPHA, power: float = 0.8) -> float:
    """The paired t test's detectable effect, (t(1 - alpha/(2m), n-1) + t(power, n-1)) sd /
    sqrt(n) (Cohen 1988), with `mde80`'s inf / NaN cases; `mde80` above MDE_SIM_MAX_N pairs."""
    from scipy import stats as sps  # noqa: PLC0415  (scipy loads only for an interval)

    if n < 2 or not math.isfinite(sd) or m < 1:
        return math.nan
    if 2.0 ** (1 - n) >= alpha / m:
        return math.inf
    q = sps.t.ppf(1 - alpha / (2 * m), n - 1) + sps.t.ppf(power, n - 1)
    return float(q * sd / math.sqrt(n))


def mde80(sd: float, n: int, m: int = 1, alpha: float = ALPHA, power: float = 0.8) -> float:
    """Estimated minimal detectable effect (|mean paired difference|) at `power` for n pairs in
    a Holm family of m questions, by simulated power of the sign-flip test at alpha/m (module
    docstring; `mde80_t` above MDE_SIM_MAX_N pairs). inf when the sign-flip test cannot reach
    alpha/m (2/2^n >= alpha/m); NaN when sd or n is unusable (n < 2, sd not finite)."""
    if n < 2 or not math.isfinite(sd) or m < 1:
        return math.nan
    if 2.0 ** (1 - n) >= alpha / m:
        return math.inf
    if n > MDE_SIM_MAX_N:
        return mde80_t(sd, n, m, alpha, power)
    return float(_mde_factor(int(n), alpha / m, power) * sd)


def settled_without_search(sd: float, effect: float) -> float | None:
    """The answer of a search for the pairs needed that needs no search: NaN when sd or the
    effect is not finite, inf for a zero effect (no number of pairs detects it); None otherwise."""
    if not (math.isfinite(sd) and math.isfinite(effect)):
        return math.nan
    return math.inf if effect == 0 else None


def seeds_needed(
    sd: float, effect: float, m: int = 1, alpha: float = ALPHA, power: float = 0.8, max_n: int = 10_000
) -> float:
    """Smallest number of pairs n whose `mde80(sd, n, m)` is <= |effect| (the seeds a question
    needs to detect `effect` with `power` after its family's correction); inf when even
    `max_n` pairs are not enough or the effect is 0; NaN when sd is not finite. sd = 0 needs
    only the pairs the sign-flip test needs to reach alpha/m. The search starts at the t
    formula's answer (`mde80_t`, cheap) and walks from there with `mde80` (simulated), which
    differs from it by a few percent, so a few pairs at most."""
    effect = abs(effect)
    settled = settled_without_search(sd, effect)
    if settled is not None:
        return settled
    floor = 2
    while floor <= max_n and 2.0 ** (1 - floor) >= alpha / m:  # the permutation test's floor
        floor += 1
    if sd == 0:
        return float(floor)
    lo, hi = floor, floor
    while hi <= max_n and mde80_t(sd, hi, m, alpha, power) > effect:
        hi *= 2
    if hi > max_n and mde80_t(sd, max_n, m, alpha, power) > effect:
        return math.inf
    hi = min(hi, max_n)
    while lo < hi:  # mde80_t decreases with n
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if mde80_t(sd, mid, m, alpha, power) <= effect else (mid + 1, hi)
    n = lo
    while n <= max_n and mde80(sd, n, m, alpha, power) > effect:
        n += 1
    while n > floor and mde80(sd, n - 1, m, alpha, power) <= effect:
        n -= 1
    return float(n) if n <= max_n else math.inf


def criterion(lo: float, hi: float, level: float) -> str:
    """A 'share >= level' criterion read from a CI: 'held' (lo >= level), 'not held'
    (hi < level) or 'undecided' (the CI contains the level)."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return "undecided"
    return "held" if lo >= level else "not held" if hi < level else "undecided"
