"""The course-assignment API, current edition (Stanford CS336, spring 2026, assignment 5), thin over our modules.

Same names and parameter names as the course, so that its code calls these unchanged; the 2025
edition stays in `noma_prorl_bench.grpo`. Scoring is separate from advantages, advantages take a
baseline and a normaliser, the per-token loss takes an importance reweighting, the reduction is
named, and `grpo_train_step` runs a whole optimizer step. The arithmetic lives in
`algorithms.advantages` (`group_advantages`), `algorithms.losses` (`reinforce_loss`,
`noclip_loss`, `grpo_clip_loss`, `gspo_loss`, `aggregate`) and `training.micro` (exact gradient
accumulation); this file only adapts names and shapes. docs/losses.md maps each name to ours.

Per-token loss at masked positions (`response_mask == 0`): none/noclip/grpo give the formula's
value at every position (the mask only selects what the GRPO clip fraction counts); gspo repeats
the sequence's value along the row. The reductions ignore masked positions either way.

Shape legend: B batch (sequences in a microbatch), T sequence positions, R rollout batch size
(= n_prompts * group_size), G group size.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch import Tensor

from noma_prorl_bench.algorithms import losses as loss_lib
from noma_prorl_bench.algorithms.advantages import group_advantages
from noma_prorl_bench.grpo import get_response_log_probs, score_responses, tokenize_prompt_and_output
from noma_prorl_bench.training import micro

__all__ = [
    "tokenize_prompt_and_output",
    "get_response_log_probs",
    "compute_rollout_rewards",
    "compute_group_normalized_rewards",
    "compute_policy_gradient_loss",
    "aggregate_loss_across_microbatch",
    "grpo_train_step",
]

REWEIGHTINGS = ("none", "noclip", "grpo", "gspo")
LOSS_NORMALIZATIONS = ("sequence", "constant")
# the course's name -> ours (algorithms.losses.LOSSES names / aggregate rules)
_LOSS_FN = {
    "none": loss_lib.reinforce_loss,
    "noclip": loss_lib.noclip_loss,
    "grpo": loss_lib.grpo_clip_loss,
    "gspo": loss_lib.gspo_loss,
}
_AGG = {"sequence": "seq-mean-token-mean", "constant": "token-sum-norm"}


def compute_rollout_rewards(
    reward_fn: Callable[[str, Any], dict[str, float]], rollout_responses: list[str], repeated_ground_truths: list[Any]
) -> tuple[Tensor, dict[str, float]]:
    """Score each response: -> (raw_rewards[R] float32, meta with reward_mean/std/max/min and the mean of
    every other key the reward function returns, e.g. format_reward_mean, answer_reward_mean)."""
    return score_responses(reward_fn, rollout_responses, repeated_ground_truths)


def compute_group_normalized_rewards(
    raw_rewards: Tensor,
    group_size: int,
    baseline: str = "mean",
    advantage_eps: float = 1e-6,
    advantage_normalizer: str = "std",
) -> tuple[Tensor, dict[str, float]]:
    """raw_rewards[R] (group by group) -> (advantages[R], meta): (r - baseline) / normaliser per group.

    baseline: mean | none; advantage_normalizer: std (unbiased, + eps) | none | mean (MaxRL: the group
    mean + eps). mean/std is GRPO, mean/none Dr. GRPO, mean/mean MaxRL, none/none the raw rewards (RFT).
    """
    if raw_rewards.dim() != 1 or group_size < 1 or raw_rewards.numel() % group_size:
        raise ValueError(
            f"raw_rewards must be 1-D with a multiple of group_size={group_size} entries, "
            f"got shape {tuple(raw_rewards.shape)}"
        )
    adv, meta = group_advantages(
        raw_rewards.view(-1, group_size), baseline=baseline, normalizer=advantage_normalizer, eps=advantage_eps
    )  # [R/G, G]
    return adv.reshape(-1), meta


def compute_policy_gradient_loss(
    raw_rewards_or_advantages: Tensor,
    policy_log_probs: Tensor,
    importance_reweighting_method: str = "none",
    old_log_probs: Tensor | None = None,
    cliprange: float | None = None,
    response_mask: Tensor | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Per-token loss `[B,T]` from A (`[B]` or `[B,1]`) and log-probs `[B,T]` -> (loss, meta).

    none: -A logp; noclip: -r A; grpo: -min(r A, clip(r, 1-cliprange, 1+cliprange) A); gspo: the same
    clip on s = exp(mean of log r over the response tokens), repeated along the row (masked positions
    included). r = exp(logp - old_log_probs). meta (scalar tensors): clip_fraction (response tokens on the
    flat side of the clip; for gspo, the tokens of clipped sequences), ratio_mean, and our metric names.
    response_mask defaults to every position.
    """
    method = importance_reweighting_method
    if method not in REWEIGHTINGS:
        raise ValueError(f"unknown importance_reweighting_method {method!r}; choose from {REWEIGHTINGS}")
    if method != "none" and old_log_probs is None:
        raise ValueError(f"importance_reweighting_method={method!r} needs old_log_probs")
    if method in ("grpo", "gspo") and cliprange is None:
        raise ValueError(f"importance_reweighting_method={method!r} needs cliprange")
    eps = 0.2 if cliprange is None else float(cliprange)
    old = policy_log_probs.detach() if old_log_probs is None else old_log_probs
    every = torch.ones_like(policy_log_probs)
    mask = every if response_mask is None else response_mask
    fn = _LOSS_FN[method]
    if method == "gspo":
        loss, m = loss_lib.gspo_loss(
            policy_log_probs, old, raw_rewards_or_advantages, mask, eps_low=eps, eps_high=eps, repeat_masked=True
        )
    else:  # the formula at every position; the metrics over the response tokens
        loss, m = fn(policy_log_probs, old, raw_rewards_or_advantages, every, eps_low=eps, eps_high=eps)
        if response_mask is not None:
            with torch.no_grad():
                _, m = fn(policy_log_probs.detach(), old, raw_rewards_or_advantages, mask, eps_low=eps, eps_high=eps)
    meta = {k: torch.tensor(v) for k, v in m.items()}
    meta["clip_fraction"], meta["ratio_mean"] = meta["clip/frac"], meta["policy/ratio_mean"]
    return loss, meta


def aggregate_loss_across_microbatch(
    per_token_policy_gradient_loss: Tensor,
    mask: Tensor,
    loss_normalization: str = "sequence",
    normalization_constant: float | None = None,
) -> Tensor:
    """Scalar loss: sequence = mean over each response's masked tokens, then over the batch (a row with no
    masked token is left out); constant = masked sum / normalization_constant. Values under mask 0
    are ignored (even NaN/inf)."""
    if loss_normalization not in LOSS_NORMALIZATIONS:
        raise ValueError(f"unknown loss_normalization {loss_normalization!r}; choose from {LOSS_NORMALIZATIONS}")
    if loss_normalization == "constant" and normalization_constant is None:
        raise ValueError("loss_normalization='constant' needs normalization_constant")
    return loss_lib.aggregate(
        per_token_policy_gradient_loss, mask, _AGG[loss_normalization], norm_const=normalization_constant
    )


# long: the course API's 18 arguments and its docstring are a third of it; the step reads in one piece
def grpo_train_step(
    model: Any,
    tokenizer: Any,
    optimizer: torch.optim.Optimizer,
    gradient_accumulation_steps: int,
    max_grad_norm: float | None,
    reward_fn: Callable[[str, Any], dict[str, float]],
    repeated_prompts: list[str],
    rollout_responses: list[str],
    repeated_ground_truths: list[Any],
    group_size: int,
    baseline: str = "mean",
    advantage_eps: float = 1e-6,
    advantage_normalizer: str = "std",
    importance_reweighting_method: str = "none",
    old_log_probs: Tensor | None = None,
    cliprange: float | None = None,
    loss_normalization: str = "sequence",
    normalization_constant: float | None = None,
) -> tuple[Tensor, dict[str, Tensor | float]]:
    """One optimizer step on a rollout batch -> (loss, meta).

    Scores the responses, turns the rewards into advantages, tokenizes the whole batch once (old_log_probs,
    when given, is `[R, T]` over that tokenization), then runs `gradient_accumulation_steps` consecutive
    microbatches of forward, per-token loss and backward, each contributing its exact share of the full
    batch's loss (`training.micro.aggregate_in`: the gradient equals the full batch's whatever the split).
    Then clips the gradient norm to max_grad_norm (None: no clip), takes one optimizer step and sets every
    `.grad` to None. Returns the batch loss (detached) and meta: loss, grad_norm (before clipping),
    clip_fraction and ratio_mean (weighted by response tokens), token_entropy (mean over response tokens),
    the reward and advantage statistics.
    """
    n, k = len(repeated_prompts), gradient_accumulation_steps
    if len(rollout_responses) != n or len(repeated_ground_truths) != n:
        raise ValueError("need as many rollout_responses and repeated_ground_truths as repeated_prompts")
    if k < 1 or n < k:
        raise ValueError(f"gradient_accumulation_steps must be in 1..{n} (the batch size), got {k}")
    if loss_normalization not in LOSS_NORMALIZATIONS:
        raise ValueError(f"unknown loss_normalization {loss_normalization!r}; choose from {LOSS_NORMALIZATIONS}")
    if loss_normalization == "constant" and normalization_constant is None:
        raise ValueError("loss_normalization='constant' needs normalization_constant")
    raw, reward_meta = compute_rollout_rewards(reward_fn, rollout_responses, repeated_ground_truths)
    adv, adv_meta = compute_group_normalized_rewards(raw, group_size, baseline, advantage_eps, advantage_normalizer)
    device = next(model.parameters()).device
    tok = {
        key: v.to(device)
        for key, v in tokenize_prompt_and_output(repeated_prompts, rollout_responses, tokenizer).items()
    }
    mask = tok["response_mask"]  # [R, T]
    if old_log_probs is not None and tuple(old_log_probs.shape) != tuple(mask.shape):
        raise ValueError(
            f"old_log_probs must have shape {tuple(mask.shape)} (the batch's tokenization), "
            f"got {tuple(old_log_probs.shape)}"
        )
    adv = adv.to(device)
    everything = slice(0, n)
    optimizer.zero_grad(set_to_none=True)
    total = torch.zeros((), device=device)
    ent_sum, tok_sum, clip_sum, ratio_sum = 0.0, 0.0, 0.0, 0.0
    for sl in micro.slices(everything, -(-n // k)):
        out = get_response_log_probs(model, tok["input_ids"][sl], tok["labels"][sl], return_token_entropy=True)
        logp, m = out["log_probs"], mask[sl]  # [B, T]
        old = None
        if old_log_probs is not None:  # ratio 1 off the response (its values there are never read)
            old = torch.where(m, old_log_probs[sl].to(device, logp.dtype), logp.detach())
        per_token, meta = compute_policy_gradient_loss(adv[sl], logp, importance_reweighting_method, old, cliprange, m)
        loss = micro.aggregate_in(
            per_token, mask, sl, everything, _AGG[loss_normalization], norm_const=float(normalization_constant or 0.0)
        )  # its share of the batch loss
        loss.backward()
        total += loss.detach()
        n_tok = float(m.sum())
        ent_sum += float(loss_lib.masked_mean_or_zero(out["token_entropy"].detach(), m)) * n_tok
        clip_sum += float(meta["clip_fraction"]) * n_tok
        ratio_sum += float(meta["ratio_mean"]) * n_tok
        tok_sum += n_tok
    params = [p for p in model.parameters() if p.grad is not None]
    if max_grad_norm is not None:
        grad_norm = torch.nn.utils.clip_grad_norm_(params, max_grad_norm)
    else:
        norms = [p.grad.detach().norm() for p in params]
        grad_norm = torch.linalg.vector_norm(torch.stack(norms)) if norms else torch.zeros((), device=device)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    d = max(tok_sum, 1.0)
    metrics: dict[str, Tensor | float] = {
        **reward_meta,
        **adv_meta,
        "loss": float(total),
        "grad_norm": grad_norm.detach(),
        "clip_fraction": clip_sum / d,
        "ratio_mean": ratio_sum / d,
        "token_entropy": ent_sum / d,
    }
    return total, metrics
