"""What the learner optimises, between scoring and the optimizer step (reward shaping, loss mask).

Legend: B prompts, G samples per prompt, N = B*G, n rows of a minibatch, P prompt length,
T response length, L = P + T, V vocabulary.

The learner (training/learner.py) calls these, in this order, each a function of tensors and flags (no model,
optimizer or I/O):

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
from noma_prorl_bench.io.metrics import Metrics


def overlong_cache_len(T: int) -> int:
    """Soft-overlong buffer length for --overlong shape: the last quarter of the budget T."""
    return max(1, T // 4)


# ---------------------------------------------------------------- rewards and masks


def shape_rewards(rewards: Tensor, mask: Tensor, *, overlong: str, T_max: int,
                  kl_tok: Optional[Tensor] = None, beta: float = 0.0) -> tuple[Tensor, Metrics]:
    """rewards[N] -> (the rewards the advantages see [N], metrics).

    overlong == "shape": + DAPO's soft overlong penalty R_length(|y|), |y| = generated tokens
    (EOS included), max_len = T_max, cache_len = overlong_cache_len(T_max). A truncated
    response has |y| = T_max and gets -1.
    kl_tok[N, T]: - beta * sum_t mask * kl_tok (kl.kl_reward_penalty, the sequence form); the
    trainer passes none and places the KL through kl_term.KLTerm.advantages instead.
    """
    shaped, m = rewards.float(), {}
    if overlong == "shape":
        lengths = mask.sum(-1)                                                   # [N]
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

    mask: Tensor                         # [N, T] loss mask (after --overlong filter)
    logp_old: Tensor                     # [N, T] ratio denominator: sampler's, or learner's (--tis_cap)
    tis_weight: Optional[Tensor] = None  # [N, T] min(pi_learner_old / pi_sampler, C), --tis_cap
    old_logits: Optional[Tensor] = None  # [N, T, V] pre-update logits (Variant B, --kl_estimator full)
