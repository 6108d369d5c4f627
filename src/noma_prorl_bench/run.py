"""Run one training job: `python -m noma_prorl_bench.run --outdir runs/A1 --steps 400`.

Without installing: `PYTHONPATH=src python -m noma_prorl_bench.run --help`.
Writes OUTDIR/config.json, metrics.jsonl (one line per step, flushed), events.jsonl,
samples.jsonl, checkpoints/ (every --save_every steps and at the end) and, when the run
completes, summary.json. `--outdir OUTDIR --resume` continues a run from its last complete
checkpoint (see docs/reliability.md).

Exit codes: 0 done; 2 bad input (flags, --outdir, model path, checkpoint; nothing written);
3 stopped by the NaN guard (--on_nan stop); 130 / 143 stopped by SIGINT / SIGTERM after
writing a checkpoint (resumable).
"""
from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import time
from typing import Optional

from . import __version__
from .config import ConfigError, RunConfig, build_parser, make_config

RUN_FILES = ("config.json", "metrics.jsonl", "events.jsonl", "samples.jsonl", "summary.json", "timeline.jsonl")
RUN_DIRS = ("plots", "checkpoints")


def check_outdir(cfg: RunConfig) -> Optional[str]:
    """An error message if --outdir cannot be used, else None (nothing is created here)."""
    d = cfg.outdir
    if os.path.exists(d) and not os.path.isdir(d):
        return f"argument --outdir: {d!r} exists and is not a directory"
    if os.path.isdir(d) and os.listdir(d) and not cfg.overwrite and not cfg.resume:
        return f"argument --outdir: {d!r} exists and is not empty (pass --overwrite to replace its run files)"
    return None


def clear_run_files(outdir: str) -> None:
    """Remove a previous run's files (only the ones a run writes)."""
    for f in RUN_FILES:
        p = os.path.join(outdir, f)
        if os.path.isfile(p):
            os.remove(p)
    for d in RUN_DIRS:
        p = os.path.join(outdir, d)
        if os.path.isdir(p):
            shutil.rmtree(p)


def _git_commit() -> Optional[str]:
    try:
        here = os.path.dirname(os.path.abspath(__file__))
        out = subprocess.run(["git", "-C", here, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def resolved_config(cfg: RunConfig) -> dict:
    """config.json: every field plus derived values and versions."""
    import numpy
    import torch
    d = cfg.to_dict()
    d["derived"] = {"variant_label": cfg.variant_label, "eps_low": cfg.eps_lo, "eps_high": cfg.eps_hi,
                    "warmstart_steps": cfg.warmstart_steps_resolved, "device": _resolved_device(cfg.device)}
    d["versions"] = {"noma_prorl_bench": __version__, "torch": torch.__version__, "numpy": numpy.__version__,
                     "python": platform.python_version(), "git_commit": _git_commit()}
    d["argv"] = sys.argv[1:]
    return d


def _resolved_device(name: str) -> str:
    """--device with auto resolved (cuda when available, else cpu)."""
    import torch
    return ("cuda" if torch.cuda.is_available() else "cpu") if name == "auto" else name


def progress(cfg: RunConfig, total: int):
    """A tqdm bar on stderr, or a no-op with --quiet."""
    if cfg.quiet:
        return None
    from tqdm import tqdm
    return tqdm(total=total, desc=os.path.basename(cfg.outdir.rstrip("/")) or "run", file=sys.stderr,
                dynamic_ncols=True, leave=True)


def check_inputs(cfg: RunConfig) -> Optional[str]:
    """An error message for inputs that would only fail after the run has started, else None."""
    parent = os.path.abspath(cfg.outdir)
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent) or not os.access(parent, os.W_OK | os.X_OK):
        return f"argument --outdir: cannot create or write {cfg.outdir!r} ({parent!r} is not a writable directory)"
    if cfg.model.startswith("hf:"):
        from .models.hf import check_model_dir       # path, config.json, a causal-LM config
        try:
            check_model_dir(cfg.model[3:])
        except ValueError as e:
            return f"argument --model: {e}"
    if cfg.device == "cuda":
        import torch
        if not torch.cuda.is_available():
            return "argument --device: cuda requested but no CUDA device is available (choose from cpu, cuda, auto)"
    return None


class _BufferSink:
    """Holds records in memory until the run's files are opened."""

    def __init__(self):
        self.records: list[dict] = []

    def write(self, record: dict) -> None:
        self.records.append(record)

    def close(self) -> None:
        pass


SINK_FILES = ("metrics.jsonl", "events.jsonl", "samples.jsonl")


def _write_json(path: str, obj: dict) -> None:
    """Write JSON atomically (temp file, then rename)."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=2)
    os.replace(tmp, path)


def build_trainer(cfg: RunConfig, ckpt=None):
    """(trainer, buffers): the Trainer is built before anything is written, its set-up records
    (warm start, adapters, monitors) held in memory; on resume it then takes the checkpoint's
    state (and its buffered records, already in events.jsonl, are dropped)."""
    from .trainer import Trainer
    buffers = [_BufferSink(), _BufferSink(), _BufferSink()]
    trainer = Trainer(cfg, *buffers)
    if ckpt is not None:
        trainer.load_state_dict(ckpt.state)          # checkpoint.CheckpointError if it does not fit
    return trainer, buffers


def open_outputs(cfg: RunConfig, trainer, buffers, ckpt=None) -> list:
    """Create or (resume) cut back the run files, attach JSONL sinks to the trainer."""
    from . import resume
    from .metrics import JsonlSink
    config = resolved_config(cfg)
    if ckpt is None:
        os.makedirs(cfg.outdir, exist_ok=True)
        clear_run_files(cfg.outdir)
    else:
        dropped = resume.prepare_outdir_for_resume(cfg.outdir, ckpt.step, cfg.keep_checkpoints)
        try:
            with open(os.path.join(cfg.outdir, "config.json")) as f:
                config["resumes"] = json.load(f).get("resumes", [])
        except (OSError, ValueError, AttributeError):
            config["resumes"] = []
        changed = {k: [ckpt.config.get(k), v] for k, v in cfg.to_dict().items()
                   if ckpt.config.get(k) != v and k != "resume"}
        config["resumes"].append({"from_step": ckpt.step, "argv": config["argv"], "changed": changed})
    _write_json(os.path.join(cfg.outdir, "config.json"), config)
    sinks = [JsonlSink(os.path.join(cfg.outdir, f), "a" if ckpt else "w") for f in SINK_FILES]
    trainer.metrics_sink, trainer.events_sink, trainer.samples_sink = sinks
    if ckpt is None:
        for sink, buf in zip(sinks, buffers):
            for rec in buf.records:
                sink.write(rec)
    else:
        trainer.event("resume", "continued from the last complete checkpoint",
                      checkpoint=os.path.relpath(ckpt.path, cfg.outdir), changed=changed,
                      dropped_lines={f: d["dropped"] + d["partial"] for f, d in dropped.items()})
    return sinks


def run(cfg: RunConfig, ckpt=None, trainer=None, buffers=None) -> dict:
    """Train one run into cfg.outdir, or continue it from `ckpt` (checkpoint.resume_config);
    returns the summary dict. A SIGINT/SIGTERM stops it after the current step with a
    checkpoint: the returned dict then has "complete": False, "signal" and "exit_code"."""
    from . import checkpoint
    from .guards import GracefulStop
    if cfg.engine != "local":                        # Ray engines (docs/ray.md): their own driver
        from .engines import run_engine
        return run_engine(cfg)
    t0 = time.perf_counter()
    if trainer is None:
        trainer, buffers = build_trainer(cfg, ckpt)
    start = -1 if ckpt is None else ckpt.step
    extra = {} if ckpt is None else ckpt.extra
    last_val = extra.get("last_val", trainer.warmstart_info["val_reward"])
    sinks = open_outputs(cfg, trainer, buffers, ckpt)
    state = {"saved": start, "path": None}

    def save(reason: str) -> None:
        wall = extra.get("wall_seconds", 0.0) + time.perf_counter() - t0
        state["path"] = checkpoint.save(trainer, cfg.outdir, cfg.keep_checkpoints,
                                        extra={"last_val": last_val, "wall_seconds": wall})
        state["saved"] = trainer.step_idx
        trainer.event("checkpoint", reason, path=os.path.relpath(state["path"], cfg.outdir))

    bar = progress(cfg, cfg.steps)
    if bar is not None and trainer.step_idx:
        bar.update(trainer.step_idx)
    try:
        with GracefulStop() as stop:
            while trainer.step_idx < cfg.steps and stop.signum is None:
                m = trainer.train_step()
                last_val = m.get("reward/val", last_val)
                if bar is not None:
                    bar.update(1)
                    bar.set_postfix(reward=f"{m['reward/mean']:.3f}", val=f"{last_val:.3f}", refresh=False)
                if cfg.save_every and trainer.step_idx % cfg.save_every == 0 and trainer.step_idx < cfg.steps:
                    save("periodic")
            if trainer.step_idx != state["saved"]:
                save("final" if trainer.step_idx >= cfg.steps else stop.name)
    finally:
        if bar is not None:
            bar.close()
        for s in sinks:
            s.close()
    if trainer.step_idx < cfg.steps:
        return {"complete": False, "signal": stop.name, "exit_code": stop.exit_code, "step": trainer.step_idx,
                "checkpoint": state["path"]}
    summary = {"complete": True, "steps": cfg.steps, "final_val_reward": last_val,
               "warmstart_val_reward": trainer.warmstart_info["val_reward"],
               "warmstart_seconds": trainer.warmstart_info["seconds"],
               "wall_seconds": extra.get("wall_seconds", 0.0) + time.perf_counter() - t0}
    if ckpt is not None:
        summary["resumed_from_step"] = ckpt.step
    _write_json(os.path.join(cfg.outdir, "summary.json"), summary)
    if cfg.plots:
        from .plots import run_plots
        run_plots(cfg.outdir)
    return summary


def resolve_config(argv: Optional[list[str]], prog: str):
    """(cfg, checkpoint or None) from the command line; exits 2 (argparse-style) on bad flags."""
    parser = build_parser(prog)
    explicit = vars(parser.parse_args(argv))
    try:
        if explicit.get("resume"):
            from .resume import resume_config
            return resume_config(explicit)
        return make_config(explicit), None
    except ConfigError as e:
        parser.error(str(e))
        raise  # unreachable


def main(argv: Optional[list[str]] = None, prog: str = "python -m noma_prorl_bench.run") -> int:
    from .checkpoint import CheckpointError
    from .guards import NonFiniteError
    cfg, ckpt = resolve_config(argv, prog)
    err = (None if ckpt else check_outdir(cfg)) or check_inputs(cfg)
    if err:
        print(f"{prog}: error: {err}", file=sys.stderr)
        return 2
    if cfg.engine != "local":
        return main_ray(cfg, prog)
    try:
        try:
            trainer, buffers = build_trainer(cfg, ckpt)   # nothing is written before this succeeds
        except CheckpointError as e:
            print(f"{prog}: error: argument --resume: {e}", file=sys.stderr)
            return 2
        except ConfigError as e:                        # names its flag, e.g. --model (weights, tokenizer)
            print(f"{prog}: error: {e}", file=sys.stderr)
            return 2
        except (ValueError, OSError) as e:              # e.g. an HF model directory that does not load
            print(f"{prog}: error: cannot set up the run: {e}", file=sys.stderr)
            return 2
        summary = run(cfg, ckpt, trainer, buffers)
    except NonFiniteError as e:
        print(f"{prog}: stopped (--on_nan stop): {e}. Outputs up to that step are in {cfg.outdir}", file=sys.stderr)
        return 3
    except KeyboardInterrupt:
        print(f"{prog}: aborted. `--outdir {cfg.outdir} --resume` continues from the last complete checkpoint "
              "(if any)", file=sys.stderr)
        return 130
    if not summary["complete"]:
        print(f"{prog}: interrupted by {summary['signal']} after step {summary['step']}; checkpoint written to "
              f"{summary['checkpoint']}. Continue with: {prog} --outdir {cfg.outdir} --resume", file=sys.stderr)
        return summary["exit_code"]
    if not cfg.quiet:
        print(json.dumps(summary), file=sys.stderr)
    return 0


def main_ray(cfg: RunConfig, prog: str) -> int:
    """--engine ray_colocated | ray_async. Exit codes: 0 done; 1 an actor died, hung past
    --actor_timeout or raised (outputs flushed, Ray shut down); 3 the NaN guard stopped the
    learner (--on_nan stop); 130 / 143 stopped by SIGINT / SIGTERM (cleaned up, no checkpoint)."""
    from .engines import EngineError, EngineStopped, run_engine
    try:
        summary = run_engine(cfg)
    except EngineError as e:
        stop = e.cause_name == "NonFiniteError"
        print(f"{prog}: {'stopped (--on_nan stop)' if stop else 'error'}: {e}\nOutputs up to the last "
              f"finished step are in {cfg.outdir}", file=sys.stderr)
        return 3 if stop else 1
    except EngineStopped as e:
        print(f"{prog}: {e}; Ray engines write no checkpoints, outputs up to the last finished step are in "
              f"{cfg.outdir}", file=sys.stderr)
        return 128 + e.signum
    if not cfg.quiet:
        print(json.dumps(summary), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
