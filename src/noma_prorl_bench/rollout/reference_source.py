"""What a training step asks of a reference (S1/S4): the `ReferenceSource` protocol, and Variant B's
`NoReference`, which builds no pi_ref and anchors the KL term to the rows' logp_old.

The strategies: `ReferenceHolder` (reference.py: A0 naive_epoch, A1 cached, A2 ring),
`NoReference` (here), and the Ray learner's `RemoteReference` (engines/remote_ref.py);
`reference.make_reference` picks one for a run.
"""

from __future__ import annotations

from typing import Any, Optional, Protocol

import torch
from torch import nn

from noma_prorl_bench.io.metrics import ForwardCounter


class ReferenceSource(Protocol):
    """What the step and the managers ask of a reference: `ReferenceHolder` (A0/A1/A2),
    `NoReference` (Variant B: the anchor is pi_old) and the Ray learner's `RemoteReference`."""

    @property
    def enabled(self) -> bool: ...

    @property
    def model(self) -> Optional[nn.Module]:
        """This process's copy of pi_ref (adapter growth grows it with the policy); None where there
        is none here (Variant B; the Ray learner's RemoteReference)."""
        ...

    def prepare(self, tokens: torch.Tensor, P: int) -> None: ...

    def anchor(
        self,
        tokens_mb: torch.Tensor,
        P: int,
        sl: slice,
        logp_old: torch.Tensor,
        old_logits: Optional[torch.Tensor] = None,
        with_logits: bool = False,
    ) -> tuple[torch.Tensor, Optional[torch.Tensor]]: ...

    def pop_counts(self) -> dict[str, int]: ...

    def pop_time(self) -> float: ...

    def reset_to(self, policy_or_state: Any, rule: str = "hard", alpha: float = 1.0) -> dict[str, Any]: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


def anchor_from(
    ref: Any, tokens_mb: torch.Tensor, P: int, sl: slice, with_logits: bool
) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """(logp_ref[n, T], logits[n, T, V] or None) of rows `sl` from a holder of pi_ref."""
    logp = ref.minibatch(tokens_mb, P, sl)
    return logp, (ref.minibatch_logits(tokens_mb, P, sl) if with_logits else None)


class NoReference:
    """Variant B: no pi_ref is built; the anchor of the KL term is pi_old (the rows' logp_old)."""

    enabled = False
    mode = "none"
    model = None

    def __init__(self) -> None:
        self.counter = ForwardCounter("ref_fwd", "tokens_ref")  # stays 0: count/ref_fwd is 0 in B

    def prepare(self, tokens: torch.Tensor, P: int) -> None:
        """Nothing to score."""

    def anchor(
        self,
        tokens_mb: torch.Tensor,
        P: int,
        sl: slice,
        logp_old: torch.Tensor,
        old_logits: Optional[torch.Tensor] = None,
        with_logits: bool = False,
    ) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
        return logp_old, old_logits  # the caller's rows of pi_old

    def pop_counts(self) -> dict[str, int]:
        return self.counter.pop_counts()

    def pop_time(self) -> float:
        return self.counter.pop_time()

    def reset_to(self, policy_or_state: Any, rule: str = "hard", alpha: float = 1.0) -> dict[str, Any]:
        raise RuntimeError("ref_compute='none' (Variant B): there is no reference policy / logp_ref")

    def state_dict(self) -> dict[str, Any]:
        return {"mode": "none", "model": None}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state["mode"] != "none":
            raise ValueError(f"checkpoint ref mode {state['mode']!r} vs this run's 'none'")
