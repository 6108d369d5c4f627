"""What the learner optimises, between scoring and the optimizer step (reward shaping, loss mask).

Legend: B prompts, G samples per prompt, N = B*G, n rows of a minibatch, P prompt length,
T response length, L = P + T, V vocabulary.

`Objective` is the one place where advantages are estimated and the per-token loss is composed
(the learner, training/learner.py, holds one and calls it; no model, optimizer or I/O inside):

  advantages       rewards[N] -> shape_rewards -> the --adv estimator, with the KL in the reward
                   placed by kl_term.KLTerm.advantages -> adv [N] or [N, T]
  token_loss       policy loss (--loss, losses.LOSSES) + beta * the KL term of the loss -> [n, T]
  reduce           the --loss_agg reduction of an [n, T] matrix over a minibatch

With --adv gae (a critic, `critic` set): `gae_advantages` takes the critic's values [N, T] and
gives per-token GAE advantages and returns (algorithms/critic.py), and `token_loss`, given the
critic's values of the minibatch, adds vf_coef * the clipped value loss (torchtune's
`estimate_advantages` and `PPOLoss` split it the same way). The functions it uses, each of tensors
and flags:

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

import torch
from torch import Tensor

from noma_prorl_bench.algorithms import critic as critic_lib
from noma_prorl_bench.algorithms import dapo
from noma_prorl_bench.algorithms import kl as kl_lib
from noma_prorl_bench.algorithms import losses as loss_lib
from noma_prorl_bench.algorithms.kl_term import KLTerm
from noma_prorl_bench.config.specs import CriticSpec, ObjectiveSpec
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


def _mc_explained_variance(r_tok: Tensor, values: Tensor, mask: Tensor, gamma: float, group_size: int) -> Metrics:
    """The critic's explained variance against the Monte Carlo returns (no bootstrap, so no value
    of the critic's in its own target), and that of the group baseline: each row's group mates'
    mean total return (their MC return at the first response token), a constant per row."""
    with torch.no_grad():
        mc = critic_lib.mc_returns(r_tok, mask, gamma)  # [N, T]
        out = {"critic/ev_mc": critic_lib.explained_variance(values, mc, mask)}
        loo = critic_lib.group_loo_mean(mc[:, 0], group_size)  # [N] or None
        if loo is not None:
            base = loo[:, None].expand_as(mc)
            out["critic/ev_mc_group_mean"] = critic_lib.explained_variance(base, mc, mask)
    return out


@dataclass
class UpdateInputs:
    """Per-step tensors the minibatch loss reads; the trainer slices rows per minibatch."""

    mask: Tensor  # [N, T] loss mask (after --overlong filter)
    logp_old: Tensor  # [N, T] ratio denominator: sampler's, or learner's (--tis_cap)
    tis_weight: Optional[Tensor] = None  # [N, T] min(pi_learner_old / pi_sampler, C), --tis_cap
    old_logits: Optional[Tensor] = None  # [N, T, V] pre-update logits (Variant B, --kl_estimator full)
    values_old: Optional[Tensor] = None  # [N, T] the critic's values before the update (--adv gae)
    returns: Optional[Tensor] = None  # [N, T] GAE returns, the value loss's targets (--adv gae)


@dataclass(frozen=True)
class Objective:
    """What the learner optimises: advantage estimation and per-token loss composition of one run
    (`spec`: --adv, --loss, clip bounds, --loss_agg, --overlong; `kl`: the KL term; `T_max`: the
    response cap, the norm constant of seq-mean-token-sum-norm and of the overlong shaping)."""

    spec: ObjectiveSpec
    kl: KLTerm
    T_max: int
    critic: Optional[CriticSpec] = None  # --adv gae: GAE and the value loss

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
        if self.critic is not None:
            raise ValueError("--adv gae: the advantages need the critic's values (gae_advantages)")
        shaped, shape_metrics = shape_rewards(rewards, mask, overlong=spec.overlong, T_max=self.T_max)  # [N]
        adv, adv_metrics = self.kl.advantages(
            shaped,
            mask,
            spec.adv,
            spec.shape.batch_size,
            spec.shape.group_size,
            beta=beta,
            logp_old=logp_old,
            logp_ref=logp_ref,
        )
        return adv, adv_metrics, shape_metrics

    def gae_advantages(
        self,
        rewards: Tensor,
        mask: Tensor,
        values: Tensor,
        *,
        beta: float,
        logp_old: Optional[Tensor] = None,
        logp_ref: Optional[Tensor] = None,
    ) -> tuple[Tensor, Tensor, Metrics, Metrics]:
        """--adv gae: rewards[N] (task rewards) and the critic's values[N, T] -> (advantages [N, T],
        whitened with --whiten_adv; returns [N, T]; advantage metrics; reward-shaping metrics). The
        reward is the shaped task reward at the last response token; with the KL in the reward
        (`logp_ref` [N, T] given) the token form adds -beta KL_t on every token (TRL's PPOTrainer), the
        sequence form -beta sum_t KL_t to the last token's reward."""
        c = self.critic
        if c is None:
            raise ValueError("gae_advantages needs --adv gae")
        shaped, shape_metrics = shape_rewards(rewards, mask, overlong=self.spec.overlong, T_max=self.T_max)  # [N]
        per_token, metrics = None, {}
        if self.kl.in_reward:
            if logp_old is None or logp_ref is None:
                raise ValueError("a KL in the reward needs logp_old and logp_ref")
            kl_tok = self.kl.reward_kl(logp_old, logp_ref)  # [N, T]
            seq, km = kl_lib.kl_reward_penalty(shaped, kl_tok, mask, beta)  # [N]
            metrics.update(
                {"reward/kl_penalty_mean": km["kl/reward_penalty_mean"], "kl/seq_sum_mean": km["kl/seq_sum_mean"]}
            )
            if self.kl.reward_form == "sequence":
                shaped = seq
            else:
                per_token = -beta * kl_tok
        r_tok = critic_lib.token_rewards(shaped, mask, per_token)  # [N, T]
        adv, returns = critic_lib.gae(r_tok, values, mask, c.gamma, c.lam)
        sel = adv[mask != 0]
        metrics.update(
            {
                "adv/raw_mean": float(sel.mean()) if sel.numel() else 0.0,
                "critic/explained_var": critic_lib.explained_variance(values, returns, mask),
            }
        )
        metrics.update(_mc_explained_variance(r_tok, values, mask, c.gamma, self.spec.shape.group_size))
        if c.whiten_adv:
            adv = critic_lib.whiten(adv, mask)
        sel = adv[mask != 0]
        r = rewards.float().view(self.spec.shape.batch_size, self.spec.shape.group_size)
        metrics.update(
            {
                "adv/mean": float(sel.mean()) if sel.numel() else 0.0,
                "adv/std": float(sel.std()) if sel.numel() > 1 else 0.0,
                "adv/abs_max": float(sel.abs().max()) if sel.numel() else 0.0,
                "reward/group_std_mean": float(r.std(dim=1).mean()) if r.shape[1] > 1 else 0.0,
                "reward/frac_zero_std": float((r.std(dim=1) == 0).float().mean()) if r.shape[1] > 1 else 0.0,
            }
        )
        return adv, returns, metrics, shape_metrics

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
        values: Optional[Tensor] = None,
        values_old: Optional[Tensor] = None,
        returns: Optional[Tensor] = None,
    ) -> tuple[Tensor, Tensor, Tensor, dict[str, Tensor], Metrics]:
        """The per-token loss of rows [n, T] -> (policy loss + beta * KL term [+ vf_coef * value loss],
        policy loss, KL term, every KL estimate {name: [n, T]} (logged), metrics). `logp_old`: the
        ratio's denominator (and the estimates' pi_old); `anchor`: logp of the KL's anchor;
        `logp_sampler`: the sampler's logp (the ref_over_old k2 reads it); `logits`, `logits_anchor`:
        [n, T, V] for --kl_estimator full; `values` (with grad), `values_old`, `returns` [n, T]: the
        critic's (--adv gae), whose clipped value loss joins the total."""
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
            logp, anchor, logp_old, logits=logits, logits_anchor=logits_anchor, temperature=spec.shape.temperature
        )
        kl_tok = self.kl.loss_term(kl, logp_sampler, anchor)  # zeros when the KL is in the reward
        total = pg + beta * kl_tok
        if values is not None:
            c = self.critic
            if c is None or values_old is None or returns is None:
                raise ValueError("a value loss needs --adv gae, the critic's old values and the returns")
            vf, vm = critic_lib.value_loss(values, values_old, returns, mask, c.cliprange_value)  # [n, T]
            total = total + c.vf_coef * vf
            metrics = {**metrics, **vm}
        return total, pg, kl_tok, kl, metrics

    @property
    def agg(self) -> str:
        """--loss_agg, resolved."""
        return self.spec.loss_agg_resolved

    def reduce(self, tok: Tensor, mask: Tensor) -> Tensor:
        """An [n, T] per-token matrix -> the minibatch's scalar by --loss_agg (norm constant T_max)."""
        return loss_lib.aggregate(tok, mask, self.agg, norm_const=self.T_max)
