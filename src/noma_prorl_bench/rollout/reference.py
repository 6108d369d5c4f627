"""The reference policy pi_ref (S1) and its log-probabilities logp_ref (S4), with exact counts.

Legend: N sequences in the step's batch, n in a minibatch, P prompt length, T response
length, L = P + T. `ReferenceHolder` owns a frozen, eval-mode copy of the policy and
hands the trainer `logp_ref` under one of four modes (`--ref_compute`):

  naive_epoch  A0: one reference forward per `minibatch` call, i.e. E*M per step for
               E PPO epochs x M minibatches (the intentionally wasteful baseline)
  cached       A1: one forward over the whole batch in `prepare`; minibatches are views
  ring         A2: like cached, but written into a buffer [max_seqs, max_resp_len]
               allocated once at construction and never reallocated; minibatches are views
               of that buffer (same numbers as cached, bit for bit)
  none         Variant B: no reference is ever built; asking for logp_ref raises
               (`make_reference` gives `NoReference` for it: reference_source.py, with the
               `ReferenceSource` protocol that every strategy meets)

Call `prepare(tokens, P)` once per rollout batch, then `minibatch(tokens[sl], P, sl)` for
each contiguous minibatch slice (any epoch order); `minibatch(tokens, P, slice(None))` gives
the whole batch. Counters are exact per step: `pop_counts()` -> {"count/ref_fwd",
"count/tokens_ref"} (tokens fed through the reference, N*L per batch forward) and
`pop_time()` -> seconds spent in reference forwards; both reset on pop.

Exact KL (`--kl_estimator full`): construct with `keep_logits=True` and call
`minibatch_logits(tokens[sl], P, sl)` -> the reference's raw logits [n, T, V] (divide by the
temperature before use). cached keeps the batch's logits next to logp_ref; ring writes them
into a second buffer [max_seqs, max_resp_len, V] allocated once; naive_epoch returns the
logits of the forward that `minibatch` just ran for the same slice (so a minibatch is still
exactly one reference forward) and runs a counted forward otherwise. Memory is N*T*V floats.

Chunked forwards (`chunk > 0`, `--logprob_chunk`): every reference forward computes logp_ref
with `models.base.chunked_response_logprobs`, `chunk` token positions per output-head call,
so the reference's [n, T, V] float32 logits never exist at once (not with keep_logits).

Reference updates (`reset_to`): `hard` copies the policy bit for bit; `polyak` mixes
ref <- alpha * pi + (1 - alpha) * ref in place, the same arithmetic as TRL's
SyncRefModelCallback (`ref.mul_(1 - alpha).add_(pi, alpha=alpha)`, trl/trainer/callbacks.py);
`ema` (the moving reference of --ref_update ema, called every --ref_ema_every steps) mixes
ref <- tau * ref + (1 - tau) * pi the same way (`models.averaging.mix_states_`).

A frozen base is held once: the copy shares the policy's frozen parameters
(`models.base.frozen_parameters`, requires_grad=False: a LoRA policy's base) instead of
cloning them, as PEFT's reference is the base with adapters disabled. Only the trained
parameters (the adapters) are the reference's own. Updates and checkpoint loads never write
a shared tensor: `hard` and `polyak` leave it as it is (ref = pi there already, so the mix
is the identity; it is not recomputed, which would round it), and a state to load must match
it exactly (else ValueError: the reference would need a base of its own).
"""

from __future__ import annotations

import copy
import time
from typing import Any, Optional, cast

import torch
from torch import nn

from noma_prorl_bench.config.choices import REF_COMPUTES, REF_UPDATES
from noma_prorl_bench.io.metrics import ForwardCounter
from noma_prorl_bench.models.averaging import mix_states_
from noma_prorl_bench.models.base import fed_tokens, frozen_parameters, policy_logprobs, same_tensor
from noma_prorl_bench.rollout.reference_source import NoReference, anchor_from

REF_MODES = (*REF_COMPUTES, "none")  # --ref_compute, and "none" for Variant B (no reference model)


def _model_device(model: nn.Module) -> torch.device:
    for t in model.parameters():
        return t.device
    return torch.device("cpu")


def _state_of(policy_or_state: nn.Module | dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return policy_or_state.state_dict() if isinstance(policy_or_state, nn.Module) else policy_or_state


def make_reference(
    policy: nn.Module,
    mode: str,
    temperature: float,
    max_seqs: int,
    max_resp_len: int,
    keep_logits: bool = False,
    chunk: int = 0,
) -> ReferenceHolder | NoReference:
    """The reference strategy of a run: `none` (Variant B) -> NoReference, else a ReferenceHolder."""
    if mode == "none":
        return NoReference()
    return ReferenceHolder(policy, mode, temperature, max_seqs, max_resp_len, keep_logits=keep_logits, chunk=chunk)


class ReferenceHolder:
    """Frozen reference policy + logp_ref provider; see the module docstring for the modes."""

    def __init__(
        self,
        policy: nn.Module | None,
        mode: str,
        temperature: float = 1.0,
        max_seqs: int = 0,
        max_resp_len: int = 0,
        keep_logits: bool = False,
        chunk: int = 0,
    ):
        if mode not in REF_MODES:
            raise ValueError(f"ref_compute must be one of {REF_MODES}, got {mode!r}")
        if chunk > 0 and keep_logits:
            raise ValueError("chunked reference log-probs (chunk > 0) keep no logits: keep_logits must be False")
        self.chunk = int(chunk)  # --logprob_chunk: positions per head call
        self.mode = mode
        self.temperature = float(temperature)
        self.model: nn.Module | None = None
        self._buf: torch.Tensor | None = None  # ring: [max_seqs, max_resp_len]
        self._cache: torch.Tensor | None = None  # cached: [N, T]
        self._n: int | None = None  # rows of the prepared batch
        self._t: int | None = None  # response length of the prepared batch
        self.keep_logits = bool(keep_logits)
        self._fwd_logits: torch.Tensor | None = None  # logits of the last forward (keep_logits)
        self._logits: torch.Tensor | None = None  # cached: [N, T, V]
        self._lbuf: torch.Tensor | None = None  # ring: [max_seqs, max_resp_len, V]
        self._naive_last: tuple[int, int] | None = None  # naive: rows of the last minibatch forward
        self.counter = ForwardCounter("ref_fwd", "tokens_ref")  # exact per step (io.metrics)
        self.shared: dict[str, torch.Tensor] = {}  # the policy's frozen parameters, aliased
        if mode == "none":
            return
        if policy is None:
            raise ValueError(f"ref_compute={mode!r} needs a policy to copy")
        # deepcopy with the frozen parameters pre-seeded in its memo: they are shared, not copied
        self.shared = frozen_parameters(policy)
        memo: dict[int, Any] = {id(p): p for p in policy.parameters() if not p.requires_grad}
        self.model = copy.deepcopy(policy, memo).eval().requires_grad_(False)
        if mode == "ring":
            if max_seqs < 1 or max_resp_len < 1:
                raise ValueError("ring needs max_seqs >= 1 and max_resp_len >= 1")
            self._buf = torch.empty(max_seqs, max_resp_len, dtype=torch.float32, device=_model_device(self.model))
            if self.keep_logits:
                vocab = int(cast(int, policy.vocab_size))
                self._lbuf = torch.empty(
                    max_seqs, max_resp_len, vocab, dtype=torch.float32, device=_model_device(self.model)
                )

    # ------------------------------------------------------------ properties

    @property
    def enabled(self) -> bool:
        """False for Variant B (mode none): there is no reference to read or reset."""
        return self.model is not None

    @property
    def buffer(self) -> torch.Tensor | None:
        """The ring buffer `[max_seqs, max_resp_len]` (None unless mode == ring)."""
        return self._buf

    def _require(self) -> nn.Module:
        if self.model is None:
            raise RuntimeError("ref_compute='none' (Variant B): there is no reference policy / logp_ref")
        return self.model

    # ------------------------------------------------------------ forwards

    @torch.no_grad()
    def _forward(self, tokens: torch.Tensor, P: int) -> torch.Tensor:
        """One counted, timed reference forward: tokens[n, L] -> logp_ref[n, T] (float32)."""
        model = self._require()
        t0 = time.perf_counter()
        # logp[n, T]; logits[n, T, V], or None when chunked
        logp, _, logits = policy_logprobs(model, tokens, P, self.temperature, chunk=self.chunk)
        self._fwd_logits = logits if self.keep_logits else None
        if logp.is_cuda:
            torch.cuda.synchronize(logp.device)
        self.counter.forward(fed_tokens(model, tokens, P), time.perf_counter() - t0)
        return logp

    def prepare(self, tokens: torch.Tensor, P: int) -> None:
        """Start a rollout batch tokens[N, L]: cached/ring run exactly one forward; naive none."""
        self._require()
        n, t = tokens.shape[0], tokens.shape[1] - P
        self._n, self._t, self._cache = n, t, None
        if self.mode == "cached":
            self._cache = self._forward(tokens, P)  # [N, T]
            self._logits = self._fwd_logits  # [N, T, V] | None
        elif self.mode == "ring":
            buf = cast(torch.Tensor, self._buf)  # allocated for ring
            if n > buf.shape[0] or t > buf.shape[1]:
                raise ValueError(f"batch [{n}, {t}] exceeds the ring buffer {list(buf.shape)}")
            logp = self._forward(tokens, P)  # [N, T]
            t0 = time.perf_counter()
            buf[:n, :t].copy_(logp)  # in place, no realloc
            if self._lbuf is not None:
                self._lbuf[:n, :t].copy_(cast(torch.Tensor, self._fwd_logits))  # [N, T, V]
            self.counter.seconds += time.perf_counter() - t0  # the ring write's time

    def minibatch(self, tokens_mb: torch.Tensor, P: int, sl: slice) -> torch.Tensor:
        """logp_ref[n, T] for rows `sl` (a contiguous slice) of the prepared batch.

        naive_epoch: one reference forward over tokens_mb; cached: a view of the cache;
        ring: a view of the ring buffer.
        """
        self._require()
        if self._n is None:
            raise RuntimeError("ReferenceHolder.minibatch before prepare() for this batch")
        if not isinstance(sl, slice):
            raise TypeError(f"minibatches are contiguous slices of the batch, got {type(sl).__name__}")
        start, stop, stride = sl.indices(self._n)
        if stride != 1 or tokens_mb.shape[0] != max(0, stop - start):
            raise ValueError(f"slice {sl} does not match a minibatch of {tokens_mb.shape[0]} rows")
        if self.mode == "naive_epoch":
            self._naive_last = (start, stop)
            return self._forward(tokens_mb, P)  # [n, T]
        if self.mode == "cached":
            return cast(torch.Tensor, self._cache)[start:stop]  # view [n, T]
        return cast(torch.Tensor, self._buf)[start:stop, : self._t]  # view [n, T]

    def anchor(
        self,
        tokens_mb: torch.Tensor,
        P: int,
        sl: slice,
        logp_old: torch.Tensor,
        old_logits: Optional[torch.Tensor] = None,
        with_logits: bool = False,
    ) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
        """The KL anchor of rows `sl`: (logp_ref[n, T], reference logits[n, T, V] if with_logits)."""
        return anchor_from(self, tokens_mb, P, sl, with_logits)

    def minibatch_logits(self, tokens_mb: torch.Tensor, P: int, sl: slice) -> torch.Tensor:
        """Raw reference logits[n, T, V] for rows `sl` (needs keep_logits=True).

        cached/ring: a view; naive_epoch: the logits of the forward `minibatch` just ran for
        this slice (no second forward), else one counted forward.
        """
        if not self.keep_logits:
            raise RuntimeError("ReferenceHolder(keep_logits=False) keeps no reference logits")
        self._require()
        if self._n is None:
            raise RuntimeError("ReferenceHolder.minibatch_logits before prepare() for this batch")
        start, stop, _ = sl.indices(self._n)
        if tokens_mb.shape[0] != max(0, stop - start):
            raise ValueError(f"slice {sl} does not match a minibatch of {tokens_mb.shape[0]} rows")
        if self.mode == "naive_epoch":
            if self._naive_last != (start, stop):
                self._forward(tokens_mb, P)
            self._naive_last = None
            return cast(torch.Tensor, self._fwd_logits)  # [n, T, V]
        if self.mode == "cached":
            return cast(torch.Tensor, self._logits)[start:stop]  # view [n, T, V]
        return cast(torch.Tensor, self._lbuf)[start:stop, : self._t]  # view [n, T, V]

    # ------------------------------------------------------------ counters

    def pop_counts(self) -> dict[str, int]:
        """This step's exact counters, then zero them: count/ref_fwd, count/tokens_ref."""
        return self.counter.pop_counts()

    def pop_time(self) -> float:
        """Seconds spent in reference forwards (and the ring write) since the last pop."""
        return self.counter.pop_time()

    # ------------------------------------------------------------ updates and checkpoints

    @torch.no_grad()
    def reset_to(
        self, policy_or_state: nn.Module | dict[str, torch.Tensor], rule: str = "hard", alpha: float = 1.0
    ) -> dict[str, Any]:
        """Update pi_ref from the policy (or a state dict): `hard` copy, `polyak` or `ema` mix.

        polyak: ref <- alpha * pi + (1 - alpha) * ref; ema (the moving reference, `alpha` = tau, the
        old reference's weight): ref <- tau * ref + (1 - tau) * pi; both on floating tensors, non-float
        buffers copied, through `models.averaging.mix_states_`. Returns the event's record:
        {"ref_update", "ref_mix_alpha"} ({"ref_update", "ref_ema_tau"} for ema).
        """
        model = self._require()
        if rule not in REF_UPDATES:
            raise ValueError(f"ref_update must be one of {REF_UPDATES}, got {rule!r}")
        src = _state_of(policy_or_state)
        self._n = self._t = self._cache = None  # a prepared batch is stale now
        self._logits = self._fwd_logits = self._naive_last = None
        if rule == "hard":
            self._load(src)
            return {"ref_update": "hard", "ref_mix_alpha": None}
        if not 0.0 <= alpha <= 1.0:
            raise ValueError(f"ref_mix_alpha / ref_ema_tau must be in [0, 1], got {alpha}")
        dst = model.state_dict()
        for name in self.shared:
            if name in src:
                self._check_shared(name, src[name])
        keep, take = (1.0 - alpha, alpha) if rule == "polyak" else (alpha, 1.0 - alpha)
        mix_states_(dst, src, keep, take, skip=self.shared)
        if rule == "ema":
            return {"ref_update": "ema", "ref_ema_tau": float(alpha)}
        return {"ref_update": "polyak", "ref_mix_alpha": float(alpha)}

    def _check_shared(self, name: str, value: torch.Tensor) -> None:
        """A state's entry for a shared frozen tensor must be that tensor or equal to it."""
        t = self.shared[name]
        if same_tensor(value, t):
            return
        if value.shape != t.shape or not torch.equal(value.to(t.device, t.dtype), t):
            raise ValueError(
                f"reference state {name!r} differs from the policy's frozen parameter it shares; "
                "a reference with a base of its own is not supported"
            )

    def _load(self, src: dict[str, torch.Tensor]) -> None:
        """Copy `src` into the reference: every entry but the shared frozen ones (checked equal)."""
        model = self._require()
        if not self.shared:
            model.load_state_dict(src)
            return
        for name in self.shared:
            if name in src:
                self._check_shared(name, src[name])
        missing, unexpected = model.load_state_dict(
            {k: v for k, v in src.items() if k not in self.shared}, strict=False
        )
        missing = [k for k in missing if k not in self.shared]
        if missing or unexpected:
            raise KeyError(f"reference state dict: missing {missing[:5]}, unexpected {unexpected[:5]}")

    def state_dict(self) -> dict[str, Any]:
        """The reference parameters (None in Variant B) for checkpoints; buffers are not saved."""
        return {"mode": self.mode, "model": None if self.model is None else self.model.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state["mode"] != self.mode and "none" in (state["mode"], self.mode):
            raise ValueError(f"checkpoint ref mode {state['mode']!r} vs this run's {self.mode!r}")
        if self.model is not None:
            with torch.no_grad():
                self._load(state["model"])
