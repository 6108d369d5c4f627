"""Run one training job: `python -m noma_prorl_bench.run --outdir runs/A1 --steps 400`.

Without installing: `PYTHONPATH=src python -m noma_prorl_bench.run --help`.
Writes OUTDIR/config.json, metrics.jsonl (one line per step, flushed), events.jsonl,
samples.jsonl and, when the run completes, summary.json. Bad flags exit 2 and write nothing.
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
from .config import RunConfig, parse_config

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
    d["derived"] = {"variant_label": cfg.variant_label, "eps_low": cfg.eps_lo, "eps_high": cfg.eps_hi}
    d["versions"] = {"noma_prorl_bench": __version__, "torch": torch.__version__, "numpy": numpy.__version__,
                     "python": platform.python_version(), "git_commit": _git_commit()}
    d["argv"] = sys.argv[1:]
    return d


def progress(cfg: RunConfig, total: int):
    """A tqdm bar on stderr, or a no-op with --quiet."""
    if cfg.quiet:
        return None
    from tqdm import tqdm
    return tqdm(total=total, desc=os.path.basename(cfg.outdir.rstrip("/")) or "run", file=sys.stderr,
                dynamic_ncols=True, leave=True)


def run(cfg: RunConfig) -> dict:
    """Train one run into cfg.outdir; returns the summary dict."""
    from .metrics import JsonlSink, open_run_files
    from .trainer import Trainer
    os.makedirs(cfg.outdir, exist_ok=True)
    clear_run_files(cfg.outdir)
    with open(os.path.join(cfg.outdir, "config.json"), "w") as f:
        json.dump(resolved_config(cfg), f, indent=2)
    metrics, events = open_run_files(cfg.outdir)
    samples = JsonlSink(os.path.join(cfg.outdir, "samples.jsonl"), "w")
    t0 = time.perf_counter()
    trainer = Trainer(cfg, metrics, events, samples)
    bar = progress(cfg, cfg.steps)
    last_val = trainer.warmstart_info["val_reward"]
    try:
        for _ in range(cfg.steps):
            m = trainer.train_step()
            last_val = m.get("reward/val", last_val)
            if bar is not None:
                bar.update(1)
                bar.set_postfix(reward=f"{m['reward/mean']:.3f}", val=f"{last_val:.3f}", refresh=False)
    finally:
        if bar is not None:
            bar.close()
        metrics.close(), events.close(), samples.close()
    summary = {"complete": True, "steps": cfg.steps, "final_val_reward": last_val,
               "warmstart_val_reward": trainer.warmstart_info["val_reward"],
               "warmstart_seconds": trainer.warmstart_info["seconds"], "wall_seconds": time.perf_counter() - t0}
    with open(os.path.join(cfg.outdir, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
    if cfg.plots:
        from .plots import run_plots
        run_plots(cfg.outdir)
    return summary


def main(argv: Optional[list[str]] = None, prog: str = "python -m noma_prorl_bench.run") -> int:
    cfg = parse_config(argv, prog=prog)
    err = check_outdir(cfg)
    if err:
        print(f"{prog}: error: {err}", file=sys.stderr)
        return 2
    summary = run(cfg)
    if not cfg.quiet:
        print(json.dumps(summary), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
