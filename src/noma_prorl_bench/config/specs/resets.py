"""Reference resets (`ResetSpec`): triggers, target, the reference's update rule and what happens
to the optimizer side. The TRL plug-in's `ResetConfig` is this class."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

from noma_prorl_bench.config.choices import OptReset, RefUpdate, ResetTo
from noma_prorl_bench.config.errors import ConfigError
from noma_prorl_bench.config.specs.base import Spec


@dataclass(frozen=True)
class ResetSpec(Spec):
    """Reference resets: triggers, target, reference rule and what happens to the optimizer side."""

    SECTION: ClassVar[str] = "resets"

    reset_every: int = 0
    """Periodic reference reset every N steps (0: never)."""
    reset_kl_above: float = 0.0
    """Reset after a step whose mean KL to pi_ref, by the --kl_estimator in use (kl/k1 for simple, kl/k2, kl/k3, kl/k3_ratio, kl/full), exceeds X (0: off)."""
    reset_kl_min_gap: int = 20
    """A KL-spike reset needs at least this many steps since the previous reset of any reason (or the start)."""
    reset_on_stall: int = 0
    """Reset after PATIENCE validations without improvement (0: off)."""
    stall_min_delta: float = 0.0
    """Improvement over the best validation reward that counts as progress."""
    reset_to: ResetTo = "current"
    """Reset target: the current policy (ProRL v2) or the best checkpoint by validation reward (ProRL v1; the policy is restored too)."""
    ref_update: RefUpdate = "hard"
    """Reference update rule at a reset: hard copy or Polyak mix ref <- a*pi + (1-a)*ref."""
    ref_mix_alpha: float = 0.6
    """Polyak mixing weight a (TRL sync_ref_model uses 0.6)."""
    opt_reset: OptReset = "keep"
    """Adam moments at a reset: keep; hard (moments, step, schedule cleared); soft (m,v *= soft_factor); asym (m *= soft_factor, v kept)."""
    soft_factor: float = 0.2
    """Factor for --opt_reset soft/asym, in [0, 1]."""
    reset_opt_step: int = 0
    """1: reset Adam's step count at a reset (bias correction restarts)."""
    reset_lr_schedule: int = 0
    """1: restart the LR schedule (warmup) at a reset."""
    reset_kl_coef: int = 0
    """1: reset the adaptive KL coefficient to its initial value at a reset."""

    @classmethod
    def from_preset(cls, name: str, **overrides: Any) -> ResetSpec:
        """The reset preset `name` (config/presets.PRESETS: prorl_v1, prorl_v2, trl_sync, noma_soft),
        `overrides` winning, as `--preset NAME --flag value` does on the command line."""
        from noma_prorl_bench.config.presets import PRESETS  # noqa: PLC0415  (presets name the specs' flags)

        if name not in PRESETS:
            raise ConfigError("preset", f"must be one of {', '.join(PRESETS)}; got {name!r}")
        unknown = set(overrides) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise ConfigError(sorted(unknown)[0], "is not a reset switch (ResetSpec has no such field)")
        return cls(**{**PRESETS[name], **overrides})

    @property
    def any_trigger(self) -> bool:
        """Whether a trigger is set (periodic, KL spike or stalled validation)."""
        return bool(self.reset_every or self.reset_kl_above or self.reset_on_stall)

    @property
    def needs_eval(self) -> bool:
        """Whether a switch reads evaluations (the stall trigger, the best-checkpoint target)."""
        return self.reset_on_stall > 0 or self.reset_to == "best"

    def check(self) -> None:
        self.nonneg("reset_every", "reset_kl_above", "reset_kl_min_gap", "reset_on_stall", "stall_min_delta")
        if not 0.0 <= self.soft_factor <= 1.0:
            raise ConfigError("soft_factor", f"must be in [0, 1], got {self.soft_factor}")
        if not 0.0 < self.ref_mix_alpha <= 1.0:
            raise ConfigError("ref_mix_alpha", f"must be in (0, 1], got {self.ref_mix_alpha}")
        self.binary("reset_opt_step", "reset_lr_schedule", "reset_kl_coef")
