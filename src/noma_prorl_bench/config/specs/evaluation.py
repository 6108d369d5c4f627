"""Evaluation (`EvalSpec`): when, pass@k samples, the drift monitors' log-prob pass."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from noma_prorl_bench.config.specs.base import Spec, copy_of
from noma_prorl_bench.config.specs.model import ModelSpec
from noma_prorl_bench.config.specs.rollout import RolloutSpec, ShapeSpec
from noma_prorl_bench.config.specs.run import RunLevelSpec


@dataclass(frozen=True)
class EvalSpec(Spec):
    """Evaluation: when, pass@k samples (drawn like the rollouts), the drift monitors' log-prob pass."""

    SECTION: ClassVar[str] = "run and outputs"

    eval_every: int = 10
    """Evaluate every N steps: greedy validation reward, drift monitors (kl/to_init, kl/to_prev), samples."""
    eval_samples: int = 0
    """K > 0: at each evaluation also sample K completions per validation prompt (at --temperature) and log reward/val_pass@k for k = 1, 2, 4, ..., K with the unbiased estimator of Chen et al. 2021, 1 - C(n-c, k)/C(n, k) (a sample is correct when it earns the full reward), beside the greedy reward/val. Costs K sampled generations per prompt per evaluation. 0: off."""
    steps: int = copy_of(RunLevelSpec, "steps")
    temperature: float = copy_of(ShapeSpec, "temperature")
    sample_draw: str = copy_of(RolloutSpec, "sample_draw")
    logprob_chunk: int = copy_of(ModelSpec, "logprob_chunk")
    seed: int = copy_of(RunLevelSpec, "seed")

    def check(self) -> None:
        self.positive("eval_every")
        self.nonneg("eval_samples")
