"""LoRA adapters and their rank growth (`GrowthSpec`, training/growth_loop.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from noma_prorl_bench.config.choices import GrowthMigration
from noma_prorl_bench.config.errors import ConfigError
from noma_prorl_bench.config.specs.base import Spec, copy_of
from noma_prorl_bench.config.specs.resets import ResetSpec
from noma_prorl_bench.config.specs.run import RunLevelSpec

#: the flags that act only with --enable_growth 1
GROWTH_FLAGS = (
    "grow_every",
    "rank_step",
    "initial_rank",
    "max_rank",
    "grow_on",
    "grow_patience",
    "growth_migration",
    "adapter_targets",
    "lora_alpha",
)


@dataclass(frozen=True)
class GrowthSpec(Spec):
    """LoRA adapters and their rank growth (training/growth_loop.py)."""

    SECTION: ClassVar[str] = "growth"

    enable_growth: int = 0
    """1: after the warm start, wrap the --adapter_targets layers in LoRA adapters (W x + s B A x, s = lora_alpha / initial_rank fixed) and FREEZE the base model: only the adapters train, so RL capacity is the adapter rank. The rank grows during training (--grow_on); the reference (Variant A) is a copy of the adapted policy."""
    grow_every: int = 0
    """Grow the adapter rank after every N-th step (--grow_on schedule; required > 0 there, must stay 0 otherwise). Never after the last step."""
    rank_step: int = 4
    """Rank added at each growth (capped at --max_rank)."""
    initial_rank: int = 4
    """Adapter rank at the start."""
    max_rank: int = 64
    """Adapter rank cap; growth stops there (equal to --initial_rank: fixed-rank adapters, no growth)."""
    grow_on: Literal["schedule", "reset", "stall"] = "schedule"
    """When to grow: schedule (every --grow_every steps); reset (right after each reference reset, which needs a reset trigger: --reset_every, --reset_kl_above, --reset_on_stall or a preset); stall (after --grow_patience validations without beating the best by --stall_min_delta)."""
    grow_patience: int = 3
    """--grow_on stall: validations (every --eval_every steps) without improvement before a growth; the count then restarts."""
    growth_migration: GrowthMigration = "preserve"
    """Optimizer state at growth: preserve (old block of every Adam moment copied, new block zero, step kept); reset (same optimizer, all state cleared); naive (new parameters and a new optimizer: state lost, the common PyTorch mistake; the LR scheduler is rebuilt at the same step); noma_flat (NOMA's flat-prefix copy of values and moments: scrambles B [out, r])."""
    adapter_targets: str = "head"
    """Comma-separated nn.Linear names that get adapters: exact dotted names (head), dotted suffixes (q_proj matches blocks.*.attn.q_proj) or globs (*proj)."""
    lora_alpha: float = 16.0
    """Adapter scale numerator: s = lora_alpha / initial_rank, fixed when the rank grows (so growth leaves the policy unchanged)."""
    stall_min_delta: float = copy_of(ResetSpec, "stall_min_delta")
    seed: int = copy_of(RunLevelSpec, "seed")
    steps: int = copy_of(RunLevelSpec, "steps")

    def check(self) -> None:
        """Growth flags: only with --enable_growth 1, each --grow_on with its own trigger."""
        self.binary("enable_growth")
        if not self.enable_growth:
            for n in GROWTH_FLAGS:
                if self.changed(n):
                    raise ConfigError(n, "only applies with --enable_growth 1")
            return
        self.positive("initial_rank", "rank_step", "grow_patience")
        self.nonneg("grow_every")
        if self.max_rank < self.initial_rank:
            raise ConfigError("max_rank", f"must be >= --initial_rank {self.initial_rank}, got {self.max_rank}")
        if not self.lora_alpha > 0:
            raise ConfigError("lora_alpha", f"must be > 0, got {self.lora_alpha}")
        if not [t for t in self.adapter_targets.split(",") if t.strip()]:
            raise ConfigError("adapter_targets", "needs at least one module name")
        if self.grow_on == "schedule" and self.grow_every <= 0:
            raise ConfigError("grow_every", "--grow_on schedule needs --grow_every N > 0")
        if self.grow_on != "schedule" and self.grow_every:
            raise ConfigError("grow_every", f"only applies to --grow_on schedule (got --grow_on {self.grow_on})")
        if self.grow_on != "stall" and self.changed("grow_patience"):
            raise ConfigError("grow_patience", f"only applies to --grow_on stall (got --grow_on {self.grow_on})")
