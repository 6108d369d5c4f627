"""What the learner optimises, between scoring and the optimizer step (reward shaping, loss mask).

Legend: B prompts, G samples per prompt, N = B*G, n rows of a minibatch, P prompt length,
T response length, L = P + T, V vocabulary.

`Objective` is the one place where advantages are estimated and the per-token loss is composed
(the learner, training/learner.py, holds one and calls it; no model, optimizer or I/O inside):

  advantages       rewards[N] -> shape_rewards -> the --adv estimator, with the KL in the reward
                   placed by kl_term.KLTerm.advantages -> adv [N] or [N, T]
  token_loss       policy loss (--loss, losses.LOSSES) + beta * the KL term of the loss -> [n, T]
  reduce           the --loss_agg reduction of an [n, T] matrix over a minibatch

A value model would plug in here: its values enter `advantages` (GAE returns) and its value
loss joins `token_loss` (torchtune's `estimate_advantages` and `PPOLoss` split it the same way).
The functions it uses, each of tensors and flags:

  shape_rewards    the task reward + DAPO soft overlong penalty (--overlong shape); the KL in
                   the reward (--kl_in reward, token or sequence form) is added with the
                   advantages by kl_term.KLTerm.advantages; `reward/mean` stays the raw task reward
  loss_mask        the mask the loss sees: --overlong filter zeroes truncated rows

The per-token KL estimates and the KL term of the loss come from kl_term.KLTerm; DAPO group
assembly (--dynamic_sampling) is a rollout stage: rollout/collector.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from torch import Tensor

from noma_prorl_bench.algorithms import dapo
from noma_prorl_bench.algorithms import kl as kl_lib
from noma_prorl_bench.algorithms import losses as loss_lib
from noma_prorl_bench.algorithms.kl_term import KLTerm
from noma_prorl_bench.config.specs import ObjectiveSpec
from noma_prorl_bench.io.metrics import Metrics


def overlong_cache_len(T: int) -> int:
    """Soft-overlong buffer length for --overlong shape: the last quarter of the budget T."""
    return max(1, T // 4)


# ---------------------------------------------------------------- rewards and masks


def shape_rewards(
    rewards: Tensor, mask: Tensor, *, overlong: str, T_max: int, kl_tok: Optional[Tensor] = None, beta: float = 0.0
) -> tuple[Tensor, Metrics]:
    """rewards[N] -> (the rewards the advantages see [N], metrics).

    overlong == "shape": + DAPO's soft overlong penalty R_length(|y|), |y| = generated tokens
    (EOS included), max_len = T_max, cache_len = overlong_cache_len(T_max). A truncated
    response has |y| = T_max and gets -1.
    kl_tok[N, T]: - beta * sum_t mask * kl_tok (kl.kl_reward_penalty, the sequence form); the
    trainer passes none and places the KL through kl_term.KLTerm.advantages instead.
    """
    shaped, m = rewards.float(), {}
    if overlong == "shape":
        lengths = mask.sum(-1)  # [N]
        shaped, om = dapo.overlong_reward_shaping(shaped, lengths, T_max, overlong_cache_len(T_max))
        m.update(om)
    if kl_tok is not None:
        shaped, km = kl_lib.kl_reward_penalty(shaped, kl_tok, mask, beta)
        m["reward/kl_penalty_mean"] = km["kl/reward_penalty_mean"]
        m["kl/seq_sum_mean"] = km["kl/seq_sum_mean"]
    if m:
        m["reward/shaped_mean"] = float(shaped.mean())
    return shaped, m


def loss_mask(mask: Tensor, truncated: Tensor, overlong: str) -> tuple[Tensor, Metrics]:
    """The loss mask [N, T]: --overlong filter zeroes the rows of truncated responses."""
    if overlong == "filter":
        out, m = dapo.overlong_filter_mask(mask, truncated)
        m["dapo/filtered_rows"] = float(truncated.sum())
        return out, m
    return mask, {}


@dataclass
class UpdateInputs:
    """Per-step tensors the minibatch loss reads; the trainer slices rows per minibatch."""

    mask: Tensor  # [N, T] loss mask (after --overlong filter)
    logp_old: Tensor  # [N, T] ratio denominator: sampler's, or learner's (--tis_cap)
    tis_weight: Optional[Tensor] = None  # [N, T] min(pi_learner_old / pi_sampler, C), --tis_cap
    old_logits: Optional[Tensor] = None  # [N, T, V] pre-update logits (Variant B, --kl_estimator full)


@dataclass(frozen=True)
class Objective:
    """What the learner optimises: advantage estimation and per-token loss composition of one run
    (`spec`: --adv, --loss, clip bounds, --loss_agg, --overlong; `kl`: the KL term; `T_max`: the
    response cap, the norm constant of seq-mean-token-sum-norm and of the overlong shaping)."""

    spec: ObjectiveSpec
    kl: KLTerm
    T_max: int

    def advantages(
        self,
        rewards: Tensor,
        mask: Tensor,
        *,
        beta: float,
        logp_old: Optional[Tensor] = None,
        logp_ref: Optional[Tensor] = None,
    ) -> tuple[Tensor, Metrics, Metrics]:
        """rewards[N] (task rewards) -> (advantages [N], or [N, T] with the KL in the reward in token
        form; advantage metrics; reward-shaping metrics). `logp_ref` [N, T]: only with the KL in the reward."""
        spec = self.spec
        shaped, shape_metrics = shape_rewards(rewards, mask, overlong=spec.overlong, T_max=self.T_max)  # [N]
        adv, adv_metrics = self.kl.advantages(
            shaped, mask, spec.adv, spec.batch_size, spec.group_size, beta=beta, logp_old=logp_old, logp_ref=logp_ref
        )
        return adv, adv_metrics, shape_metrics

    def token_loss(
        self,
        logp: Tensor,
        logp_old: Tensor,
        adv: Tensor,
        mask: Tensor,
        *,
        anchor: Tensor,
        logp_sampler: Tensor,
        beta: float,
        tis_weight: Optional[Tensor] = None,
        logits: Optional[Tensor] = None,
        logits_anchor: Optional[Tensor] = None,
    ) -> tuple[Tensor, Tensor, Tensor, dict[str, Tensor], Metrics]:
        """The per-token loss of rows [n, T] -> (policy loss + beta * KL term, policy loss, KL term, every
        KL estimate {name: [n, T]} (logged), metrics). `logp_old`: the ratio's denominator (and the
        estimates' pi_old); `anchor`: logp of the KL's anchor; `logp_sampler`: the sampler's logp (the
        ref_over_old k2 reads it); `logits`, `logits_anchor`: [n, T, V] for --kl_estimator full."""
        spec = self.spec
        pg, metrics = loss_lib.LOSSES[spec.loss](
            logp,
            logp_old,
            adv,
            mask,
            eps_low=spec.eps_lo,
            eps_high=spec.eps_hi,
            dual_clip_c=spec.dual_clip_c or None,
            tis_weight=tis_weight,
        )
        kl = self.kl.estimates(
            logp, anchor, logp_old, logits=logits, logits_anchor=logits_anchor, temperature=spec.temperature
        )
        kl_tok = self.kl.loss_term(kl, logp_sampler, anchor)  # zeros when the KL is in the reward
        return pg + beta * kl_tok, pg, kl_tok, kl, metrics

    @property
    def agg(self) -> str:
        """--loss_agg, resolved."""
        return self.spec.loss_agg_resolved

    def reduce(self, tok: Tensor, mask: Tensor) -> Tensor:
        """An [n, T] per-token matrix -> the minibatch's scalar by --loss_agg (norm constant T_max)."""
        return loss_lib.aggregate(tok, mask, self.agg, norm_const=self.T_max)
