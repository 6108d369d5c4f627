"""Outcome-reward advantage estimators: group functions `rewards[B,G] -> adv[B,G]` (pure).

Shape legend: B prompts per step, G samples per prompt (group size), N = B*G.
Every estimator has the signature
    fn(rewards[B,G], *, eps: float = 1e-6, normalize_by_std: bool = True) -> (adv[B,G], metrics)
and gives the same advantage to every token of a response (the trainer broadcasts it).
Standard deviations are `torch.std` (unbiased, divisor n-1), so every estimator needs G >= 2
(REINFORCE++ needs N >= 2). With the KL in the reward in REINFORCE++'s token form,
`token_advantages` gives per-token advantages [N, T] instead (see there).

  grpo         (r - mean_g) / (std_g + eps)             Shao et al. 2024 (DeepSeekMath)
  dr_grpo      r - mean_g                                Liu et al. 2025 (Dr. GRPO)
  rloo         r - mean_{j != i} r_j                     Ahmadian et al. 2024 (RLOO, after Kool 2019)
  reinforce_pp (r - mean_batch) / (std_batch + eps)      Hu 2025 (REINFORCE++)
  maxrl        (r - mean_g) / (mean_g + eps)            MaxRL normaliser (Stanford CS336, spring 2026, assignment 5)
  rft          r (no baseline, no normaliser)           rejection-sampling fine-tuning as a policy gradient
All group forms are `group_advantages` with a named baseline and normaliser.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

from noma_prorl_bench.io.metrics import Metrics


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


def grpo_advantages(rewards: Tensor, *, eps: float = 1e-6, normalize_by_std: bool = True) -> tuple[Tensor, Metrics]:
    """GRPO outcome advantage (Shao et al. 2024, DeepSeekMath, sec. 4.1.2).

    A_ig = (r_ig - mean_g r) / (std_g r + eps) with the unbiased std, or r_ig - mean_g r when
    normalize_by_std is False. Groups with identical rewards get A = 0.
    """
    return group_advantages(rewards, baseline="mean", normalizer="std" if normalize_by_std else "none", eps=eps)


BASELINES = ("mean", "none")
NORMALIZERS = ("std", "none", "mean")


def group_advantages(
    rewards: Tensor, *, baseline: str = "mean", normalizer: str = "std", eps: float = 1e-6
) -> tuple[Tensor, Metrics]:
    """Per-group baseline and normaliser: A_ig = (r_ig - b_g) / d_g, the group forms in one place.

    baseline   mean: b_g = mean_g r;   none: b_g = 0.
    normalizer std: d_g = std_g r + eps (unbiased std);   mean: d_g = mean_g r + eps (MaxRL);
               none: d_g = 1.
    mean/std is GRPO, mean/none Dr. GRPO, mean/mean MaxRL, none/none the raw rewards (RFT).
    """
    if baseline not in BASELINES:
        raise ValueError(f"unknown baseline {baseline!r}; choose from {BASELINES}")
    if normalizer not in NORMALIZERS:
        raise ValueError(f"unknown advantage normalizer {normalizer!r}; choose from {NORMALIZERS}")
    r = _check(rewards)  # [B,G]
    adv = r - r.mean(dim=1, keepdim=True) if baseline == "mean" else r.clone()  # [B,G]
    if normalizer == "std":
        adv = adv / (r.std(dim=1, keepdim=True) + eps)
    elif normalizer == "mean":
        adv = adv / (r.mean(dim=1, keepdim=True) + eps)
    return adv, _metrics(r, adv)


def maxrl_advantages(rewards: Tensor, *, eps: float = 1e-6, normalize_by_std: bool = True) -> tuple[Tensor, Metrics]:
    """MaxRL advantage: (r - mean_g r) / (mean_g r + eps), the group mean as the normaliser.

    Source: Stanford CS336 (spring 2026), assignment 5, advantage_normalizer="mean". For 0/1
    rewards with success rate p > 0 a correct response gets (1 - p) / p: rare successes weigh more
    than under GRPO's std. A group with all-zero rewards gets A = 0. `normalize_by_std` is ignored.
    """
    return group_advantages(rewards, baseline="mean", normalizer="mean", eps=eps)


def rft_advantages(rewards: Tensor, *, eps: float = 1e-6, normalize_by_std: bool = True) -> tuple[Tensor, Metrics]:
    """RFT: the raw rewards as advantages (no baseline, no normaliser): with 0/1 rewards, the
    policy gradient of the correct responses only (rejection-sampling fine-tuning; Stanford CS336
    spring 2026, assignment 5, baseline="none", advantage_normalizer="none"). `eps` and
    `normalize_by_std` are ignored."""
    return group_advantages(rewards, baseline="none", normalizer="none", eps=eps)


def dr_grpo_advantages(rewards: Tensor, *, eps: float = 1e-6, normalize_by_std: bool = True) -> tuple[Tensor, Metrics]:
    """Dr. GRPO advantage (Liu et al. 2025, "Understanding R1-Zero-like training"): r - mean_g r.

    Differs from GRPO by never dividing by the group std (which up-weights groups with low
    reward spread); `eps` and `normalize_by_std` are accepted for a uniform signature and ignored.
    """
    r = _check(rewards)
    adv = r - r.mean(dim=1, keepdim=True)
    return adv, _metrics(r, adv)


def rloo_advantages(rewards: Tensor, *, eps: float = 1e-6, normalize_by_std: bool = True) -> tuple[Tensor, Metrics]:
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


def reinforce_pp_advantages(
    rewards: Tensor, *, eps: float = 1e-6, normalize_by_std: bool = True
) -> tuple[Tensor, Metrics]:
    """REINFORCE++ advantage (Hu 2025): whitening over the whole batch, not per group.

    A = (r - mean_{B,G} r) / (std_{B,G} r + eps) (unbiased std) or r - mean_{B,G} r when
    normalize_by_std is False. Unlike GRPO there is no per-prompt baseline. With the KL in the
    reward, the sequence form (`kl.kl_reward_penalty`) shapes r before this; REINFORCE++'s own
    token form whitens per-token returns instead (`token_advantages`). Libraries differ on the std
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


def token_advantages(
    name: str, rewards: Tensor, penalty: Tensor, mask: Tensor, *, eps: float = 1e-6
) -> tuple[Tensor, Metrics]:
    """Per-token advantages `[N, T]` when the KL is in the reward in REINFORCE++'s token form.

    rewards[B, G] outcome rewards; penalty[N, T] = beta * sum_{s>=t} m KL_s (the KL part of token
    t's return, `kl.kl_return_to_go`); mask[N, T] response tokens. The order follows OpenRLHF
    (experience_maker: process_experiences, then compute_reward + get_cumulative_returns):
      grpo, dr_grpo, rloo  the group estimator acts on the outcome reward, then the KL return is
                           subtracted: A_it = est(r)_i - penalty_it (OpenRLHF group_norm / rloo /
                           reinforce_baseline order).
      reinforce_pp         the token return R_it = r_i - penalty_it, whitened over every response
                           token of the batch: (R - mean_m R) / (std_m R + eps), unbiased std
                           (Hu 2025, REINFORCE++: global advantage normalisation).
    With penalty = 0 the group estimators equal their sequence form; reinforce_pp then whitens
    over tokens (a sequence weighs by its length), not over sequences. Zero where mask == 0.
    """
    r = rewards.float()  # [B, G]
    m = mask.to(torch.float32)  # [N, T]
    pen = torch.where(m != 0, penalty.float(), torch.zeros_like(m))  # [N, T]
    if name == "reinforce_pp":
        ret = (r.reshape(-1, 1) - pen) * m  # [N, T] token returns
        n = m.sum().clamp(min=2.0)
        mean = ret.sum() / n
        std = (((ret - mean) * m).pow(2).sum() / (n - 1)).sqrt()
        adv = (ret - mean) / (std + eps) * m  # [N, T]
    else:
        seq, _ = ADVANTAGES[name](r)  # [B, G]
        adv = (seq.reshape(-1, 1) - pen) * m  # [N, T]
    sel = adv.reshape(-1)[m.reshape(-1) != 0]  # response tokens
    metrics = _metrics(r, sel if sel.numel() else adv.new_zeros(1))
    return adv, metrics


AdvantageFn = Callable[..., tuple[Tensor, Metrics]]

ADVANTAGES: dict[str, AdvantageFn] = {
    "grpo": grpo_advantages,
    "dr_grpo": dr_grpo_advantages,
    "rloo": rloo_advantages,
    "reinforce_pp": reinforce_pp_advantages,
    "maxrl": maxrl_advantages,
    "rft": rft_advantages,
}
