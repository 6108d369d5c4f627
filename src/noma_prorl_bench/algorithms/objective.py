"""What the trainer optimises, between scoring and the optimizer step (the issue-3 flags).

Legend: B prompts, G samples per prompt, N = B*G, n rows of a minibatch, P prompt length,
T response length, L = P + T, V vocabulary.

The trainer calls these, in this order, each a function of tensors and flags (no model,
optimizer or I/O):

  assemble_groups  --dynamic_sampling 1: B groups picked from several rollout rounds, padded
                   to one P and T (DAPO dynamic sampling; see the function for the fill rule)
  shape_rewards    the task reward + DAPO soft overlong penalty (--overlong shape); the KL in
                   the reward (--kl_in reward, token or sequence form) is added with the
                   advantages by kl_term.KLTerm.advantages; `reward/mean` stays the raw task reward
  loss_mask        the mask the loss sees: --overlong filter zeroes truncated rows

The per-token KL estimates and the KL term of the loss come from kl_term.KLTerm.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
from torch import Tensor

from noma_prorl_bench.algorithms import dapo
from noma_prorl_bench.algorithms import kl as kl_lib
from noma_prorl_bench.rollout.sampling import RolloutBatch

Metrics = dict[str, float]

DS_MAX_EXTRA_ROUNDS = 3   # --dynamic_sampling: at most 3 extra rollout rounds of B prompts per step


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


# ---------------------------------------------------------------- dynamic sampling


def informative_groups(batch: RolloutBatch, G: int) -> Tensor:
    """Keep-mask [B'] of the groups of `batch` whose task rewards are not all equal."""
    keep, _ = dapo.dynamic_sampling_mask(batch.rewards.view(-1, G))              # [B']
    return keep


def assemble_groups(rounds: list[RolloutBatch], B: int, G: int, pad_id: int) -> tuple[RolloutBatch, Metrics]:
    """DAPO dynamic sampling: a batch of exactly B groups out of one or more rollout rounds.

    Groups whose G task rewards have zero spread carry no group-relative advantage and are
    dropped; the first B informative groups (in sampling order) are kept. If fewer than B
    exist (the trainer stops after DS_MAX_EXTRA_ROUNDS extra rounds), the remaining slots are
    filled with dropped groups in sampling order, so every step keeps the shape [B*G, ...]
    (those groups then contribute only KL/entropy terms, as without dynamic sampling).
    Rounds may differ in P (text tasks) and T: prompts are left-padded and responses
    right-padded with PAD (mask 0, logp_old 0), which changes no logprob (the toy tasks have a
    fixed P; HF policies mask leading PADs).
    """
    picks, fill, n_zero = [], [], 0
    for r, b in enumerate(rounds):
        for g, k in enumerate(informative_groups(b, G).tolist()):
            (picks if k else fill).append((r, g))
            n_zero += not k
    n_fill = max(0, B - len(picks))
    chosen = picks[:B] + fill[:n_fill]                                            # B (round, group)
    P = max(b.prompt_len for b in rounds)
    T = max(b.T for b in rounds)
    parts = []
    for r, g in chosen:
        b = rounds[r]
        rows = list(range(g * G, (g + 1) * G))                                    # G row indices
        p_pad, t_pad = P - b.prompt_len, T - b.T
        tok = b.tokens[rows]                                                      # [G, L_r]
        tok = torch.cat([tok.new_full((G, p_pad), pad_id), tok, tok.new_full((G, t_pad), pad_id)], 1)  # [G, P+T]
        zeros = b.mask.new_zeros(G, t_pad)
        parts.append((tok, torch.cat([b.mask[rows], zeros], 1), torch.cat([b.logp_old[rows], zeros], 1),
                      b.rewards[rows], b.truncated[rows],
                      [b.prompts[i] for i in rows], [b.answers[i] for i in rows], [b.responses[i] for i in rows]))
    cols = list(zip(*parts))
    batch = RolloutBatch(
        tokens=torch.cat(cols[0]), mask=torch.cat(cols[1]), logp_old=torch.cat(cols[2]),
        rewards=torch.cat(cols[3]), truncated=torch.cat(cols[4]),
        group=torch.arange(B, device=rounds[0].group.device).repeat_interleave(G),
        prompt_len=P, prompts=sum(cols[5], []), answers=sum(cols[6], []), responses=sum(cols[7], []),
        version=rounds[0].version)
    metrics = {"dapo/dropped_groups": float(n_zero - n_fill), "dapo/filler_groups": float(n_fill),
               "dapo/extra_rounds": float(len(rounds) - 1),
               "dapo/reward_mean_sampled": float(torch.cat([b.rewards for b in rounds]).mean())}
    return batch, metrics
