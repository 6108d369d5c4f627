"""Unit tests for dapo.py: dynamic sampling, overlong filtering and shaping, length penalty."""

import pytest
import torch

from noma_prorl_bench.algorithms import dapo as D


@pytest.mark.unit
def test_dynamic_sampling_mask():
    r = torch.tensor([[1.0, 1.0, 1.0], [0.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
    keep, m = D.dynamic_sampling_mask(r)
    # only the middle group has spread (max - min = 1)
    assert keep.tolist() == [False, True, False]
    assert m["dapo/groups_dropped"] == 2.0 and m["dapo/frac_groups_dropped"] == pytest.approx(2 / 3)


@pytest.mark.unit
def test_select_informative_groups_trims_to_need():
    r = torch.tensor([[0.0, 1.0], [1.0, 1.0], [1.0, 0.0], [0.5, 0.0]])
    idx, m = D.select_informative_groups(r, n_needed=2)
    # informative groups are 0, 2, 3; the first two are taken, group 1 is dropped
    assert idx.tolist() == [0, 2] and m["dapo/groups_kept"] == 2.0 and m["dapo/groups_dropped"] == 1.0
    assert D.select_informative_groups(r, n_needed=0)[0].numel() == 0


@pytest.mark.unit
def test_overlong_filter_mask():
    mask = torch.ones(3, 2)
    out, m = D.overlong_filter_mask(mask, torch.tensor([False, True, False]))
    assert out.tolist() == [[1, 1], [0, 0], [1, 1]] and m["dapo/frac_truncated"] == pytest.approx(1 / 3)


@pytest.mark.unit
def test_soft_overlong_penalty_piecewise():
    # max_len 10, cache 4 -> free up to 6, then (6 - L)/4, -1 beyond 10
    lengths = torch.tensor([5, 6, 7, 8, 10, 11])
    pen = D.soft_overlong_penalty(lengths, max_len=10, cache_len=4)
    assert pen.tolist() == pytest.approx([0.0, 0.0, -0.25, -0.5, -1.0, -1.0])
    shaped, m = D.overlong_reward_shaping(torch.ones(6), lengths, 10, 4, factor=2.0)
    assert shaped.tolist() == pytest.approx([1.0, 1.0, 0.5, 0.0, -1.0, -1.0])
    assert m["dapo/frac_in_overlong_buffer"] == pytest.approx(4 / 6)
    with pytest.raises(ValueError):
        D.soft_overlong_penalty(lengths, max_len=10, cache_len=0)


@pytest.mark.unit
def test_linear_length_penalty():
    # 1 - .1 * 5/10 = .95; coef 0 is the identity
    out, _ = D.linear_length_penalty(torch.tensor([1.0]), torch.tensor([5]), coef=0.1, max_len=10)
    assert out.item() == pytest.approx(0.95)
    assert D.linear_length_penalty(torch.tensor([0.3]), torch.tensor([9]), 0.0, 10)[0].item() == pytest.approx(0.3)
