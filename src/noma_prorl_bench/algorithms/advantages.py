"""Outcome-reward advantage estimators: group functions `rewards[B,G] -> adv[B,G]` (pure).

Shape legend: B prompts per step, G samples per prompt (group size), N = B*G.
Every estimator has the signature
    fn(rewards[B,G], *, eps: float = 1e-6, normalize_by_std: bool = True) -> (adv[B,G], metrics)
and gives the same advantage to every token of a response (the trainer broadcasts it).
Standard deviations are `torch.std` (unbiased, divisor n-1), so every estimator needs G >= 2
(REINFORCE++ needs N >= 2).

  grpo         (r - mean_g) / (std_g + eps)             Shao et al. 2024 (DeepSeekMath)
  dr_grpo      r - mean_g                                Liu et al. 2025 (Dr. GRPO)
  rloo         r - mean_{j != i} r_j                     Ahmadian et al. 2024 (RLOO, after Kool 2019)
  reinforce_pp (r - mean_batch) / (std_batch + eps)      Hu 2025 (REINFORCE++)
"""

from __future__ import annotations

from typing import Callable

from torch import Tensor

Metrics = dict[str, float]


def _check(rewards: Tensor) -> Tensor:
    if rewards.dim() != 2 or rewards.shape[1] < 2:
        raise ValueError(f"rewards must be [B, G] with G >= 2, got shape {tuple(rewards.shape)}")
    return rewards.float()


def _metrics(rewards: Tensor, adv: Tensor) -> Metrics:
    group_std = rewards.std(dim=1)  # [B]
    return {
        "adv/mean": float(adv.mean().item()),
        "adv/std": float(adv.std().item()) if adv.numel() > 1 else 0.0,
        "adv/abs_max": float(adv.abs().max().item()),
        "reward/group_std_mean": float(group_std.mean().item()),
        "reward/frac_zero_std": float((group_std == 0).float().mean().item()),
    }


def grpo_advantages(rewards: Tensor, *, eps: float = 1e-6,
                    normalize_by_std: bool = True) -> tuple[Tensor, Metrics]:
    """GRPO outcome advantage (Shao et al. 2024, DeepSeekMath, sec. 4.1.2).

    A_ig = (r_ig - mean_g r) / (std_g r + eps) with the unbiased std, or r_ig - mean_g r when
    normalize_by_std is False. Groups with identical rewards get A = 0.
    """
    r = _check(rewards)  # [B,G]
    adv = r - r.mean(dim=1, keepdim=True)  # [B,G]
    if normalize_by_std:
        adv = adv / (r.std(dim=1, keepdim=True) + eps)
    return adv, _metrics(r, adv)


def dr_grpo_advantages(rewards: Tensor, *, eps: float = 1e-6,
                       normalize_by_std: bool = True) -> tuple[Tensor, Metrics]:
    """Dr. GRPO advantage (Liu et al. 2025, "Understanding R1-Zero-like training"): r - mean_g r.

    Differs from GRPO by never dividing by the group std (which up-weights groups with low
    reward spread); `eps` and `normalize_by_std` are accepted for a uniform signature and ignored.
    """
    r = _check(rewards)
    adv = r - r.mean(dim=1, keepdim=True)
    return adv, _metrics(r, adv)


def rloo_advantages(rewards: Tensor, *, eps: float = 1e-6,
                    normalize_by_std: bool = True) -> tuple[Tensor, Metrics]:
    """RLOO advantage (Ahmadian et al. 2024; Kool et al. 2019): leave-one-out baseline.

    A_ig = r_ig - (sum_g r - r_ig) / (G - 1) = G/(G-1) * (r_ig - mean_g r), an unbiased
    baseline because it excludes the sample itself. No std division, as in the paper;
    `eps` and `normalize_by_std` are ignored.
    """
    r = _check(rewards)
    g = r.shape[1]
    loo_mean = (r.sum(dim=1, keepdim=True) - r) / (g - 1)  # [B,G]
    adv = r - loo_mean
    return adv, _metrics(r, adv)


def reinforce_pp_advantages(rewards: Tensor, *, eps: float = 1e-6,
                            normalize_by_std: bool = True) -> tuple[Tensor, Metrics]:
    """REINFORCE++ advantage (Hu 2025): whitening over the whole batch, not per group.

    A = (r - mean_{B,G} r) / (std_{B,G} r + eps) (unbiased std) or r - mean_{B,G} r when
    normalize_by_std is False. Unlike GRPO there is no per-prompt baseline; a KL penalty placed
    in the reward (`kl.kl_reward_penalty`) is applied before this. Libraries differ on the std
    divisor (n or n-1): a factor sqrt((n-1)/n), negligible at batch sizes of hundreds.
    """
    if rewards.dim() != 2 or rewards.numel() < 2:
        raise ValueError(f"rewards must be [B, G] with B*G >= 2, got shape {tuple(rewards.shape)}")
    r = rewards.float()
    adv = r - r.mean()
    if normalize_by_std:
        adv = adv / (r.std() + eps)
    metrics = _metrics(r, adv) if r.shape[1] >= 2 else {"adv/mean": float(adv.mean().item())}
    return adv, metrics


AdvantageFn = Callable[..., tuple[Tensor, Metrics]]

ADVANTAGES: dict[str, AdvantageFn] = {
    "grpo": grpo_advantages,
    "dr_grpo": dr_grpo_advantages,
    "rloo": rloo_advantages,
    "reinforce_pp": reinforce_pp_advantages,
}
