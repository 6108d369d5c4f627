"""--grad_parts_every by hand: each part's gradient, their sum over micro-batches, norms and cosine."""

import math

import pytest
import torch

from noma_prorl_bench.training.grad_parts import GradParts


def test_two_parts_on_a_two_parameter_model_by_hand():
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    pg = 3.0 * w[0] + w[1]  # gradient (3, 1)
    kl = 0.5 * (w * w).sum()  # gradient w = (1, 2)
    parts = GradParts([w])
    parts.add("pg", pg)
    parts.add("kl", kl)
    (pg + kl).backward()  # the graph was kept for the update's own backward
    m = parts.metrics()
    assert m["grad/pg_norm"] == pytest.approx(math.sqrt(10))
    assert m["grad/kl_norm"] == pytest.approx(math.sqrt(5))
    assert m["grad/kl_over_pg"] == pytest.approx(math.sqrt(5) / math.sqrt(10))
    assert m["grad/cos_pg_kl"] == pytest.approx(5 / math.sqrt(50))
    assert w.grad.tolist() == [4.0, 3.0]


def test_micro_batches_add_up_and_a_constant_part_is_zero():
    w = torch.tensor([1.0, -1.0], requires_grad=True)
    parts = GradParts([w])
    parts.add("pg", 2.0 * w[0])
    parts.add("pg", -w[1])  # a second micro-batch: gradients summed -> (2, -1)
    parts.add("kl", torch.tensor(0.3))  # no graph (KL in the reward): nothing to add
    m = parts.metrics()
    assert m["grad/pg_norm"] == pytest.approx(math.sqrt(5))
    assert m["grad/kl_norm"] == 0.0
    assert "grad/cos_pg_kl" not in m and "grad/kl_over_pg" not in m
