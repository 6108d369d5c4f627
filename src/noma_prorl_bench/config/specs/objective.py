"""The loss side of the learner: the KL term (`KLSpec`) and the advantages and per-token loss with
its clip bounds, aggregation and KL coefficient (`ObjectiveSpec`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from noma_prorl_bench.config.choices import Adv, KLEstimator, Loss, LossAgg
from noma_prorl_bench.config.errors import ConfigError
from noma_prorl_bench.config.specs.base import Spec, copy_of, flag, sub
from noma_prorl_bench.config.specs.model import ModelSpec
from noma_prorl_bench.config.specs.reference import ReferenceSpec
from noma_prorl_bench.config.specs.rollout import ShapeSpec

DAPO_EPS_HIGH = 0.28  # Yu et al. 2025 (DAPO) clip-higher upper range
CLIP_EPS_DEFAULT = 0.2  # PPO/GRPO clip range when no clip flag is given
GSPO_EPS = (3e-4, 4e-4)  # Zheng et al. 2025 (GSPO): sequence-ratio clip range (low, high)


def kl_metric_key(kl_estimator: str) -> str:
    """Metric key of the per-token KL a --kl_estimator puts in the loss (and that --target_kl,
    --reset_kl_above and the reports read): kl/<estimator>, with simple spelled k1."""
    return "kl/k1" if kl_estimator in ("simple", "k1") else f"kl/{kl_estimator}"


@dataclass(frozen=True)
class KLSpec(Spec):
    """The KL term (algorithms/kl_term.KLTerm): estimator, k2 ratio, placement, reward form, and
    its anchor (pi_ref for Variant A, pi_old for Variant B)."""

    SECTION: ClassVar[str] = "KL and reference"

    kl_estimator: KLEstimator = "k3"
    """Estimator in the loss (r = pi_anchor/pi_theta). k3 = r - 1 - log r (default; GRPO's, verl's default low_var_kl): its value estimates KL(pi||anchor) but its in-loss gradient is that of the reverse KL(anchor||pi). k3_ratio = (pi_theta/pi_old) * k3: same value on-policy, gradient of KL(pi||anchor) (TRL 1.16's default use_bias_correction_kl when beta > 0; slime). simple = k1 = logp_theta - logp_anchor: zero expected gradient, so with it Variant A, Variant B and every reset give identical updates (see README). k2 = 0.5*(log r)^2 (see --k2_mode): gradient of KL(pi||anchor). full = exact KL over the vocabulary. k1/k2/k3 are logged every step (docs/losses.md)."""
    k2_mode: Literal["theta_over_ref", "ref_over_old"] = "theta_over_ref"
    """k2 ratio. theta_over_ref: differentiable 0.5*(log pi_theta/pi_ref)^2. ref_over_old: the ProRL-v2 blog's x = exp(clamp(log pi_ref/pi_old)) as written; it is constant in theta inside a rollout, so as a loss term it adds no gradient (its value is logged as kl/ref_over_old_k2 every step either way)."""
    kl_in: Literal["loss", "reward"] = "loss"
    """Place the KL penalty in the loss (beta * KL_t added to each token's loss), or in the reward (see --kl_reward_form), computed between logp_old and logp_ref at rollout time."""
    kl_reward_form: Literal["token", "sequence"] = "token"
    """--kl_in reward only. token (default): REINFORCE++ (Hu 2025) as OpenRLHF does it: -beta*KL_t on every token, return-to-go, so token t's advantage sees r - beta*sum_{s>=t} KL_s (group baselines act on the outcome reward first; reinforce_pp whitens the token returns over the batch); advantages become per token [N, T]. sequence: r - beta*sum_t KL_t, one shaped reward per sequence before the advantage estimator (TRL 1.16 RLOOTrainer's form)."""
    variant: str = copy_of(ReferenceSpec, "variant")

    @property
    def estimator(self) -> str:
        """--kl_estimator with simple spelled k1 (the same estimator)."""
        return "k1" if self.kl_estimator == "simple" else self.kl_estimator

    @property
    def placement(self) -> str:
        return self.kl_in

    @property
    def reward_form(self) -> str:
        return self.kl_reward_form

    @property
    def anchor(self) -> str:
        """What the KL is measured against: ref (Variant A) or old (Variant B, no reference)."""
        return "old" if self.variant == "B" else "ref"

    @property
    def metric_key(self) -> str:
        return kl_metric_key(self.kl_estimator)

    def check(self) -> None:
        if self.kl_in == "reward" and self.kl_estimator in ("full", "k3_ratio"):
            raise ConfigError(
                "kl_estimator",
                f"{self.kl_estimator} is only available with --kl_in loss (full needs "
                "logits; k3_ratio's ratio pi/pi_old is 1 at rollout time, use k3)",
            )
        if self.kl_in != "reward" and self.kl_reward_form != "token":
            raise ConfigError("kl_reward_form", f"only applies to --kl_in reward (got --kl_in {self.kl_in})")
        if self.kl_in == "reward" and self.variant == "B":
            raise ConfigError(
                "kl_in",
                "reward subtracts beta*KL(pi_old || pi_ref) from the rewards and needs a "
                "reference model; Variant B (--variant B) has none. Use --kl_in loss or --variant A",
            )
        if self.k2_mode != "theta_over_ref" and self.kl_estimator != "k2":
            raise ConfigError("k2_mode", f"{self.k2_mode} only applies to --kl_estimator k2 (got {self.kl_estimator})")


@dataclass(frozen=True)
class ObjectiveSpec(Spec):
    """Advantages and the per-token loss: estimator, policy loss and its clip bounds, aggregation,
    TIS, overlong handling, the KL term and its coefficient."""

    SECTION: ClassVar[str] = "loss"

    adv: Adv = "grpo"
    """Advantage estimator over rewards[B,G] (maxrl: (r - mean_g) / (mean_g + eps); rft: the raw rewards). gae: PPO with a critic, a value model (a copy of the policy after the warm start with a linear value head on its final hidden states, its own Adam) and per-token GAE(--gamma, --lam) advantages; the clipped value loss, times --vf_coef, joins the policy loss (docs/losses.md)."""
    loss: Loss = "grpo_clip"
    """Per-token policy loss (noclip: -ratio * A, unclipped)."""
    clip_eps: float = -1.0
    """PPO/GRPO clip range epsilon (eps_low = eps_high = clip_eps unless those are given). -1: 0.2, except with --loss gspo, where no clip flag at all means the GSPO paper's 3e-4 (low) / 4e-4 (high) on the sequence ratio. The values used are config.json's derived.eps_low / derived.eps_high."""
    eps_low: float = -1.0
    """Lower clip range (ratio >= 1 - eps_low); -1 means --clip_eps."""
    eps_high: float = -1.0
    """Upper clip range (ratio <= 1 + eps_high); -1 means --clip_eps, except with --loss dapo where it means DAPO's clip-higher 0.28 (and with --loss gspo and no clip flag, 4e-4). With --loss cispo it is the only bound: the IS weight is truncated at 1 + eps_high (MiniMax-M1)."""
    dual_clip_c: float = 0.0
    """Dual-clip constant c > 1 for negative advantages (Ye et al. 2020); 0 disables."""
    loss_agg: LossAgg = "auto"
    """How the per-token loss matrix is reduced to a scalar. auto: seq-mean-token-mean (a mean over sequences, as the GSPO paper) with --loss gspo, token-mean otherwise; the value used is config.json's derived.loss_agg."""
    tis_cap: float = 0.0
    """Truncated importance sampling cap C between sampler and learner logprobs; 0 disables."""
    overlong: Literal["none", "filter", "shape"] = "none"
    """DAPO overlong handling: mask truncated responses from the loss, or soft length shaping of rewards."""
    beta: float = flag(0.05, section="KL and reference")
    """KL coefficient (initial value when --target_kl is set)."""
    target_kl: float = flag(0.0, section="KL and reference")
    """Adaptive KL controller target (Ziegler et al. 2019); 0 keeps beta fixed."""
    kl_horizon: int = flag(10000, section="KL and reference")
    """Adaptive KL controller horizon, in samples: after each step beta *= 1 + clip(kl/target - 1, -0.2, 0.2) * N / horizon with N = batch_size*group_size sequences (Ziegler et al. 2019; TRL, OpenRLHF). Must exceed 0.2*N so beta stays positive."""
    grad_parts_every: int = flag(0, section="KL and reference")
    """Every K steps (0: never), on the update's last minibatch: the gradient norms of the policy-gradient part and of the beta * KL part of the loss and their cosine (metrics grad/pg_norm, grad/kl_norm, grad/kl_over_pg, grad/cos_pg_kl; docs/metrics.md), each from its own backward pass over the same graph, so the update's bits are unchanged; costs two backward passes of one minibatch per K steps."""
    shape: ShapeSpec = sub(ShapeSpec)
    logprob_chunk: int = copy_of(ModelSpec, "logprob_chunk")
    kl: KLSpec = sub(KLSpec)

    @property
    def _gspo_paper_clip(self) -> bool:
        """--loss gspo with no clip flag at all: the GSPO paper's 3e-4 / 4e-4."""
        return self.loss == "gspo" and self.clip_eps < 0 and self.eps_low < 0 and self.eps_high < 0

    @property
    def eps_lo(self) -> float:
        """Effective lower clip range."""
        if self.eps_low >= 0:
            return self.eps_low
        if self._gspo_paper_clip:
            return GSPO_EPS[0]
        return self.clip_eps if self.clip_eps >= 0 else CLIP_EPS_DEFAULT

    @property
    def eps_hi(self) -> float:
        """Effective upper clip range."""
        if self.eps_high >= 0:
            return self.eps_high
        if self.loss == "dapo":
            return DAPO_EPS_HIGH
        if self._gspo_paper_clip:
            return GSPO_EPS[1]
        return self.clip_eps if self.clip_eps >= 0 else CLIP_EPS_DEFAULT

    @property
    def clip_used(self) -> dict:
        """The clip bounds the chosen loss actually applies (config.json derived): None where the loss
        has no such bound (reinforce, noclip: none; cispo: only eps_high, the IS-weight truncation)."""
        lo = None if self.loss in ("reinforce", "noclip", "cispo") else self.eps_lo
        hi = None if self.loss in ("reinforce", "noclip") else self.eps_hi
        return {"eps_low": lo, "eps_high": hi}

    @property
    def loss_agg_resolved(self) -> str:
        """--loss_agg after resolving auto (seq-mean-token-mean for gspo, else token-mean)."""
        if self.loss_agg != "auto":
            return self.loss_agg
        return "seq-mean-token-mean" if self.loss == "gspo" else "token-mean"

    def check(self) -> None:
        self.positive("kl_horizon")
        self.nonneg("beta", "target_kl", "tis_cap", "dual_clip_c", "grad_parts_every")
        if self.clip_eps != -1.0 and not 0.0 < self.clip_eps < 1.0:
            raise ConfigError("clip_eps", f"must be -1 (the loss's default) or in (0, 1), got {self.clip_eps}")
        for n in ("eps_low", "eps_high"):
            v = getattr(self, n)
            if v != -1.0 and not 0.0 < v < 1.0 and not (n == "eps_high" and v >= 1.0):
                raise ConfigError(n, f"must be -1 (use --clip_eps) or in (0, 1), got {v}")
        if self.eps_low != -1.0 and self.eps_low >= 1.0:
            raise ConfigError("eps_low", f"must be < 1, got {self.eps_low}")
        if self.dual_clip_c != 0.0 and self.dual_clip_c <= 1.0:
            raise ConfigError("dual_clip_c", f"must be 0 (off) or > 1, got {self.dual_clip_c}")
        if self.tis_cap != 0.0 and self.tis_cap < 1.0:
            raise ConfigError("tis_cap", f"must be 0 (off) or >= 1, got {self.tis_cap}")
        rows = self.shape.rows
        if self.target_kl > 0 and self.kl_horizon <= 0.2 * rows:
            raise ConfigError(
                "kl_horizon",
                f"must exceed 0.2 * batch_size * group_size = {0.2 * rows:g} samples with --target_kl "
                f"(each step moves beta by up to 20% * N / horizon), got {self.kl_horizon}",
            )
        self._check_loss()
        if self.target_kl > 0 and self.beta <= 0:
            raise ConfigError("beta", "the adaptive KL controller (--target_kl) needs an initial --beta > 0")

    def _check_loss(self) -> None:
        """Loss flags that the chosen --loss would ignore are errors, not no-ops."""
        if self.dual_clip_c and self.loss in ("cispo", "reinforce", "noclip"):
            raise ConfigError(
                "dual_clip_c", f"applies to the clipped surrogates (grpo_clip, dapo, gspo), not --loss {self.loss}"
            )
        for n in ("clip_eps", "eps_low", "eps_high"):
            if getattr(self, n) != -1.0 and self.loss in ("reinforce", "noclip"):
                raise ConfigError(n, f"--loss {self.loss} has no clip; drop the flag or pick a clipped loss")
        if self.eps_low != -1.0 and self.loss == "cispo":
            raise ConfigError(
                "eps_low",
                "--loss cispo truncates the IS weight from above only (MiniMax-M1): "
                "set --eps_high (or --clip_eps), not --eps_low",
            )
