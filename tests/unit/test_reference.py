"""Unit tests for reference.py: A0/A1/A2 counts, ring-buffer stability and views, updates."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from noma_prorl_bench.models.base import response_logprobs
from noma_prorl_bench.rollout.reference import ReferenceHolder

torch.set_num_threads(1)
V, H, P = 7, 5, 3


class _Toy(nn.Module):
    """tokens[N, L] -> logits[N, L, V]: embedding, running mean over positions (causal), head."""

    def __init__(self):
        super().__init__()
        self.vocab_size = V
        self.emb = nn.Embedding(V, H)
        self.head = nn.Linear(H, V)
        self.register_buffer("calls", torch.zeros((), dtype=torch.long))  # non-float buffer

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.emb(tokens)  # [N, L, H]
        steps = torch.arange(1, tokens.shape[1] + 1, dtype=x.dtype).view(1, -1, 1)
        return self.head(x.cumsum(1) / steps)  # [N, L, V]


def _policy(seed: int = 0) -> _Toy:
    torch.manual_seed(seed)
    return _Toy()


def _tokens(n: int, t: int, seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, V, (n, P + t), generator=g)


def _run_step(holder: ReferenceHolder, tokens: torch.Tensor, epochs: int, mb: int, seed: int = 0):
    """prepare + E epochs over contiguous minibatches in a per-epoch permuted order."""
    holder.prepare(tokens, P)
    n = tokens.shape[0]
    slices = [slice(i, min(i + mb, n)) for i in range(0, n, mb)]
    g = torch.Generator().manual_seed(seed)
    outs = {}
    for _ in range(epochs):
        for j in torch.randperm(len(slices), generator=g).tolist():
            sl = slices[j]
            outs[(sl.start, sl.stop)] = holder.minibatch(tokens[sl], P, sl)
    return outs


@pytest.mark.unit
def test_reference_is_frozen_eval_deep_copy():
    pol = _policy()
    pol.train()
    ref = ReferenceHolder(pol, "cached", temperature=0.7)
    assert not ref.model.training and pol.training
    assert all(not p.requires_grad for p in ref.model.parameters())
    with torch.no_grad():
        pol.head.weight.add_(1.0)
    assert not torch.equal(ref.model.head.weight, pol.head.weight)


@pytest.mark.unit
@pytest.mark.parametrize(
    "mode,fwd,toks",
    [
        ("naive_epoch", 3 * 4, 3 * 4 * (3 * 7)),  # E*M forwards, each over 3 rows x L = 7
        ("cached", 1, 12 * 7),  # one forward over N = 12 rows x L = 7
        ("ring", 1, 12 * 7),
    ],
)
def test_counters_exact_per_step(mode, fwd, toks):
    # E = 3 epochs x M = 4 minibatches of 3 rows (N = 12, T = 4, L = P + T = 7)
    holder = ReferenceHolder(_policy(), mode, max_seqs=16, max_resp_len=8)
    _run_step(holder, _tokens(12, 4), epochs=3, mb=3)
    assert holder.pop_counts() == {"count/ref_fwd": fwd, "count/tokens_ref": toks}
    assert holder.pop_counts() == {"count/ref_fwd": 0, "count/tokens_ref": 0}  # reset on pop
    assert holder.pop_time() > 0.0 and holder.pop_time() == 0.0


@pytest.mark.unit
def test_variant_b_never_builds_a_reference():
    holder = ReferenceHolder(_policy(), "none")
    assert holder.model is None and not holder.enabled and holder.buffer is None
    tokens = _tokens(4, 3)
    with pytest.raises(RuntimeError):
        holder.prepare(tokens, P)
    with pytest.raises(RuntimeError):
        holder.minibatch(tokens, P, slice(None))
    with pytest.raises(RuntimeError):
        holder.reset_to(_policy())
    assert holder.pop_counts() == {"count/ref_fwd": 0, "count/tokens_ref": 0}
    assert ReferenceHolder(None, "none").state_dict() == {"mode": "none", "model": None}


@pytest.mark.unit
def test_ring_buffer_never_reallocates_and_minibatches_are_views():
    holder = ReferenceHolder(_policy(), "ring", temperature=0.9, max_seqs=8, max_resp_len=6)
    buf = holder.buffer
    ptr = buf.untyped_storage().data_ptr()
    assert list(buf.shape) == [8, 6]
    for step, (n, t) in enumerate([(8, 6), (5, 4), (3, 6), (8, 2)]):
        outs = _run_step(holder, _tokens(n, t, seed=step), epochs=2, mb=2, seed=step)
        assert holder.buffer is buf and buf.untyped_storage().data_ptr() == ptr
        for (start, stop), mb in outs.items():
            assert mb.shape == (stop - start, t)
            assert mb.untyped_storage().data_ptr() == ptr  # a view of the buffer
            assert mb.data_ptr() == buf[start].data_ptr()  # at the right rows
    with pytest.raises(ValueError):
        holder.prepare(_tokens(9, 2), P)  # never grows
    with pytest.raises(ValueError):
        holder.prepare(_tokens(2, 7), P)


@pytest.mark.unit
def test_ring_matches_cached_exactly_and_cached_matches_policy():
    pol = _policy(3)
    cached = ReferenceHolder(pol, "cached", temperature=0.8)
    ring = ReferenceHolder(pol, "ring", temperature=0.8, max_seqs=10, max_resp_len=9)
    naive = ReferenceHolder(pol, "naive_epoch", temperature=0.8)
    for step, (n, t) in enumerate([(10, 9), (6, 5)]):
        tokens = _tokens(n, t, seed=10 + step)
        a = _run_step(cached, tokens, epochs=2, mb=4)
        b = _run_step(ring, tokens, epochs=2, mb=4)
        c = _run_step(naive, tokens, epochs=1, mb=4)
        assert a.keys() == b.keys() == c.keys()
        for k in a:
            assert torch.equal(a[k], b[k]) and torch.equal(a[k], c[k])
        with torch.no_grad():
            full, _, _ = response_logprobs(pol, tokens, P, 0.8)
        assert torch.equal(cached.minibatch(tokens, P, slice(None)), full)
        assert torch.equal(ring.minibatch(tokens, P, slice(None)), full)
        assert not full.requires_grad


@pytest.mark.unit
def test_minibatch_argument_checks():
    holder = ReferenceHolder(_policy(), "cached")
    tokens = _tokens(6, 3)
    with pytest.raises(RuntimeError):
        holder.minibatch(tokens[:2], P, slice(0, 2))  # before prepare
    holder.prepare(tokens, P)
    with pytest.raises(TypeError):
        holder.minibatch(tokens[:2], P, torch.tensor([0, 1]))
    with pytest.raises(ValueError):
        holder.minibatch(tokens[:3], P, slice(0, 2))
    with pytest.raises(ValueError):
        holder.minibatch(tokens[::2], P, slice(0, 6, 2))


@pytest.mark.unit
def test_hard_reset_copies_bit_for_bit_from_module_or_state_dict():
    holder = ReferenceHolder(_policy(0), "cached")
    pol = _policy(1)
    pol.calls.fill_(5)
    assert holder.reset_to(pol, "hard") == {"ref_update": "hard", "ref_mix_alpha": None}
    for k, v in pol.state_dict().items():
        assert torch.equal(holder.model.state_dict()[k], v)
    assert all(not p.requires_grad for p in holder.model.parameters())
    holder.reset_to({k: v.clone() for k, v in _policy(2).state_dict().items()}, "hard")
    assert torch.equal(holder.model.head.bias, _policy(2).head.bias)


@pytest.mark.unit
def test_polyak_update_is_exact():
    ref0, pol = _policy(0), _policy(1)
    pol.calls.fill_(9)
    # alpha = 0.5: both products are exact, one rounding in the sum -> bit for bit
    holder = ReferenceHolder(ref0, "ring", max_seqs=2, max_resp_len=2)
    rec = holder.reset_to(pol, "polyak", alpha=0.5)
    assert rec == {"ref_update": "polyak", "ref_mix_alpha": 0.5}
    for k, r in ref0.state_dict().items():
        got, pi = holder.model.state_dict()[k], pol.state_dict()[k]
        expected = r * 0.5 + pi * 0.5 if r.is_floating_point() else pi
        assert torch.equal(got, expected), k
    # alpha = 0.6 (TRL default): ref <- 0.6 pi + 0.4 ref, within float32 rounding of float64
    holder = ReferenceHolder(ref0, "cached")
    holder.reset_to(pol, "polyak", alpha=0.6)
    for name, r in ref0.named_parameters():
        got, pi = holder.model.get_parameter(name).double(), pol.get_parameter(name).double()
        exact = 0.4 * r.double() + 0.6 * pi
        scale = torch.maximum((0.4 * r.double()).abs(), (0.6 * pi).abs())
        assert torch.all((got - exact).abs() <= 2 * 2.0**-23 * scale + 1e-30), name
    # alpha = 1 is a hard copy, alpha = 0 leaves the reference unchanged (bit for bit)
    h1 = ReferenceHolder(ref0, "cached")
    h1.reset_to(pol, "polyak", alpha=1.0)
    h0 = ReferenceHolder(ref0, "cached")
    h0.reset_to(pol, "polyak", alpha=0.0)
    for name, r in ref0.named_parameters():
        assert torch.equal(h1.model.get_parameter(name), pol.get_parameter(name))
        assert torch.equal(h0.model.get_parameter(name), r)
    with pytest.raises(ValueError):
        h0.reset_to(pol, "polyak", alpha=1.5)


@pytest.mark.unit
def test_reset_invalidates_prepared_batch_and_state_dict_roundtrip():
    holder = ReferenceHolder(_policy(0), "cached")
    tokens = _tokens(4, 3)
    holder.prepare(tokens, P)
    holder.reset_to(_policy(1), "hard")
    with pytest.raises(RuntimeError):
        holder.minibatch(tokens, P, slice(None))
    state = holder.state_dict()
    other = ReferenceHolder(_policy(5), "ring", max_seqs=4, max_resp_len=3)
    other.load_state_dict(state)
    for k, v in holder.model.state_dict().items():
        assert torch.equal(other.model.state_dict()[k], v)


@pytest.mark.slow
def test_polyak_bit_identical_to_trl_sync_ref_model():
    trl_callbacks = pytest.importorskip("trl.trainer.callbacks")
    ref0, pol = _policy(0), _policy(1)
    holder = ReferenceHolder(ref0, "cached")
    holder.reset_to(pol, "polyak", alpha=0.6)
    target = _policy(0)
    trl_callbacks.SyncRefModelCallback._sync_target_model(pol, target, 0.6)
    for name, p in target.named_parameters():
        assert torch.equal(holder.model.get_parameter(name), p), name
