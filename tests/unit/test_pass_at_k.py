"""pass@k (rollout/pass_at_k.py): the unbiased estimator of Chen et al. 2021 against hand-worked
values, exact enumeration and a Monte-Carlo draw of k samples without replacement."""

import itertools
from math import comb

import numpy as np
import pytest

from noma_prorl_bench.rollout.pass_at_k import is_correct, ks_for, pass_at_k
from noma_prorl_bench.tasks.toy import Parity, ReverseDigits

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    "n, c, k, want",
    [
        (5, 2, 1, 2 / 5),  # pass@1 is the fraction correct
        (5, 2, 2, 1 - 3 / 10),  # 1 - C(3,2)/C(5,2)
        (5, 2, 3, 1 - 1 / 10),  # 1 - C(3,3)/C(5,3)
        (5, 2, 4, 1.0),  # n - c = 3 < k: every 4-subset holds a correct sample
        (8, 1, 4, 1 - 35 / 70),  # 1 - C(7,4)/C(8,4) = 1/2
        (10, 3, 5, 1 - 21 / 252),  # 1 - C(7,5)/C(10,5)
        (4, 0, 4, 0.0),
        (4, 4, 1, 1.0),
    ],
)
def test_hand_worked_values(n, c, k, want):
    assert pass_at_k(n, c, k) == pytest.approx(want, abs=1e-12)


def test_equals_enumeration_of_all_k_subsets():
    for n in range(1, 9):
        for c in range(n + 1):
            for k in range(1, n + 1):
                hit = sum(any(i < c for i in s) for s in itertools.combinations(range(n), k))
                assert pass_at_k(n, c, k) == pytest.approx(hit / comb(n, k), abs=1e-12)


def test_monte_carlo_draws_without_replacement_agree():
    rng = np.random.default_rng(0)
    n, trials = 16, 40_000
    for c, k in [(1, 4), (3, 2), (5, 8), (2, 16)]:
        labels = np.array([1] * c + [0] * (n - c))
        draws = np.array([rng.permutation(labels)[:k].any() for _ in range(trials)])
        se = np.sqrt(pass_at_k(n, c, k) * (1 - pass_at_k(n, c, k)) / trials)
        assert abs(draws.mean() - pass_at_k(n, c, k)) <= 4 * se + 1e-9


def test_ks_and_correctness_rule():
    assert ks_for(1) == [1] and ks_for(8) == [1, 2, 4, 8] and ks_for(6) == [1, 2, 4, 6]
    assert is_correct(ReverseDigits(n_val=1), "4321", "4321") and not is_correct(ReverseDigits(n_val=1), "4311", "4321")
    assert is_correct(Parity(n_val=1), "1", "1")
    with pytest.raises(ValueError):
        pass_at_k(4, 5, 1)
