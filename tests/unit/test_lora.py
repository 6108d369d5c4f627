"""Unit tests for models/lora.py: attaching, naming/matching, init, scaling, rank queries."""

import pytest
import torch
from torch import nn

from noma_prorl_bench.models.lora import (
    LoRALinear,
    adapter_parameters,
    adapter_rank,
    adapters,
    attach_lora,
    merged_adapters,
)
from noma_prorl_bench.training.growth import grow_adapters

torch.set_num_threads(1)


class Attn(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.q_proj, self.k_proj, self.v_proj, self.o_proj = (nn.Linear(d, d) for _ in range(4))


class MLP(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.up, self.down = nn.Linear(d, 2 * d), nn.Linear(2 * d, d)


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.attn, self.mlp = Attn(d), MLP(d)


class Tiny(nn.Module):
    """Transformer-shaped names without attention: x[N, d] -> logits[N, V]."""

    def __init__(self, d=6, v=5, n_blocks=2):
        super().__init__()
        self.blocks = nn.ModuleList(Block(d) for _ in range(n_blocks))
        self.head = nn.Linear(d, v)

    def forward(self, x):
        for b in self.blocks:
            a = b.attn
            x = x + a.o_proj(torch.tanh(a.q_proj(x) + a.k_proj(x) * a.v_proj(x)))
            x = x + b.mlp.down(torch.relu(b.mlp.up(x)))
        return self.head(x)


def _model(seed=0):
    torch.manual_seed(seed)
    return Tiny()


@pytest.mark.unit
def test_attach_exact_name_keeps_output_and_freezes_base():
    m, x = _model(), torch.randn(4, 6)
    ref = m(x)
    names = attach_lora(m, ["head"], rank=2, alpha=4.0, freeze_base=True)
    assert names == ["head"]
    assert isinstance(m.head, LoRALinear) and m.head.rank == 2 and m.head.scale == 2.0
    assert torch.equal(m(x), ref)  # B = 0 at attach: bit-identical
    trainable = [n for n, p in m.named_parameters() if p.requires_grad]
    assert trainable == ["head.lora_A", "head.lora_B"]


@pytest.mark.unit
def test_attach_glob_and_suffix_matching():
    m = _model()
    names = attach_lora(m, ["*proj"], rank=1, freeze_base=False)
    assert len(names) == 8 and all(n.endswith("proj") for n in names)
    m2 = _model()
    names2 = attach_lora(m2, ["q_proj", "blocks.1.mlp.up"], rank=1)
    assert names2 == ["blocks.0.attn.q_proj", "blocks.1.attn.q_proj", "blocks.1.mlp.up"]
    m3 = _model()
    assert attach_lora(m3, ["blocks.*.mlp.*"], rank=1) == [
        "blocks.0.mlp.up",
        "blocks.0.mlp.down",
        "blocks.1.mlp.up",
        "blocks.1.mlp.down",
    ]
    assert not any(p.requires_grad for n, p in m3.named_parameters() if "lora_" not in n)


@pytest.mark.unit
def test_attach_no_match_raises_and_bad_args():
    with pytest.raises(ValueError):
        attach_lora(_model(), ["nope"], rank=2)
    with pytest.raises(ValueError):
        LoRALinear(nn.Linear(3, 3), rank=0)
    with pytest.raises(ValueError):
        LoRALinear(nn.Linear(3, 3), rank=1, a_init="bogus")


@pytest.mark.unit
def test_shapes_init_and_forward_formula():
    base = nn.Linear(5, 3)
    lo = LoRALinear(base, rank=4, alpha=2.0, a_init="kaiming", seed=3)
    assert lo.lora_A.shape == (4, 5) and lo.lora_B.shape == (3, 4)
    assert torch.count_nonzero(lo.lora_B) == 0
    assert lo.lora_A.abs().max() <= 5**-0.5  # U(-1/sqrt(in), 1/sqrt(in))
    with torch.no_grad():
        lo.lora_B.normal_()
    x = torch.randn(2, 7, 5)  # extra leading dims pass through
    expect = base(x) + 0.5 * (x @ lo.lora_A.T @ lo.lora_B.T)
    torch.testing.assert_close(lo(x), expect, rtol=1e-6, atol=1e-6)
    # seeded: same seed -> same A, other seed -> other A
    assert torch.equal(LoRALinear(nn.Linear(5, 3), 4, seed=3).lora_A, lo.lora_A)
    assert not torch.equal(LoRALinear(nn.Linear(5, 3), 4, seed=4).lora_A, lo.lora_A)
    assert torch.count_nonzero(LoRALinear(base, 2, a_init="zeros").lora_A) == 0


@pytest.mark.unit
def test_rank_queries_and_growth_keeps_scale_and_output():
    m, x = _model().double(), torch.randn(4, 6, dtype=torch.float64)
    attach_lora(m, ["head", "o_proj"], rank=2, alpha=8.0)
    assert adapter_rank(m) == 2 and len(adapters(m)) == 3
    assert len(adapter_parameters(m)) == 6
    with torch.no_grad():
        for p in adapter_parameters(m):
            p.normal_()  # make B non-zero: a trained adapter
    before = m(x)
    grow_adapters(m, None, new_rank=5)
    assert adapter_rank(m) == 5
    assert all(mod.scale == 4.0 for _, mod in adapters(m))  # alpha / initial_rank, not alpha / 5
    torch.testing.assert_close(m(x), before, rtol=1e-12, atol=1e-12)  # float64: summation order only
    assert m.head.lora_A.shape == (5, 6) and m.head.lora_B.shape == (5, 5)
    assert torch.count_nonzero(m.head.lora_B[:, 2:]) == 0
    assert torch.count_nonzero(m.head.lora_A[2:]) == 3 * 6  # declared (kaiming) init
    assert m.head.lora_A.dtype == torch.float64


@pytest.mark.unit
def test_adapter_rank_mixed_raises_and_zero_without_adapters():
    m = _model()
    assert adapter_rank(m) == 0
    attach_lora(m, ["head", "q_proj"], rank=2)
    plan_mod = m.head
    from noma_prorl_bench.training.growth import realloc_param

    realloc_param(plan_mod, "lora_A", (3, 6))
    realloc_param(plan_mod, "lora_B", (5, 3))
    with pytest.raises(ValueError):
        adapter_rank(m)


def test_merged_adapters_equal_the_unmerged_forward_and_leave_nothing_behind():
    """Inside merged_adapters each LoRALinear computes x @ (W + s B A).T + b: float32 equal to the
    three-matmul forward up to rounding; bf16 base weights give the bf16 merge (within bf16
    rounding); nothing is merged outside the block, no gradient reaches A or B, state_dict unchanged."""
    m = _model()
    attach_lora(m, ["*proj", "up"], rank=2, alpha=4.0)
    with torch.no_grad():
        for _, a in adapters(m):
            a.lora_B.copy_(0.3 * torch.randn(a.lora_B.shape, generator=torch.Generator().manual_seed(1)))
    x = torch.randn(7, 6, generator=torch.Generator().manual_seed(2))
    keys = sorted(m.state_dict())
    y = m(x)
    with merged_adapters(m) as n:
        assert n == 10 and all(a.merged is not None for _, a in adapters(m))
        ym = m(x)
        assert not ym.requires_grad  # merged weights are detached (base frozen, A and B not reached)
    assert all(a.merged is None for _, a in adapters(m)) and sorted(m.state_dict()) == keys
    assert torch.allclose(y, ym, atol=1e-5) and torch.equal(m(x), y)  # the unmerged forward again
    a = adapters(m)[0][1]
    w = a.base.weight
    expected = w + a.scale * a.lora_B @ a.lora_A
    with merged_adapters(m):
        assert torch.allclose(a.merged, expected.detach(), atol=1e-6)
    a.base.weight.data = w.data.to(torch.bfloat16)  # a bf16 base: the merge is rounded once to bf16
    expected = a.base.weight.float() + a.scale * a.lora_B @ a.lora_A  # the bf16 base, summed in float32
    with merged_adapters(m):
        assert a.merged.dtype == torch.bfloat16
        assert torch.equal(a.merged, expected.detach().to(torch.bfloat16))
