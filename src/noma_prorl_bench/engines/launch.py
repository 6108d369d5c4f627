"""Entry point of the Ray engines: `run_engine(cfg)`, what `engines.local.run` and `run.main` call
for `--engine ray_colocated | ray_async`.

It prepares OUTDIR exactly as the local engine does (config.json, metrics.jsonl, events.jsonl,
samples.jsonl) plus timeline.jsonl, runs the engine's driver, writes summary.json and
plots/timeline.png. On failure or a signal it flushes what it has (an `error` / `stopped`
event, summary.json with `"complete": false`), stops every actor (and Ray, if the engine
started it), then raises EngineError / EngineStopped for `run.main_ray` to turn into an exit code;
non-finite logits in a generator raise the local engine's NonFiniteLogits (its `nan_guard` event
written, exit 3).
"""
from __future__ import annotations

import os
import signal
import time

from noma_prorl_bench.engines.driver import EngineError
from noma_prorl_bench.engines.stops import EngineStopped
from noma_prorl_bench.io import safe_files
from noma_prorl_bench.io.metrics import JsonlSink, open_run_files
from noma_prorl_bench.rollout.nonfinite import NonFiniteLogits, logits_event


class RunFiles:
    """metrics.jsonl, events.jsonl, samples.jsonl, timeline.jsonl of one run (flushed per line)."""

    def __init__(self, outdir: str, mode: str = "w"):
        self.metrics, self.events = open_run_files(outdir, mode)
        self.samples = JsonlSink(os.path.join(outdir, "samples.jsonl"), mode)
        self.timeline = JsonlSink(os.path.join(outdir, "timeline.jsonl"), mode)

    def close(self) -> None:
        for s in (self.metrics, self.events, self.samples, self.timeline):
            s.close()


def run_engine(cfg, ckpt=None) -> dict:
    """Train one run with a Ray engine into cfg.outdir (same files as the local engine plus
    timeline.jsonl and plots/timeline.png), or continue it from `ckpt` (the files are cut
    back to its step as for the local engine). On failure it flushes the outputs,
    stops every actor (and Ray, if it started it), then raises EngineError (or EngineStopped)."""
    from noma_prorl_bench.engines.async_ import AsyncEngine  # noqa: PLC0415
    from noma_prorl_bench.engines.colocated import ColocatedEngine  # noqa: PLC0415
    from noma_prorl_bench.io.run_dir import prepare_new_outdir, resolved_config  # noqa: PLC0415
    t0 = time.perf_counter()
    if ckpt is None:
        safe_files.makedirs(cfg.outdir)
        prepare_new_outdir(cfg)                      # empty or ours, no symlinked run file (under the lock)
        safe_files.write_json(os.path.join(cfg.outdir, "config.json"), resolved_config(cfg))
        files = RunFiles(cfg.outdir)
    else:
        files = _open_for_resume(cfg, ckpt)
    engine = (ColocatedEngine if cfg.engine == "ray_colocated" else AsyncEngine)(cfg, files, ckpt)
    error = None
    try:
        summary = engine.run()
    except (EngineError, EngineStopped, KeyboardInterrupt) as e:
        error = e if not isinstance(e, KeyboardInterrupt) else EngineStopped(signal.SIGINT)
        msg = _record_failure(cfg, files, engine.steps_done, error)
        summary = {"complete": False, "error": msg, "steps": engine.steps_done, "engine": cfg.engine}
    finally:
        if engine.bar is not None:
            engine.bar.close()
        engine.stop()
        files.close()
    summary["wall_seconds"] = time.perf_counter() - t0
    safe_files.write_json(os.path.join(cfg.outdir, "summary.json"), summary)
    if isinstance(error, EngineStopped):
        raise error
    cause = getattr(error, "cause", None)
    if isinstance(cause, NonFiniteLogits):
        raise cause                          # the local engine's stop: exit 3 with its message (run.py)
    if error is not None:
        raise EngineError(f"--engine {cfg.engine}: {error}", error.cause_name, error.waited_s)
    from noma_prorl_bench.engines.timeline import save_timeline_plot  # noqa: PLC0415
    save_timeline_plot(cfg.outdir, title=f"{cfg.engine}: {os.path.basename(cfg.outdir.rstrip('/'))}")
    if cfg.plots:
        from noma_prorl_bench.analysis.plots import run_plots  # noqa: PLC0415
        run_plots(cfg.outdir)
    return summary


def _record_failure(cfg, files, step: int, error: Exception) -> str:
    """The events.jsonl record of a failed or stopped run; returns its one-line reason. Non-finite
    logits in a generator get the local engine's `nan_guard` event (rollout/nonfinite.py)."""
    cause = getattr(error, "cause", None)
    if isinstance(cause, NonFiniteLogits):
        from noma_prorl_bench.io.checkpoint import list_checkpoints  # noqa: PLC0415
        ckpts = list_checkpoints(cfg.outdir)
        files.events.write(logits_event(cause, os.path.relpath(ckpts[-1][1], cfg.outdir) if ckpts else None))
        return str(cause)
    files.events.write({"step": step, "event": "stopped" if isinstance(error, EngineStopped) else "error",
                        "reason": str(error), "engine": cfg.engine, "waited_s": getattr(error, "waited_s", None)})
    return str(error)


def _open_for_resume(cfg, ckpt) -> RunFiles:
    """The run files cut back to the checkpoint's step, config.json with the resume recorded, the
    files opened for appending and a `resume` event (as `run_dir.open_outputs` for the local engine)."""
    from noma_prorl_bench.io.run_dir import record_resume  # noqa: PLC0415
    resumed = record_resume(cfg, ckpt)
    files = RunFiles(cfg.outdir, "a")
    files.events.write({"step": ckpt.step, "event": "resume", "reason": "continued from the last complete checkpoint",
                        **resumed})
    return files
