"""Pooled answers over machines: one question's per-seed paired differences from several run sets of
the same commands (one set per machine), combined with the machine as a stratum.

The data of a question is a table: one row per seed (pair index), one column per machine, NaN where
that machine did not run that seed. The same seed on two machines shares its warm start and data
order, so its two differences may be correlated; every statistic here treats a seed's row as one
unit (a cluster) and never assumes two machines' runs of one seed are independent.

    pooled diff   mean of every difference in the table (each run pair counts once: machine m
                  weighs n_m / N)
    p             sign-flip test of pooled diff = 0 with a seed's differences flipped together
                  on every machine (under H0 the row (d_s1, ..., d_sM) is as likely as its
                  negation; no assumption about the correlation between machines). Statistic
                  |sum of all d|, i.e. |sum of the seeds' row sums|. Exact (every one of the 2^J
                  patterns of J seeds, counted by meet-in-the-middle) for J <= EXACT_MAX_UNITS,
                  else N_RANDOM random patterns (seed 0; p = (k + 1)/(R + 1), resolution
                  1/(R + 1), Monte-Carlo SE sqrt(p(1 - p)/R)). With one machine it is the
                  report's `stats.sign_flip_p`
    ci95          the interval of the pooled diff: seeds grouped by the set of machines that ran
                  them (the strata of the design; with no seed shared, one stratum per machine),
                  se^2 = sum_g J_g var(u_g) / N^2 (u = a seed's row sum), the t interval with
                  Welch-Satterthwaite df, widened on a side to the stratified bootstrap-t interval
                  (seeds resampled within their stratum, N_BOOT resamples, seed 0) where that
                  reaches further: the construction of `stats.paired_interval`, stratified
    heterogeneity p   do the machines' effects differ? A permutation test of the machine means
                  of the differences centred within each seed (machine labels permuted within
                  every seed two or more machines ran; when no seed is shared, across all
                  pairs: a one-way test), statistic sum_m n_m mean_m^2, N_PERM permutations
                  (seed 0). NaN when no two machines can be compared
    margin        the fewest differences whose sign would have to flip, or that would have to be
                  removed, for the question's verdict to change with the rest of its Holm family
                  as it is: searched over every single difference and pair of differences, then
                  greedily (the most influential first); `fragile` when it is 1
    mde90         the smallest effect the design detects with 90% power at the family's first
                  Holm level 0.05/m: simulated studies of the same table shape with normal
                  differences of the observed within-machine sd (`power.mde`)

Tests: tests/unit/test_pooled.py (a hand-worked exact p on a 3 + 3 toy, an A/A across two machines,
the interval's coverage by simulation at 8 to 20 pairs).
"""

from __future__ import annotations

import itertools
import math
from typing import Sequence

import numpy as np

from noma_prorl_bench.analysis import stats

EXACT_MAX_UNITS = 40  # meet-in-the-middle enumerates 2 x 2^20 half sums at 40 seeds
N_RANDOM, N_BOOT, N_PERM, SEED = 200_000, 9_999, 20_000, 0
ALPHA = stats.ALPHA


def table(strata: dict[str, dict[str, float]]) -> tuple[list[str], list[str], np.ndarray]:
    """(seed keys, machine names, rows x machines array with NaN where not run) from
    machine -> seed key -> difference; non-finite differences count as not run."""
    machines = list(strata)
    keys = sorted({k for col in strata.values() for k in col}, key=lambda k: (len(k), k))
    out = np.full((len(keys), len(machines)), np.nan)
    for j, m in enumerate(machines):
        for i, k in enumerate(keys):
            v = strata[m].get(k)
            if v is not None and math.isfinite(v):
                out[i, j] = float(v)
    keep = np.isfinite(out).any(axis=1)
    return [k for k, ok in zip(keys, keep) if ok], machines, out[keep]


def _half_sums(v: np.ndarray) -> np.ndarray:
    s = np.zeros(1)
    for x in v:
        s = np.concatenate([s + x, s - x])
    return s


def flip_p(values: Sequence[float] | np.ndarray, seed: int = SEED, n_random: int = N_RANDOM) -> tuple[float, bool]:
    """(two-sided sign-flip p of sum(values) = 0, exact?): exact over all 2^J patterns for J <=
    EXACT_MAX_UNITS (meet-in-the-middle: half sums of each half, one sorted, counted by binary
    search), else `n_random` random patterns, (k + 1)/(R + 1). 1.0 when the sum is 0; NaN without data."""
    v = np.asarray([x for x in values if math.isfinite(x)], dtype=float)
    if v.size == 0:
        return math.nan, True
    tol = 1e-9 * max(1.0, float(np.abs(v).sum()))
    thr = abs(float(v.sum())) - tol
    if thr <= 0:
        return 1.0, True
    if v.size <= EXACT_MAX_UNITS:
        h = v.size // 2
        a, b = _half_sums(v[:h]), np.sort(_half_sums(v[h:]))
        hi = b.size - np.searchsorted(b, thr - a, side="left")  # a + b >= thr
        lo = np.searchsorted(b, -thr - a, side="right")  # a + b <= -thr
        return float((hi.sum() + lo.sum()) / 2.0**v.size), True
    rng, k, left = np.random.default_rng(seed), 0, n_random
    while left > 0:
        signs = rng.choice((1.0, -1.0), size=(min(left, 10_000), v.size))
        k += int(np.sum(np.abs(signs @ v) >= thr))
        left -= signs.shape[0]
    return (k + 1) / (n_random + 1), False


def pooled_p(tab: np.ndarray) -> tuple[float, bool]:
    """The stratified sign-flip p of a table (module docstring): its seeds' row sums flipped."""
    return flip_p(np.nansum(tab, axis=1)[np.isfinite(tab).any(axis=1)])


def _strata(tab: np.ndarray) -> list[np.ndarray]:
    """Row indices grouped by the set of machines that ran them; a group of one seed joins the
    largest group (a variance needs two)."""
    groups: dict[tuple, list[int]] = {}
    for i, row in enumerate(np.isfinite(tab)):
        groups.setdefault(tuple(row), []).append(i)
    big = max(groups.values(), key=len)
    out = [np.array(g) for g in groups.values() if len(g) >= 2 or g is big]
    small = [i for g in groups.values() if len(g) < 2 and g is not big for i in g]
    if small:
        j = max(range(len(out)), key=lambda x: out[x].size)
        out[j] = np.concatenate([out[j], small])
    return out


def _se_df(u: list[np.ndarray], n_total: int) -> tuple[float, float]:
    a = [x.size * float(x.var(ddof=1)) / n_total**2 for x in u if x.size >= 2]
    se2 = sum(a)
    df_den = sum(ai**2 / (x.size - 1) for ai, x in zip(a, [x for x in u if x.size >= 2]))
    return math.sqrt(se2), (se2**2 / df_den if df_den > 0 else math.inf)


def pooled_interval(
    tab: np.ndarray, level: float = 0.95, n_boot: int = N_BOOT, resolution: float = 1e-3
) -> tuple[float, float, float]:
    """(pooled diff, lo, hi): the stratified t interval widened to the stratified bootstrap-t
    (module docstring). With one machine and one stratum it is `stats.paired_interval` (up to its
    resampler). Fewer than 2 seeds: NaN bounds; no spread: the t interval with sd = `resolution`."""
    from scipy import stats as sps  # noqa: PLC0415  (scipy loads only for an interval)

    ok = np.isfinite(tab)
    n_total = int(ok.sum())
    if n_total == 0:
        return math.nan, math.nan, math.nan
    est = float(np.nansum(tab) / n_total)
    if ok.any(axis=1).sum() < 2:
        return est, math.nan, math.nan
    groups = _strata(tab)
    u = [np.nansum(tab[g], axis=1) for g in groups]
    se, df = _se_df(u, n_total)
    if not se > stats.FLOAT_NOISE * max(1.0, abs(est)):
        q = float(sps.t.ppf(0.5 + level / 2, max(1, n_total - 1)))
        return est, est - q * resolution / math.sqrt(n_total), est + q * resolution / math.sqrt(n_total)
    q = float(sps.t.ppf(0.5 + level / 2, df)) if math.isfinite(df) else float(sps.norm.ppf(0.5 + level / 2))
    lo, hi = est - q * se, est + q * se
    if min(g.size for g in groups) >= stats.MIN_BOOT_T_N or sum(g.size for g in groups) >= 2 * stats.MIN_BOOT_T_N:
        tq = _boot_t(u, n_total, est, level, n_boot)
        if tq is not None:
            lo, hi = min(lo, est - tq[1] * se), max(hi, est - tq[0] * se)
    return est, lo, hi


def _boot_t(u: list[np.ndarray], n_total: int, est: float, level: float, n_boot: int) -> tuple[float, float] | None:
    """Quantiles of T* = (est* - est) / se* over `n_boot` resamples of each stratum's seed sums."""
    rng = np.random.default_rng(SEED)
    draws = [x[rng.integers(0, x.size, (n_boot, x.size))] for x in u]
    est_b = sum(d.sum(axis=1) for d in draws) / n_total
    se_b = np.sqrt(sum(d.shape[1] * d.var(axis=1, ddof=1) for d in draws if d.shape[1] >= 2)) / n_total
    ok = se_b > stats.FLOAT_NOISE * max(1.0, abs(est))
    if ok.sum() < n_boot / 2:
        return None
    lo, hi = np.quantile((est_b[ok] - est) / se_b[ok], [0.5 - level / 2, 0.5 + level / 2])
    return float(lo), float(hi)


def heterogeneity_p(tab: np.ndarray, n_perm: int = N_PERM, seed: int = SEED) -> float:
    """Permutation p that the machines' mean differences are equal (module docstring); NaN with
    fewer than two machines holding data or nothing to permute."""
    ok = np.isfinite(tab)
    if (ok.sum(axis=0) > 0).sum() < 2:
        return math.nan
    shared = ok.sum(axis=1) >= 2
    rng = np.random.default_rng(seed)
    if shared.any():  # centre within seed, permute labels within seed
        rows = [(np.flatnonzero(ok[i]), tab[i, ok[i]] - tab[i, ok[i]].mean()) for i in np.flatnonzero(shared)]
    else:  # one block: every pair
        cols = np.nonzero(ok)[1]
        vals = tab[ok]
        rows = [(cols, vals - vals.mean())]
    m = tab.shape[1]

    def stat(perms: list[np.ndarray]) -> np.ndarray:
        sums, counts = np.zeros((perms[0].shape[0], m)), np.zeros(m)
        for (cols, vals), order in zip(rows, perms):
            np.add.at(sums.T, cols, vals[order].T)
            np.add.at(counts, cols, 1)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.nansum(np.where(counts > 0, sums**2 / counts, 0.0), axis=1)

    observed = stat([np.arange(c.size)[None, :] for c, _ in rows])[0]
    k = 0
    for size in [5_000] * (n_perm // 5_000) + [n_perm % 5_000]:
        if size:
            perms = [rng.permuted(np.tile(np.arange(c.size), (size, 1)), axis=1) for c, _ in rows]
            k += int(np.sum(stat(perms) >= observed - 1e-12 * max(1.0, observed)))
    return (k + 1) / (n_perm + 1)


def within_sd(tab: np.ndarray) -> float:
    """The sd of the differences about their machine's mean (pooled over machines, ddof per machine)."""
    ss, dof = 0.0, 0
    for col in tab.T:
        c = col[np.isfinite(col)]
        if c.size >= 2:
            ss, dof = ss + float(((c - c.mean()) ** 2).sum()), dof + c.size - 1
    return math.sqrt(ss / dof) if dof else math.nan


def family_verdicts(ps: Sequence[float], diffs: Sequence[float], alpha: float = ALPHA) -> list[str]:
    """Holm over the whole family, then each question's verdict (higher is better)."""
    return [stats.verdict(d, p, True, alpha) for d, p in zip(diffs, stats.holm(ps))]


def _verdict_after(tabs: list[np.ndarray], ps: list[float], i: int, new: np.ndarray) -> str:
    p_new = list(ps)
    p_new[i] = pooled_p(new)[0]
    diffs = [float(np.nanmean(t)) for t in tabs]
    diffs[i] = float(np.nanmean(new)) if np.isfinite(new).any() else math.nan
    return family_verdicts(p_new, diffs)[i]


def margin(tabs: list[np.ndarray], i: int, exhaustive: int = 2) -> tuple[int | None, bool]:
    """(fewest differences of question i to flip or remove so its verdict changes, exact?): every
    set of up to `exhaustive` differences is tried, then sets of the most influential ones
    greedily (flipping the k most supporting, or for a null the k most opposing, differences).
    None when no change is found (every difference flipped or removed)."""
    ps = [pooled_p(t)[0] for t in tabs]
    tab = tabs[i]
    before = family_verdicts(ps, [float(np.nanmean(t)) for t in tabs])[i]
    cells = list(zip(*np.nonzero(np.isfinite(tab))))

    def changed(idx: Sequence[tuple[int, int]], how: str) -> bool:
        new = tab.copy()
        for r, c in idx:
            new[r, c] = -new[r, c] if how == "flip" else math.nan
        return _verdict_after(tabs, ps, i, new) != before

    for k in range(1, min(exhaustive, len(cells)) + 1):
        for idx in itertools.combinations(cells, k):
            if changed(idx, "flip") or changed(idx, "remove"):
                return k, True
    sign = 1.0 if float(np.nanmean(tab)) >= 0 else -1.0
    supporting = before != stats.VERDICTS[2]
    order = sorted(cells, key=lambda rc: -sign * tab[rc] if supporting else sign * tab[rc])
    for k in range(exhaustive + 1, len(cells) + 1):
        if changed(order[:k], "flip") or changed(order[:k], "remove"):
            return k, False
    return None, False
