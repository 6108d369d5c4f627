"""A LoRA policy's frozen base is held once: the reference, the drift monitor's snapshots and the
best-policy snapshot alias it instead of cloning it, with the same numbers as full copies."""

from __future__ import annotations

import copy

import pytest
import torch
from safetensors.torch import load_file, save_file
from torch import nn

from noma_prorl_bench.io.state_tree import decode, encode
from noma_prorl_bench.models.base import frozen_parameters, response_logprobs, same_tensor
from noma_prorl_bench.models.lora import adapter_parameters, attach_lora
from noma_prorl_bench.rollout.reference import ReferenceHolder
from noma_prorl_bench.training.monitors import DriftMonitor, drift_kl
from noma_prorl_bench.training.resets import BestTracker, clone_state_dict

torch.set_num_threads(1)
V, H, P, T = 11, 8, 3, 5


class _Toy(nn.Module):
    """tokens[N, L] -> logits[N, L, V]: embedding, a linear mixer, running mean (causal), head."""

    def __init__(self):
        super().__init__()
        self.vocab_size = V
        self.emb = nn.Embedding(V, H)
        self.mix = nn.Linear(H, H)
        self.head = nn.Linear(H, V)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = torch.tanh(self.mix(self.emb(tokens)))  # [N, L, H]
        steps = torch.arange(1, tokens.shape[1] + 1, dtype=x.dtype).view(1, -1, 1)
        return self.head(x.cumsum(1) / steps)  # [N, L, V]


def _lora_policy(seed: int = 0) -> _Toy:
    torch.manual_seed(seed)
    pol = _Toy()
    attach_lora(pol, ["mix", "head"], rank=2, alpha=4.0, freeze_base=True, seed=seed)
    return pol


def _train(pol: nn.Module, tokens: torch.Tensor, steps: int = 3, lr: float = 0.1) -> None:
    """A few Adam steps on the adapters (so the policy and its copies differ in the adapters)."""
    opt = torch.optim.Adam(list(adapter_parameters(pol)), lr=lr)
    for _ in range(steps):
        opt.zero_grad()
        (-response_logprobs(pol, tokens, P)[0].sum()).backward()
        opt.step()


def _tokens(n: int = 6, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, V, (n, P + T), generator=torch.Generator().manual_seed(seed))


def _round_trip(obj, tmp_path):
    """`obj` through the checkpoint's encoding and a safetensors file, as a resume reads it."""
    tensors: dict[str, torch.Tensor] = {}
    tree = encode(obj, "", tensors, {})
    save_file(tensors, str(tmp_path / "t.safetensors"))
    return decode(tree, load_file(str(tmp_path / "t.safetensors")))


def _own_bytes(tensors, policy: nn.Module) -> int:
    """Bytes of the distinct storages among `tensors` that the policy does not own."""
    policy_ptrs = {p.untyped_storage().data_ptr() for p in policy.parameters()}
    seen: dict[int, int] = {}
    for t in tensors:
        ptr = t.untyped_storage().data_ptr()
        if ptr not in policy_ptrs:
            seen[ptr] = t.untyped_storage().nbytes()
    return sum(seen.values())


@pytest.mark.unit
def test_frozen_parameters_are_the_base_only():
    pol = _lora_policy()
    frozen = frozen_parameters(pol)
    assert set(frozen) == {"emb.weight", "mix.base.weight", "mix.base.bias", "head.base.weight", "head.base.bias"}
    assert frozen_parameters(_Toy()) == {}  # a fully trained policy shares nothing


@pytest.mark.unit
@pytest.mark.parametrize("mode", ["cached", "naive_epoch", "ring"])
def test_reference_shares_the_base_and_scores_like_a_full_copy(mode):
    pol, toks = _lora_policy(), _tokens()
    full = copy.deepcopy(pol).eval().requires_grad_(False)  # what the reference used to be
    ref = ReferenceHolder(pol, mode, max_seqs=8, max_resp_len=T)
    ref_sd, pol_sd = ref.model.state_dict(), pol.state_dict()
    for name in frozen_parameters(pol):
        assert same_tensor(ref_sd[name], pol_sd[name]), name
    for p in adapter_parameters(ref.model):  # the adapters are the reference's own
        assert all(p.untyped_storage().data_ptr() != q.untyped_storage().data_ptr() for q in pol.parameters())
    adapter_bytes = sum(p.numel() * p.element_size() for p in adapter_parameters(pol))
    assert _own_bytes(ref.model.state_dict().values(), pol) == adapter_bytes
    _train(pol, toks)
    ref.prepare(toks, P)
    assert torch.equal(ref.minibatch(toks, P, slice(None)), response_logprobs(full, toks, P)[0])


@pytest.mark.unit
def test_hard_and_polyak_updates_never_write_the_shared_base():
    pol, toks = _lora_policy(), _tokens()
    base = {k: v.clone() for k, v in frozen_parameters(pol).items()}
    ref = ReferenceHolder(pol, "cached")
    _train(pol, toks)
    before = {n: p.clone() for n, p in ref.model.named_parameters() if "lora" in n}
    ref.reset_to(pol, "polyak", alpha=0.25)
    pol_sd = pol.state_dict()
    for n, p in ref.model.named_parameters():
        if "lora" in n:  # ref <- 0.25 pi + 0.75 ref, by hand
            assert torch.equal(p, before[n].mul(0.75).add(pol_sd[n], alpha=0.25)), n
    for k, v in base.items():  # the base: bit for bit what it was
        assert torch.equal(frozen_parameters(pol)[k], v), k
    ref.reset_to(pol, "hard")
    for n, p in ref.model.named_parameters():
        assert torch.equal(p, pol_sd[n]), n
    ref.prepare(toks, P)
    assert torch.equal(ref.minibatch(toks, P, slice(None)), response_logprobs(pol, toks, P)[0])


@pytest.mark.unit
def test_reference_state_round_trip_and_a_foreign_base_is_refused(tmp_path):
    pol, toks = _lora_policy(), _tokens()
    ref = ReferenceHolder(pol, "cached")
    _train(pol, toks)
    ref.reset_to(pol, "hard")
    ref2 = ReferenceHolder(pol, "cached")  # a resumed run: adapters at init
    ref2.load_state_dict(_round_trip(ref.state_dict(), tmp_path))
    for (n, a), b in zip(ref.model.state_dict().items(), ref2.model.state_dict().values()):
        assert torch.equal(a, b), n
    assert same_tensor(ref2.model.state_dict()["emb.weight"], pol.state_dict()["emb.weight"])
    bad = {k: v.clone() for k, v in ref.state_dict()["model"].items()}
    bad["emb.weight"] += 1.0
    with pytest.raises(ValueError, match="emb.weight"):
        ref2.load_state_dict({"mode": "cached", "model": bad})
    with pytest.raises(ValueError, match="emb.weight"):
        ref2.reset_to(bad, "polyak", alpha=0.5)
    assert torch.equal(frozen_parameters(pol)["emb.weight"], ref.model.emb.weight)  # untouched


@pytest.mark.unit
def test_drift_monitor_snapshots_alias_the_base_and_measure_like_full_copies(tmp_path):
    pol, toks = _lora_policy(), _tokens()
    mask = torch.ones(toks.shape[0], T)
    init_full = copy.deepcopy(pol)
    mon = DriftMonitor(pol, toks, P, mask, temperature=0.7)
    adapter_bytes = sum(p.numel() * p.element_size() for p in adapter_parameters(pol))
    assert _own_bytes(mon.init_params.values(), pol) == adapter_bytes
    _train(pol, toks, steps=2)
    mon.remember(pol)
    prev_full = copy.deepcopy(pol)
    assert _own_bytes(mon.prev.params.values(), pol) == adapter_bytes
    _train(pol, toks, steps=2)
    got = mon.measure(pol)
    assert got["kl/to_init"] == drift_kl(pol, init_full, toks, P, mask, 0.7) > 0
    assert got["kl/to_prev"] == drift_kl(pol, prev_full, toks, P, mask, 0.7) > 0
    mon2 = DriftMonitor(pol, toks, P, mask, temperature=0.7)
    mon2.load_state_dict(_round_trip(mon.state_dict(), tmp_path))
    assert _own_bytes(list(mon2.init_params.values()) + list(mon2.prev.params.values()), pol) == 2 * adapter_bytes
    assert mon2.measure(pol) == got


@pytest.mark.unit
def test_best_snapshot_aliases_the_base_and_restores_bit_for_bit(tmp_path):
    pol, toks = _lora_policy(), _tokens()
    best = BestTracker(frozen=frozen_parameters(pol))
    best.update(1, 0.5, pol)
    saved = clone_state_dict(pol)
    adapter_bytes = sum(p.numel() * p.element_size() for p in adapter_parameters(pol))
    assert _own_bytes(best.params.values(), pol) == adapter_bytes
    want = {k: v.clone() for k, v in pol.state_dict().items()}
    _train(pol, toks)
    best2 = BestTracker(frozen=frozen_parameters(pol))
    best2.load_state_dict(_round_trip(best.state_dict(), tmp_path))
    assert _own_bytes(best2.params.values(), pol) == adapter_bytes
    assert best2.restore(pol) == 1
    for k, v in pol.state_dict().items():
        assert torch.equal(v, want[k]), k
    assert saved.keys() == want.keys()


@pytest.mark.unit
def test_clone_state_dict_copies_unless_asked_to_share():
    pol = _lora_policy()
    ref = ReferenceHolder(pol, "cached")  # its module is frozen as a whole
    snap = clone_state_dict(ref.model)  # a copy: nothing aliases the live tensors
    live = {t.untyped_storage().data_ptr() for t in ref.model.state_dict().values()}
    assert all(t.untyped_storage().data_ptr() not in live for t in snap.values())
    shared = clone_state_dict(pol, share_frozen=True)  # a policy snapshot: the base aliased
    assert same_tensor(shared["emb.weight"], pol.state_dict()["emb.weight"])
    assert not same_tensor(shared["head.lora_A"], pol.state_dict()["head.lora_A"])
