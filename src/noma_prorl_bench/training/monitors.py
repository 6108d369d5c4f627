"""Drift monitors: exact KL of the policy to its initial and previous self.

Legend: N evaluation sequences, P prompt length, T response length, L = P + T, V vocabulary.

On a fixed evaluation batch (tokens[N, L] with response mask[N, T]) the monitor reports
    kl/to_init  masked mean over response tokens of KL(pi_theta || pi_init)
    kl/to_prev  the same against the policy of the previous step
where each per-position KL is the exact full-vocabulary sum of `kl.kl_full` on the
temperature-scaled logits. The other policies are kept as parameter snapshots (a state-dict
clone, not a second module) and evaluated through `torch.func.functional_call` on the
policy's own module. Monitor forwards are counted in their own counters
(`count/monitor_fwd`, `count/tokens_monitor`), never in `count/ref_fwd`.

Trainer use: build `DriftMonitor(policy, eval_tokens, P, eval_mask, temperature)` before the
first update; at the start of a step whose end will be measured, `remember(policy)`; after
the update, `measure(policy)` -> {"kl/to_init", "kl/to_prev"}; `pop_counts()` once a step.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any, Iterator

import torch
from torch import nn
from torch.func import functional_call

from noma_prorl_bench.algorithms.kl import kl_full
from noma_prorl_bench.io.metrics import ForwardCounter
from noma_prorl_bench.models.base import fed_tokens, frozen_parameters, response_logits, same_tensor, slices_logits
from noma_prorl_bench.training.resets import adopt_frozen, clone_state_dict

Params = dict[str, torch.Tensor]
#: the drift monitor's row chunk holds at most this many logits per [n, T, V] tensor (64 MiB float32)
MONITOR_CHUNK_ELEMENTS = 2**24


def vocab_size(policy: nn.Module) -> int:
    """The policy's vocabulary: its `vocab_size` attribute, else its config's, else 1 (no chunking
    information: the whole batch goes in one piece)."""
    v = getattr(policy, "vocab_size", None) or getattr(getattr(policy, "config", None), "vocab_size", None)
    return int(v) if v else 1


class MonitorCounter(ForwardCounter):
    """Exact count of monitor forwards and the tokens they processed, plus their time
    (`count/monitor_fwd`, `count/tokens_monitor`; io.metrics.ForwardCounter)."""

    def __init__(self) -> None:
        super().__init__("monitor_fwd", "tokens_monitor")


@contextlib.contextmanager
def _eval_mode(module: nn.Module) -> Iterator[None]:
    """Evaluate deterministically (dropout off), then restore the module's train/eval flag."""
    was_training = module.training
    module.eval()
    try:
        yield
    finally:
        module.train(was_training)


def _functional(policy: nn.Module, params: Params):
    """`policy`'s forward with `params`. strict: every parameter must come from `params`;
    non-persistent buffers (HF rotary `inv_freq`) are not in a state dict, so the module's own
    constants fill them in. tie_weights=False because a state dict names each tied tensor
    separately (equal values, maybe distinct tensors). Keeps the policy's `slice_logits`."""
    params = {**{n: b for n, b in policy.named_buffers() if n not in params}, **params}

    def call(toks: torch.Tensor, keep_last: int = 0) -> torch.Tensor:
        kwargs = {"keep_last": keep_last} if keep_last else {}
        return functional_call(policy, params, (toks,), kwargs, tie_weights=False, strict=True)

    setattr(call, "slice_logits", slices_logits(policy))  # read by models.base.response_logits
    return call


def _scaled_logits(
    policy: nn.Module,
    params: Params | None,
    tokens: torch.Tensor,
    P: int,
    temperature: float,
    counter: MonitorCounter | None,
) -> torch.Tensor:
    """logits[N, T, V] / temperature of `policy`, or of its architecture with `params`."""
    t0 = time.perf_counter()
    model = policy if params is None else _functional(policy, params)
    logits = response_logits(model, tokens, P) / temperature  # [N, T, V]
    if counter is not None:
        counter.forward(fed_tokens(model, tokens, P), time.perf_counter() - t0)
    return logits


def _masked_kl(logits_p: torch.Tensor, logits_q: torch.Tensor, mask: torch.Tensor) -> float:
    """Masked mean over response tokens of KL(p || q): [N,T,V], [N,T,V], [N,T] -> float."""
    kl = kl_full(logits_p, logits_q)  # [N, T]
    m = mask.to(kl.dtype)
    return float((kl * m).sum() / m.sum().clamp_min(1.0))


@torch.no_grad()
def drift_kl(
    policy: nn.Module,
    other: nn.Module | Params,
    tokens: torch.Tensor,
    P: int,
    mask: torch.Tensor,
    temperature: float = 1.0,
    counter: MonitorCounter | None = None,
) -> float:
    """KL(pi_policy || pi_other) averaged over response tokens (mask[N, T]); 2 counted forwards.

    `other` is a module with the same vocabulary, or a parameter snapshot of `policy`'s
    own architecture (e.g. from `clone_state_dict`).
    """
    with _eval_mode(policy):
        lp = _scaled_logits(policy, None, tokens, P, temperature, counter)
        if isinstance(other, nn.Module):
            with _eval_mode(other):
                lq = _scaled_logits(other, None, tokens, P, temperature, counter)
        else:
            lq = _scaled_logits(policy, other, tokens, P, temperature, counter)
    return _masked_kl(lp, lq, mask)


def _clone_params(params: Params) -> Params:
    """Detached clones of a parameter dict; entries that were one tensor stay one tensor."""
    out: Params = {}
    seen: dict[int, torch.Tensor] = {}
    for k, v in params.items():
        if id(v) not in seen:
            seen[id(v)] = v.detach().clone()
        out[k] = seen[id(v)]
    return out


class PrevPolicySnapshot:
    """The previous step's parameters, kept as one state-dict clone refreshed in place (frozen
    parameters are aliased, not cloned: `clone_state_dict`)."""

    def __init__(self, frozen: Params | None = None) -> None:
        self.params: Params | None = None
        self.step: int | None = None
        self.frozen = frozen or {}  # the live policy's frozen parameters: a loaded snapshot aliases them

    def capture(self, policy: nn.Module, step: int | None = None) -> None:
        """Copy `policy`'s current parameters and buffers (reusing storage when shapes match)."""
        sd = policy.state_dict()
        params = self.params
        same = (
            params is not None
            and params.keys() == sd.keys()
            and all(params[k].shape == v.shape and params[k].dtype == v.dtype for k, v in sd.items())
        )
        if same and params is not None:
            for k, v in sd.items():
                if not same_tensor(params[k], v):  # an aliased frozen tensor is already current
                    params[k].copy_(v)
        else:
            self.params = clone_state_dict(policy, share_frozen=True)
        self.step = step

    def state_dict(self) -> dict[str, Any]:
        return {"params": self.params, "step": self.step}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        params = state["params"]
        self.params = None if params is None else adopt_frozen(_clone_params(params), self.frozen)
        self.step = state["step"]


class DriftMonitor:
    """kl/to_init and kl/to_prev on a fixed evaluation batch, with their own forward counter."""

    def __init__(self, policy: nn.Module, tokens: torch.Tensor, P: int, mask: torch.Tensor, temperature: float = 1.0):
        if mask.shape != (tokens.shape[0], tokens.shape[1] - P):
            raise ValueError(f"mask {tuple(mask.shape)} does not match tokens {tuple(tokens.shape)} with P={P}")
        self.tokens, self.P, self.mask, self.temperature = tokens, P, mask, float(temperature)
        self.frozen = frozen_parameters(policy)  # a LoRA base: aliased by both snapshots, held once
        self.init_params: Params = clone_state_dict(policy, share_frozen=True)
        self.prev = PrevPolicySnapshot(self.frozen)
        self.counter = MonitorCounter()

    def remember(self, policy: nn.Module, step: int | None = None) -> None:
        """Snapshot the policy as 'previous' (call at the start of the step to be measured)."""
        self.prev.capture(policy, step)

    @torch.no_grad()
    def measure(self, policy: nn.Module) -> dict[str, float]:
        """{"kl/to_init", "kl/to_prev"}: 2 forwards, 3 once a previous snapshot exists (counted per
        pass over the batch). Rows go through in chunks of at most MONITOR_CHUNK_ELEMENTS logits
        each, so a large vocabulary never holds [N, T, V] float32 tensors of the whole batch (one
        chunk, the same arithmetic, whenever the batch fits: every toy model)."""
        others = {"kl/to_init": self.init_params}
        if self.prev.params is not None:
            others["kl/to_prev"] = self.prev.params
        N, T = self.mask.shape
        rows = N if not T else max(1, MONITOR_CHUNK_ELEMENTS // (T * vocab_size(policy)))
        sums: dict[str, Any] = {k: 0.0 for k in others}  # float, then a 0-dim tensor
        t0 = time.perf_counter()
        fed = 0  # the policy's own pass (--shared_prompt shares prompts); the others run every row's
        with _eval_mode(policy):
            for a in range(0, N, rows):
                tok, m = self.tokens[a : a + rows], self.mask[a : a + rows].float()
                fed += fed_tokens(policy, tok, self.P)
                lp = _scaled_logits(policy, None, tok, self.P, self.temperature, None)  # [n, T, V]
                for key, params in others.items():
                    kl = kl_full(lp, _scaled_logits(policy, params, tok, self.P, self.temperature, None))
                    sums[key] = sums[key] + (kl * m).sum()
        seconds = (time.perf_counter() - t0) / (1 + len(others))
        self.counter.forward(fed, seconds)
        for _ in others:
            self.counter.forward(self.tokens.numel(), seconds)
        total = self.mask.float().sum().clamp_min(1.0)
        return {k: float(v / total) for k, v in sums.items()}

    def pop_counts(self) -> dict[str, int]:
        return self.counter.pop_counts()

    def pop_time(self) -> float:
        return self.counter.pop_time()

    def state_dict(self) -> dict[str, Any]:
        return {"init_params": self.init_params, "prev": self.prev.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.init_params = adopt_frozen(_clone_params(state["init_params"]), self.frozen)
        self.prev.load_state_dict(state["prev"])
