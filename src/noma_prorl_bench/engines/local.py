"""The local engine: one process builds the Trainer and runs its steps (`--engine local`).

`train(cfg)` is the library's entry: it checks the inputs, dispatches to a Ray engine for
`--engine ray_*`, and returns the summary dict; `run.main` and `noma_prorl_bench.train` call it.
A SIGINT/SIGTERM stops the loop after the current step with a checkpoint.
"""

from __future__ import annotations

import os
import time
from typing import Any

from noma_prorl_bench.config import RunConfig
from noma_prorl_bench.config.specs import RunSpecs
from noma_prorl_bench.io import checkpoint
from noma_prorl_bench.io.lock import run_lock
from noma_prorl_bench.io.metrics import MemorySink
from noma_prorl_bench.io.run_dir import open_outputs, progress, quiet_third_party, write_json
from noma_prorl_bench.rollout.nonfinite import logits_event
from noma_prorl_bench.training.guards import GracefulStop, NonFiniteLogits, StepAbandoned, stop_during_setup
from noma_prorl_bench.training.result import before_after


def build_trainer(cfg: RunConfig, ckpt=None):
    """(trainer, buffers): the Trainer is wired, then set up before anything is written, its
    set-up records (the memory estimate, warm start, adapters, monitors) held in memory. A new run
    takes the warm start and the evaluation before RL (metrics.jsonl's step-0 row) as explicit
    steps; a resumed run skips them and takes the checkpoint's state (its buffered records, already
    in events.jsonl, are dropped). A stop signal meanwhile raises guards.SetupStopped (run.main:
    exit 128 + signal number)."""
    from noma_prorl_bench.io.memory import estimate_event
    from noma_prorl_bench.training.trainer import Trainer

    quiet_third_party(cfg)
    buffers = [MemorySink(), MemorySink(), MemorySink()]
    buffers[1].write(estimate_event(RunSpecs.from_config(cfg)))  # the memory_estimate record, first
    with stop_during_setup():  # a stop signal here: SetupStopped, nothing written
        trainer = Trainer.from_config(cfg, *buffers)  # wired: no work yet
        trainer.start(warm_start=ckpt is None)  # set-up steps; the warm start for a new run only
        if ckpt is not None:
            trainer.load_state_dict(ckpt.state)  # checkpoint.CheckpointError if it does not fit
            from noma_prorl_bench.io.resume import require_verified  # noqa: PLC0415

            require_verified(ckpt)  # then: its files match their recorded sha256
    return trainer, buffers


def run(cfg: RunConfig, ckpt=None, trainer=None, buffers=None) -> dict:
    """Train one run into cfg.outdir, or continue it from `ckpt` (io.resume.resume_config);
    returns the summary dict. Holds OUTDIR/run.lock throughout (io.lock.RunLocked if
    another live process holds it). A SIGINT/SIGTERM stops it after the current step with a
    checkpoint: the returned dict then has "complete": False, "signal" and "exit_code"."""
    if cfg.engine != "local":  # Ray engines (docs/ray.md): their own driver, which
        from noma_prorl_bench.engines.launch import run_engine  # takes the lock after its set-up

        return run_engine(cfg, ckpt)
    with run_lock(cfg.outdir):
        return _run(cfg, ckpt, trainer, buffers)


def _run(cfg: RunConfig, ckpt=None, trainer=None, buffers=None) -> dict:
    t0 = time.perf_counter()
    if trainer is None:
        trainer, buffers = build_trainer(cfg, ckpt)
    extra = {} if ckpt is None else ckpt.extra
    last_val = extra.get("last_val", trainer.warmstart_info["val_reward"])
    sinks = open_outputs(cfg, trainer, buffers, ckpt)
    if ckpt is not None:  # a growth due on a shorter run's last step (io/resume.py)
        trainer.growth.grow_pending(trainer.step_idx)
    state: dict[str, Any] = {"saved": -1 if ckpt is None else ckpt.step, "path": None}

    def save(reason: str) -> None:
        wall = extra.get("wall_seconds", 0.0) + time.perf_counter() - t0
        state["path"] = checkpoint.save(
            trainer, cfg.outdir, cfg.keep_checkpoints, extra={"last_val": last_val, "wall_seconds": wall}
        )
        state["saved"] = trainer.step_idx
        trainer.event("checkpoint", reason, path=os.path.relpath(state["path"], cfg.outdir))

    bar = progress(cfg, cfg.steps)
    if bar is not None and trainer.step_idx:
        bar.update(trainer.step_idx)
    abandoned = False
    try:
        with GracefulStop() as stop:
            try:
                last_val = _steps(cfg, trainer, stop, bar, save, last_val)
            except StepAbandoned:  # a stop signal outlived the grace: keep the last checkpoint
                abandoned = True
            except NonFiniteLogits as e:  # the policy cannot sample: stop (exit 3), keep the last checkpoint
                _logits_event(cfg, trainer, e, state["path"])
                raise
            if not abandoned and trainer.step_idx != state["saved"]:
                save("final" if trainer.step_idx >= cfg.steps else stop.name)
    finally:
        if bar is not None:
            bar.close()
        for s in sinks:
            s.close()
    if abandoned or trainer.step_idx < cfg.steps:
        path = state["path"] or (ckpt.path if ckpt is not None else None)
        return {
            "complete": False,
            "signal": stop.name,
            "exit_code": stop.exit_code,
            "abandoned": abandoned,
            "step": state["saved"] if abandoned else trainer.step_idx,
            "checkpoint": path,
        }
    if trainer.updates_applied == 0 and (ckpt is None or ckpt.step < cfg.steps):
        return _no_updates(cfg, state["path"])
    summary = _complete_summary(cfg, trainer, ckpt, last_val, extra.get("wall_seconds", 0.0) + time.perf_counter() - t0)
    if cfg.plots:
        from noma_prorl_bench.analysis.plots import run_plots

        run_plots(cfg.outdir)
    return summary


def _complete_summary(cfg: RunConfig, trainer, ckpt, last_val, wall: float) -> dict:
    """Write and return summary.json of a run that reached --steps."""
    summary = {
        "complete": True,
        "steps": cfg.steps,
        "final_val_reward": last_val,
        "warmstart_val_reward": trainer.warmstart_info["val_reward"],
        "val_reward_before_rl": trainer.warmstart_info["val_reward"],
        "warmstart_seconds": trainer.warmstart_info["seconds"],
        "wall_seconds": wall,
        "cpu_seconds": time.process_time(),
    }  # this process's (a resumed run: since its resume)
    if ckpt is not None:
        summary["resumed_from_step"] = ckpt.step
    if getattr(trainer, "val_after", None) is not None:  # the last step's evaluation ran in this process
        summary["validation"] = before_after(trainer.val_before, trainer.val_after)
    write_json(os.path.join(cfg.outdir, "summary.json"), summary)
    return summary


def _logits_event(cfg: RunConfig, trainer, e: NonFiniteLogits, last_checkpoint) -> None:
    """The nan_guard event of non-finite logits while sampling (the step being sampled is the
    trainer's step_idx, incremented as the step began)."""
    e.step = trainer.step_idx
    trainer.write_event(logits_event(e, last_checkpoint and os.path.relpath(last_checkpoint, cfg.outdir)))


def _no_updates(cfg: RunConfig, last_checkpoint) -> dict:
    """summary.json of a run in which no optimizer step was taken: not complete, exit 3."""
    summary = {
        "complete": False,
        "no_updates": True,
        "steps": cfg.steps,
        "exit_code": 3,
        "reason": "no update was applied in the whole run (every minibatch was skipped by the NaN guard "
        "or filtered out)",
        "checkpoint": last_checkpoint,
    }
    write_json(os.path.join(cfg.outdir, "summary.json"), summary)
    return summary


def _steps(cfg: RunConfig, trainer, stop: GracefulStop, bar, save, last_val: float) -> float:
    """Train until --steps or a stop signal; each step runs under `stop.step()` (abandoned if it
    outlives the stop grace); returns the last validation reward."""
    while trainer.step_idx < cfg.steps and stop.signum is None:
        with stop.step():
            m = trainer.train_step()
        last_val = m.get("reward/val", last_val)
        if bar is not None:
            bar.update(1)
            bar.set_postfix(reward=f"{m['reward/mean']:.3f}", val=f"{last_val:.3f}", refresh=False)
        if cfg.save_every and trainer.step_idx % cfg.save_every == 0 and trainer.step_idx < cfg.steps:
            save("periodic")
    return last_val


def train(cfg: RunConfig) -> str:
    """Train one run from Python and return its directory: the same checks, files and metrics as
    `python -m noma_prorl_bench.run` with the same flags. Raises ConfigError on a bad --outdir
    or input (nothing written), RuntimeError if the run stopped before its last step."""
    from noma_prorl_bench.config import ConfigError, validate
    from noma_prorl_bench.io.run_dir import check_inputs, check_outdir

    validate(cfg)
    err = check_outdir(cfg) or check_inputs(cfg)
    if err:
        flag, _, msg = err.partition(": ")
        raise ConfigError(flag.replace("argument --", ""), msg)
    summary = run(cfg)
    if not summary.get("complete", False):
        raise RuntimeError(f"run in {cfg.outdir} stopped before step {cfg.steps}: {summary}")
    return cfg.outdir
