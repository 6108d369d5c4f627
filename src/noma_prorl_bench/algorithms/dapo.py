"""DAPO extras as pure functions: dynamic sampling, overlong filtering and shaping, length penalty.

From Yu et al. 2025, "DAPO: An Open-Source LLM Reinforcement Learning System at Scale" (sec. 3.2-3.4).
The trainer wires them; nothing here samples, scores or touches a model.

Shape legend: B prompts (groups), G samples per prompt, N = B*G sequences, T response tokens.

Dynamic sampling, as the trainer is meant to run it (oversample, filter, refill, with a limit):

    kept = []                                         # group indices that carry signal
    for round in range(max_rounds):                   # the limit (DAPO: max_num_gen_batches)
        rewards = rollout(prompts_for_round)          # [B', G]
        idx, m = select_informative_groups(rewards, target_groups - len(kept))
        kept += idx; log m["dapo/groups_dropped"]     # the metric of what was dropped
        if len(kept) == target_groups: break
    # if the limit is hit first the trainer trains on the smaller batch and logs it
"""

from __future__ import annotations

import torch
from torch import Tensor

from noma_prorl_bench.io.metrics import Metrics


def dynamic_sampling_mask(rewards: Tensor, *, min_spread: float = 0.0) -> tuple[Tensor, Metrics]:
    """Keep-mask `[B]` of groups whose rewards are not all equal (max - min > min_spread).

    A group whose G rewards are identical has zero group-relative advantage under GRPO, Dr. GRPO
    and RLOO, so it contributes no policy gradient (only KL/entropy terms): DAPO drops it.
    """
    spread = rewards.max(dim=1).values - rewards.min(dim=1).values  # [B]
    keep = spread > min_spread  # [B] bool
    n = rewards.shape[0]
    dropped = int((~keep).sum().item())
    return keep, {
        "dapo/groups_dropped": float(dropped),
        "dapo/frac_groups_dropped": dropped / n if n else 0.0,
    }


def select_informative_groups(rewards: Tensor, n_needed: int, *, min_spread: float = 0.0) -> tuple[Tensor, Metrics]:
    """Indices (LongTensor[K], K <= n_needed, in order) of the first informative groups.

    The remaining informative groups beyond `n_needed` are discarded (DAPO trims the refilled
    batch to its target size); metrics count the dropped zero-spread groups of this round.
    """
    keep, metrics = dynamic_sampling_mask(rewards, min_spread=min_spread)
    idx = torch.nonzero(keep, as_tuple=False).flatten()[: max(n_needed, 0)]
    metrics["dapo/groups_kept"] = float(idx.numel())
    return idx, metrics


def overlong_filter_mask(mask: Tensor, truncated: Tensor) -> tuple[Tensor, Metrics]:
    """DAPO overlong filtering: zero the loss mask `[N,T]` of truncated responses (`truncated[N]`).

    A response cut at max_new_tokens gets a reward that says nothing about its reasoning;
    masking it removes that noise from the loss (the sample still counts in group statistics).
    """
    keep = (~truncated.bool()).to(mask.dtype).unsqueeze(-1)  # [N,1]
    return mask * keep, {"dapo/frac_truncated": float(truncated.float().mean().item()) if truncated.numel() else 0.0}


def soft_overlong_penalty(lengths: Tensor, max_len: int, cache_len: int, factor: float = 1.0) -> Tensor:
    """DAPO soft overlong punishment R_length(|y|) per sequence (`lengths[N] -> [N]`, <= 0).

        0                                   if |y| <= max_len - cache_len
        ((max_len - cache_len) - |y|) / cache_len   if max_len - cache_len < |y| <= max_len
        -1                                  if |y| > max_len
    times `factor`. The penalty ramps linearly from 0 to -1 over the last `cache_len` tokens.
    """
    if not 0 < cache_len <= max_len:
        raise ValueError(f"need 0 < cache_len <= max_len, got cache_len={cache_len}, max_len={max_len}")
    n_tok = lengths.float()
    expected = max_len - cache_len
    ramp = (expected - n_tok) / cache_len
    pen = torch.where(n_tok <= expected, torch.zeros_like(n_tok), ramp)
    pen = torch.where(n_tok > max_len, torch.full_like(n_tok, -1.0), pen)
    return factor * pen


def overlong_reward_shaping(
    rewards: Tensor, lengths: Tensor, max_len: int, cache_len: int, factor: float = 1.0
) -> tuple[Tensor, Metrics]:
    """Add the soft overlong penalty to the task rewards: `rewards[N] + R_length(lengths[N])`."""
    pen = soft_overlong_penalty(lengths, max_len, cache_len, factor)
    return rewards.float() + pen, {
        "dapo/overlong_penalty_mean": float(pen.mean().item()) if pen.numel() else 0.0,
        "dapo/frac_in_overlong_buffer": float((pen < 0).float().mean().item()) if pen.numel() else 0.0,
    }


def linear_length_penalty(rewards: Tensor, lengths: Tensor, coef: float, max_len: int) -> tuple[Tensor, Metrics]:
    """Optional length penalty `r - coef * |y| / max_len` (a plain linear cost on length).

    Not part of DAPO itself; a common baseline for length control (e.g. Kimi k1.5 uses a
    correctness-aware variant). coef = 0 is the identity.
    """
    pen = coef * lengths.float() / float(max_len)
    return rewards.float() - pen, {"length/penalty_mean": float(pen.mean().item()) if pen.numel() else 0.0}
