"""The execution engine (`EngineSpec`): local, or Ray actors colocated or asynchronous."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from noma_prorl_bench.config.errors import ConfigError
from noma_prorl_bench.config.specs.base import Spec

#: engine flag -> the engines it acts on (a flag the chosen engine ignores is an error)
ENGINE_ONLY = {
    "steps_per_rollout": ("ray_colocated",),
    "max_staleness": ("ray_async",),
    "num_generators": ("ray_async",),
    "ref_placement": ("ray_colocated", "ray_async"),
    "ray_address": ("ray_colocated", "ray_async"),
    "actor_timeout": ("ray_colocated", "ray_async"),
    "weight_sync": ("ray_colocated", "ray_async"),
}


@dataclass(frozen=True)
class EngineSpec(Spec):
    """Which engine runs the stages, and the Ray engines' options."""

    SECTION: ClassVar[str] = "engines"

    engine: Literal["local", "ray_colocated", "ray_async"] = "local"
    """Execution engine: local (one process, no Ray); ray_colocated (Generator and Learner actors on one node, generate -> train -> sync in turn); ray_async (generation of the next batches overlaps training, bounded by --max_staleness). See docs/ray.md."""
    ref_placement: Literal["learner", "generator", "own_actor"] = "learner"
    """Ray engines, Variant A: where pi_ref scores logp_ref. learner: inside the learner's update (as the local engine); generator: on the rollout workers right after sampling; own_actor: a separate ReferenceScorer actor. Remote placements compute it once per batch (needs --ref_compute cached)."""
    steps_per_rollout: int = 1
    """ray_colocated, K: the generator samples K step-batches with one policy version, then the learner takes K steps (one per batch, each ppo_epochs x minibatches clipped updates, logp_old from the sampling version) before the next weight sync. With --ppo_epochs 1 --minibatches 1 this is K optimizer steps per rollout; K=1 equals --engine local."""
    max_staleness: int = 1
    """ray_async, S: a batch sampled by policy version w is trained at learner version <= w + S; the driver delays generation (never discards) to keep it. 0 = synchronous."""
    num_generators: int = 1
    """ray_async: Generator actors sampling in parallel (at most max(1, --max_staleness) sample at once: S batches may run ahead of the one in training)."""
    ray_address: str = ""
    """Ray engines: join an existing cluster at this address (e.g. auto, or HOST:6379 after `ray start --head`); empty starts a private local one."""
    actor_timeout: float = 120.0
    """Ray engines: seconds an actor call may take before the actor is declared hung; a dead or hung actor ends the run with exit code 1."""
    weight_sync: Literal["object_store", "nccl"] = "object_store"
    """Ray engines: weight transport from learner to generators. object_store (numpy arrays, CPU); nccl needs CUDA GPUs (one per actor) and is not available in this build."""

    def check(self) -> None:
        for n, engines in ENGINE_ONLY.items():
            if self.changed(n) and self.engine not in engines:
                raise ConfigError(n, f"applies to --engine {' or '.join(engines)}, not {self.engine}")
        self.positive("steps_per_rollout", "num_generators")
        self.nonneg("max_staleness")
        if not self.actor_timeout > 0:
            raise ConfigError("actor_timeout", f"must be > 0 seconds, got {self.actor_timeout}")
        if self.weight_sync == "nccl":
            raise ConfigError(
                "weight_sync",
                "nccl needs CUDA GPUs (one per actor) and is not implemented in this build; use object_store",
            )
