"""The run directory: checks before anything is written, config.json, the JSONL sinks and
their resume cut-back, summary.json (written atomically).

Files a run writes: config.json, metrics.jsonl, events.jsonl, samples.jsonl, summary.json,
timeline.jsonl (Ray engines), plots/, checkpoints/.
"""
from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
from typing import Optional

from noma_prorl_bench._version import __version__
from noma_prorl_bench.config import RunConfig
from noma_prorl_bench.io import resume
from noma_prorl_bench.io.lock import LOCK_FILE
from noma_prorl_bench.io.metrics import JsonlSink, MultiSink, report_sink

RUN_FILES = ("config.json", "metrics.jsonl", "events.jsonl", "samples.jsonl", "summary.json", "timeline.jsonl",
             "metrics.csv")
RUN_DIRS = ("plots", "checkpoints", "tb", "wandb")
SINK_FILES = ("metrics.jsonl", "events.jsonl", "samples.jsonl")


def check_outdir(cfg: RunConfig) -> Optional[str]:
    """An error message if --outdir cannot be used, else None (nothing is created here)."""
    d = cfg.outdir
    if os.path.exists(d) and not os.path.isdir(d):
        return f"argument --outdir: {d!r} exists and is not a directory"
    if os.path.isdir(d) and set(os.listdir(d)) - {LOCK_FILE} and not cfg.overwrite and not cfg.resume:
        return f"argument --outdir: {d!r} exists and is not empty (pass --overwrite to replace its run files)"
    return None


def check_inputs(cfg: RunConfig) -> Optional[str]:
    """An error message for inputs that would only fail after the run has started, else None."""
    from noma_prorl_bench.io import preflight
    err = preflight.outdir_error(cfg.outdir) or preflight.missing_dependency(cfg) or preflight.memory_error(cfg)
    if err:
        return err
    if cfg.model.startswith("hf:"):
        from noma_prorl_bench.models.hf import (
            check_model_dir,  # path, config.json, a causal-LM config
        )
        try:
            check_model_dir(cfg.model[3:])
        except ValueError as e:
            return f"argument --model: {e}"
    if cfg.device == "cuda":
        import torch
        if not torch.cuda.is_available():
            return "argument --device: cuda requested but no CUDA device is available (choose from cpu, cuda, auto)"
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


def resolved_device(name: str) -> str:
    """--device with auto resolved (cuda when available, else cpu)."""
    import torch
    return ("cuda" if torch.cuda.is_available() else "cpu") if name == "auto" else name


def resolved_config(cfg: RunConfig) -> dict:
    """config.json: every field plus derived values and versions."""
    import numpy
    import torch
    d = cfg.to_dict()
    d["derived"] = {"variant_label": cfg.variant_label, **cfg.clip_used, "loss_agg": cfg.loss_agg_resolved,
                    "warmstart_steps": cfg.warmstart_steps_resolved, "device": resolved_device(cfg.device)}
    d["versions"] = {"noma_prorl_bench": __version__, "torch": torch.__version__, "numpy": numpy.__version__,
                     "python": platform.python_version(), "git_commit": _git_commit()}
    d["argv"] = sys.argv[1:]
    return d


def write_json(path: str, obj: dict) -> None:
    """Write JSON atomically (temp file, then rename)."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=2)
    os.replace(tmp, path)


def quiet_third_party(cfg: RunConfig) -> None:
    """--quiet: silence other libraries' progress bars too (transformers' "Loading weights",
    huggingface_hub downloads). Only imports transformers when the model needs it anyway."""
    if not cfg.quiet or not cfg.model.startswith("hf:"):
        return
    try:
        import transformers
        transformers.utils.logging.disable_progress_bar()
        import huggingface_hub.utils
        huggingface_hub.utils.disable_progress_bars()
    except ImportError:
        pass


def progress(cfg: RunConfig, total: int):
    """A tqdm bar on stderr, or None with --quiet."""
    if cfg.quiet:
        return None
    from tqdm import tqdm
    return tqdm(total=total, desc=os.path.basename(cfg.outdir.rstrip("/")) or "run", file=sys.stderr,
                dynamic_ncols=True, leave=True)


def _read_jsonl(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def record_resume(cfg: RunConfig, ckpt) -> dict:
    """Cut the run files back to the checkpoint's step and write config.json with this resume
    appended to its `resumes` list; returns the fields of the `resume` event (both engines)."""
    dropped = resume.prepare_outdir_for_resume(cfg.outdir, ckpt.step, cfg.keep_checkpoints)
    config = resolved_config(cfg)
    try:
        with open(os.path.join(cfg.outdir, "config.json")) as f:
            config["resumes"] = json.load(f).get("resumes", [])
    except (OSError, ValueError, AttributeError):
        config["resumes"] = []
    changed = {k: [ckpt.config.get(k), v] for k, v in cfg.to_dict().items()
               if ckpt.config.get(k) != v and k != "resume"}
    config["resumes"].append({"from_step": ckpt.step, "argv": config["argv"], "changed": changed})
    write_json(os.path.join(cfg.outdir, "config.json"), config)
    return {"checkpoint": os.path.relpath(ckpt.path, cfg.outdir), "changed": changed,
            "dropped_lines": {f: d["dropped"] + d["partial"] for f, d in dropped.items()}}


def open_outputs(cfg: RunConfig, trainer, buffers, ckpt=None) -> list:
    """Create or (resume) cut back the run files, attach JSONL sinks to the trainer."""
    if ckpt is None:
        os.makedirs(cfg.outdir, exist_ok=True)
        clear_run_files(cfg.outdir)
        write_json(os.path.join(cfg.outdir, "config.json"), resolved_config(cfg))
    else:
        resumed = record_resume(cfg, ckpt)
    sinks = [JsonlSink(os.path.join(cfg.outdir, f), "a" if ckpt else "w") for f in SINK_FILES]
    history = [] if ckpt is None else _read_jsonl(os.path.join(cfg.outdir, "metrics.jsonl"))
    sinks[0] = MultiSink([sinks[0], report_sink(cfg.report_to, cfg.outdir, history, cfg.to_dict())])
    trainer.metrics_sink, trainer.events_sink, trainer.samples_sink = sinks
    if ckpt is None:
        for sink, buf in zip(sinks, buffers):
            for rec in buf.records:
                sink.write(rec)
    else:
        trainer.event("resume", "continued from the last complete checkpoint", **resumed)
    return sinks
