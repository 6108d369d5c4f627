"""Entry point of the Ray engines: `run_engine(cfg)`, what `engines.local.run` and `run.main` call
for `--engine ray_colocated | ray_async`.

Like the local engine, it writes nothing until the set-up is done: Ray started (or joined), the
actors up, the learner's warm start and the step-0 evaluation finished, their records held in
memory. A stop signal before then shuts Ray down and raises the local engine's
`guards.SetupStopped` (exit 128 + signal number, OUTDIR as it was). Then, under the run lock, it
prepares OUTDIR exactly as the local engine does (config.json, metrics.jsonl, events.jsonl,
samples.jsonl) plus timeline.jsonl, runs the engine's steps, writes summary.json and
plots/timeline.png. On failure or a signal it flushes what it has (an `error` / `stopped`
event, summary.json with `"complete": false`), stops every actor (and Ray, if the engine
started it), then raises EngineError / EngineStopped for `run.main_ray` to turn into an exit code;
non-finite values raise the local engine's error (exit 3 with its one-line message): NonFiniteLogits
from a generator (its `nan_guard` event written), NonFiniteError from the learner's NaN guard under
`--on_nan stop` (the learner's `nan_guard` event written).
"""

from __future__ import annotations

import os
import signal
import time
from contextlib import ExitStack
from typing import Any, Optional

from noma_prorl_bench.engines.calls import EngineError
from noma_prorl_bench.engines.stops import EngineStopped, StopSignals, stop_on_signals
from noma_prorl_bench.io import safe_files
from noma_prorl_bench.io.lock import run_lock
from noma_prorl_bench.io.metrics import JsonlSink, MemorySink, open_run_files
from noma_prorl_bench.rollout.nonfinite import NonFiniteError, NonFiniteLogits, logits_event
from noma_prorl_bench.training.guards import SetupStopped

FILES = ("metrics", "events", "samples", "timeline")


class RunFiles:
    """metrics.jsonl, events.jsonl, samples.jsonl, timeline.jsonl of one run (flushed per line);
    with no outdir, the same four held in memory (the set-up's records) until `replay`."""

    metrics: Any
    events: Any
    samples: Any
    timeline: Any

    def __init__(self, outdir: Optional[str] = None, mode: str = "w"):
        if outdir is None:
            self.metrics, self.events, self.samples, self.timeline = (MemorySink() for _ in FILES)
            return
        self.metrics, self.events = open_run_files(outdir, mode)
        self.samples = JsonlSink(os.path.join(outdir, "samples.jsonl"), mode)
        self.timeline = JsonlSink(os.path.join(outdir, "timeline.jsonl"), mode)

    def replay(self, held: "RunFiles") -> None:
        """Write the records `held` keeps in memory, in their order."""
        for name in FILES:
            for rec in getattr(held, name).records:
                getattr(self, name).write(rec)

    def close(self) -> None:
        for name in FILES:
            getattr(self, name).close()


def run_engine(cfg, ckpt=None) -> dict:
    """Train one run with a Ray engine into cfg.outdir (same files as the local engine plus
    timeline.jsonl and plots/timeline.png), or continue it from `ckpt` (the files are cut
    back to its step as for the local engine). Holds OUTDIR/run.lock once the set-up is done (as
    the local engine; io.lock.RunLocked if another live process holds it). A stop signal during
    the set-up: guards.SetupStopped, nothing written. On a later failure it flushes the outputs,
    stops every actor (and Ray, if it started it), then raises EngineError (or EngineStopped)."""
    t0 = time.perf_counter()
    with stop_on_signals() as stops:
        engine = _started(cfg, ckpt, stops)
        with ExitStack() as cleanup:
            cleanup.callback(engine.stop)  # also if the lock or OUTDIR is refused
            with stops.held():  # the lock and the run's files: taken and opened whole
                cleanup.enter_context(run_lock(cfg.outdir))
                files = _open_files(cfg, ckpt)
                cleanup.callback(files.close)
                files.replay(engine.files)
                engine.files = files
            return _train(cfg, engine, stops, t0)


def _started(cfg, ckpt, stops: StopSignals):
    """The engine with Ray, its actors, the warm start and the generators started, their records
    held in memory. A stop signal meanwhile: Ray is shut down and SetupStopped raised (nothing was
    written, as in the local engine's set-up); a failure (EngineError) is kept in
    `engine.setup_error`, for `_train` to record in the run's files as any later one."""
    from noma_prorl_bench.engines.async_ import AsyncEngine  # noqa: PLC0415
    from noma_prorl_bench.engines.colocated import ColocatedEngine  # noqa: PLC0415

    engine = (ColocatedEngine if cfg.engine == "ray_colocated" else AsyncEngine)(cfg, RunFiles(), ckpt)
    engine.stops = stops
    try:
        engine.start()
        if stops.signum is not None:  # its exception was raised where Python ignores them (a __del__, say)
            raise EngineStopped(stops.signum)
    except BaseException as e:  # noqa: BLE001  (re-raised below unless it is an EngineError)
        if stops.signum is None and isinstance(e, EngineError):
            engine.setup_error = e
            return engine
        with stops.held():
            engine.stop()
        if stops.signum is not None or isinstance(e, (EngineStopped, KeyboardInterrupt)):
            signum: Any = stops.signum or getattr(e, "signum", signal.SIGINT)
            raise SetupStopped(int(signum)) from None  # whatever Ray made of the handler's exception
        raise
    return engine


def _open_files(cfg, ckpt) -> RunFiles:
    """A new run's OUTDIR prepared (empty or ours, no symlinked run file: checked again under the
    lock), config.json and the run files; on resume the files cut back to the checkpoint."""
    from noma_prorl_bench.io.run_dir import prepare_new_outdir, resolved_config  # noqa: PLC0415

    if ckpt is not None:
        return _open_for_resume(cfg, ckpt)
    safe_files.makedirs(cfg.outdir)
    prepare_new_outdir(cfg)
    safe_files.write_json(os.path.join(cfg.outdir, "config.json"), resolved_config(cfg))
    return RunFiles(cfg.outdir)


def _train(cfg, engine, stops: StopSignals, t0: float) -> dict:
    """The engine's steps with the run's files open; summary.json; the error or stop raised."""
    files, error = engine.files, None
    try:
        if engine.setup_error is not None:
            raise engine.setup_error
        if stops.signum is not None:  # came while the files were being opened
            raise EngineStopped(stops.signum)
        summary = engine.run()
    except (EngineError, EngineStopped, KeyboardInterrupt) as e:
        error = e if not isinstance(e, KeyboardInterrupt) else EngineStopped(signal.SIGINT)
        msg = _record_failure(cfg, files, engine.steps_done, error)
        summary = {"complete": False, "error": msg, "steps": engine.steps_done, "engine": cfg.engine}
    finally:
        with stops.held():
            if engine.bar is not None:
                engine.bar.close()
            engine.stop()
            files.close()
    summary["wall_seconds"] = time.perf_counter() - t0
    safe_files.write_json(os.path.join(cfg.outdir, "summary.json"), summary)
    if isinstance(error, EngineStopped):
        raise error
    cause = getattr(error, "cause", None)
    if isinstance(cause, NonFiniteError):
        raise cause  # the local engine's stop: exit 3 with its message (run.py)
    if error is not None:
        raise EngineError(f"--engine {cfg.engine}: {error}", error.cause_name, error.waited_s)
    from noma_prorl_bench.engines.timeline import save_timeline_plot  # noqa: PLC0415

    save_timeline_plot(cfg.outdir, title=f"{cfg.engine}: {os.path.basename(cfg.outdir.rstrip('/'))}")
    if cfg.plots:
        from noma_prorl_bench.analysis.plots import run_plots  # noqa: PLC0415

        run_plots(cfg.outdir)
    return summary


def _record_failure(cfg, files, step: int, error: BaseException) -> str:
    """The events.jsonl record of a failed or stopped run; returns its one-line reason. Non-finite
    logits in a generator get the local engine's `nan_guard` event (rollout/nonfinite.py); the
    learner's NaN guard (--on_nan stop) brings its own records of the step (its `nan_guard` event)."""
    cause = getattr(error, "cause", None)
    if isinstance(cause, NonFiniteError) and not isinstance(cause, NonFiniteLogits):
        for name, records in getattr(cause, "records", {}).items():
            for rec in records:
                getattr(files, name).write(rec)
        return str(cause)
    if isinstance(cause, NonFiniteLogits):
        from noma_prorl_bench.io.checkpoint import list_checkpoints  # noqa: PLC0415

        ckpts = list_checkpoints(cfg.outdir)
        files.events.write(logits_event(cause, os.path.relpath(ckpts[-1][1], cfg.outdir) if ckpts else None))
        return str(cause)
    files.events.write(
        {
            "step": step,
            "event": "stopped" if isinstance(error, EngineStopped) else "error",
            "reason": str(error),
            "engine": cfg.engine,
            "waited_s": getattr(error, "waited_s", None),
        }
    )
    return str(error)


def _open_for_resume(cfg, ckpt) -> RunFiles:
    """The run files cut back to the checkpoint's step, config.json with the resume recorded, the
    files opened for appending and a `resume` event (as `run_dir.open_outputs` for the local engine)."""
    from noma_prorl_bench.io.run_dir import record_resume  # noqa: PLC0415

    resumed = record_resume(cfg, ckpt)
    files = RunFiles(cfg.outdir, "a")
    files.events.write(
        {"step": ckpt.step, "event": "resume", "reason": "continued from the last complete checkpoint", **resumed}
    )
    return files
