"""The critic's model for --adv gae: a copy of the policy's trunk with a linear value head.

Legend: N sequences, P prompt length, T response length, L = P + T, C hidden size.

`ValueModel(policy)` deep-copies the policy (after the warm start and any LoRA adapters, so it
starts from the policy's features, as TRL's PPOTrainer and OpenRLHF start their value model from a
pretrained model) with the policy's frozen parameters (a LoRA base) aliased, not copied, and adds
`head = Linear(C, 1)` initialised to zero (the first values are 0: the first advantages are the
discounted returns). Trainable: the head and whatever trains in the policy (all weights; with LoRA,
the adapters). `values(tokens, P)` -> V[N, T] float32: the value of the state before each response
token, read from the final hidden state at the position that predicts that token (position
P - 1 + t), where the policy reads its logits.

A separate model rather than a head on the policy's own trunk: the value loss's gradients then
never reach the policy's parameters, its optimizer state or its gradient clipping, so the critic
has its own Adam and its own reset switch, and every other arm's update is unchanged.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import nn

from noma_prorl_bench.models.base import autocast, policy_device


def hidden_size(policy: nn.Module) -> int:
    """C, read from one hidden-state pass over one token (no model-specific attribute)."""
    probe = torch.zeros(1, 1, dtype=torch.long, device=policy_device(policy))
    with torch.no_grad():
        return int(policy.hidden_states(probe).shape[-1])  # type: ignore[operator]


class ValueModel(nn.Module):
    """trunk (a copy of the policy: `hidden_states(tokens, keep_last)`) -> Linear(C, 1) head."""

    def __init__(self, policy: nn.Module):
        super().__init__()
        if not hasattr(policy, "hidden_states"):
            raise ValueError(f"--adv gae needs a policy with hidden_states, not {type(policy).__name__}")
        memo: dict[int, Any] = {id(p): p for p in policy.parameters() if not p.requires_grad}  # shared base
        self.trunk = copy.deepcopy(policy, memo)
        C = hidden_size(self.trunk)
        self.head = nn.Linear(C, 1).to(policy_device(policy))
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)

    def trainable(self) -> list[nn.Parameter]:
        """The parameters the critic's optimizer updates (the frozen base excluded)."""
        return [p for p in self.parameters() if p.requires_grad]

    def values(self, tokens: torch.Tensor, P: int) -> torch.Tensor:
        """tokens[N, L] -> V[N, T] (float32)."""
        T = tokens.shape[1] - P
        with autocast(self.trunk):
            h = self.trunk.hidden_states(tokens, keep_last=T + 1)[:, :-1]  # type: ignore[operator]  # [N, T, C]
        return self.head(h.float()).squeeze(-1)  # [N, T]

    def reinit_from(self, policy: nn.Module) -> None:
        """Back to the start: the trunk takes the policy's current weights, the head is zeroed."""
        with torch.no_grad():
            self.trunk.load_state_dict(policy.state_dict())
            self.head.weight.zero_()
            self.head.bias.zero_()
