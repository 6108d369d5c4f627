"""KL estimators (k1/k2/k3, k3_ratio), exact KL from logits, KL-in-reward forms, adaptive beta.

Shape legend: N sequences, T response tokens, V vocabulary.

Sign convention (Schulman, "Approximating KL Divergence", 2020). Tokens x are sampled from
the policy pi_theta; the anchor is pi_ref (Variant A) or any other policy. Per token
    log r = logp_anchor - logp            (r = pi_anchor(x) / pi_theta(x))
    k1 = -log r                           unbiased for KL(pi_theta || pi_anchor), can be < 0
    k2 = 0.5 * (log r)^2                  biased, >= 0, low variance
    k3 = r - 1 - log r                    unbiased, >= 0 (Schulman's "k3", GRPO's KL term)
Expectations are over x ~ pi_theta, so the estimates are only unbiased on on-policy samples.

Values and gradients are different questions. Put in the loss with the samples held fixed,
the expected gradient E_x~pi[grad k(x)] of each estimator is (docs/losses.md derives them;
tests/unit/test_kl_gradients.py checks each by Monte Carlo):
    k1        0                                  (E_pi[grad log pi] = 0: no regularisation)
    k2        grad KL(pi_theta || pi_anchor)
    k3        grad KL(pi_anchor || pi_theta)     (the reverse KL, not the one k3's value estimates)
    k3_ratio  grad KL(pi_theta || pi_anchor)     (rho * k3 with rho = pi_theta / sg(pi_old): the
                                                 importance-weighted k3 of TRL's
                                                 use_bias_correction_kl, OpenRLHF and slime)
    full      grad KL(pi_theta || pi_anchor)     (exact, from logits)

--kl_clip X clamps log r to [-X, X] before each estimator (`clamp=` below; `kl_full` clamps each
vocabulary entry's log p_v - log q_v): where a token's |log r| > X its k1/k2/k3 are constants, so
they add no gradient there. k3_ratio's importance weight rho and full's weights p_v are not
clamped: their gradient stays. `clipped(...)` marks the clamped tokens (metric kl/clip_frac).
"""

from __future__ import annotations

import torch
from torch import Tensor

from noma_prorl_bench.io.metrics import Metrics

REF_OVER_OLD_CLAMP = 10.0  # |log pi_ref/pi_old| clamp of the ProRL-v2 blog's k2 (--k2_mode ref_over_old)


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


def clipped(logp: Tensor, logp_anchor: Tensor, clamp: float) -> Tensor:
    """Float 0/1 `[N,T]`: 1 where |logp - logp_anchor| > clamp, the tokens `kl_terms(clamp=)` clamps."""
    with torch.no_grad():
        return ((logp - logp_anchor).abs() > clamp).to(torch.float32)


def kl_full(logits_p: Tensor, logits_q: Tensor, *, clamp: float | None = None) -> Tensor:
    """Exact KL(p || q) per position from logits: `[..., V], [..., V] -> [...]`.

    KL = sum_v p_v (log p_v - log q_v), computed from log_softmax in float32. With p the
    policy and q the reference this is the quantity k1/k3 estimate from one sample.
    clamp: if given, each log p_v - log q_v is clamped to [-clamp, clamp] (--kl_clip); p_v is not.
    """
    logp = torch.log_softmax(logits_p.float(), dim=-1)
    logq = torch.log_softmax(logits_q.float(), dim=-1)
    if clamp is None:
        return (logp.exp() * (logp - logq)).sum(-1)
    return (logp.exp() * (logp - logq).clamp(-clamp, clamp)).sum(-1)


def k3_ratio(logp: Tensor, logp_anchor: Tensor, logp_old: Tensor, *, clamp: float | None = None) -> Tensor:
    """rho * k3 per token `[N,T]`, rho = exp(logp - sg(logp_old)) = pi_theta / pi_old.

    On samples from pi_old, E[rho k3] = E_pi_theta[k3] = KL(pi_theta || pi_anchor) for every
    theta, so its gradient is grad KL(pi_theta || pi_anchor) (plain k3's is that of the reverse
    KL). At theta = theta_old rho = 1 and the value equals k3. TRL GRPOConfig
    use_bias_correction_kl (DeepSeek-V3.2), OpenRLHF and slime use this form.
    """
    rho = torch.exp(logp - logp_old.detach())  # [N,T]
    return rho * kl_terms(logp, logp_anchor, clamp=clamp)["k3"]


def kl_return_to_go(kl_tok: Tensor, mask: Tensor) -> Tensor:
    """`[N,T] -> [N,T]`: sum_{s >= t} m_s KL_s at every response position t (0 where m = 0).

    The per-token penalty -beta*KL_t summed from t to the end (gamma = 1): what token t's return
    loses in the REINFORCE++ token form (Hu 2025; OpenRLHF compute_reward + get_cumulative_returns).
    KL is detached (a reward carries no gradient); masked positions, whatever they hold, add 0.
    """
    m = mask.to(kl_tok.dtype)
    k = torch.where(m != 0, kl_tok.detach(), torch.zeros_like(kl_tok)) * m  # [N,T]
    return k.flip(-1).cumsum(-1).flip(-1) * m  # [N,T]


def kl_reward_penalty(rewards: Tensor, kl_tok: Tensor, mask: Tensor, beta: float) -> tuple[Tensor, Metrics]:
    """KL in the reward, sequence-sum form: `r_i - beta * sum_t m_it kl_it`, one number per sequence.

    rewards[N], kl_tok[N,T] (any estimator, detached here: a reward carries no gradient),
    mask[N,T]. Every token of sequence i then sees the same shaped reward (TRL 1.16 RLOOTrainer:
    rewards - beta * sum_t k1). This is NOT the REINFORCE++ form: there (Hu 2025, OpenRLHF)
    each token carries -beta*KL_t and token t's return is r - beta * sum_{s>=t} KL_s
    (`kl_return_to_go`), so a token is charged only for the KL at and after it; the two agree
    at t = 0 only. The metrics are shared by both forms.
    """
    m = mask.to(kl_tok.dtype)
    kl_seq = (torch.where(m != 0, kl_tok.detach(), torch.zeros_like(kl_tok)) * m).sum(-1)  # [N]
    shaped = rewards.to(kl_seq.dtype) - beta * kl_seq
    return shaped, {
        "kl/seq_sum_mean": float(kl_seq.mean().item()),
        "kl/reward_penalty_mean": float((beta * kl_seq).mean().item()),
    }


class AdaptiveKLController:
    """Adaptive KL coefficient (Ziegler et al. 2019, "Fine-tuning LMs from human preferences").

    After each step with observed KL `kl` over a batch of n samples (sequences):
        error = clip(kl / target - 1, -0.2, 0.2)
        beta <- beta * (1 + error * n / horizon)
    so beta grows when KL overshoots the target and shrinks when it undershoots, by at most
    20% * n / horizon per update. n counts samples, not optimizer steps, so `horizon` is in
    samples too: about horizon / n steps to move beta by e^0.2 at full error. This is
    Ziegler et al. 2019's rule as TRL (PPOTrainer: n = batch_size) and OpenRLHF
    (n = rollout_batch_size * n_samples_per_prompt) call it. `state_dict` / `load_state_dict`
    save and restore it.
    """

    def __init__(self, init_beta: float, target: float, horizon: float):
        if target <= 0 or horizon <= 0:
            raise ValueError(f"target and horizon must be positive, got {target}, {horizon}")
        self.init_beta = float(init_beta)
        self.value = float(init_beta)
        self.target = float(target)
        self.horizon = float(horizon)

    def update(self, current_kl: float, n_samples: int) -> float:
        """Update beta from the KL just observed over a batch of `n_samples` sequences; return it."""
        error = min(max(current_kl / self.target - 1.0, -0.2), 0.2)
        self.value *= 1.0 + error * n_samples / self.horizon
        return self.value

    def state_dict(self) -> dict[str, float]:
        return {"value": self.value, "init_beta": self.init_beta, "target": self.target, "horizon": self.horizon}

    def load_state_dict(self, state: dict[str, float]) -> None:
        self.value = float(state["value"])
        self.init_beta = float(state.get("init_beta", state["value"]))
        self.target = float(state["target"])
        self.horizon = float(state["horizon"])
