"""Unit tests for rewards.py: R1-Zero format/answer reward and keyword inclusion."""

import doctest

import pytest

from noma_prorl_bench.tasks import rewards as R


@pytest.mark.unit
def test_doctests():
    assert doctest.testmod(R).failed == 0


@pytest.mark.unit
@pytest.mark.parametrize(
    "response, truth, expected",
    [
        ("think </think> <answer> 42 </answer>", "42", (1.0, 1.0, 1.0)),
        ("think </think> <answer> 41 </answer>", "42", (0.0, 1.0, 0.0)),
        ("<answer> 42 </answer>", "42", (0.0, 0.0, 0.0)),  # no "</think> <answer>"
        ("x </think> <answer> 42", "42", (0.0, 0.0, 0.0)),  # no "</answer>"
        ("x </think> <answer> \\boxed{\\frac{1}{2}} </answer>", "0.5", (1.0, 1.0, 1.0)),
        ("x </think> <answer> 1/2 </answer>", "\\dfrac12", (1.0, 1.0, 1.0)),
        ("x </think> <answer> 1,000 </answer>", "1000", (1.0, 1.0, 1.0)),
        ("x </think> <answer> $3.0$. </answer>", "3", (1.0, 1.0, 1.0)),
        ("x </think> <answer> Paris </answer>", "paris", (1.0, 1.0, 1.0)),
        ("x </think> <answer> 7 </answer>", ["6", "7"], (1.0, 1.0, 1.0)),
        ("x </think> <answer>  </answer>", "", (0.0, 1.0, 0.0)),  # empty answers never match
    ],
)
def test_r1_zero_reward_fn(response, truth, expected):
    out = R.r1_zero_reward_fn(response, truth)
    assert (out["reward"], out["format_reward"], out["answer_reward"]) == expected


@pytest.mark.unit
def test_keyword_inclusion():
    text = "The red apple fell from the tree."
    assert R.keyword_inclusion_reward_fn(text, ["Apple", "RED"])["reward"] == 1.0
    assert R.keyword_inclusion_reward_fn(text, "apple, red")["reward"] == 1.0
    miss = R.keyword_inclusion_reward_fn(text, "apple, banana")
    assert miss["reward"] == 0.0 and miss["keyword_frac"] == 0.5
    assert R.keyword_inclusion_reward_fn(text, [])["reward"] == 1.0  # vacuous
