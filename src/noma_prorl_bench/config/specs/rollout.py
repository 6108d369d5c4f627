"""The rollout's shape (`ShapeSpec`: B prompts x G samples at a temperature, shared by every stage
that needs it) and the collector (`RolloutSpec`: how tokens are drawn, DAPO's refill)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from noma_prorl_bench.config.choices import SampleDraw
from noma_prorl_bench.config.errors import ConfigError
from noma_prorl_bench.config.specs.base import Spec, flag, sub


@dataclass(frozen=True)
class ShapeSpec(Spec):
    """B prompts x G samples per step at one temperature."""

    SECTION: ClassVar[str] = "sampling"

    batch_size: int = 16
    """Prompts per step (B)."""
    group_size: int = 8
    """Samples per prompt (G); N = B*G sequences per step."""
    temperature: float = 1.0
    """Sampling temperature; log-probs of policy, reference and behaviour all use logits/temperature."""

    @property
    def rows(self) -> int:
        """N = B*G sequences per step."""
        return self.batch_size * self.group_size

    def check(self) -> None:
        self.positive("batch_size", "group_size")
        if not self.temperature > 0:
            raise ConfigError("temperature", f"must be > 0, got {self.temperature}")


@dataclass(frozen=True)
class RolloutSpec(Spec):
    """The collector (rollout/collector.py): the shape, the draw, DAPO refill."""

    SECTION: ClassVar[str] = "sampling"

    sample_draw: SampleDraw = "exponential"
    """How the sampler draws each token from softmax(logits / temperature) (training rollouts and --eval_samples; greedy evaluation draws nothing). exponential: torch.multinomial's exponential race (one exponential variate per vocabulary entry per row, the same draw as transformers' generate; every earlier run used it). inverse_cdf: one float64 uniform variate per row, searched in the row's cumulative distribution (float32 sums within blocks of 256 entries, float64 across them). The same distribution, a different use of the seeded generator: the tokens of a seed differ between the two. With a large vocabulary inverse_cdf is much cheaper (SmolLM2, 49,152 entries, 16 rows: 0.8 vs 14 ms per token; docs/performance.md)."""
    dynamic_sampling: int = flag(0, section="loss")
    """1: DAPO dynamic sampling (drop groups with zero reward spread, refill from oversampled prompts)."""
    shape: ShapeSpec = sub(ShapeSpec)

    def check(self) -> None:
        self.binary("dynamic_sampling")
