"""Paired statistics of the suite report (analysis/stats.py): hand-worked p-values and Holm
adjustments, a bootstrap CI that covers the truth, and the two checks the method must pass
before its verdicts are trusted: a real difference in synthetic paired data is detected, and
two arms drawn from the same distribution give `no detectable difference`."""

from __future__ import annotations

import math

import numpy as np
import pytest

from noma_prorl_bench.analysis import power, stats

pytestmark = pytest.mark.unit


def test_sign_flip_exact_hand_worked():
    # d = (1, 2, 3): mean 2; the 8 sign patterns give |sum| = 6, 4, 2, 0, 0, 2, 4, 6 -> only
    # (+,+,+) and (-,-,-) reach |sum| >= 6, so p = 2/8
    assert stats.sign_flip_p([1.0, 2.0, 3.0]) == pytest.approx(0.25)
    # d = (1, -1, 2): |sum| = 2; patterns with |s1 - s2 ... | >= 2: sums are
    # 1-1+2=2, 1-1-2=-2, 1+1+2=4, 1+1-2=0, -1-1+2=0, -1-1-2=-4, -1+1+2=2, -1+1-2=-2 -> 6 of 8
    assert stats.sign_flip_p([1.0, -1.0, 2.0]) == pytest.approx(6 / 8)
    assert stats.sign_flip_p([0.0, 0.0]) == 1.0
    # ten positive differences: only the all-plus and all-minus patterns -> 2 / 1024
    assert stats.sign_flip_p(np.arange(1.0, 11.0)) == pytest.approx(2 / 1024)
    # n > 16 uses random patterns, p = (k + 1) / (N + 1): twenty equal differences are reached
    # only by the all-plus / all-minus patterns (chance 2 / 2^20), so k = 0 and p = 1 / 1000
    assert stats.sign_flip_p(np.ones(20), n_random=999) == pytest.approx(1 / 1000)


def test_holm_hand_worked():
    # p = (0.01, 0.04, 0.03), m = 3: sorted 0.01*3 = 0.03, 0.03*2 = 0.06, max(0.06, 0.04*1) = 0.06
    assert stats.holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    # NaN is left out of m: (0.02, nan, 0.5) -> 0.02*2 = 0.04, 0.5*1 = 0.5
    adj = stats.holm([0.02, math.nan, 0.5])
    assert adj[0] == pytest.approx(0.04) and math.isnan(adj[1]) and adj[2] == pytest.approx(0.5)
    assert stats.holm([0.9, 0.8]) == [1.0, 1.0]  # capped at 1


def test_verdict_direction_and_threshold():
    assert stats.verdict(0.1, 0.01) == "better" and stats.verdict(-0.1, 0.01) == "worse"
    assert stats.verdict(-0.1, 0.01, higher_is_better=False) == "better"  # a time went down
    assert stats.verdict(0.1, 0.05) == "no detectable difference"  # p must be < alpha
    assert stats.verdict(0.1, math.nan) == "no detectable difference"


def test_bootstrap_ci_equal_differences_and_coverage():
    x = np.array([0.5, 0.6, 0.7])
    # all d_i equal: never zero width; the t interval with sd = the resolution the values carry,
    # 0.1 +- t(0.975, 2) 0.001 / sqrt(3) = 0.1 +- 4.302653 * 0.000577350
    lo, hi = stats.bootstrap_ci(x, x - 0.1, resolution=0.001)
    assert (lo, hi) == pytest.approx((0.1 - 0.0024841, 0.1 + 0.0024841), abs=1e-7)
    lo, hi = stats.bootstrap_ci(x, x - 0.1)  # default resolution 1e-6
    assert lo < 0.1 < hi and hi - lo == pytest.approx(2 * 4.302653 * 1e-6 / math.sqrt(3), rel=1e-5)
    assert all(math.isnan(v) for v in stats.bootstrap_ci([1.0], [0.0]))
    # coverage: over 100 synthetic studies of 10 pairs (true mean diff 0.02, sd 0.03) the 95% CI
    # contains 0.02 in most of them (BCa at n = 10 undercovers a little: accept >= 85%)
    rng = np.random.default_rng(0)
    hits = 0
    for i in range(100):
        y = rng.normal(0.5, 0.05, 10)
        x = y + 0.02 + rng.normal(0, 0.03, 10)
        lo, hi = stats.bootstrap_ci(x, y, seed=i)
        hits += lo <= 0.02 <= hi
    assert hits >= 85


def test_small_n_ci_is_the_t_interval_and_covers():
    # d = [0.1, 0.2, 0.3]: mean 0.2, sd 0.1, t(0.975, 2) = 4.3027 -> 0.2 +- 4.3027 * 0.1 / sqrt(3)
    lo, hi = stats.bootstrap_ci([0.1, 0.2, 0.3], [0.0, 0.0, 0.0])
    assert (lo, hi) == pytest.approx((0.2 - 0.24842, 0.2 + 0.24842), abs=1e-4)
    # A/A at n = 3 (true mean diff 0): the interval covers 0 in ~95% of studies; the BCa bootstrap
    # this replaced covered it in far fewer (a quick-suite A/A gave [+0.017, +0.043])
    rng = np.random.default_rng(1)
    hits = sum(lo <= 0 <= hi for lo, hi in (stats.bootstrap_ci(rng.normal(0, 1, 3), np.zeros(3)) for _ in range(400)))
    assert hits >= 0.92 * 400
    # the gain share's Fieller interval (t with n - 1 = 2) is valid at 3 pairs too: these gains
    # are nearly proportional, so it is narrow and contains the point estimate
    share, lo, hi = stats.ratio_ci([0.17, 0.18, 0.16], [0.2, 0.21, 0.19])
    assert share == pytest.approx(0.85) and 0.8 < lo < 0.85 < hi < 0.9


def _study(effect: float, seed: int, n: int = 10) -> tuple[float, float]:
    """One synthetic paired study: seed-level noise shared by both arms (sd 0.05, as seeds move
    the score) plus per-run noise (sd 0.02); returns (mean diff, p)."""
    rng = np.random.default_rng(seed)
    base = rng.normal(0.55, 0.05, n)
    x = base + effect + rng.normal(0, 0.02, n)
    y = base + rng.normal(0, 0.02, n)
    return float(np.mean(x - y)), stats.sign_flip_p(x - y)


def test_real_difference_is_detected():
    # effect 0.05 = 2.5x the per-run noise: detected (p < 0.05) in nearly every study of 10 pairs
    detected = sum(_study(0.05, s)[1] < 0.05 for s in range(100))
    assert detected >= 95
    # and with Holm over 12 comparisons (11 nulls) the real one still comes out "better"
    ps = [_study(0.0, 100 + i)[1] for i in range(11)] + [_study(0.05, 3)[1]]
    adj = stats.holm(ps)
    assert stats.verdict(0.05, adj[-1]) == "better"


def test_aa_no_difference_at_the_nominal_rate():
    # identical arms: a false "better"/"worse" in <= ~5% of studies (alpha 0.05, exact test)
    false = sum(_study(0.0, s)[1] < 0.05 for s in range(400))
    assert false <= 0.08 * 400


def test_ratio_ci_and_criterion():
    gain_a = np.array([0.20, 0.22, 0.18, 0.21, 0.19, 0.20, 0.23, 0.17, 0.20, 0.20])
    share, lo, hi = stats.ratio_ci(0.85 * gain_a, gain_a)
    assert share == pytest.approx(0.85) and lo == pytest.approx(0.85) and hi == pytest.approx(0.85)
    assert stats.criterion(lo, hi, 0.8) == "held" and stats.criterion(lo, hi, 0.9) == "not held"
    assert stats.criterion(0.75, 0.95, 0.8) == "undecided"
    assert math.isnan(stats.ratio_ci([0.1, 0.1], [-0.1, -0.2])[0])  # A gained nothing


# ---------------------------------------------------------------- coverage, Fieller, power


def test_paired_interval_widens_the_t_interval_toward_the_skew_and_is_deterministic():
    # right-skewed differences: the bootstrap-t reaches further up than the t interval, and the
    # report's interval takes the farther end on each side (never narrower than t)
    d = np.array([0.1, 0.0, 0.2, 0.1, 0.0, 0.1, 1.5, 0.2, 0.1, 0.0])
    lo, hi = stats.paired_interval(d)
    tlo, thi = stats.t_ci(d)
    assert lo <= tlo and hi > thi + 0.1
    assert stats.paired_interval(d) == (lo, hi)  # seeded resamples: reproducible
    assert stats.bootstrap_ci(d, np.zeros(10)) == (lo, hi)  # the report's route to it
    # below MIN_BOOT_T_N pairs: the t interval alone; symmetric data: t and bootstrap-t agree
    assert stats.paired_interval(d[:4]) == pytest.approx(stats.t_ci(d[:4]))
    sym = np.array([-2.0, -1.0, 0.0, 1.0, 2.0, -2.0, -1.0, 0.0, 1.0, 2.0])
    assert stats.paired_interval(sym) == pytest.approx(stats.t_ci(sym), rel=0.25)


@pytest.mark.parametrize("dist", ["normal", "shifted exp"])
def test_paired_interval_covers_at_ten_pairs(dist):
    # 600 studies of 10 pairs (the slow tier and benchmarks/studies/interval_coverage.py do every shape
    # with more): coverage 0.969 (normal) / 0.944 (shifted exp) in the 4 000-study table; the
    # Monte-Carlo SE at 600 studies is 0.007-0.009, so 0.92 is 2.7 SE or more below both
    rng = np.random.default_rng(7)
    hits = 0
    for _ in range(600):
        d = rng.standard_normal(10) if dist == "normal" else rng.exponential(1.0, 10) - 1.0
        lo, hi = stats.paired_interval(d)
        hits += lo <= 0.0 <= hi
    assert hits / 600 >= 0.92, hits / 600


def test_fieller_hand_worked():
    # num = (1, 3, 2, 2), den = (2, 4, 2, 4), n = 4: a = 2, b = 3
    # var(num) = (1 + 1 + 0 + 0)/3 = 2/3 -> V11 = 1/6; var(den) = 4/3 -> V22 = 1/3;
    # cov = ((-1)(-1) + (1)(1) + 0 + 0)/3 = 2/3 -> V12 = 1/6; t(0.975, 3) = 3.182446, t^2 = 10.12796
    # A = 9 - 10.12796/3 = 5.62401, B = 6 - 10.12796/6 = 4.31201, C = 4 - 10.12796/6 = 2.31201
    # disc = B^2 - A C = 18.59343 - 13.00277 = 5.59066, sqrt = 2.36446
    # lo = (4.31201 - 2.36446)/5.62401 = 0.34629, hi = (4.31201 + 2.36446)/5.62401 = 1.18713
    assert stats.fieller_ci([1, 3, 2, 2], [2, 4, 2, 4]) == pytest.approx((0.34629, 1.18713), abs=2e-5)
    share, lo, hi = stats.ratio_ci([1, 3, 2, 2], [2, 4, 2, 4])
    assert (share, lo, hi) == pytest.approx((2 / 3, 0.34629, 1.18713), abs=2e-5)
    # a denominator indistinguishable from 0: unbounded, so every criterion is undecided
    lo, hi = stats.fieller_ci([0.1, 0.2, 0.0], [0.1, -0.1, 0.05])
    assert (lo, hi) == (-math.inf, math.inf) and stats.criterion(lo, hi, 0.8) == "undecided"


def test_ratio_verdict_does_not_depend_on_the_seed():
    # gains whose share sits close to 0.8: whatever seed the caller passes, one interval and one
    # verdict (a bootstrap bound moved across 0.8 with the resampler's seed)
    rng = np.random.default_rng(3)
    gain_a = rng.normal(0.11, 0.03, 10)
    gain_b = 0.74 * gain_a + rng.normal(0, 0.004, 10)
    results = {stats.ratio_ci(gain_b, gain_a, seed=s) for s in range(20)}
    assert len(results) == 1
    verdicts = {stats.criterion(lo, hi, 0.8) for _, lo, hi in results}
    assert len(verdicts) == 1


def test_mde80_t_hand_worked():
    # sd 1, n 10, one question: t(0.975, 9) = 2.262157, t(0.8, 9) = 0.883408
    # (2.262157 + 0.883408) / sqrt(10) = 3.145565 / 3.162278 = 0.994715
    assert stats.mde80_t(1.0, 10, 1) == pytest.approx(0.994715, abs=1e-5)
    # five questions (Holm's first step = Bonferroni 0.05/5): t(0.995, 9) = 3.249836
    # (3.249836 + 0.883408) / 3.162278 = 1.307045; scales with sd
    assert stats.mde80_t(0.02, 10, 5) == pytest.approx(0.02 * 1.307045, abs=1e-6)


def _sign_flip_power(delta: float, n: int, level: float, studies: int = 3000) -> float:
    """Share of studies of n N(delta, 1) differences whose `stats.sign_flip_p` is < level
    (the report's own test, draws independent of mde80's)."""
    rng = np.random.default_rng(2024)
    return float(np.mean([stats.sign_flip_p(rng.normal(delta, 1.0, n)) < level for _ in range(studies)]))


def test_mde80_is_the_sign_flip_tests_80_percent_power_point():
    # at mde80 the report's test (sign-flip at 0.05/m, Holm's first step) has power 0.8: checked
    # with 3000 fresh studies, SE 0.0073, so +-0.025 is about 3.4 SE
    for n, m in ((10, 1), (10, 5), (8, 2)):
        assert _sign_flip_power(stats.mde80(1.0, n, m), n, 0.05 / m) == pytest.approx(0.8, abs=0.025)
    # the t formula it replaced falls short of 80% for the sign-flip test in a family of 5
    assert _sign_flip_power(stats.mde80_t(1.0, 10, 5), 10, 0.01) < 0.78
    # linear in sd, reproducible, and the sign-flip floor 2/2^n: never detectable at n = 5
    assert stats.mde80(0.02, 10, 5) == pytest.approx(0.02 * stats.mde80(1.0, 10, 5), rel=1e-12)
    assert stats.mde80(1.0, 5, 1) == math.inf and math.isfinite(stats.mde80(1.0, 6, 1))
    # 17 questions: alpha/m = 0.00294; 2/2^8 = 0.0078 (out), 2/2^9 = 0.0039 (out), 2/2^10 in
    assert stats.mde80(1.0, 9, 17) == math.inf and math.isfinite(stats.mde80(1.0, 10, 17))
    assert math.isnan(stats.mde80(math.nan, 10, 1)) and math.isnan(stats.mde80(1.0, 1, 1))
    # above MDE_SIM_MAX_N pairs: the t formula (the two tests agree there)
    assert stats.mde80(1.0, 40, 3) == stats.mde80_t(1.0, 40, 3)


def test_seeds_needed_is_the_smallest_n_with_mde80_below_the_effect():
    for sd, effect, m in ((1.0, 1.0, 1), (1.0, 0.5, 1), (0.03, 0.02, 5), (1.0, 1.0, 17)):
        n = int(stats.seeds_needed(sd, effect, m))
        assert stats.mde80(sd, n, m) <= effect < stats.mde80(sd, n - 1, m)
    assert stats.seeds_needed(1.0, 1.0, 1) == 10  # mde80(1, 10, 1) = 0.989 above
    assert stats.seeds_needed(0.0, 0.1, 17) == 10  # only the sign-flip floor binds
    assert stats.seeds_needed(1.0, 0.0, 1) == math.inf


def test_paired_interval_float_noise_is_not_spread():
    """Differences equal but for float noise (1e-16) and two values 2e-7 higher: resamples equal
    at the resolution are left out of the bootstrap, so T* cannot blow the interval up (it gave
    an upper bound of 90 for a mean of 0.08); the interval is the resolution's, around the mean."""
    d = [
        0.08126520000000015,
        0.08126520000000004,
        0.0812654,
        0.08126520000000004,
        0.08126520000000004,
        0.0812654,
        0.08126520000000004,
        0.08126519999999993,
    ]
    lo, hi = stats.paired_interval(d)
    mean = sum(d) / len(d)
    assert lo < mean < hi and hi - lo < 2e-6
    # a spread above the resolution still gets the t / bootstrap-t interval, which holds the data's mean
    d2 = [v * 1000 for v in d]
    lo2, hi2 = stats.paired_interval(d2, resolution=1e-9)
    assert lo2 < sum(d2) / len(d2) < hi2 and hi2 - lo2 < 1e-3


def test_holm_families_keeps_what_survives_each_family_by_hand():
    rows = [
        dict(name="a", p=0.001, diff=0.1, n_pairs=10),
        dict(name="b", p=0.02, diff=-0.2, n_pairs=12),
        dict(name="c", p=0.04, diff=0.3, n_pairs=10),
    ]
    out = power.holm_families({"one": rows[:1], "all": rows})
    assert out["one"]["m"] == 1 and out["one"]["survivors"][0]["p_holm"] == pytest.approx(0.001)
    # Holm over 3: 3 x 0.001 = 0.003 better; 2 x 0.02 = 0.04 worse; max(0.04, 1 x 0.04) = 0.04 better
    fam = out["all"]
    assert fam["m"] == 3 and fam["min_pairs"] == 10
    assert [(r["name"], r["verdict"]) for r in fam["survivors"]] == [("a", "better"), ("b", "worse"), ("c", "better")]
    assert [r["p_holm"] for r in fam["survivors"]] == pytest.approx([0.003, 0.04, 0.04])
    rows[2]["p"] = 0.06  # 0.06 >= 0.05: c drops out, the others stay
    assert [r["name"] for r in power.holm_families({"all": rows})["all"]["survivors"]] == ["a", "b"]
    assert power.holm_families({"none": []})["none"] == {"m": 0, "min_pairs": 0, "survivors": []}
