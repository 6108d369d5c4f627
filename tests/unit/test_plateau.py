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
