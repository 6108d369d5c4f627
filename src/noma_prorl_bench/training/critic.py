"""The critic stage of --adv gae: the value model, its own Adam, its forwards and its reset switch.

Legend: N sequences, n rows of a minibatch, P prompt length, T response length.

One step with a critic: `values_old` (one no_grad forward over the batch, before the update) feeds
GAE (algorithms/objective.Objective.gae_advantages); each micro-batch of the update runs `values`
(with grad), the Objective adds vf_coef * the clipped value loss to the policy's per-token loss and
one backward reaches both models (their parameters are disjoint); after the policy's optimizer step
`step` clips the critic's gradients by --max_grad_norm on their own and steps its Adam (skipped
with the policy's update when the NaN guard skips it, or when the critic's own gradients are not
finite). Every critic forward is counted: count/critic_fwd, count/tokens_critic (1 + E x M x
micro-batches per step).

The critic's Adam follows the policy's LR schedule (--lr_schedule, --warmup_steps, the same horizon;
base LR --critic_lr): its scheduler steps whenever the policy's does (every applied update), so both
are always at the same point of the schedule (TRL's PPOTrainer drives policy and value with one
scheduler; OpenRLHF gives the critic its own scheduler of the same kind).

At a reference reset (`on_reset`, --critic_reset): keep leaves weights, Adam state and schedule
alone; follow applies the policy's --opt_reset treatment to the critic's Adam and schedule through
optim_state.apply_reset_semantics (--reset_lr_schedule, or a hard reset, restarts the warmup; no KL
coefficient of its own); reinit copies the current policy into the trunk, zeroes the value head,
clears the Adam state and restarts the schedule (a hard reset).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from noma_prorl_bench.config.choices import CRITIC_RESETS
from noma_prorl_bench.config.specs import CriticSpec
from noma_prorl_bench.io.metrics import ForwardCounter, Metrics
from noma_prorl_bench.models.startup import lean_optimizer
from noma_prorl_bench.models.value import ValueModel
from noma_prorl_bench.training.optim_state import (
    apply_moment_reset,
    apply_reset_semantics,
    restart_schedule,
    run_scheduler,
)


class Critic:
    """The value model of one run and its optimizer (state: both, saved in the checkpoint)."""

    def __init__(self, spec: CriticSpec, policy: nn.Module):
        self.spec = spec
        self.model = ValueModel(policy)
        self.optimizer = lean_optimizer(torch.optim.Adam)(self.model.trainable(), lr=spec.critic_lr_resolved)
        self.scheduler = run_scheduler(self.optimizer, spec.optimizer)  # the policy's schedule, --critic_lr as base
        self.counter = ForwardCounter("critic_fwd", "tokens_critic")

    # ------------------------------------------------------------ forwards (counted)
    def values_old(self, tokens: torch.Tensor, P: int) -> torch.Tensor:
        """V[N, T] before the update (no grad): GAE's values and the value clip's centre."""
        with torch.no_grad():
            v = self.model.values(tokens, P)
        self.counter.forward(tokens.numel())
        return v

    def values(self, tokens: torch.Tensor, P: int) -> torch.Tensor:
        """V[n, T] with the gradient, for the value loss of one micro-batch."""
        v = self.model.values(tokens, P)
        self.counter.forward(tokens.numel())
        return v

    def pop_counts(self) -> dict[str, int]:
        return self.counter.pop_counts()

    # ------------------------------------------------------------ the update
    def step(self, skip: bool) -> Metrics:
        """After the minibatch's backward: clip and step the critic's Adam (unless `skip`, or its
        gradients are not finite), step its LR scheduler with the policy's (unless `skip`), then
        drop its gradients."""
        params = self.model.trainable()
        if self.spec.optimizer.max_grad_norm > 0:
            gn = torch.nn.utils.clip_grad_norm_(params, self.spec.optimizer.max_grad_norm)
        else:
            grads = [p.grad.detach().norm() for p in params if p.grad is not None]
            gn = torch.stack(grads).norm() if grads else torch.tensor(0.0)
        finite = bool(torch.isfinite(gn))
        lr = float(self.optimizer.param_groups[0]["lr"])  # the LR this update used
        if finite and not skip:
            self.optimizer.step()
        if not skip:  # in step with the policy's scheduler, which steps on every applied update
            self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return {"critic/grad_norm": float(gn), "critic/skipped": float(skip or not finite), "critic/lr": lr}

    # ------------------------------------------------------------ reference resets
    def on_reset(self, policy: nn.Module) -> dict[str, Any]:
        """--critic_reset at a reference reset -> the `critic_reset` event's values."""
        s = self.spec
        if s.critic_reset not in CRITIC_RESETS:
            raise ValueError(f"critic_reset must be one of {CRITIC_RESETS}, got {s.critic_reset!r}")
        if s.critic_reset == "keep":
            return {"mode": "keep"}
        if s.critic_reset == "follow":
            rec = apply_reset_semantics(
                self.optimizer,
                self.scheduler,
                None,
                opt_reset=s.resets.opt_reset,
                soft_factor=s.resets.soft_factor,
                reset_opt_step=bool(s.resets.reset_opt_step),
                reset_lr_schedule=bool(s.resets.reset_lr_schedule),
                reset_kl_coef=False,
            )
            return {"mode": "follow", **rec}
        self.model.reinit_from(policy)
        lr_before = float(self.optimizer.param_groups[0]["lr"])
        rec = apply_moment_reset(self.optimizer, "hard")
        return {"mode": "reinit", **rec, "lr_before": lr_before, "lr_after": restart_schedule(self.scheduler)}

    # ------------------------------------------------------------ checkpoint
    def state_dict(self) -> dict[str, Any]:
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
