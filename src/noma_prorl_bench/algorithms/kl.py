"""KL estimators (k1/k2/k3), exact KL from logits, KL-in-reward placement, adaptive beta.

Shape legend: N sequences, T response tokens, V vocabulary.

Sign convention (Schulman, "Approximating KL Divergence", 2020). Tokens x are sampled from
the policy pi_theta; the anchor is pi_ref (Variant A) or any other policy. Per token
    log r = logp_anchor - logp            (r = pi_anchor(x) / pi_theta(x))
    k1 = -log r                           unbiased for KL(pi_theta || pi_anchor), can be < 0
    k2 = 0.5 * (log r)^2                  biased, >= 0, low variance; its gradient is the
                                          gradient of the KL (what GRPO-style "k2 loss" uses)
    k3 = r - 1 - log r                    unbiased, >= 0 (Schulman's "k3", GRPO's KL term)
Expectations are over x ~ pi_theta, so the estimates are only unbiased on on-policy samples.
"""

from __future__ import annotations

import torch
from torch import Tensor

Metrics = dict[str, float]

KL_ESTIMATORS = ("k1", "k2", "k3")


def kl_terms(logp: Tensor, logp_anchor: Tensor, *, clamp: float | None = None) -> dict[str, Tensor]:
    """Per-token k1, k2, k3 `[N,T]` for KL(pi_theta || pi_anchor); differentiable w.r.t. logp.

    clamp: if given, log r is clamped to [-clamp, clamp] before the estimators (guards exp()
    in k3 against huge ratios on rare tokens; gradients vanish outside the clamp).
    """
    log_r = logp_anchor - logp  # [N,T]
    if clamp is not None:
        log_r = log_r.clamp(-clamp, clamp)
    return {
        "k1": -log_r,
        "k2": 0.5 * log_r.pow(2),
        "k3": torch.exp(log_r) - 1.0 - log_r,
    }


def kl_full(logits_p: Tensor, logits_q: Tensor) -> Tensor:
    """Exact KL(p || q) per position from logits: `[..., V], [..., V] -> [...]`.

    KL = sum_v p_v (log p_v - log q_v), computed from log_softmax in float32. With p the
    policy and q the reference this is the quantity k1/k3 estimate from one sample.
    """
    logp = torch.log_softmax(logits_p.float(), dim=-1)
    logq = torch.log_softmax(logits_q.float(), dim=-1)
    return (logp.exp() * (logp - logq)).sum(-1)


def kl_reward_penalty(rewards: Tensor, kl_tok: Tensor, mask: Tensor,
                      beta: float) -> tuple[Tensor, Metrics]:
    """KL placed in the reward: `r_i - beta * sum_t m_it kl_it` (per token, summed per sequence).

    rewards[N], kl_tok[N,T] (any estimator, detached here: a reward carries no gradient),
    mask[N,T]. As in Ziegler et al. 2019 / InstructGPT and REINFORCE++ (Hu 2025), whose
    per-token shaping collapses to this sum for outcome-only rewards and gamma = 1.
    """
    m = mask.to(kl_tok.dtype)
    kl_seq = (torch.where(m != 0, kl_tok.detach(), torch.zeros_like(kl_tok)) * m).sum(-1)  # [N]
    shaped = rewards.to(kl_seq.dtype) - beta * kl_seq
    return shaped, {"kl/seq_sum_mean": float(kl_seq.mean().item()),
                    "kl/reward_penalty_mean": float((beta * kl_seq).mean().item())}


class AdaptiveKLController:
    """Adaptive KL coefficient (Ziegler et al. 2019, "Fine-tuning LMs from human preferences").

    After each step with observed KL `kl`:
        error = clip(kl / target - 1, -0.2, 0.2)
        beta <- beta * (1 + error * n_steps / horizon)
    so beta grows when KL overshoots the target and shrinks when it undershoots, by at most
    20% * n_steps / horizon per update. `state_dict` / `load_state_dict` save and restore it.
    """

    def __init__(self, init_beta: float, target: float, horizon: float):
        if target <= 0 or horizon <= 0:
            raise ValueError(f"target and horizon must be positive, got {target}, {horizon}")
        self.init_beta = float(init_beta)
        self.value = float(init_beta)
        self.target = float(target)
        self.horizon = float(horizon)

    def update(self, current_kl: float, n_steps: int) -> float:
        """Update beta from the KL just observed over `n_steps` steps; return the new beta."""
        error = min(max(current_kl / self.target - 1.0, -0.2), 0.2)
        self.value *= 1.0 + error * n_steps / self.horizon
        return self.value

    def state_dict(self) -> dict[str, float]:
        return {"value": self.value, "init_beta": self.init_beta, "target": self.target, "horizon": self.horizon}

    def load_state_dict(self, state: dict[str, float]) -> None:
        self.value = float(state["value"])
        self.init_beta = float(state.get("init_beta", state["value"]))
        self.target = float(state["target"])
        self.horizon = float(state["horizon"])
