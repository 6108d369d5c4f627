"""Per-token policy-gradient losses and their named reductions (pure functions).

Every loss returns a per-token loss *matrix* `[N, T]` plus a flat metrics dict; reducing that
matrix to a scalar is a separate, named choice (`aggregate`). Masked positions of the matrix
hold finite values (0 where the loss is defined through the mask) and never matter after
`aggregate`, which ignores them whatever they hold.

Shape legend: N sequences (= B*G), T response tokens, V vocabulary.
Sign convention: `loss = -objective`; minimising the loss maximises the surrogate.
`ratio = exp(logp - logp_old)` per token (`pi_theta / pi_old`).

Losses (see docs/losses.md for formulas, papers and library names):
  reinforce  -A * logp                          (naive policy gradient; Williams 1992)
  noclip     -r A                               (importance-weighted, unclipped; CS336 2026's "noclip")
  grpo_clip  -min(r A, clip(r, 1-eps_low, 1+eps_high) A), optional dual clip
             (PPO, Schulman et al. 2017; GRPO, Shao et al. 2024; dual clip, Ye et al. 2020)
  dapo       the same clipped surrogate with decoupled eps_low < eps_high ("clip-higher",
             Yu et al. 2025, DAPO); DAPO's token-level averaging is `aggregate("token-mean")`
  cispo      -sg(min(r, 1+eps_high)) * A * logp  (MiniMax-M1, 2025: truncated from above only)
  gspo       -min(s A, clip(s, ...) A) with s = exp(masked mean_t log r) per sequence,
             broadcast to the tokens (Zheng et al. 2025, GSPO; the paper's eps 3e-4 / 4e-4 and
             mean over sequences are the config defaults for --loss gspo)
Advantages arrive per sequence (`[N]` or `[N,1]`, broadcast over T) or per token (`[N,T]`).
Any loss can be multiplied per token by a truncated importance-sampling weight
`tis_weight = min(pi_learner / pi_sampler, C)` (Yao et al. 2025, "Your efficient RL framework
secretly brings you off-policy RL training"); see `tis_weights`.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

from noma_prorl_bench.config.choices import AGGREGATIONS
from noma_prorl_bench.io.metrics import Metrics
from noma_prorl_bench.models.base import entropy_from_logits  # noqa: F401  (one definition, used here by name)

# ---------------------------------------------------------------- masked reductions


def _sanitize(tensor: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """Zero `tensor` where mask == 0 (so NaN/inf there cannot leak) and cast mask to its dtype."""
    m = mask.to(tensor.dtype)
    return torch.where(m != 0, tensor, torch.zeros_like(tensor)) * m, m


def masked_mean_or_zero(tensor: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """Mean of `tensor` over positions where `mask` is 1, over `dim` (all elements if None).

    Values under mask == 0 are ignored entirely (even NaN/inf). A slice with no masked
    element has mean 0 (its denominator is clamped to 1) rather than NaN.
    """
    t, m = _sanitize(tensor, mask)
    if dim is None:
        return t.sum() / m.sum().clamp(min=1.0)
    return t.sum(dim) / m.sum(dim).clamp(min=1.0)


def masked_normalize(tensor: Tensor, mask: Tensor, normalize_constant: float = 1.0, dim: int | None = None) -> Tensor:
    """Sum of `tensor` over masked positions (over `dim`, or all if None) / `normalize_constant`."""
    t, _ = _sanitize(tensor, mask)
    total = t.sum() if dim is None else t.sum(dim)
    return total / normalize_constant


def aggregate(loss: Tensor, mask: Tensor, agg: str, norm_const: float | None = None) -> Tensor:
    """Reduce a per-token loss matrix `[N, T]` to a scalar under a named rule.

    token-mean              sum_{i,t} m l / sum_{i,t} m         (DAPO; every token weighs the same)
    seq-mean-token-mean     mean_i [ sum_t m l / sum_t m ]      (GRPO paper; sequences with no
                                                                 response token are left out)
    seq-mean-token-sum      (1/N) sum_i sum_t m l                (each sequence's summed loss)
    seq-mean-token-sum-norm sum_{i,t} m l / (N * norm_const)    (Dr. GRPO; a constant denominator,
                                                                 norm_const defaults to T;
                                                                 verl divides by T only)
    token-sum-norm          sum_{i,t} m l / norm_const          (the whole batch's masked sum over one
                                                                 constant, default N * T; CS336 2026's
                                                                 loss_normalization="constant")
    """
    n, t_len = loss.shape
    lm, m = _sanitize(loss, mask)
    if agg == "token-mean":
        return lm.sum() / m.sum().clamp(min=1.0)
    if agg == "seq-mean-token-mean":
        tok = m.sum(-1)  # [N]
        seq = lm.sum(-1) / tok.clamp(min=1.0)  # [N]
        has = (tok > 0).to(loss.dtype)  # [N]
        return (seq * has).sum() / has.sum().clamp(min=1.0)
    if agg == "seq-mean-token-sum":
        return lm.sum() / max(n, 1)
    if agg == "seq-mean-token-sum-norm":
        c = float(t_len if norm_const is None else norm_const)
        if c <= 0:
            raise ValueError(f"norm_const must be positive, got {c}")
        return lm.sum() / (max(n, 1) * c)
    if agg == "token-sum-norm":
        c = float(max(n, 1) * t_len if norm_const is None else norm_const)
        if c <= 0:
            raise ValueError(f"norm_const must be positive, got {c}")
        return lm.sum() / c
    raise ValueError(f"unknown loss aggregation {agg!r}; choose from {(*AGGREGATIONS, 'token-sum-norm')}")


# ---------------------------------------------------------------- helpers


def tis_weights(logp_learner: Tensor, logp_sampler: Tensor, cap: float) -> Tensor:
    """Truncated importance weight `min(pi_learner / pi_sampler, cap)` per token, detached.

    logp_learner[N,T]: the learner's log-probs of the sampled tokens (its own recompute of
    `logp_old`); logp_sampler[N,T]: the inference engine's log-probs. Yao et al. 2025 (TIS).
    """
    with torch.no_grad():
        return torch.exp(logp_learner - logp_sampler).clamp(max=cap)


def _adv_matrix(adv: Tensor, logp: Tensor) -> Tensor:
    """Advantages in logp's dtype as `[N,1]` (one per sequence: `adv[N]` or `[N,1]`, broadcast over
    the tokens) or `[N,T]` (one per token, as the REINFORCE++ token form of the KL in the reward
    gives), unchanged."""
    if adv.dim() == 2 and adv.shape == logp.shape:
        return adv.to(logp.dtype)
    return adv.reshape(-1, 1).to(logp.dtype)


def _log_ratio(logp: Tensor, logp_old: Tensor, mask: Tensor) -> Tensor:
    """log(pi_theta / pi_old) per token, zero where mask == 0 (so exp never overflows there)."""
    return torch.where(mask != 0, logp - logp_old, torch.zeros_like(logp))


def _frac(flags: Tensor, mask: Tensor) -> float:
    """Fraction of masked tokens where the boolean `flags[N,T]` holds."""
    return float(masked_mean_or_zero(flags.to(torch.float32), mask).item())


def _apply_tis(loss: Tensor, tis_weight: Tensor | None, mask: Tensor, metrics: Metrics) -> Tensor:
    if tis_weight is None:
        return loss
    metrics["tis/weight_mean"] = float(masked_mean_or_zero(tis_weight.float(), mask).item())
    return loss * tis_weight.detach()


# ---------------------------------------------------------------- losses


def _clipped_surrogate(
    ratio: Tensor, a: Tensor, mask: Tensor, eps_low: float, eps_high: float, dual_clip_c: float | None
) -> tuple[Tensor, Metrics]:
    """PPO clipped surrogate loss `[N,T]` for a given ratio `[N,T]` and advantages `a[N,1]`.

    loss = max(-r A, -clip(r, 1-eps_low, 1+eps_high) A); with dual clip (c > 1, Ye et al. 2020)
    the loss of tokens with A < 0 is further capped: loss = min(loss, -c A), i.e. the objective
    is max(min(r A, clip(r) A), c A) for A < 0, bounding the push-down when r >> 1.
    """
    clipped = ratio.clamp(1.0 - eps_low, 1.0 + eps_high)
    loss = torch.maximum(-ratio * a, -clipped * a)  # [N,T]
    high = (a > 0) & (ratio > 1.0 + eps_high)  # gradient blocked by the upper clip
    low = (a < 0) & (ratio < 1.0 - eps_low)  # gradient blocked by the lower clip
    dual = torch.zeros_like(high)
    if dual_clip_c is not None:
        if dual_clip_c <= 1.0:
            raise ValueError(f"dual_clip_c must be > 1, got {dual_clip_c}")
        cap = -dual_clip_c * a
        dual = (a < 0) & (loss > cap)  # equivalently r > c for A < 0
        loss = torch.where(a < 0, torch.minimum(loss, cap), loss)
    metrics = {
        "clip/frac": _frac(high | low | dual, mask),
        "clip/frac_high": _frac(high, mask),
        "clip/frac_low": _frac(low, mask),
        "clip/frac_dual": _frac(dual, mask),
    }
    return loss, metrics


def _ratio_metrics(log_ratio: Tensor, mask: Tensor) -> Metrics:
    with torch.no_grad():
        ratio = log_ratio.exp()
        return {
            "policy/ratio_mean": float(masked_mean_or_zero(ratio, mask).item()),
            "policy/ratio_max": float(torch.where(mask != 0, ratio, torch.zeros_like(ratio)).max().item())
            if ratio.numel()
            else 0.0,
            "policy/approx_kl_old": float(masked_mean_or_zero(0.5 * log_ratio.pow(2), mask).item()),
        }


def reinforce_loss(
    logp: Tensor,
    logp_old: Tensor,
    adv: Tensor,
    mask: Tensor,
    *,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    dual_clip_c: float | None = None,
    tis_weight: Tensor | None = None,
) -> tuple[Tensor, Metrics]:
    """Naive policy gradient `-A * logp` per token (no ratio, no clip; Williams 1992).

    `logp_old`, `eps_*` and `dual_clip_c` do not enter the loss; `logp_old` is used only for the
    logged ratio. Gradient: -A * grad logp. clip/frac is 0 by definition.
    """
    a = _adv_matrix(adv, logp)  # [N,1] or [N,T]
    log_ratio = _log_ratio(logp.detach(), logp_old, mask)
    metrics = _ratio_metrics(log_ratio, mask)
    metrics.update({"clip/frac": 0.0, "clip/frac_high": 0.0, "clip/frac_low": 0.0, "clip/frac_dual": 0.0})
    loss = torch.where(mask != 0, -a * logp, torch.zeros_like(logp))  # [N,T]
    return _apply_tis(loss, tis_weight, mask, metrics), metrics


def noclip_loss(
    logp: Tensor,
    logp_old: Tensor,
    adv: Tensor,
    mask: Tensor,
    *,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    dual_clip_c: float | None = None,
    tis_weight: Tensor | None = None,
) -> tuple[Tensor, Metrics]:
    """Importance-weighted policy gradient without a clip: `-r A` per token, r = pi_theta / pi_old.

    The ratio's gradient flows (d/dlogp = -r A). `eps_*` and `dual_clip_c` are not used; clip/frac
    is 0 by definition. CS336 (spring 2026) assignment 5's importance_reweighting_method="noclip".
    """
    a = _adv_matrix(adv, logp)  # [N,1] or [N,T]
    log_ratio = _log_ratio(logp, logp_old, mask)  # [N,T]
    metrics = _ratio_metrics(log_ratio.detach(), mask)
    metrics.update({"clip/frac": 0.0, "clip/frac_high": 0.0, "clip/frac_low": 0.0, "clip/frac_dual": 0.0})
    loss = torch.where(mask != 0, -log_ratio.exp() * a, torch.zeros_like(logp))  # [N,T]
    return _apply_tis(loss, tis_weight, mask, metrics), metrics


def grpo_clip_loss(
    logp: Tensor,
    logp_old: Tensor,
    adv: Tensor,
    mask: Tensor,
    *,
    eps_low: float,
    eps_high: float,
    dual_clip_c: float | None = None,
    tis_weight: Tensor | None = None,
) -> tuple[Tensor, Metrics]:
    """PPO/GRPO clipped surrogate per token: `-min(r A, clip(r, 1-eps_low, 1+eps_high) A)`.

    Symmetric PPO when eps_low == eps_high (Schulman et al. 2017; GRPO, Shao et al. 2024).
    dual_clip_c (c > 1) adds the dual clip of Ye et al. 2020 for A < 0 (see `_clipped_surrogate`).
    Tokens on the flat side of the clip get zero gradient.
    """
    a = _adv_matrix(adv, logp)  # [N,1] or [N,T]
    log_ratio = _log_ratio(logp, logp_old, mask)  # [N,T]
    ratio = log_ratio.exp()
    loss, metrics = _clipped_surrogate(ratio, a, mask, eps_low, eps_high, dual_clip_c)
    metrics.update(_ratio_metrics(log_ratio.detach(), mask))
    loss = torch.where(mask != 0, loss, torch.zeros_like(loss))
    return _apply_tis(loss, tis_weight, mask, metrics), metrics


def dapo_loss(
    logp: Tensor,
    logp_old: Tensor,
    adv: Tensor,
    mask: Tensor,
    *,
    eps_low: float,
    eps_high: float,
    dual_clip_c: float | None = None,
    tis_weight: Tensor | None = None,
) -> tuple[Tensor, Metrics]:
    """DAPO's clip-higher surrogate (Yu et al. 2025): the PPO clip with decoupled bounds.

    Identical arithmetic to `grpo_clip_loss`; DAPO uses eps_low=0.2, eps_high=0.28 so that
    low-probability tokens with A > 0 can grow further. DAPO's token-level loss is the
    reduction `aggregate(..., "token-mean")`, chosen by the trainer, not here.
    """
    return grpo_clip_loss(
        logp, logp_old, adv, mask, eps_low=eps_low, eps_high=eps_high, dual_clip_c=dual_clip_c, tis_weight=tis_weight
    )


def cispo_loss(
    logp: Tensor,
    logp_old: Tensor,
    adv: Tensor,
    mask: Tensor,
    *,
    eps_low: float,
    eps_high: float,
    dual_clip_c: float | None = None,
    tis_weight: Tensor | None = None,
) -> tuple[Tensor, Metrics]:
    """CISPO (MiniMax-M1, 2025): `-sg(min(r, 1 + eps_high)) * A * logp` per token.

    The importance weight is truncated from above only and detached, so every token keeps a
    gradient `-w * A * grad logp` (PPO would zero clipped ones). The paper writes
    clip(r, 1 - eps_low, 1 + eps_high) but sets no lower bound (eps_low large); TRL's `cispo`
    also caps from above only. `eps_low` and dual_clip_c are not used. clip/frac counts tokens
    whose weight was truncated (= clip/frac_high; clip/frac_low is 0).
    """
    a = _adv_matrix(adv, logp)  # [N,1] or [N,T]
    log_ratio = _log_ratio(logp.detach(), logp_old, mask)  # [N,T], detached
    ratio = log_ratio.exp()
    w = ratio.clamp(max=1.0 + eps_high)
    high = ratio > 1.0 + eps_high
    metrics = _ratio_metrics(log_ratio, mask)
    metrics.update(
        {
            "clip/frac": _frac(high, mask),
            "clip/frac_high": _frac(high, mask),
            "clip/frac_low": 0.0,
            "clip/frac_dual": 0.0,
        }
    )
    loss = torch.where(mask != 0, -w * a * logp, torch.zeros_like(logp))
    return _apply_tis(loss, tis_weight, mask, metrics), metrics


def gspo_loss(
    logp: Tensor,
    logp_old: Tensor,
    adv: Tensor,
    mask: Tensor,
    *,
    eps_low: float,
    eps_high: float,
    dual_clip_c: float | None = None,
    tis_weight: Tensor | None = None,
    repeat_masked: bool = False,
) -> tuple[Tensor, Metrics]:
    """GSPO (Zheng et al. 2025): clip a *sequence-level* ratio and broadcast it to the tokens.

    s_i = exp( sum_t m log r / sum_t m )  (geometric mean of token ratios, length-normalised),
    loss_it = -min(s_i A_i, clip(s_i, 1-eps_low, 1+eps_high) A_i) for every response token t.
    The gradient flows through s_i (all tokens of a sequence share it). The paper uses very
    small eps (3e-4 low / 4e-4 high) and a mean over sequences: the config resolves --loss gspo
    without clip flags to those and --loss_agg auto to seq-mean-token-mean, under which this
    loss equals the paper's objective exactly (token-mean would weigh sequences by length).
    Masked positions hold 0 (the trainer's convention) or, with repeat_masked, the sequence's value
    like every other position of the row (CS336 spring 2026's convention); `aggregate` ignores them
    either way, so the reduced loss and its gradient are the same.
    """
    a = _adv_matrix(adv, logp)  # [N,1] or [N,T]
    log_ratio = _log_ratio(logp, logp_old, mask)  # [N,T]
    seq_log_ratio = masked_mean_or_zero(log_ratio, mask, dim=-1).unsqueeze(-1)  # [N,1]
    s = seq_log_ratio.exp().expand_as(logp)  # [N,T], same value along T
    loss, metrics = _clipped_surrogate(s, a, mask, eps_low, eps_high, dual_clip_c)
    metrics.update(_ratio_metrics(log_ratio.detach(), mask))
    metrics["policy/seq_ratio_mean"] = float(seq_log_ratio.detach().exp().mean().item())
    if not repeat_masked:
        loss = torch.where(mask != 0, loss, torch.zeros_like(loss))
    return _apply_tis(loss, tis_weight, mask, metrics), metrics


LossFn = Callable[..., tuple[Tensor, Metrics]]

LOSSES: dict[str, LossFn] = {
    "reinforce": reinforce_loss,
    "noclip": noclip_loss,
    "grpo_clip": grpo_clip_loss,
    "dapo": dapo_loss,
    "cispo": cispo_loss,
    "gspo": gspo_loss,
}
