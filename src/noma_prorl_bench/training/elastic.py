"""Elastic Reset (Noukhovitch et al. 2023, arXiv 2312.07551): the policy's EMA, and the reset that uses it.

`ElasticReset(policy, decay)` holds two parameter snapshots of the policy, taken when it is made
(after the warm start, when the KL reference is copied too):

  init   the initial policy, never changed
  ema    an exponential moving average of the online policy, ema <- d * ema + (1 - d) * pi after
         every step (`update`, `models.averaging.mix_states_`, d = --elastic_decay)

`reset(policy)` does the paper's two assignments, in this order: policy <- ema (a bit-for-bit
copy), then ema <- init. The KL reference is not touched (it stays the initial policy), nor is the
optimizer here (the reset's --opt_reset switches apply as for any reset). A frozen base (LoRA) is
aliased in both snapshots, not cloned (`resets.clone_state_dict(share_frozen=True)`), so the two
cost the adapters only; adapter growth migrates them like every other snapshot (`snapshots`).
`state_dict()` / `load_state_dict()` carry both for checkpoints: a resumed run continues the same EMA.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from noma_prorl_bench.models.averaging import mix_states_
from noma_prorl_bench.models.base import frozen_parameters, policy_device
from noma_prorl_bench.training.resets import adopt_frozen, clone_state_dict


class ElasticReset:
    """The policy's EMA and initial weights, and Elastic Reset's two assignments (module docstring)."""

    def __init__(self, policy: nn.Module, decay: float):
        if not 0.0 < decay < 1.0:
            raise ValueError(f"elastic_decay must be in (0, 1), got {decay}")
        self.decay = float(decay)
        self.device = policy_device(policy)  # where a loaded state goes
        self.frozen = frozen_parameters(policy)  # aliased in the snapshots, never mixed or written
        self.init = clone_state_dict(policy, share_frozen=True)
        self.ema = clone_state_dict(policy, share_frozen=True)

    def update(self, policy: nn.Module) -> None:
        """ema <- decay * ema + (1 - decay) * policy (after a step's update)."""
        mix_states_(self.ema, policy.state_dict(), self.decay, 1.0 - self.decay, skip=self.frozen)

    @torch.no_grad()
    def reset(self, policy: nn.Module) -> dict[str, Any]:
        """policy <- ema, then ema <- init; the record of the reset event."""
        policy.load_state_dict(self.ema)
        for name, t in self.ema.items():
            if name not in self.frozen:
                t.copy_(self.init[name])
        return {"policy_from": "ema", "ema_from": "init", "elastic_decay": self.decay}

    def snapshots(self) -> list:
        """The parameter snapshots kept (growth migrates them with the policy)."""
        return [self.init, self.ema]

    def state_dict(self) -> dict[str, Any]:
        """decay and the two snapshots' own entries (a frozen base is the live policy's: not saved)."""
        own = {part: {k: v for k, v in getattr(self, part).items() if k not in self.frozen} for part in ("init", "ema")}
        return {"decay": self.decay, **own}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Copy a saved state in; the frozen entries stay aliases of the live policy's tensors."""
        self.decay = float(state["decay"])
        for part in ("init", "ema"):
            saved, mine = state[part], getattr(self, part)
            missing, extra = sorted(set(mine) - set(self.frozen) - set(saved)), sorted(set(saved) - set(mine))
            if missing or extra:
                raise KeyError(f"Elastic Reset {part} state: missing {missing[:3]}, unexpected {extra[:3]}")
            loaded = {k: saved[k].detach().to(self.device, copy=True) for k in saved}
            setattr(
                self,
                part,
                adopt_frozen({**{k: self.frozen[k] for k in mine if k in self.frozen}, **loaded}, self.frozen),
            )
