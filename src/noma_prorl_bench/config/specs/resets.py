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
    """Reset target: the current policy (ProRL v2), the best checkpoint by validation reward (ProRL v1; the policy is restored too), or elastic: Elastic Reset (Noukhovitch et al. 2023), policy <- its EMA (--elastic_decay), then EMA <- the initial policy; the KL reference stays the initial policy."""
    elastic_decay: float = 0.995
    """--reset_to elastic: decay d of the policy's EMA, updated after every step: ema <- d*ema + (1-d)*pi; in (0, 1)."""
    ref_update: RefUpdate = "hard"
    """Reference update rule: hard copy or Polyak mix ref <- a*pi + (1-a)*ref at a reset; ema: no resets, a moving reference ref <- tau*ref + (1-tau)*pi every --ref_ema_every steps (EMA-PG)."""
    ref_mix_alpha: float = 0.6
    """Polyak mixing weight a (TRL sync_ref_model uses 0.6)."""
    ref_ema_tau: float = 0.95
    """--ref_update ema: weight tau of the old reference, in (0, 1)."""
    ref_ema_every: int = 10
    """--ref_update ema: steps between reference updates (after steps N, 2N, ...), >= 1."""
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

    @property
    def moving_reference(self) -> bool:
        """Whether the reference moves without resets (--ref_update ema)."""
        return self.ref_update == "ema"

    @property
    def elastic(self) -> bool:
        """Whether resets are Elastic Reset (--reset_to elastic: the policy's EMA is kept every step)."""
        return self.reset_to == "elastic"

    def check(self) -> None:
        self.nonneg("reset_every", "reset_kl_above", "reset_kl_min_gap", "reset_on_stall", "stall_min_delta")
        if not 0.0 <= self.soft_factor <= 1.0:
            raise ConfigError("soft_factor", f"must be in [0, 1], got {self.soft_factor}")
        if not 0.0 < self.ref_mix_alpha <= 1.0:
            raise ConfigError("ref_mix_alpha", f"must be in (0, 1], got {self.ref_mix_alpha}")
        self.binary("reset_opt_step", "reset_lr_schedule", "reset_kl_coef")
        for n in ("ref_ema_tau", "elastic_decay"):
            if not 0.0 < getattr(self, n) < 1.0:
                raise ConfigError(n, f"must be in (0, 1) (exclusive), got {getattr(self, n)}")
        if self.ref_ema_every < 1:
            raise ConfigError("ref_ema_every", f"must be an integer >= 1, got {self.ref_ema_every}")
        self._check_anchors()

    def _check_anchors(self) -> None:
        """The moving reference (ema) and Elastic Reset: their flags alone are errors, not no-ops, and
        combinations with nothing to do or two rules for one reference are refused."""
        if self.ref_update != "ema":
            for n in ("ref_ema_tau", "ref_ema_every"):
                if self.changed(n):
                    raise ConfigError(n, f"only applies to --ref_update ema (got --ref_update {self.ref_update})")
        elif self.any_trigger:
            first = next(n for n in ("reset_every", "reset_kl_above", "reset_on_stall") if getattr(self, n))
            raise ConfigError(
                first,
                "reset triggers need --ref_update hard or polyak; --ref_update ema moves the reference "
                "every --ref_ema_every steps by itself (drop the trigger or pick hard/polyak)",
            )
        if self.reset_to != "elastic":
            if self.changed("elastic_decay"):
                raise ConfigError(
                    "elastic_decay", f"only applies to --reset_to elastic (got --reset_to {self.reset_to})"
                )
            return
        if self.ref_update != "hard":
            raise ConfigError(
                "ref_update",
                f"must stay hard with --reset_to elastic (its KL reference is the initial policy and is "
                f"never updated), got {self.ref_update}",
            )
        if not self.any_trigger:
            raise ConfigError(
                "reset_to",
                "elastic needs a reset trigger (--reset_every, --reset_kl_above or --reset_on_stall): "
                "without one it never resets",
            )
