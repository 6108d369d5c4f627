"""The learner's stand-in for `ReferenceHolder` when pi_ref lives in another actor.

Legend: N sequences in the batch, n in a minibatch, T response length.

`--ref_placement generator | own_actor` moves the reference forward out of the learner: a
generator or a ReferenceScorer scores each batch once (A1) and the batch arrives with
`logp_ref[N, T]` and the reference version that scored it. The learner's unchanged loss code
keeps calling `trainer.ref.prepare / minibatch / pop_counts / reset_to`; this class answers:

  receive(logp_ref, ref_version, counts, seconds)   the batch's scores; a version other than
                                                    this side's is refused (a lost reset)
  prepare, minibatch                                views of the received logp_ref (as cached)
  reset_to(policy, rule, alpha)                     ref_version += 1 and a pending update
                                                    {ref_version, rule, alpha, arrays: [ref],
                                                    struct_version, module: [ref]} that the
                                                    driver sends to every holder (`pop_update`)

Counters (`count/ref_fwd`, `count/tokens_ref`) are the holders' exact counts for the batch.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import torch

from noma_prorl_bench.engines.weights import pack_state, structure
from noma_prorl_bench.io.metrics import ForwardCounter
from noma_prorl_bench.rollout.reference import REF_UPDATES
from noma_prorl_bench.rollout.reference_source import anchor_from


def _ray_put(obj):
    import ray  # noqa: PLC0415  (only inside the learner actor)

    return ray.put(obj)


class RemoteReference:
    """Stands in for `ReferenceHolder` inside the learner when pi_ref lives in another actor.

    `receive` takes the batch's logp_ref (checked against this side's ref_version); `prepare`,
    `minibatch` serve it as A1 (cached) does; `reset_to` packs the policy state and leaves a
    pending update for the driver (`pop_update`) instead of touching weights here."""

    enabled = True
    mode = "cached"
    model = None  # pi_ref lives in the holders (adapter growth needs --ref_placement learner)

    def __init__(self, put: Callable = _ray_put):
        self._put = put
        self.ref_version = 0
        self.struct_version = 0
        self._sig: Any = None
        self._module_ref: Any = None
        self._logp: Optional[torch.Tensor] = None
        self._n: Optional[int] = None
        self.counter = ForwardCounter("ref_fwd", "tokens_ref")  # the holders' counts (io.metrics)
        self.pending: Optional[dict] = None

    def bind(self, policy) -> None:
        """The structure the holders start with (the learner's policy at version 0)."""
        self._sig = structure(policy)

    def receive(self, logp_ref: torch.Tensor, ref_version: int, counts: dict, seconds: float) -> None:
        if ref_version != self.ref_version:
            raise RuntimeError(
                f"batch scored by reference version {ref_version}, the learner is at "
                f"{self.ref_version} (a reset did not reach the reference holder)"
            )
        self._logp = logp_ref
        self.counter.forward(int(counts.get("count/tokens_ref", 0)), seconds, calls=int(counts.get("count/ref_fwd", 0)))

    def prepare(self, tokens: torch.Tensor, P: int) -> None:
        if self._logp is None or self._logp.shape[0] != tokens.shape[0]:
            raise RuntimeError("RemoteReference.prepare: no logp_ref received for this batch")
        self._n = tokens.shape[0]

    def minibatch(self, tokens_mb: torch.Tensor, P: int, sl: slice) -> torch.Tensor:
        if self._n is None or self._logp is None:
            raise RuntimeError("RemoteReference.minibatch before prepare() for this batch")
        start, stop, _ = sl.indices(self._n)
        if tokens_mb.shape[0] != stop - start:
            raise ValueError(f"slice {sl} does not match a minibatch of {tokens_mb.shape[0]} rows")
        return self._logp[start:stop]  # view [n, T]

    def anchor(self, tokens_mb, P: int, sl: slice, logp_old, old_logits=None, with_logits: bool = False):
        return anchor_from(self, tokens_mb, P, sl, with_logits)

    def minibatch_logits(self, tokens_mb, P, sl):
        raise RuntimeError("--kl_estimator full needs the reference in the learner (--ref_placement learner)")

    def pop_counts(self) -> dict:
        return self.counter.pop_counts()

    def pop_time(self) -> float:
        return self.counter.pop_time()

    @torch.no_grad()
    def reset_to(self, policy_or_state, rule: str = "hard", alpha: float = 1.0) -> dict[str, Any]:
        if rule not in REF_UPDATES:
            raise ValueError(f"ref_update must be one of {REF_UPDATES}, got {rule!r}")
        if rule != "hard" and not 0.0 <= alpha <= 1.0:
            raise ValueError(f"ref_mix_alpha / ref_ema_tau must be in [0, 1], got {alpha}")
        sig = structure(policy_or_state)
        if sig != self._sig:
            if not isinstance(policy_or_state, torch.nn.Module):
                raise ValueError("a reference reset across a structure change needs the policy module")
            self._sig, self.struct_version = sig, self.struct_version + 1
            self._module_ref = self._put(policy_or_state)
        self.ref_version += 1
        self.pending = {
            "ref_version": self.ref_version,
            "rule": rule,
            "alpha": float(alpha),
            "arrays": [self._put(pack_state(policy_or_state))],
            "struct_version": self.struct_version,
            "module": [self._module_ref],
        }
        self._logp = self._n = None
        if rule == "ema":
            return {"ref_update": rule, "ref_ema_tau": float(alpha)}
        return {"ref_update": rule, "ref_mix_alpha": float(alpha) if rule == "polyak" else None}

    def pop_update(self) -> Optional[dict]:
        out, self.pending = self.pending, None
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"mode": "remote", "model": None, "ref_version": self.ref_version}
