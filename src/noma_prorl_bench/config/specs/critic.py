"""PPO's critic (`CriticSpec`, --adv gae): GAE, the clipped value loss, the critic's own Adam on the
policy's schedule, and its treatment at a reference reset."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from noma_prorl_bench.config.choices import CriticReset
from noma_prorl_bench.config.errors import ConfigError
from noma_prorl_bench.config.specs.base import Spec, copy_of, sub
from noma_prorl_bench.config.specs.objective import ObjectiveSpec
from noma_prorl_bench.config.specs.optimizer import OptimizerSpec
from noma_prorl_bench.config.specs.resets import ResetSpec

CRITIC_FLAGS = ("gamma", "lam", "whiten_adv", "vf_coef", "cliprange_value", "critic_lr", "critic_reset")


@dataclass(frozen=True)
class CriticSpec(Spec):
    """PPO with a critic (--adv gae; algorithms/critic.py, training/critic.py): its flags, the
    policy's optimizer (whose schedule and clipping its Adam follows) and the reset switches
    (`follow` applies the policy's --opt_reset treatment to it)."""

    SECTION: ClassVar[str] = "loss"

    gamma: float = 1.0
    """--adv gae only: discount gamma in [0, 1] of the per-token rewards (the task reward at the last response token)."""
    lam: float = 0.95
    """--adv gae only: GAE lambda in [0, 1] (1: Monte-Carlo returns minus values; 0: the one-step TD residual)."""
    whiten_adv: int = 1
    """--adv gae only: 1: whiten the GAE advantages over the batch's response tokens (masked mean 0, std 1), as TRL's PPOTrainer and OpenRLHF do; 0: raw."""
    vf_coef: float = 0.1
    """--adv gae only: value-loss coefficient c_v > 0 in loss = policy loss + beta*KL + c_v * value loss (TRL's vf_coef)."""
    cliprange_value: float = 0.2
    """--adv gae only: value clip range: value loss 0.5*max((V-R)^2, (clip(V, V_old-c, V_old+c)-R)^2) per token (TRL/OpenAI baselines); 0: unclipped 0.5*(V-R)^2."""
    critic_lr: float = -1.0
    """--adv gae only: base learning rate of the critic's Adam, which follows the policy's --lr_schedule and --warmup_steps (its gradients are clipped by --max_grad_norm on their own). -1: --lr; the value used is config.json's derived.critic_lr."""
    critic_reset: CriticReset = "keep"
    """--adv gae only: the critic at a reference reset. keep: weights and Adam state untouched; follow: its Adam and LR schedule get the policy's --opt_reset treatment (with --soft_factor, --reset_opt_step, --reset_lr_schedule); reinit: the critic is re-initialised from the current policy (value head zeroed), its Adam state cleared and its schedule restarted."""
    adv: str = copy_of(ObjectiveSpec, "adv")
    optimizer: OptimizerSpec = sub(OptimizerSpec)
    resets: ResetSpec = sub(ResetSpec)

    @property
    def enabled(self) -> bool:
        """True for --adv gae: the run has a critic."""
        return self.adv == "gae"

    @property
    def critic_lr_resolved(self) -> float:
        """--critic_lr after resolving -1 (--lr)."""
        return self.optimizer.lr if self.critic_lr < 0 else self.critic_lr

    def check(self) -> None:
        if not self.enabled:
            for n in CRITIC_FLAGS:
                if self.changed(n):
                    raise ConfigError(n, f"only applies with --adv gae (got --adv {self.adv})")
            return
        for n in ("gamma", "lam"):
            if not 0.0 <= getattr(self, n) <= 1.0:
                raise ConfigError(n, f"must be in [0, 1], got {getattr(self, n)}")
        if self.whiten_adv not in (0, 1):
            raise ConfigError("whiten_adv", f"invalid choice: {self.whiten_adv} (choose from 0, 1)")
        if not self.vf_coef > 0:
            raise ConfigError("vf_coef", f"must be > 0 with --adv gae, got {self.vf_coef}")
        if self.cliprange_value < 0:
            raise ConfigError("cliprange_value", f"must be >= 0 (0: unclipped), got {self.cliprange_value}")
        if not (self.critic_lr > 0 or self.critic_lr == -1):
            raise ConfigError("critic_lr", f"must be > 0, or -1 for --lr, got {self.critic_lr}")
