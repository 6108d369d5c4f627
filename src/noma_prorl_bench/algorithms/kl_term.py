"""The KL choice as one object: estimator, k2 mode, placement, reward form, anchor.

Legend: B prompts, G samples per prompt, N = B*G sequences, n rows of a minibatch, T response
tokens, V vocabulary.

`KLTerm.from_spec(spec)` takes the run's `KLSpec` (config/specs.py: --kl_estimator, --k2_mode, --kl_in,
--kl_reward_form and --variant, read once); the trainer asks the object and never reads those strings itself:

  metric_key            kl/k1 | kl/k2 | kl/k3 | kl/k3_ratio | kl/full: the logged estimate that
                        enters the loss (what --target_kl and --reset_kl_above read)
  in_reward             the rewards carry the KL: the trainer hands over logp_ref for the batch
  needs_ref_logits      the reference must keep its logits [N, T, V] (`full`, Variant A)
  needs_old_logits      the pre-update policy's logits [N, T, V] are needed (`full`, Variant B)
  estimates(...)        every per-token estimate to log, {name: [n, T]}
  loss_term(...)        the per-token KL term of the loss [n, T] (zeros when the KL is in the reward)
  advantages(...)       rewards[N] -> advantages [N] (KL in the loss, or the sequence form) or
                        [N, T] (the REINFORCE++ token form), plus metrics
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from noma_prorl_bench.algorithms import advantages as adv_lib
from noma_prorl_bench.algorithms import kl as kl_lib
from noma_prorl_bench.config import kl_metric_key
from noma_prorl_bench.config.specs import KLSpec
from noma_prorl_bench.io.metrics import Metrics


@dataclass(frozen=True)
class KLTerm:
    """One run's KL term. estimator: k1 | k2 | k3 | k3_ratio | full; k2_mode: theta_over_ref |
    ref_over_old; placement: loss | reward; reward_form: token | sequence (placement reward only);
    anchor: ref (Variant A, pi_ref) | old (Variant B, pi_old)."""

    estimator: str = "k3"
    k2_mode: str = "theta_over_ref"
    placement: str = "loss"
    reward_form: str = "token"
    anchor: str = "ref"
    clip: float | None = None  # --kl_clip: |log pi_theta - log pi_anchor| clamp before every estimator

    @classmethod
    def from_spec(cls, spec: KLSpec) -> KLTerm:
        """The KL term of a run's `KLSpec` (config/specs.py; `simple` is already spelled k1 there)."""
        return cls(
            estimator=spec.estimator,
            k2_mode=spec.k2_mode,
            placement=spec.placement,
            reward_form=spec.reward_form,
            anchor=spec.anchor,
            clip=spec.clip,
        )

    # ---------------------------------------------------------------- what it needs
    @property
    def metric_key(self) -> str:
        return kl_metric_key(self.estimator)

    @property
    def key(self) -> str:
        """metric_key without the `kl/` prefix (the name in the `estimates` dict)."""
        return self.metric_key[len("kl/") :]

    @property
    def in_reward(self) -> bool:
        return self.placement == "reward"

    @property
    def needs_ref_logits(self) -> bool:
        return self.estimator == "full" and self.anchor == "ref"

    @property
    def needs_old_logits(self) -> bool:
        return self.estimator == "full" and self.anchor == "old"

    @property
    def ref_over_old(self) -> bool:
        """The ProRL-v2 blog's k2 as written: x = exp(clamp(log pi_ref / pi_old)), constant in theta."""
        return self.estimator == "k2" and self.k2_mode == "ref_over_old"

    # ---------------------------------------------------------------- per-token values
    def estimates(
        self,
        logp: Tensor,
        anchor: Tensor,
        logp_old: Tensor,
        *,
        logits: Tensor | None = None,
        logits_anchor: Tensor | None = None,
        temperature: float = 1.0,
    ) -> dict[str, Tensor]:
        """Per-token KL(pi_theta || anchor) estimates [n, T] to log: k1, k2, k3 always; k3_ratio
        (rho = pi_theta / sg(pi_old), logp_old[n, T] the PG ratio's denominator) when chosen; `full`
        from logits [n, T, V] (divided by the temperature, as every logprob is) when both are given.
        With --kl_clip every one is of the clamped log-ratio, and `clip_frac` (0/1 per token) marks
        the clamped tokens."""
        c = self.clip
        kl = kl_lib.kl_terms(logp, anchor, clamp=c)
        if self.estimator == "k3_ratio":
            kl["k3_ratio"] = kl_lib.k3_ratio(logp, anchor, logp_old, clamp=c)
        if logits is not None and logits_anchor is not None:
            kl["full"] = kl_lib.kl_full(logits / temperature, logits_anchor / temperature, clamp=c)  # [n, T]
        if c is not None:
            kl["clip_frac"] = kl_lib.clipped(logp, anchor, c)  # logged as kl/clip_frac
        return kl

    def chosen(self, kl: dict[str, Tensor], logp_sampler: Tensor, anchor: Tensor) -> Tensor:
        """The chosen estimator's per-token value [n, T]. ref_over_old: k2 of log(pi_ref / pi_sampler),
        clamped to +-REF_OVER_OLD_CLAMP (or the tighter --kl_clip) and detached (no gradient, as
        documented in --help)."""
        if self.ref_over_old:
            bound = min(kl_lib.REF_OVER_OLD_CLAMP, self.clip or kl_lib.REF_OVER_OLD_CLAMP)
            return kl_lib.kl_terms(logp_sampler, anchor, clamp=bound)["k2"].detach()
        return kl[self.key]

    def reward_kl(self, logp_old: Tensor, logp_ref: Tensor) -> Tensor:
        """The per-token KL the reward carries (--kl_in reward) [N, T]: the chosen estimator between
        logp_old and logp_ref at rollout time (log-ratio clamped by --kl_clip), detached."""
        kl = kl_lib.kl_terms(logp_old, logp_ref, clamp=self.clip)
        return self.chosen(kl, logp_old, logp_ref).detach()

    def loss_term(self, kl: dict[str, Tensor], logp_sampler: Tensor, anchor: Tensor) -> Tensor:
        """The per-token KL term that enters the loss [n, T] (beta is applied by the caller);
        zeros when the KL is in the reward instead."""
        if self.in_reward:
            return torch.zeros_like(kl["k1"])
        return self.chosen(kl, logp_sampler, anchor)

    # ---------------------------------------------------------------- advantages
    def advantages(
        self,
        rewards: Tensor,
        mask: Tensor,
        adv: str,
        B: int,
        G: int,
        *,
        beta: float,
        logp_old: Tensor | None = None,
        logp_ref: Tensor | None = None,
    ) -> tuple[Tensor, Metrics]:
        """rewards[N] -> (advantages, metrics) with the KL placed as configured.

        loss:            the --adv estimator on rewards[B, G] -> adv [N].
        reward sequence: the estimator on r_i - beta * sum_t m KL_t (kl.kl_reward_penalty) -> [N].
        reward token:    REINFORCE++ (Hu 2025) -> [N, T]: token t's return is
                         r_i - beta * sum_{s>=t} m KL_s (kl.kl_return_to_go), then the estimator
                         (advantages.token_advantages). KL_t is the chosen estimator between
                         logp_old[N, T] and logp_ref[N, T] at rollout time, detached.
        """
        if not self.in_reward:
            a, m = adv_lib.ADVANTAGES[adv](rewards.view(B, G))
            return a.reshape(-1), m  # [B, G] -> [N]
        if logp_old is None or logp_ref is None:
            raise ValueError("a KL in the reward needs logp_old and logp_ref")
        kl_tok = self.reward_kl(logp_old, logp_ref)  # [N, T]
        shaped, km = kl_lib.kl_reward_penalty(rewards, kl_tok, mask, beta)  # [N]
        metrics = {
            "reward/kl_penalty_mean": km["kl/reward_penalty_mean"],
            "kl/seq_sum_mean": km["kl/seq_sum_mean"],
            "reward/shaped_mean": float(shaped.mean()),
        }
        if self.reward_form == "sequence":
            a, m = adv_lib.ADVANTAGES[adv](shaped.view(B, G))
            return a.reshape(-1), {**m, **metrics}  # [N]
        penalty = beta * kl_lib.kl_return_to_go(kl_tok, mask)  # [N, T]
        a, m = adv_lib.token_advantages(adv, rewards.float().view(B, G), penalty, mask)
        return a, {**m, **metrics}  # [N, T]
