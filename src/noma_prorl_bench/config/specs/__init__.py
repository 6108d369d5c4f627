"""The spec tree: the configuration of a run, one frozen spec per stage, each owning its flags.

Every flag is declared once, in the spec of the stage that acts on it (its type, default, `--help`
and checks: config/specs/base.py says how); specs compose (`RunSpecs` holds them all; stages that
need the rollout's shape share one `ShapeSpec`; the critic holds the run's `OptimizerSpec` and
`ResetSpec`). The flat `RunConfig` (config/run_config.py, one field per flag, what config.json
holds) and the command line are generated from this tree; `RunSpecs.from_config(cfg)` builds the
tree from a flat config, each spec checking itself, and config/validate.py adds the rules that
span two specs. A stage never reads the `RunConfig`: it gets its spec.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from noma_prorl_bench.config.specs.base import Spec, build, owned_fields, spec_docs, spec_sections
from noma_prorl_bench.config.specs.critic import CriticSpec
from noma_prorl_bench.config.specs.engine import EngineSpec
from noma_prorl_bench.config.specs.evaluation import EvalSpec
from noma_prorl_bench.config.specs.growth import GrowthSpec
from noma_prorl_bench.config.specs.model import ModelSpec, WarmStartSpec
from noma_prorl_bench.config.specs.objective import KLSpec, ObjectiveSpec
from noma_prorl_bench.config.specs.optimizer import OptimizerSpec
from noma_prorl_bench.config.specs.reference import ReferenceSpec
from noma_prorl_bench.config.specs.resets import ResetSpec
from noma_prorl_bench.config.specs.rollout import RolloutSpec, ShapeSpec
from noma_prorl_bench.config.specs.run import CheckpointSpec, RunLevelSpec
from noma_prorl_bench.config.specs.task import TaskSpec


@dataclass(frozen=True)
class RunSpecs:
    """Every stage's spec of one run (the root of the tree)."""

    run: RunLevelSpec
    task: TaskSpec
    model: ModelSpec
    warm_start: WarmStartSpec
    rollout: RolloutSpec
    reference: ReferenceSpec
    objective: ObjectiveSpec
    optimizer: OptimizerSpec
    critic: CriticSpec
    resets: ResetSpec
    growth: GrowthSpec
    evaluation: EvalSpec
    engine: EngineSpec
    checkpoints: CheckpointSpec

    @property
    def seed(self) -> int:
        return self.run.seed

    @property
    def threads(self) -> int:
        return self.run.threads

    @property
    def steps(self) -> int:
        return self.run.steps

    @classmethod
    def from_config(cls, cfg: Any) -> RunSpecs:
        """The tree of a flat config (a RunConfig): each spec built once and checked (ConfigError on
        the first bad value); specs that hold another share its one instance."""
        made: dict = {}
        return cls(**{name: build(tp, cfg, made) for name, tp in ROOT.items()})


#: the root's specs by attribute name
ROOT: dict[str, type] = {
    "run": RunLevelSpec,
    "task": TaskSpec,
    "model": ModelSpec,
    "warm_start": WarmStartSpec,
    "rollout": RolloutSpec,
    "reference": ReferenceSpec,
    "objective": ObjectiveSpec,
    "optimizer": OptimizerSpec,
    "critic": CriticSpec,
    "resets": ResetSpec,
    "growth": GrowthSpec,
    "evaluation": EvalSpec,
    "engine": EngineSpec,
    "checkpoints": CheckpointSpec,
}

#: every spec class, in the order their flags stand in RunConfig (and config.json)
SPECS: tuple[type, ...] = (
    RunLevelSpec,
    TaskSpec,
    ModelSpec,
    OptimizerSpec,
    WarmStartSpec,
    ShapeSpec,
    RolloutSpec,
    ObjectiveSpec,
    CriticSpec,
    ReferenceSpec,
    KLSpec,
    ResetSpec,
    GrowthSpec,
    EngineSpec,
    CheckpointSpec,
    EvalSpec,
)


def owner(flag: str) -> type:
    """The spec that owns `flag`."""
    return next(cls for cls in SPECS if flag in {f.name for f in owned_fields(cls)})


def flag_docs() -> dict[str, str]:
    """Every flag's help, from its owner."""
    return {k: v for cls in SPECS for k, v in spec_docs(cls).items()}


def flag_sections() -> dict[str, str]:
    """Every flag's `--help` section, from its owner."""
    return {k: v for cls in SPECS for k, v in spec_sections(cls).items()}


__all__ = [
    "SPECS",
    "CheckpointSpec",
    "CriticSpec",
    "EngineSpec",
    "EvalSpec",
    "GrowthSpec",
    "KLSpec",
    "ModelSpec",
    "ObjectiveSpec",
    "OptimizerSpec",
    "ReferenceSpec",
    "ResetSpec",
    "RolloutSpec",
    "RunLevelSpec",
    "RunSpecs",
    "ShapeSpec",
    "Spec",
    "TaskSpec",
    "WarmStartSpec",
    "build",
    "flag_docs",
    "flag_sections",
    "owner",
]
