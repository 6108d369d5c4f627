"""Unit tests for monitors.py: exact drift KL, snapshots, and the separate monitor counter."""

from __future__ import annotations

import copy
import io

import pytest
import torch
from torch import nn

from noma_prorl_bench.rollout.reference import ReferenceHolder
from noma_prorl_bench.training.monitors import (
    DriftMonitor,
    MonitorCounter,
    PrevPolicySnapshot,
    drift_kl,
)

torch.set_num_threads(1)
V, H, P, T, N = 6, 4, 2, 3, 5


class _Toy(nn.Module):
    """tokens[N, L] -> logits[N, L, V]; tied embedding/head and dropout (needs eval mode)."""

    def __init__(self):
        super().__init__()
        self.vocab_size = V
        self.emb = nn.Embedding(V, H)
        self.mix = nn.Linear(H, H)
        self.drop = nn.Dropout(0.5)
        self.head = nn.Linear(H, V, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.emb(tokens).cumsum(1)  # [N, L, H]
        return self.head(torch.tanh(self.drop(self.mix(x))))  # [N, L, V]


def _policy(seed: int = 0) -> _Toy:
    torch.manual_seed(seed)
    return _Toy()


def _batch(seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, V, (N, P + T), generator=g)
    mask = torch.ones(N, T)
    mask[0, 2:] = 0.0
    mask[3, 1:] = 0.0  # 15 - 1 - 2 = 12 tokens
    return tokens, mask


def _hand_kl(p_model, q_model, tokens, mask, temperature):
    """float64 reference: sum_v p (log p - log q) at positions P-1..L-2, masked mean."""
    with torch.no_grad():
        lp = torch.log_softmax(p_model.eval()(tokens)[:, P - 1 : -1].double() / temperature, -1)
        lq = torch.log_softmax(q_model.eval()(tokens)[:, P - 1 : -1].double() / temperature, -1)
    kl = (lp.exp() * (lp - lq)).sum(-1)  # [N, T]
    return float((kl * mask.double()).sum() / mask.double().sum())


@pytest.mark.unit
def test_drift_kl_matches_hand_computation_and_is_zero_to_itself():
    pol, other = _policy(0), _policy(1)
    tokens, mask = _batch()
    got = drift_kl(pol, other, tokens, P, mask, temperature=0.7)
    assert got == pytest.approx(_hand_kl(pol, other, tokens, mask, 0.7), rel=1e-5)
    assert got > 0.0
    pol.train()
    assert drift_kl(pol, copy.deepcopy(pol), tokens, P, mask, 0.7) == 0.0  # dropout is off
    assert pol.training  # mode restored


@pytest.mark.unit
def test_drift_kl_snapshot_params_equal_module_and_counts_two_forwards():
    pol, other = _policy(0), _policy(1)
    tokens, mask = _batch()
    params = {k: v.clone() for k, v in other.state_dict().items()}
    counter = MonitorCounter()
    a = drift_kl(pol, other, tokens, P, mask, 1.3, counter)
    b = drift_kl(other, params, tokens, P, mask, 1.3, counter)  # other's arch + params
    c = drift_kl(pol, params, tokens, P, mask, 1.3, counter)  # pol's arch, other's params
    assert a == c
    assert b == 0.0
    assert counter.pop_counts() == {"count/monitor_fwd": 6, "count/tokens_monitor": 6 * N * (P + T)}
    assert counter.pop_counts() == {"count/monitor_fwd": 0, "count/tokens_monitor": 0}


@pytest.mark.unit
def test_drift_monitor_to_init_and_to_prev_after_updates():
    pol = _policy(0)
    tokens, mask = _batch()
    init = copy.deepcopy(pol)
    mon = DriftMonitor(pol, tokens, P, mask, temperature=1.0)
    ref = ReferenceHolder(pol, "cached")
    assert mon.measure(pol) == {"kl/to_init": 0.0}  # no previous yet
    assert mon.pop_counts() == {"count/monitor_fwd": 2, "count/tokens_monitor": 2 * N * (P + T)}
    opt = torch.optim.SGD(pol.parameters(), lr=0.5)
    prevs = []
    for step in (1, 2):
        mon.remember(pol, step)
        prevs.append(copy.deepcopy(pol))
        pol.train()
        opt.zero_grad()
        pol(tokens).logsumexp(-1).mean().backward()
        opt.step()
        out = mon.measure(pol)
        assert out["kl/to_init"] == pytest.approx(_hand_kl(pol, init, tokens, mask, 1.0), rel=1e-5)
        assert out["kl/to_prev"] == pytest.approx(_hand_kl(pol, prevs[-1], tokens, mask, 1.0), rel=1e-5)
        assert out["kl/to_prev"] > 0.0
        assert mon.pop_counts()["count/monitor_fwd"] == 3
    assert out["kl/to_init"] != out["kl/to_prev"]
    assert ref.pop_counts() == {"count/ref_fwd": 0, "count/tokens_ref": 0}  # never counted there


@pytest.mark.unit
def test_prev_snapshot_reuses_storage_and_keeps_ties():
    pol = _policy(0)
    snap = PrevPolicySnapshot()
    snap.capture(pol, step=1)
    assert snap.params["emb.weight"] is snap.params["head.weight"]
    ptr = snap.params["mix.weight"].data_ptr()
    with torch.no_grad():
        pol.mix.weight.add_(1.0)
    snap.capture(pol, step=2)
    assert snap.params["mix.weight"].data_ptr() == ptr and snap.step == 2
    for k, v in pol.state_dict().items():
        assert torch.equal(snap.params[k], v)
    assert snap.params["mix.weight"].data_ptr() != pol.mix.weight.data_ptr()


@pytest.mark.unit
def test_drift_monitor_state_dict_roundtrip():
    pol = _policy(0)
    tokens, mask = _batch()
    mon = DriftMonitor(pol, tokens, P, mask)
    mon.remember(pol, 4)
    with torch.no_grad():
        pol.mix.bias.add_(0.3)
    buf = io.BytesIO()
    torch.save(mon.state_dict(), buf)
    buf.seek(0)
    other = DriftMonitor(_policy(7), tokens, P, mask)
    other.load_state_dict(torch.load(buf))
    assert other.measure(pol) == mon.measure(pol)
    assert other.prev.step == 4
    with pytest.raises(ValueError):
        DriftMonitor(pol, tokens, P, mask[:, :2])


@pytest.mark.unit
def test_snapshot_missing_a_key_is_an_error_not_a_silent_mix():
    pol, other = _policy(0), _policy(1)
    tokens, mask = _batch()
    params = {k: v for k, v in other.state_dict().items() if k != "mix.bias"}
    with pytest.raises(RuntimeError):
        drift_kl(pol, params, tokens, P, mask)


@pytest.mark.unit
def test_row_chunks_give_the_same_kl_and_counts(monkeypatch):
    """A vocabulary too large for one piece is measured a few rows at a time (bounded memory):
    the same values as in one piece, the same forward counts."""
    import noma_prorl_bench.training.monitors as monitors_mod

    pol = _policy(0)
    tokens, mask = _batch()
    whole, chunked = DriftMonitor(pol, tokens, P, mask), DriftMonitor(pol, tokens, P, mask)
    for mon in (whole, chunked):
        mon.remember(pol, 1)
    with torch.no_grad():
        for p in pol.parameters():
            p.add_(0.1 * torch.randn_like(p))
    one = whole.measure(pol)
    monkeypatch.setattr(monitors_mod, "MONITOR_CHUNK_ELEMENTS", 2 * T * V)  # 2 rows per piece: 3 pieces
    two = chunked.measure(pol)
    assert one.keys() == two.keys() and all(two[k] == pytest.approx(one[k], rel=1e-6) for k in one)
    assert (
        whole.pop_counts() == chunked.pop_counts() == {"count/monitor_fwd": 3, "count/tokens_monitor": 3 * N * (P + T)}
    )
