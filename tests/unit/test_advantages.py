"""Unit tests for advantages.py: each estimator against hand-worked values."""

import pytest
import torch

from noma_prorl_bench.algorithms.advantages import ADVANTAGES, group_advantages, maxrl_advantages, rft_advantages

R = torch.tensor([[1.0, 0.0, 0.0, 1.0], [1.0, 1.0, 1.0, 1.0]])


@pytest.mark.unit
def test_registry_keys():
    assert set(ADVANTAGES) == {"grpo", "dr_grpo", "rloo", "reinforce_pp", "maxrl", "rft"}
    for fn in ADVANTAGES.values():
        adv, m = fn(R)
        assert adv.shape == R.shape and all(isinstance(v, float) for v in m.values())


@pytest.mark.unit
def test_grpo_unbiased_std_plus_eps():
    adv, m = ADVANTAGES["grpo"](R, eps=1e-6)
    # group 0: mean .5, deviations +-.5, unbiased var = (4 * .25) / 3 = 1/3, std = .57735
    # A = .5 / (.57735 + 1e-6) = .866024...; group 1 has zero spread -> A = 0
    want = 0.5 / (3**-0.5 + 1e-6)
    assert adv[0].tolist() == pytest.approx([want, -want, -want, want], rel=1e-6)
    assert adv[1].tolist() == [0.0] * 4
    assert m["reward/frac_zero_std"] == 0.5
    no_std, _ = ADVANTAGES["grpo"](R, normalize_by_std=False)
    assert no_std[0].tolist() == [0.5, -0.5, -0.5, 0.5]


@pytest.mark.unit
def test_dr_grpo_never_divides_by_std():
    adv, _ = ADVANTAGES["dr_grpo"](R, normalize_by_std=True)
    assert adv[0].tolist() == [0.5, -0.5, -0.5, 0.5]


@pytest.mark.unit
def test_maxrl_divides_by_the_group_mean_plus_eps():
    r = torch.tensor([[1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    adv, _ = maxrl_advantages(r, eps=1e-3)
    # group 0: mean .25 -> (1 - .25) / (.25 + 1e-3), (0 - .25) / .251; group 1 never succeeds -> 0
    assert adv[0].tolist() == pytest.approx([0.75 / 0.251, -0.25 / 0.251, -0.25 / 0.251, -0.25 / 0.251])
    assert adv[1].tolist() == [0.0] * 4


@pytest.mark.unit
def test_rft_returns_the_raw_rewards_and_modes_are_checked():
    assert torch.equal(rft_advantages(R)[0], R)
    adv, _ = group_advantages(R, baseline="none", normalizer="std", eps=0.0)
    assert adv[0].tolist() == pytest.approx([3**0.5, 0.0, 0.0, 3**0.5])  # r / std, std = 1/sqrt(3)
    with pytest.raises(ValueError, match="baseline"):
        group_advantages(R, baseline="max")
    with pytest.raises(ValueError, match="normalizer"):
        group_advantages(R, normalizer="max")


@pytest.mark.unit
def test_rloo_leave_one_out_mean():
    adv, _ = ADVANTAGES["rloo"](R)
    # r=1: others (0,0,1) mean 1/3 -> 2/3; r=0: others (1,0,1) mean 2/3 -> -2/3
    assert adv[0].tolist() == pytest.approx([2 / 3, -2 / 3, -2 / 3, 2 / 3])
    assert adv[1].tolist() == [0.0] * 4


@pytest.mark.unit
def test_reinforce_pp_batch_whitening():
    r = torch.tensor([[1.0, 0.0], [1.0, 1.0]])
    adv, _ = ADVANTAGES["reinforce_pp"](r, eps=0.0)
    # global mean .75; deviations .25, -.75, .25, .25; unbiased var = .75 / 3 = .25 -> std .5
    assert adv.flatten().tolist() == pytest.approx([0.5, -1.5, 0.5, 0.5])
    # unlike GRPO, the all-ones group gets a nonzero advantage from the batch baseline
    assert adv[1].abs().sum().item() > 0


@pytest.mark.unit
def test_group_of_one_is_rejected():
    with pytest.raises(ValueError):
        ADVANTAGES["grpo"](torch.ones(3, 1))
    with pytest.raises(ValueError):
        ADVANTAGES["rloo"](torch.ones(3, 1))
