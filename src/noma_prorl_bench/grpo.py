"""The course-assignment building-block API, thin over our modules.

Same names and semantics as the CS336-style assignment so that its users can drop these in;
the arithmetic lives in `advantages`, `losses` and `rewards`, this file only adapts shapes.

Shape legend: B batch (sequences in a microbatch), T sequence positions, V vocabulary,
R rollout batch size (= n_prompts * group_size).
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch import Tensor

from noma_prorl_bench.algorithms.advantages import grpo_advantages
from noma_prorl_bench.algorithms.losses import (
    grpo_clip_loss,
    masked_normalize,
    reinforce_loss,
)
from noma_prorl_bench.models.base import entropy_from_logits
from noma_prorl_bench.tasks.rewards import (
    keyword_inclusion_reward_fn,
    r1_zero_reward_fn,
)

__all__ = [
    "compute_group_normalized_rewards",
    "compute_naive_policy_gradient_loss",
    "compute_grpo_clip_loss",
    "compute_policy_gradient_loss",
    "masked_mean",
    "masked_normalize",
    "grpo_microbatch_train_step",
    "sft_microbatch_train_step",
    "compute_entropy",
    "get_response_log_probs",
    "tokenize_prompt_and_output",
    "r1_zero_reward_fn",
    "keyword_inclusion_reward_fn",
]


def compute_group_normalized_rewards(
    reward_fn: Callable[[str, Any], dict[str, float]],
    rollout_responses: list[str],
    repeated_ground_truths: list[Any],
    group_size: int,
    advantage_eps: float,
    normalize_by_std: bool,
) -> tuple[Tensor, Tensor, dict[str, float]]:
    """Score each response, then A = (r - mean_group) [/ (std_group + eps)] -> (adv[R], raw[R], meta).

    std is torch.std (unbiased). Responses are laid out group by group (group_size consecutive
    responses share a prompt). meta holds reward statistics and the mean of every other key the
    reward function returns (e.g. format_reward, answer_reward).
    """
    if len(rollout_responses) != len(repeated_ground_truths) or len(rollout_responses) % group_size:
        raise ValueError("need len(responses) == len(ground_truths), a multiple of group_size")
    raw, meta = score_responses(reward_fn, rollout_responses, repeated_ground_truths)  # [R]
    adv, m = grpo_advantages(raw.view(-1, group_size), eps=advantage_eps, normalize_by_std=normalize_by_std)  # [R/G, G]
    return adv.reshape(-1), raw, {**meta, **m}


def score_responses(
    reward_fn: Callable[[str, Any], dict[str, float]], rollout_responses: list[str], repeated_ground_truths: list[Any]
) -> tuple[Tensor, dict[str, float]]:
    """`reward_fn(response, ground_truth)["reward"]` per response -> (raw[R] float32, meta).

    meta: reward_mean/std/max/min and the mean of every other key the reward function returns
    (e.g. format_reward_mean, answer_reward_mean).
    """
    if len(rollout_responses) != len(repeated_ground_truths) or not rollout_responses:
        raise ValueError("need as many ground truths as responses, and at least one response")
    scores = [reward_fn(r, g) for r, g in zip(rollout_responses, repeated_ground_truths)]
    raw = torch.tensor([s["reward"] for s in scores], dtype=torch.float32)  # [R]
    meta = {
        "reward_mean": float(raw.mean()),
        "reward_std": float(raw.std()) if raw.numel() > 1 else 0.0,
        "reward_max": float(raw.max()),
        "reward_min": float(raw.min()),
    }
    for key in scores[0]:
        if key != "reward":
            meta[f"{key}_mean"] = sum(float(s.get(key, 0.0)) for s in scores) / len(scores)
    return raw, meta


def masked_mean(tensor: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """The handout's masked mean: `sum(tensor * mask, dim) / sum(mask, dim)` (all elements if dim is None).

    As the handout defines it, and as torch's own 0/0 does, a slice whose mask is all zero gives
    NaN; NaN/inf under mask == 0 also propagate (x * 0). The trainer uses its own guarded helper
    (`algorithms.losses.masked_mean_or_zero`: empty slice -> 0, masked values ignored).
    """
    if dim is None:
        return torch.sum(tensor * mask) / torch.sum(mask)
    return torch.sum(tensor * mask, dim=dim) / torch.sum(mask, dim=dim)


def compute_naive_policy_gradient_loss(raw_rewards_or_advantages: Tensor, policy_log_probs: Tensor) -> Tensor:
    """Per-token `-A * logp`: A `[B,1]` (or `[B]`) broadcast over `policy_log_probs[B,T]` -> `[B,T]`."""
    ones = torch.ones_like(policy_log_probs)
    loss, _ = reinforce_loss(policy_log_probs, policy_log_probs.detach(), raw_rewards_or_advantages, ones)
    return loss


def compute_grpo_clip_loss(
    advantages: Tensor, policy_log_probs: Tensor, old_log_probs: Tensor, cliprange: float
) -> tuple[Tensor, dict[str, Tensor]]:
    """Per-token `-min(r A, clip(r, 1-eps, 1+eps) A)` `[B,T]`; meta has `clipped[B,T]` and fractions.

    `clipped` marks tokens where the clipped term is strictly smaller (the flat side of the clip).
    """
    ones = torch.ones_like(policy_log_probs)
    loss, m = grpo_clip_loss(policy_log_probs, old_log_probs, advantages, ones, eps_low=cliprange, eps_high=cliprange)
    with torch.no_grad():
        ratio = torch.exp(policy_log_probs - old_log_probs)
        a = advantages.reshape(-1, 1)
        clipped = ratio.clamp(1 - cliprange, 1 + cliprange) * a < ratio * a  # [B,T]
    meta = {"clipped": clipped, **{k: torch.tensor(v) for k, v in m.items()}}
    return loss, meta


def compute_policy_gradient_loss(
    policy_log_probs: Tensor,
    loss_type: str,
    raw_rewards: Tensor | None = None,
    advantages: Tensor | None = None,
    old_log_probs: Tensor | None = None,
    cliprange: float | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Dispatch: `no_baseline` (-R logp), `reinforce_with_baseline` (-A logp), `grpo_clip`."""
    if loss_type == "no_baseline":
        if raw_rewards is None:
            raise ValueError("no_baseline needs raw_rewards")
        return compute_naive_policy_gradient_loss(raw_rewards, policy_log_probs), {}
    if loss_type == "reinforce_with_baseline":
        if advantages is None:
            raise ValueError("reinforce_with_baseline needs advantages")
        return compute_naive_policy_gradient_loss(advantages, policy_log_probs), {}
    if loss_type == "grpo_clip":
        if advantages is None or old_log_probs is None or cliprange is None:
            raise ValueError("grpo_clip needs advantages, old_log_probs and cliprange")
        return compute_grpo_clip_loss(advantages, policy_log_probs, old_log_probs, cliprange)
    raise ValueError(f"unknown loss_type {loss_type!r}")


def grpo_microbatch_train_step(
    policy_log_probs: Tensor,
    response_mask: Tensor,
    gradient_accumulation_steps: int,
    loss_type: str,
    raw_rewards: Tensor | None = None,
    advantages: Tensor | None = None,
    old_log_probs: Tensor | None = None,
    cliprange: float | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Per-token loss -> masked mean per sequence -> mean over batch -> / accumulation; backward().

    Gradients accumulate across calls (nothing is zeroed). Returns the scaled loss (detached).
    """
    tok, meta = compute_policy_gradient_loss(
        policy_log_probs, loss_type, raw_rewards, advantages, old_log_probs, cliprange
    )  # [B,T]
    loss = masked_mean(tok, response_mask, dim=1).mean() / gradient_accumulation_steps
    loss.backward()
    return loss.detach(), meta


def sft_microbatch_train_step(
    policy_log_probs: Tensor, response_mask: Tensor, gradient_accumulation_steps: int, normalize_constant: float = 1.0
) -> tuple[Tensor, dict[str, Tensor]]:
    """SFT step: `-(sum_t m logp) / normalize_constant` per sequence, mean over batch, / accumulation.

    Calls backward(); returns the scaled loss (detached) and the per-sequence summed log-prob.
    """
    seq = masked_normalize(policy_log_probs, response_mask, normalize_constant, dim=-1)  # [B]
    loss = -seq.mean() / gradient_accumulation_steps
    loss.backward()
    return loss.detach(), {"masked_log_prob_sum": seq.detach()}


def compute_entropy(logits: Tensor) -> Tensor:
    """Per-position entropy of softmax(logits): `[..., V] -> [...]`."""
    return entropy_from_logits(logits)


def get_response_log_probs(
    model: Any, input_ids: Tensor, labels: Tensor, return_token_entropy: bool = False
) -> dict[str, Tensor]:
    """log p(labels | prefix) per position `[B,T]` (and entropy `[B,T]`) from `model(input_ids)`.

    `model` may return logits `[B,T,V]` directly or an HF-style output with `.logits`.
    """
    out = model(input_ids)
    logits = out.logits if hasattr(out, "logits") else out  # [B,T,V]
    logp = torch.log_softmax(logits.float(), dim=-1)
    result = {"log_probs": logp.gather(-1, labels.unsqueeze(-1)).squeeze(-1)}  # [B,T]
    if return_token_entropy:
        result["token_entropy"] = entropy_from_logits(logits)
    return result


def _encode(tokenizer: Any, text: str) -> list[int]:
    try:
        return list(tokenizer.encode(text, add_special_tokens=False))
    except TypeError:
        return list(tokenizer.encode(text))


def tokenize_prompt_and_output(prompt_strs: list[str], output_strs: list[str], tokenizer: Any) -> dict[str, Tensor]:
    """Concatenate prompt and output ids, right-pad, shift: input_ids/labels/response_mask `[B, L-1]`.

    L = the longest prompt+output. input_ids = ids[:, :-1], labels = ids[:, 1:]; response_mask
    (bool) is True where the label is an output token. Padding uses tokenizer.pad_token_id
    (eos_token_id if pad is None). Encoding adds no special tokens.
    """
    pad = getattr(tokenizer, "pad_token_id", None)
    pad = getattr(tokenizer, "eos_token_id", None) if pad is None else pad
    if pad is None:
        raise ValueError("tokenizer has neither pad_token_id nor eos_token_id")
    prompts = [_encode(tokenizer, p) for p in prompt_strs]
    outputs = [_encode(tokenizer, o) for o in output_strs]
    length = max(len(p) + len(o) for p, o in zip(prompts, outputs))
    ids = torch.full((len(prompts), length), int(pad), dtype=torch.long)  # [B,L]
    mask = torch.zeros((len(prompts), length), dtype=torch.bool)  # [B,L], marks output tokens
    for i, (p, o) in enumerate(zip(prompts, outputs)):
        ids[i, : len(p) + len(o)] = torch.tensor(p + o, dtype=torch.long)
        mask[i, len(p) : len(p) + len(o)] = True
    return {"input_ids": ids[:, :-1], "labels": ids[:, 1:], "response_mask": mask[:, 1:]}
