"""Pooled answers over machines (analysis/pooled.py, analysis/power.py): the exact stratified
sign-flip p on hand-worked toys, an A/A across two machines, the interval's coverage by simulation,
the heterogeneity check, the verdict's margin and the simulated power."""

from __future__ import annotations

import math

import numpy as np
import pytest

from noma_prorl_bench.analysis import pooled, power, stats


def test_exact_p_on_a_3_plus_3_toy_by_hand() -> None:
    # machine A: seeds 0-2, d = 1, 2, 3; machine B: seeds 3-5, d = 4, 5, -1 (no seed shared: six
    # units). |d| sum to 16 and the observed sum is 14 = 16 - 2 x 1, so a pattern is as extreme
    # when the |d| it turns negative sum to <= 1 ({}, {1 of A}, {1 of B}) or >= 15 (their
    # complements): 6 of 2^6 patterns.
    _, machines, tab = pooled.table({"A": {"0": 1.0, "1": 2.0, "2": 3.0}, "B": {"3": 4.0, "4": 5.0, "5": -1.0}})
    assert machines == ["A", "B"] and tab.shape == (6, 2)
    assert pooled.pooled_p(tab) == (6 / 64, True)
    # the same numbers on shared seeds 0-2: three units with sums 5, 7, 2 (all |.| sum to 14 = the
    # observed): only the all-plus and all-minus patterns reach it, 2 of 2^3
    _, _, shared = pooled.table({"A": {"0": 1.0, "1": 2.0, "2": 3.0}, "B": {"0": 4.0, "1": 5.0, "2": -1.0}})
    assert shared.shape == (3, 2) and pooled.pooled_p(shared) == (2 / 8, True)


@pytest.mark.parametrize("n", [3, 9, 16])
def test_flip_p_is_the_reports_sign_flip_p_on_one_machine(n: int) -> None:
    d = np.random.default_rng(n).normal(0.4, 1.0, n)
    assert pooled.flip_p(d) == (pytest.approx(stats.sign_flip_p(d), abs=1e-12), True)


def test_flip_p_counts_exactly_past_the_enumeration_limit_of_stats() -> None:
    d = np.concatenate([np.ones(19), [-1.0]])  # sum 18 of 20 unit values: |S| >= 18 needs <= 1 minus sign or >= 19
    assert pooled.flip_p(d) == (pytest.approx(2 * 21 / 2**20), True)
    p, exact = pooled.flip_p(np.ones(pooled.EXACT_MAX_UNITS + 5) * 0.1)
    assert not exact and p == pytest.approx(1 / (pooled.N_RANDOM + 1))


def _aa_study(rng: np.random.Generator) -> np.ndarray:
    """Two machines, identical distributions: 8 seeds on both (shared), 12 more on the second."""
    tab = np.full((20, 2), np.nan)
    tab[:8] = rng.normal(0.0, 0.02, (8, 2))
    tab[8:, 1] = rng.normal(0.0, 0.02, 12)
    return tab


def test_aa_across_two_machines_finds_no_detectable_difference() -> None:
    rng = np.random.default_rng(0)
    tab = _aa_study(rng)
    est, lo, hi = pooled.pooled_interval(tab)
    assert lo < 0 < hi and abs(est) < 0.01
    assert pooled.family_verdicts([pooled.pooled_p(tab)[0]], [est]) == ["no detectable difference"]
    assert pooled.heterogeneity_p(tab, n_perm=2_000) > 0.05
    rejections = sum(pooled.pooled_p(_aa_study(rng))[0] < 0.05 for _ in range(300))
    assert rejections <= 300 * 0.05 + 3 * math.sqrt(300 * 0.05 * 0.95)  # the test holds its level


def test_heterogeneity_sees_machines_that_disagree_and_not_a_shared_seed_effect() -> None:
    rng = np.random.default_rng(3)
    seed_effect = rng.normal(0.0, 1.0, (10, 1))
    same = seed_effect + rng.normal(0.0, 0.1, (10, 2))
    assert pooled.heterogeneity_p(same, n_perm=2_000) > 0.05  # large seed effects, one machine effect
    apart = same + np.array([[0.0, 0.3]])
    assert pooled.heterogeneity_p(apart, n_perm=2_000) < 0.01
    disjoint = np.full((16, 2), np.nan)
    disjoint[:8, 0], disjoint[8:, 1] = rng.normal(0, 1, 8), rng.normal(3, 1, 8)
    assert pooled.heterogeneity_p(disjoint, n_perm=2_000) < 0.01  # no shared seed: a one-way test


def _study(rng: np.random.Generator, n: int, shape: str) -> tuple[np.ndarray, float]:
    """Machine A runs seeds 0..n-1, machine B the first n//2 of them too (correlation 0.5 within a
    seed), B's true effect 0.5 sd above A's; returns the table and the pooled estimand."""
    k = n // 2
    common = rng.standard_normal((n, 1))
    noise = rng.exponential(1.0, (n, 2)) - 1.0 if shape == "exp" else rng.standard_normal((n, 2))
    d = np.sqrt(0.5) * common + np.sqrt(0.5) * noise + np.array([[0.0, 0.5]])
    d[k:, 1] = np.nan
    return d, 0.5 * k / (n + k)


@pytest.mark.parametrize("n", [8, 12, 20])
@pytest.mark.parametrize("shape", ["normal", "exp"])
def test_pooled_interval_covers_95_percent(n: int, shape: str) -> None:
    # 500 studies: Monte-Carlo SE 0.010 at 0.95; the bar 0.925 is 2.5 SE below it, and a
    # conservative interval may not exceed 0.99
    rng = np.random.default_rng(100 + n + (shape == "exp"))
    hits = 0
    for _ in range(500):
        tab, truth = _study(rng, n, shape)
        _, lo, hi = pooled.pooled_interval(tab, n_boot=999)
        hits += lo <= truth <= hi
    assert 0.925 <= hits / 500 <= 0.99


def test_margin_counts_the_seeds_a_verdict_rests_on() -> None:
    eight = [np.ones((8, 1))]  # p = 2/256; one flipped seed gives 18/256 > 0.05
    assert pooled.margin(eight, 0) == (1, True)
    twenty = [np.ones((20, 1))]  # flipping k ones: p >= 0.05 first at k = 6 (removal needs 15)
    assert pooled.margin(twenty, 0) == (6, False)
    null = [np.array([[1.0], [1.0], [1.0], [1.0], [1.0], [1.0], [-1.0], [-1.0]])]
    assert pooled.margin(null, 0)[0] == 2  # flipping the two -1 makes eight +1 (one flip: 18/256)


def test_the_family_is_every_question_of_the_study() -> None:
    assert pooled.family_verdicts([0.01, 0.02, 0.5, 0.6], [1.0, -1.0, 1.0, 1.0]) == [
        "better",
        "no detectable difference",
        "no detectable difference",
        "no detectable difference",
    ]


def test_simulated_power_matches_the_reports_mde_and_sizes_a_study() -> None:
    for n in (8, 12):
        assert power.mde(1.0, (1,) * n, 4) == pytest.approx(stats.mde80(1.0, n, 4, power=0.9), rel=0.03)
    assert power.mde(1.0, (1,) * 5, 4) == math.inf  # 2/2^5 >= 0.05/4
    n = power.pairs_needed(1.0, 0.8, m=4)
    assert power.mde(1.0, (1,) * int(n), 4) <= 0.8 < power.mde(1.0, (1,) * (int(n) - 1), 4)
