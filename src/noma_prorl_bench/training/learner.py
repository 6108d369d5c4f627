"""The update stage: advantages, then `ppo_epochs` x `minibatches` clipped updates of the policy.

Legend: N = B*G sequences, n rows of a minibatch, T response length, V vocabulary, E ppo_epochs,
M minibatches. `Learner.update(batch, reference)` -> metrics; the Learner owns the optimizer
side (`OptimSide`: optimizer, scheduler, adaptive-KL controller) that the managers share, and
calls its `Objective` (algorithms/objective.py) for the advantages and the per-token loss. With
--adv gae it also holds the `Critic` (training/critic.py): its values enter the advantages and the
loss, and its optimizer steps after the policy's.
"""

from __future__ import annotations

from typing import Callable, Optional, cast

import numpy as np
import torch

from noma_prorl_bench.algorithms import kl as kl_lib
from noma_prorl_bench.algorithms import losses as loss_lib
from noma_prorl_bench.algorithms import objective as objective_lib
from noma_prorl_bench.algorithms.kl_term import KLTerm
from noma_prorl_bench.config.specs import ObjectiveSpec, OptimizerSpec
from noma_prorl_bench.io.metrics import Counters, StageTimer
from noma_prorl_bench.models.base import fed_tokens, policy_logprobs
from noma_prorl_bench.models.startup import lean_optimizer
from noma_prorl_bench.rollout.reference_source import ReferenceSource
from noma_prorl_bench.rollout.sampling import RolloutBatch
from noma_prorl_bench.training import guards, micro
from noma_prorl_bench.training.critic import Critic
from noma_prorl_bench.training.grad_parts import GradParts
from noma_prorl_bench.training.optim_state import OptimSide, run_scheduler


def make_optimizer(spec: OptimizerSpec, policy: torch.nn.Module) -> torch.optim.Optimizer:
    """--optimizer over the trainable parameters (LoRA: the adapters only)."""
    cls = lean_optimizer(torch.optim.AdamW if spec.optimizer == "adamw" else torch.optim.Adam)
    params = [p for p in policy.parameters() if p.requires_grad]
    return cls(params, lr=spec.lr, weight_decay=spec.weight_decay)


class Learner:
    """The policy's optimizer side and the loss of one step; reads no reference state of its own:
    the step hands the `ReferenceSource` in (pi_ref for Variant A, pi_old for Variant B)."""

    def __init__(
        self,
        spec: ObjectiveSpec,
        optim: OptimizerSpec,
        policy: torch.nn.Module,
        kl: KLTerm,
        T_max: int,
        counters: Counters,
        timer: StageTimer,
        order_gen: torch.Generator,
        event: Callable[..., None],
        critic: Optional[Critic] = None,
    ):
        """`spec`: advantages, loss, KL coefficient; `optim`: optimizer, schedule, update loop;
        `critic`: the value model of --adv gae (None otherwise)."""
        self.spec, self.opt_spec, self.policy, self.kl, self.T_max = spec, optim, policy, kl, T_max
        self.critic = critic
        self.objective = objective_lib.Objective(
            spec, kl, T_max, critic.spec if critic is not None else None
        )  # advantages and the per-token loss
        self.counters, self.timer, self.order_gen, self.event = counters, timer, order_gen, event
        optimizer = make_optimizer(optim, policy)
        kl_ctrl = (
            kl_lib.AdaptiveKLController(spec.beta, spec.target_kl, spec.kl_horizon) if spec.target_kl > 0 else None
        )
        self.optim = OptimSide(optimizer, run_scheduler(optimizer, optim), kl_ctrl)  # shared with the managers
        self.updates_applied = 0  # optimizer steps taken (a run with none ends non-zero)
        self.grad_parts: Optional[GradParts] = None  # set for the measured minibatch (--grad_parts_every)

    @property
    def beta(self) -> float:
        """The KL coefficient now: the adaptive controller's value, else --beta."""
        return self.optim.kl_ctrl.value if self.optim.kl_ctrl is not None else self.spec.beta

    def advantages(self, batch: RolloutBatch, reference: ReferenceSource) -> tuple[dict, dict]:
        """batch.advantages ([N], or [N, T] with the KL in the reward in token form) from the task
        rewards with --overlong shape applied -> (advantage metrics, shaping metrics)."""
        ref = (
            reference.anchor(batch.tokens, batch.prompt_len, slice(None), batch.logp_old)[0]  # [N, T] view
            if self.kl.in_reward
            else None
        )  # --kl_in reward
        if self.critic is not None:  # --adv gae: per-token GAE from the critic's values
            batch.values = self.critic.values_old(batch.tokens, batch.prompt_len)  # [N, T]
            batch.advantages, batch.returns, adv_metrics, shape_metrics = self.objective.gae_advantages(
                batch.rewards, batch.mask, batch.values, beta=self.beta, logp_old=batch.logp_old, logp_ref=ref
            )
            return adv_metrics, shape_metrics
        batch.advantages, adv_metrics, shape_metrics = self.objective.advantages(
            batch.rewards, batch.mask, beta=self.beta, logp_old=batch.logp_old, logp_ref=ref
        )
        return adv_metrics, shape_metrics

    def update(self, batch: RolloutBatch, reference: ReferenceSource, step: int = 0) -> dict:
        """E epochs x M minibatches (in a seeded random order per epoch) -> the passes' mean metrics."""
        N, M = batch.n, self.opt_spec.minibatches
        bounds = np.linspace(0, N, M + 1).astype(int)
        slices = [slice(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:])]
        sums: dict[str, float] = {}
        n_pass = 0
        anchors = torch.zeros_like(batch.logp_old)  # the anchor the loss saw, [N, T]
        self.policy.train()
        inp, out_once = self.update_inputs(batch)
        E, every = self.opt_spec.ppo_epochs, self.spec.grad_parts_every
        parts = None
        for epoch in range(E):
            order = torch.randperm(M, generator=self.order_gen).tolist()
            for i, j in enumerate(order):
                if every > 0 and step % every == 0 and epoch == E - 1 and i == len(order) - 1:
                    self.grad_parts = parts = GradParts(self.policy.parameters())  # the last minibatch
                mb = self.minibatch_step(
                    batch, slices[j], inp, reference, step, anchors=anchors if epoch == 0 else None
                )
                for k, v in mb.items():
                    sums[k] = sums.get(k, 0.0) + v
                n_pass += 1
                self.grad_parts = None
        out = {k: v / n_pass for k, v in sums.items()}
        out.update(out_once)
        if parts is not None:
            out.update(parts.metrics())
        if reference.enabled:  # the blog's k2 of pi_ref vs pi_old
            k2 = kl_lib.kl_terms(batch.logp_old, anchors, clamp=kl_lib.REF_OVER_OLD_CLAMP)["k2"]
            out["kl/ref_over_old_k2"] = float(loss_lib.masked_mean_or_zero(k2, batch.mask))
        return out

    def update_inputs(self, batch: RolloutBatch) -> tuple[objective_lib.UpdateInputs, dict]:
        """The loss mask (--overlong filter) and, for --tis_cap or Variant B's exact KL, one no_grad forward of
        the pre-update policy over the batch (count/policy_fwd_train; chunked with --logprob_chunk): the learner's
        own logp_old (the ratio's denominator; TIS weights it against the sampler's) and the old logits [N, T, V]."""
        spec = self.spec
        mask, metrics = objective_lib.loss_mask(batch.mask, batch.truncated, spec.overlong)
        inp = objective_lib.UpdateInputs(
            mask=mask, logp_old=batch.logp_old, values_old=batch.values, returns=batch.returns
        )
        b_full = self.kl.needs_old_logits
        if spec.tis_cap > 0 or b_full:
            with torch.no_grad():
                logp, _, logits = policy_logprobs(
                    self.policy, batch.tokens, batch.prompt_len, spec.shape.temperature, chunk=spec.logprob_chunk
                )  # logits None when chunked
            self.counters.add("policy_fwd_train", 1)
            self.counters.add("tokens_policy", fed_tokens(self.policy, batch.tokens, batch.prompt_len))
            if spec.tis_cap > 0:
                inp.tis_weight = loss_lib.tis_weights(logp, batch.logp_old, spec.tis_cap)  # [N, T]
                inp.logp_old = logp
            inp.old_logits = logits if b_full else None  # [N, T, V]
        return inp, metrics

    def minibatch_step(
        self,
        batch: RolloutBatch,
        sl: slice,
        inp: objective_lib.UpdateInputs,
        reference: ReferenceSource,
        step: int = 0,
        anchors: Optional[torch.Tensor] = None,
    ) -> dict:
        """One optimizer step on rows `sl`: --micro_batch pieces accumulate, clip, NaN guard, step."""
        os_ = self.opt_spec
        opt = self.optim
        mask = inp.mask[sl]
        opt.optimizer.zero_grad(set_to_none=True)  # --micro_batch: grads accumulate
        parts = [
            self._micro_backward(batch, m, sl, inp, reference, step, anchors) for m in micro.slices(sl, os_.micro_batch)
        ]
        loss, logp, ent, pg, kl, kl_tok, metrics = micro.join(parts)  # the minibatch's, detached
        gn = (
            torch.nn.utils.clip_grad_norm_(self.policy.parameters(), os_.max_grad_norm)
            if os_.max_grad_norm > 0
            else _grad_norm(self.policy)
        )
        skipped = guards.nan_guard(
            self.policy,
            opt.optimizer,
            os_.on_nan,
            self.event,
            step,
            sl,
            loss=loss,
            grad_norm=gn,
            logp=logp,
            kl=kl_tok,
            mask=batch.mask[sl],
        )  # --on_nan: skip/stop
        if not skipped:
            opt.optimizer.step()
            opt.scheduler.step()
            self.updates_applied += 1
        critic_metrics = self.critic.step(skipped) if self.critic is not None else {}
        with torch.no_grad():
            resp = batch.mask[sl]  # KL/entropy over all responses
            out = {f"kl/{k}": float(loss_lib.masked_mean_or_zero(v, resp)) for k, v in kl.items()}
            out.update(
                {
                    "loss/total": float(loss),
                    "optim/grad_norm": float(gn),
                    "loss/pg": float(self.objective.reduce(pg, mask)),
                    "loss/kl": float(self.objective.reduce(kl_tok, mask)),
                    "policy/entropy": float(loss_lib.masked_mean_or_zero(ent, resp)),
                    "guard/nan_skip_frac": float(skipped),
                }
            )
        out.update(metrics)
        out.update(critic_metrics)
        return out

    # long: one micro-batch's forward, reference anchor, loss, measured parts and backward, in order
    def _micro_backward(
        self,
        batch: RolloutBatch,
        sl: slice,
        ctx: slice,
        inp: objective_lib.UpdateInputs,
        reference: ReferenceSource,
        step: int,
        anchors: Optional[torch.Tensor],
    ) -> micro.Part:
        """Forward, loss and backward of rows `sl` of minibatch `ctx` (its share of ctx's loss)."""
        spec = self.spec
        P, tokens, mask = batch.prompt_len, batch.tokens[sl], inp.mask[sl]
        logp, ent, logits = micro.logprobs(self.policy, tokens, P, spec.shape.temperature, spec.logprob_chunk)
        self.counters.add("policy_fwd_train", 1)
        self.counters.add("tokens_policy", fed_tokens(self.policy, tokens, P))
        old_logits = None if inp.old_logits is None else inp.old_logits[sl]
        with self.timer("ref_in_train"):  # A0 runs a reference forward here
            anchor, logits_anchor = reference.anchor(
                tokens, P, sl, inp.logp_old[sl], old_logits, with_logits=self.kl.needs_ref_logits
            )
        if anchors is not None:  # once per row: the k2 diagnostic
            anchors[sl] = anchor.detach()
        adv = cast(torch.Tensor, batch.advantages)[sl]  # set by `advantages` before the update
        critic = {}  # --adv gae: the critic's values of these rows, for the value loss
        if self.critic is not None:
            critic = {
                "values": self.critic.values(tokens, P),
                "values_old": cast(torch.Tensor, inp.values_old)[sl],
                "returns": cast(torch.Tensor, inp.returns)[sl],
            }
        tok, pg, kl_tok, kl, metrics = self.objective.token_loss(  # pg + beta * KL term, [n, T]
            logp,
            inp.logp_old[sl],
            adv,
            mask,
            anchor=anchor,
            logp_sampler=batch.logp_old[sl],
            beta=self.beta,
            tis_weight=None if inp.tis_weight is None else inp.tis_weight[sl],
            logits=logits,
            logits_anchor=logits_anchor,
            **critic,
        )
        loss = micro.aggregate_in(tok, inp.mask[ctx], sl, ctx, self.objective.agg, self.T_max)
        if self.grad_parts is not None:  # --grad_parts_every: each part's own backward, graph kept
            for name, part in (("pg", pg), ("kl", self.beta * kl_tok)):
                self.grad_parts.add(
                    name, micro.aggregate_in(part, inp.mask[ctx], sl, ctx, self.objective.agg, self.T_max)
                )
        loss = guards.inject_nan(loss, step)  # test hook, see guards.py
        loss.backward()
        return micro.Part(
            loss.detach(),
            logp.detach(),
            ent,
            pg.detach(),
            {k: v.detach() for k, v in kl.items()},
            kl_tok.detach(),
            metrics,
            float(mask.sum()),
        )


def _grad_norm(model) -> torch.Tensor:
    norms = [p.grad.detach().norm() for p in model.parameters() if p.grad is not None]
    return torch.stack(norms).norm() if norms else torch.tensor(0.0)
