"""Validation of a `RunConfig`: each spec of the tree checks its own flags when it is built
(config/specs/), then the rules below, which span two specs, run in turn. The first invalid value
or combination raises `ConfigError` naming its flag (argparse-style, exit code 2); nothing is
written before validation passes.
"""

from __future__ import annotations

from typing import Any, Optional

from noma_prorl_bench.config.errors import ConfigError
from noma_prorl_bench.config.specs import RunSpecs
from noma_prorl_bench.config.specs.task import TEXT_TASKS

__all__ = ["ConfigError", "validate"]


def validate(cfg: Any, explicit: Optional[set] = None) -> RunSpecs:
    """Raise ConfigError on the first invalid value or combination; the run's specs otherwise."""
    if not cfg.outdir:
        raise ConfigError("outdir", "is required")
    sp = RunSpecs.from_config(cfg)
    _shape(sp)
    _task_and_model(sp)
    _variant(sp, explicit or set())
    _growth(sp)
    if sp.run.overwrite and sp.checkpoints.resume:
        raise ConfigError("resume", "continues the run in --outdir and --overwrite starts a new one: pass one of them")
    _engine(sp)
    _critic(sp)
    return sp


def _shape(sp: RunSpecs) -> None:
    """The rollout's shape against the updates and the advantages."""
    n = sp.rollout.shape.rows
    if sp.optimizer.minibatches > n:
        raise ConfigError("minibatches", f"must be <= batch_size*group_size = {n}")
    if sp.rollout.shape.group_size < 2:
        raise ConfigError(
            "group_size",
            f"must be >= 2 for --adv {sp.objective.adv} (advantages are group functions rewards[B,G] "
            "with an unbiased std)",
        )
    if sp.model.logprob_chunk and sp.objective.kl.kl_estimator == "full":
        raise ConfigError(
            "logprob_chunk",
            "cannot be used with --kl_estimator full, which needs the whole "
            "[n, T, V] logits; use 0 or another estimator",
        )


def _task_and_model(sp: RunSpecs) -> None:
    """Text tasks need a text model."""
    task = sp.task.task
    if task in TEXT_TASKS and not sp.model.is_hf:
        raise ConfigError("task", f"{task} is a text task and needs --model hf:PATH")
    if sp.task.is_rg and not sp.model.is_hf:
        raise ConfigError("task", f"{task} is a reasoning-gym text task and needs --model hf:PATH")


def _variant(sp: RunSpecs, explicit: set) -> None:
    """Variant B has no reference model: nothing that needs one."""
    ref, kl = sp.reference, sp.objective.kl
    if ref.variant == "B":
        if ref.ref_compute != "cached" and "ref_compute" in explicit:
            raise ConfigError(
                "ref_compute",
                f"{ref.ref_compute} needs a reference model; Variant B (--variant B) "
                "has none. Drop --ref_compute or use --variant A",
            )
        for n in ("reset_every", "reset_kl_above", "reset_on_stall"):
            if getattr(sp.resets, n):
                raise ConfigError(n, "reference resets need a reference model; Variant B (--variant B) has none")
        if sp.resets.moving_reference:
            raise ConfigError("ref_update", "ema moves a reference model; Variant B (--variant B) has none")
        if kl.kl_estimator == "k2" and kl.k2_mode == "ref_over_old":
            raise ConfigError("k2_mode", "ref_over_old needs a reference model; Variant B (--variant B) has none")
        if sp.run.preset not in ("none", "smollm2_demo"):
            raise ConfigError("preset", "reset presets need a reference model; Variant B (--variant B) has none")
    if kl.kl_in == "reward" and ref.ref_compute == "naive_epoch":
        raise ConfigError(
            "kl_in",
            "reward needs logp_ref for the whole batch before the advantages, but "
            "--ref_compute naive_epoch computes it per minibatch. "
            "Use --ref_compute cached or ring",
        )


def _growth(sp: RunSpecs) -> None:
    """--grow_on reset grows at reference resets: a reference and a trigger."""
    if not sp.growth.enable_growth or sp.growth.grow_on != "reset":
        return
    if sp.reference.variant == "B":
        raise ConfigError("grow_on", "reset grows at reference resets; Variant B (--variant B) has none")
    if not sp.resets.any_trigger:
        raise ConfigError(
            "grow_on",
            "reset needs a reset trigger: --reset_every, --reset_kl_above, "
            "--reset_on_stall or a --preset that sets one",
        )


def _engine(sp: RunSpecs) -> None:
    """What the Ray engines do not run: CUDA actors, other sinks, some checkpoints and placements."""
    eng = sp.engine.engine
    if eng == "local":
        return
    if sp.model.device == "cuda":
        raise ConfigError("device", f"--engine {eng} places its actors on CPUs in this build; use --device cpu")
    if sp.run.report_to != "none":
        raise ConfigError(
            "report_to",
            f"--engine {eng} writes metrics.jsonl only in this build (use --engine local, or --report_to none)",
        )
    if sp.checkpoints.save_every or sp.checkpoints.resume:
        _ray_checkpoints(sp)
    placement = sp.engine.ref_placement
    if placement == "learner":
        return
    if sp.reference.variant == "B":
        raise ConfigError("ref_placement", "Variant B (--variant B) has no reference model to place")
    if sp.reference.ref_compute != "cached":
        raise ConfigError(
            "ref_placement",
            f"{placement} scores logp_ref once per batch outside the "
            f"learner (A1); use --ref_compute cached (got {sp.reference.ref_compute})",
        )
    if sp.objective.kl.kl_estimator == "full":
        raise ConfigError(
            "ref_placement",
            "--kl_estimator full needs the reference logits in the learner; use --ref_placement learner",
        )
    if sp.growth.enable_growth:
        raise ConfigError(
            "ref_placement",
            "--enable_growth grows pi_ref together with the policy inside the learner; use --ref_placement learner",
        )


def _ray_checkpoints(sp: RunSpecs) -> None:
    """--save_every / --resume with a Ray engine: with the reference in the learner, ray_colocated
    checkpoints at round ends and ray_async after draining its batches in flight (docs/ray.md);
    the rest is refused with the reason."""
    eng, ck = sp.engine, sp.checkpoints
    flag = "resume" if ck.resume else "save_every"
    if sp.reference.variant == "A" and eng.ref_placement != "learner":
        raise ConfigError(
            flag,
            f"--engine {eng.engine} checkpoints only with --ref_placement learner (the "
            f"reference held by the {eng.ref_placement} actor is not saved)",
        )
    if eng.engine == "ray_colocated" and ck.save_every % eng.steps_per_rollout:
        raise ConfigError(
            "save_every",
            f"--engine ray_colocated checkpoints at the end of a rollout round: "
            f"--save_every must be a multiple of --steps_per_rollout "
            f"{eng.steps_per_rollout}, got {ck.save_every}",
        )


def _critic(sp: RunSpecs) -> None:
    """--adv gae: the engine, growth and variant its critic supports."""
    if not sp.critic.enabled:
        return
    if sp.engine.engine != "local":
        raise ConfigError("adv", f"gae (a critic) runs with --engine local only, not {sp.engine.engine}")
    if sp.growth.enable_growth and sp.growth.max_rank > sp.growth.initial_rank:
        raise ConfigError(
            "adv",
            "gae with growing adapters is not supported (the critic's adapters do not grow): "
            "use --max_rank equal to --initial_rank",
        )
    if sp.critic.critic_reset != "keep" and sp.reference.variant == "B":
        raise ConfigError("critic_reset", "acts at reference resets; Variant B (--variant B) has none")
