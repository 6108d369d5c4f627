"""PPO with a critic: per-token rewards, GAE, whitening and the clipped value loss (pure functions).

Legend: N sequences, n rows of a minibatch, T response tokens. `mask[N, T]` is 1 on generated
tokens (EOS included); every output is 0 where mask == 0, and values there never matter.

  token_rewards  r_t = per-token rewards (-beta KL_t with the KL in the reward in token form, else 0)
                 plus the sequence's reward at its last response token (TRL PPOTrainer,
                 OpenRLHF: the score lands on the last generated token)
  gae            delta_t = r_t + gamma V_{t+1} - V_t (V_{T_i} = 0 after the last token),
                 A_t = delta_t + gamma lambda A_{t+1}, returns R_t = A_t + V_t
                 (Schulman et al. 2015, "High-Dimensional Continuous Control Using Generalized
                 Advantage Estimation", arXiv 1506.02438, eq. 16). gamma = lambda = 1 gives
                 A_t = sum_{s>=t} r_s - V_t (returns-to-go minus values); lambda = 0 gives the
                 one-step TD residual A_t = delta_t.
  mc_returns     G_t = sum_{s>=t} gamma^(s-t) r_s: the realised discounted return to the end of
                 the sequence, no bootstrap (GAE with lambda = 1 and V = 0); the honest target
                 the critic's explained variance is also measured against (critic/ev_mc)
  whiten         (x - masked mean) / (masked unbiased std + eps) over every response token of the
                 batch (TRL's masked_whiten with shift_mean)
  value_loss     0.5 * max((V - R)^2, (clip(V, V_old - c, V_old + c) - R)^2) per token, the
                 clipped value loss of OpenAI baselines' ppo2 and TRL's PPOTrainer (c =
                 cliprange_value; c = 0: 0.5 (V - R)^2); its reduction over the minibatch is the
                 run's --loss_agg, as the policy loss's (token-mean: TRL's masked mean)
PPO's clipped policy loss itself is algorithms/losses.py's (Schulman et al. 2017, arXiv 1707.06347),
fed these per-token advantages.
"""

from __future__ import annotations

import torch
from torch import Tensor

from noma_prorl_bench.io.metrics import Metrics

NAME = "gae"  # the --adv value that brings a critic in (config/choices.ADVS)


def _f(x: Tensor) -> Tensor:
    """float32, or float64 kept (the gradient checks run in float64)."""
    return x if x.dtype == torch.float64 else x.float()


def last_token_index(mask: Tensor) -> tuple[Tensor, Tensor]:
    """mask[N, T] -> (index of each row's last response token [N], rows that have one [N] bool)."""
    m = mask != 0
    pos = torch.arange(mask.shape[1], device=mask.device).expand_as(mask)  # [N, T]
    last = torch.where(m, pos, torch.full_like(pos, -1)).max(dim=-1).values  # [N]
    return last.clamp(min=0), last >= 0


def token_rewards(rewards: Tensor, mask: Tensor, per_token: Tensor | None = None) -> Tensor:
    """rewards[N] (one per sequence) -> r[N, T]: `per_token[N, T]` (or 0) on every response token,
    plus the sequence's reward on its last response token; 0 where mask == 0. A row without a
    response token gets no reward (nothing could earn it)."""
    m = mask.to(torch.float32)
    r = torch.zeros_like(m) if per_token is None else torch.where(m != 0, per_token.float(), torch.zeros_like(m))
    last, has = last_token_index(mask)
    add = torch.where(has, rewards.float(), torch.zeros_like(rewards, dtype=torch.float32))  # [N]
    r = r.scatter_add(1, last[:, None], add[:, None])
    return r * m


def gae(rewards: Tensor, values: Tensor, mask: Tensor, gamma: float, lam: float) -> tuple[Tensor, Tensor]:
    """Per-token rewards r[N, T], values V[N, T] (of the state before each response token) ->
    (advantages A[N, T], returns R[N, T] = A + V), both 0 where mask == 0. Past a row's last response
    token V and A are 0, so the last token's delta is r_last - V_last. The mask is a prefix per row
    (generated tokens, then padding); a token after a masked hole would see V = 0 from the hole."""
    if not (0.0 <= gamma <= 1.0 and 0.0 <= lam <= 1.0):
        raise ValueError(f"gamma and lambda must be in [0, 1], got {gamma}, {lam}")
    m = mask.to(torch.float32)
    v = torch.where(m != 0, values.float(), torch.zeros_like(m))  # garbage under the mask never enters
    r = torch.where(m != 0, rewards.float(), torch.zeros_like(m))
    T = m.shape[1]
    adv = torch.zeros_like(m)
    next_v = torch.zeros_like(m[:, 0])  # [N]
    next_a = torch.zeros_like(m[:, 0])
    for t in reversed(range(T)):
        delta = r[:, t] + gamma * next_v - v[:, t]
        next_a = (delta + gamma * lam * next_a) * m[:, t]
        adv[:, t] = next_a
        next_v = v[:, t]
    return adv, (adv + v) * m


def mc_returns(rewards: Tensor, mask: Tensor, gamma: float) -> Tensor:
    """Per-token rewards r[N, T] -> the Monte Carlo returns G[N, T], G_t = sum_{s>=t} gamma^(s-t) r_s
    over the row's response tokens (no value enters), 0 where mask == 0."""
    adv, _ = gae(rewards, torch.zeros_like(rewards, dtype=torch.float32), mask, gamma, 1.0)
    return adv


def group_loo_mean(x: Tensor, group_size: int) -> Tensor | None:
    """x[N] (rows grouped by prompt, G = group_size consecutive rows) -> the mean of each row's
    G - 1 group mates [N] (leave-one-out); None when G < 2 (no other sample to average)."""
    if group_size < 2:
        return None
    g = x.double().view(-1, group_size)
    return ((g.sum(dim=1, keepdim=True) - g) / (group_size - 1)).view(-1)


def whiten(x: Tensor, mask: Tensor, eps: float = 1e-8) -> Tensor:
    """(x - mean) / (std + eps) over the positions where mask != 0 (unbiased std; one position:
    std 0), 0 elsewhere."""
    m = mask.to(torch.float32)
    xs = torch.where(m != 0, x.float(), torch.zeros_like(m))
    n = m.sum()
    mean = xs.sum() / n.clamp(min=1.0)
    var = (((xs - mean) * m).pow(2).sum() / (n - 1)).clamp(min=0.0) if n > 1 else n.new_zeros(())
    return (xs - mean) / (var.sqrt() + eps) * m


def value_loss(
    values: Tensor, values_old: Tensor, returns: Tensor, mask: Tensor, cliprange_value: float
) -> tuple[Tensor, Metrics]:
    """The clipped value loss per token [n, T] (0 where mask == 0) and its metrics:
    0.5 * max((V - R)^2, (V_old + clip(V - V_old, -c, c) - R)^2); c = 0: 0.5 * (V - R)^2.
    `values` carries the gradient; `values_old` (before the update) and `returns` are constants."""
    v = _f(values)
    m = mask.to(v.dtype)
    v = torch.where(m != 0, v, torch.zeros_like(v))
    v_old = torch.where(m != 0, values_old.to(v.dtype), torch.zeros_like(v)).detach()
    ret = torch.where(m != 0, returns.to(v.dtype), torch.zeros_like(v)).detach()
    unclipped = (v - ret).pow(2)
    if cliprange_value > 0:
        v_clip = v_old + (v - v_old).clamp(-cliprange_value, cliprange_value)
        clipped = (v_clip - ret).pow(2)
        loss = 0.5 * torch.maximum(unclipped, clipped)
        frac_flags = (clipped > unclipped).float()
    else:
        loss = 0.5 * unclipped
        frac_flags = torch.zeros_like(m)
    loss = loss * m
    with torch.no_grad():
        denom = m.sum().clamp(min=1.0)
        metrics = {
            "critic/vf_loss": float(loss.sum() / denom),
            "critic/vf_clipfrac": float((frac_flags * m).sum() / denom),
            "critic/value_mean": float((v * m).sum() / denom),
            "critic/return_mean": float((ret * m).sum() / denom),
        }
    return loss, metrics


def explained_variance(values: Tensor, returns: Tensor, mask: Tensor) -> float:
    """1 - Var(R - V) / Var(R) over the response tokens (0 when Var(R) is 0): how much of the
    returns the critic predicts."""
    m = mask != 0
    r, v = returns[m].double(), values[m].double()
    if r.numel() < 2 or float(r.var()) == 0.0:
        return 0.0
    return float(1.0 - (r - v).var() / r.var())
