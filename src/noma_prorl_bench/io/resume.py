"""Resuming a run: `--outdir OUTDIR --resume` continues it from its newest complete checkpoint.

`resume_config` builds the run's config (the checkpoint's, then the flags given now; a change
to a field outside config.RESUME_SAFE_FIELDS is refused, listing the fields), and
`prepare_outdir_for_resume` cuts metrics.jsonl, events.jsonl, samples.jsonl (and
timeline.jsonl) back to the checkpoint's step, dropping a partial last line left by a
`kill -9`, so the continued run appends exactly what an uninterrupted run would have written.
Every problem is a ConfigError naming the flag (exit 2, nothing written). See docs/reliability.md.
"""
from __future__ import annotations

import json
import os
from dataclasses import fields

from noma_prorl_bench.config import RESUME_SAFE_FIELDS, ConfigError, RunConfig, validate
from noma_prorl_bench.io.checkpoint import (
    CKPT_DIR,
    Checkpoint,
    CheckpointError,
    list_checkpoints,
    prune,
    read,
)

JSONL_FILES = ("metrics.jsonl", "events.jsonl", "samples.jsonl", "timeline.jsonl")


def truncate_jsonl(path: str, step: int) -> dict[str, int]:
    """Keep the records with "step" <= `step`; drop a partial last line and unparseable lines.
    Rewritten atomically. Returns {"kept", "dropped", "partial"}."""
    if not os.path.isfile(path):
        return {"kept": 0, "dropped": 0, "partial": 0}
    with open(path, "rb") as f:
        raw = f.read()
    lines = raw.split(b"\n")
    partial = int(lines[-1] != b"")                     # no trailing newline: killed mid-write
    kept, dropped = [], 0
    for line in lines[:-1]:
        try:
            rec = json.loads(line)
            ok = isinstance(rec, dict) and not (isinstance(rec.get("step"), (int, float)) and rec["step"] > step)
        except ValueError:
            ok = False
        if ok:
            kept.append(line)
        else:
            dropped += 1
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(b"".join(x + b"\n" for x in kept))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return {"kept": len(kept), "dropped": dropped, "partial": partial}


def find_resumable(outdir: str) -> str:
    """Path of the newest complete checkpoint in `outdir`, or a ConfigError saying why not."""
    if not os.path.isdir(outdir):
        raise ConfigError("resume", f"{outdir!r} does not exist: there is no run to resume")
    ckpts = list_checkpoints(outdir)
    if ckpts:
        return ckpts[-1][1]
    if not os.path.isfile(os.path.join(outdir, "config.json")):
        raise ConfigError("resume", f"{outdir!r} is not a run directory (no config.json, no {CKPT_DIR}/)")
    raise ConfigError("resume", f"{outdir!r} has no complete checkpoint (checkpoints are written every "
                                "--save_every steps and at the end); start it again with --overwrite")


def resume_config(explicit: dict) -> tuple[RunConfig, Checkpoint]:
    """The config of a resumed run: the checkpoint's config, then the flags given now. Refused
    (ConfigError) if a given flag changes a field outside RESUME_SAFE_FIELDS."""
    if not explicit.get("outdir"):
        raise ConfigError("outdir", "is required")
    if explicit.get("overwrite"):
        raise ConfigError("resume", "continues the run in --outdir and --overwrite starts a new one: pass one of them")
    try:
        ckpt = read(find_resumable(explicit["outdir"]))
    except CheckpointError as e:
        raise ConfigError("resume", f"{e} (delete that checkpoint directory to resume from an older one)") from e
    known = {f.name: f.default for f in fields(RunConfig)}
    unknown = sorted(set(ckpt.config) - set(known))
    if unknown:
        raise ConfigError("resume", f"the checkpoint's config has fields this version does not know: {unknown}")
    saved = {**known, **ckpt.config}
    changed = {k: (saved[k], v) for k, v in explicit.items() if k in known and saved[k] != v}
    unsafe = [k for k in changed if k not in RESUME_SAFE_FIELDS]
    if unsafe:
        diffs = ", ".join(f"--{k} (checkpoint {changed[k][0]!r}, now {changed[k][1]!r})" for k in unsafe)
        raise ConfigError("resume", f"refusing to resume with a different config: {diffs}. Fields safe to change "
                                    f"on resume: {', '.join('--' + f for f in RESUME_SAFE_FIELDS)}")
    cfg = RunConfig(**{**saved, **explicit, "resume": True, "overwrite": False})
    validate(cfg, set(explicit))
    if ckpt.step > cfg.steps:
        raise ConfigError("steps", f"the last checkpoint is at step {ckpt.step}, beyond --steps {cfg.steps}")
    problem = inexact_steps_change(int(saved["steps"]), ckpt.step, cfg)
    if problem:
        raise ConfigError("steps", f"refusing to resume with --steps {cfg.steps} (the run had --steps "
                                   f"{saved['steps']}): {problem}. Start a new run with --steps {cfg.steps} "
                                   "(--overwrite), or resume without changing --steps")
    return cfg, ckpt


def inexact_steps_change(old_steps: int, step: int, cfg: RunConfig) -> str | None:
    """Why continuing from checkpoint `step` of a `--steps old_steps` run with `cfg.steps` would not
    equal an uninterrupted `--steps cfg.steps` run, or None when it would (resume is exact or
    refused). What depends on --steps: the cosine LR schedule (its horizon, from step 1 on) and the
    work done only on the last step: an evaluation off the --eval_every cadence (also refreshing
    the kl/to_prev snapshot); with --engine ray_async, the batches sampled ahead (up to
    --max_staleness), which a run stops launching at its last step. A growth due on the last step
    is done by the resume (growth_loop)."""
    if cfg.steps == old_steps:
        return None
    if cfg.lr_schedule != "constant":
        return (f"--lr_schedule {cfg.lr_schedule} spans --steps, so a {cfg.steps}-step run has other learning "
                f"rates from step 1 on")
    if cfg.engine == "ray_async" and step + cfg.max_staleness > old_steps:
        return (f"--engine ray_async samples batches ahead of training (--max_staleness {cfg.max_staleness}), "
                f"but the {old_steps}-step run sampled none for the steps after {old_steps}, so steps "
                f"{old_steps + 1}.. would train on batches sampled by newer policy versions than in a "
                f"{cfg.steps}-step run")
    if step == old_steps < cfg.steps and step % cfg.eval_every:
        return (f"its last step {step} evaluated (a run always evaluates its last step) off the --eval_every "
                f"{cfg.eval_every} cadence, which a {cfg.steps}-step run does not do, so the metrics would differ "
                f"from step {step} on")
    return None


def prepare_outdir_for_resume(outdir: str, step: int, keep: int) -> dict[str, dict]:
    """Cut the run's JSONL files back to `step`, drop summary.json and newer or partial
    checkpoints. Returns what was dropped per file."""
    dropped = {f: truncate_jsonl(os.path.join(outdir, f), step) for f in JSONL_FILES
               if os.path.isfile(os.path.join(outdir, f))}
    summary = os.path.join(outdir, "summary.json")
    if os.path.isfile(summary):
        os.remove(summary)
    prune(outdir, keep, after_step=step)
    return dropped
