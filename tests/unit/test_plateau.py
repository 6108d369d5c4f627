"""Plateau statistics by hand: tail slopes per 100 steps, the words for an arm's tail, the paired sentence."""

import math

import numpy as np
import pytest

from noma_prorl_bench.analysis.plateau import arm_plateau, plateau_sentence, tail_slope, tail_words


def test_tail_slope_of_a_line_uses_only_the_last_third():
    steps = np.arange(10, 310, 10)  # 10 .. 300
    y = np.where(steps < 200, 0.1 * steps, 0.5 + 0.002 * steps)  # a steep start, then 0.2 per 100 steps
    slope, mean, n = tail_slope(steps, y)
    assert n == 11  # steps 200 .. 300
    assert slope == pytest.approx(0.2)
    assert mean == pytest.approx(0.5 + 0.002 * 250)


def test_tail_slope_skips_nan_and_needs_three_points():
    slope, mean, n = tail_slope(np.array([1, 2, 3]), np.array([np.nan, 1.0, 2.0]))
    assert math.isnan(slope) and n == 2 and mean == pytest.approx(1.5)  # tail: steps 2 and 3
    assert tail_slope(np.zeros(0), np.zeros(0))[2] == 0


def _stats(slope, kl_tail=0.5, kl_slope=0.0):
    return {"score_slope": slope, "score_tail": 0.5, "kl_slope": kl_slope, "kl_tail": kl_tail, "points": 11}


def test_the_words_follow_the_intervals():
    flat = arm_plateau([_stats(s) for s in (-0.01, 0.01, 0.0, 0.02, -0.02)])
    assert flat["score_slope"] == pytest.approx(0.0) and flat["lo"] < 0 < flat["hi"] and flat["n"] == 5
    assert tail_words(flat, "A") == "A shows no detectable climb (a plateau) with the KL to the initial policy pinned"
    moving = arm_plateau([_stats(s, kl_slope=0.1) for s in (-0.01, 0.01, 0.0, 0.02, -0.02)])  # 0.1 > 10% of 0.5
    assert tail_words(moving, "A").endswith("while its KL to the initial policy still moves")
    assert tail_words(arm_plateau([_stats(s) for s in (0.1, 0.12, 0.11)]), "A") == "A still climbs"
    assert tail_words(arm_plateau([_stats(0.1)]), "A") == "A has too few seeds to tell"


def test_paired_sentence_says_faster_only_at_p_below_005():
    none = {s: _stats(v) for s, v in enumerate((-0.01, 0.01, 0.0, 0.02, -0.02, 0.01))}
    reset = {s: _stats(v + 0.1 + 0.01 * s) for s, v in enumerate((-0.01, 0.01, 0.0, 0.02, -0.02, 0.01))}
    text, res = plateau_sentence(none, reset, "no reset", "reset")
    assert res["n_pairs"] == 6 and res["p"] == pytest.approx(2 / 64)  # all six differences positive
    assert res["diff"] == pytest.approx(0.125)
    assert "reset climbs detectably faster" in text and "no reset shows no detectable climb" in text
    few = {s: reset[s] for s in range(4)}  # 4 pairs: the smallest sign-flip p is 2/16 = 0.125
    text, res = plateau_sentence(none, few, "no reset", "reset")
    assert res["n_pairs"] == 4 and "does not climb detectably faster" in text


def _run(seed, score_slope):
    from pathlib import Path

    from noma_prorl_bench.analysis.runlog import Run

    steps = np.arange(10, 310, 10)
    score = 0.3 + score_slope / 100 * steps + 0.001 * seed
    kl = np.full(steps.size, 0.066)
    return Run(Path(f"s{seed}"), {"seed": seed}, steps, {"reward/val": score, "kl/to_init": kl}, [], [], None)


def test_the_report_section_has_one_sentence_per_comparison_with_the_numbers():
    from noma_prorl_bench.analysis.plateau import plateau_lines

    arms = {
        "none": {s: _run(s, 0.001 * (s - 2.5)) for s in range(6)},  # slopes -0.0025 .. +0.0025 per 100 steps
        "keep": {s: _run(s, 0.05 + 0.001 * s) for s in range(6)},
        "other": {s: _run(s, 0.0) for s in range(6)},
    }
    del arms["other"][0].metrics["kl/to_init"]  # an arm without the KL monitor: no sentence
    rows = [
        {"name": "keep vs none", "arm": "keep", "baseline": "none"},
        {"name": "other vs none", "arm": "other", "baseline": "none"},
    ]
    lines = plateau_lines(arms, rows)
    said = [x for x in lines if x.startswith("- ")]
    assert len(said) == 1 and said[0].startswith("- keep vs none: Over the last third of the run, none shows no")
    assert "kl/to_init 0.066 moving" in said[0] and "keep climbs detectably faster" in said[0]
    assert "6 pairs" in said[0] and "sign-flip p 0.031" in said[0]
    assert plateau_lines(arms, rows[1:]) == []


def test_one_sentence_per_task_plateau_pinned_no_plateau_and_ambiguous():
    from noma_prorl_bench.analysis.plateau import plateau_headline, plateau_verdict

    flat6 = (-0.02, -0.01, 0.0, 0.0, 0.01, 0.02)  # mean 0, sd sqrt(2e-4): t interval +- 2.5706 * 0.005774 = 0.0148
    none = {s: _stats(v, kl_tail=0.5, kl_slope=0.01) for s, v in enumerate(flat6)}  # 0.01 < 10% of 0.5: pinned
    on = {s: _stats(v + 0.1 + 0.01 * s) for s, v in enumerate(flat6)}  # differences 0.10 .. 0.15, all positive
    climbs = {s: _stats(v) for s, v in enumerate((0.1, 0.11, 0.12, 0.1, 0.11, 0.12))}  # 0.11 +- 0.0094
    same = {s: _stats(v + (0.01 if s % 2 else -0.01)) for s, v in enumerate(flat6)}  # differences average 0
    moving = {s: _stats(v, kl_tail=0.5, kl_slope=0.1) for s, v in enumerate(flat6)}  # 0.1 = 20% of 0.5
    cases = {
        "beta 1": plateau_sentence(none, on, "none", "keep")[1],
        "beta 0.1": plateau_sentence(climbs, on, "none", "keep")[1],
        "beta 2": plateau_sentence(none, same, "none", "keep")[1],
        "beta 5": plateau_sentence(moving, on, "none", "keep")[1],
        "beta 9": plateau_sentence({0: none[0]}, {0: on[0]}, "none", "keep")[1],
    }
    assert [plateau_verdict(r) for r in cases.values()] == ["goes on", "no plateau"] + ["ambiguous"] * 3
    assert cases["beta 1"]["diff"] == pytest.approx(0.125) and cases["beta 1"]["p"] == pytest.approx(2 / 64)
    text = plateau_headline(list(cases.items()))
    assert text.count(". ") == 0 and text.endswith(".")  # one sentence
    assert "goes on in 1 of 5 comparisons: " in text
    assert (
        "beta 1: it plateaus (score slope +0.000 [-0.015, +0.015]) with the KL pinned (kl/to_init 0.500 moving "
        "+0.010) and the reset arm goes on (reset minus no reset +0.125 [" in text
    )
    assert ", p 0.031)" in text
    assert "beta 0.1: it does not plateau (score slope +0.110 [+0.101, +0.119])" in text
    assert "beta 2: ambiguous, a plateau with the KL pinned, but the reset arm is not detectably faster" in text
    assert "beta 5: ambiguous, a plateau, but its KL still moves" in text
    assert "beta 9: ambiguous, too few seeds" in text


def test_the_section_opens_with_the_sentence_only_for_reset_against_no_reset():
    from noma_prorl_bench.analysis.plateau import plateau_lines

    def arm(slope, reset_every):
        runs = {s: _run(s, slope(s)) for s in range(6)}
        for r in runs.values():
            r.config["reset_every"] = reset_every
        return runs

    arms = {"none": arm(lambda s: 0.001 * (s - 2.5), 0), "keep": arm(lambda s: 0.05 + 0.001 * s, 50)}
    arms["hard"] = arm(lambda s: 0.05, 50)
    rows = [
        {"name": "keep vs none", "arm": "keep", "baseline": "none"},
        {"name": "hard vs keep", "arm": "hard", "baseline": "keep"},  # a reset baseline: no part of the sentence
        {"name": "hard vs keep", "arm": "hard", "baseline": "keep", "metric": "s_step"},  # a timing row: no 2nd line
    ]
    lines = plateau_lines(arms, rows)
    one = [x for x in lines if x.startswith("**In one sentence.**")]
    assert len(one) == 1 and "in 1 of 1 comparisons: keep vs none: it plateaus" in one[0]
    assert "hard vs keep:" not in one[0] and len([x for x in lines if x.startswith("- ")]) == 2
    for r in arms["none"].values():
        r.config["reset_every"] = 50
    assert not any(x.startswith("**In one sentence.**") for x in plateau_lines(arms, rows))
