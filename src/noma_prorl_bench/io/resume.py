"""Resuming a run: `--outdir OUTDIR --resume` continues it from its newest complete checkpoint.

`resume_config` builds the run's config (the checkpoint's, then the flags given now; a change
to a field outside config.RESUME_SAFE_FIELDS is refused, listing the fields), and
`prepare_outdir_for_resume` cuts metrics.jsonl, events.jsonl, samples.jsonl (and
timeline.jsonl) back to the checkpoint's step, dropping a partial last line left by a
`kill -9`, so the continued run appends exactly what an uninterrupted run would have written.
Before anything is cut, `check_metrics_log` verifies that metrics.jsonl holds steps 1..k (k =
the checkpoint's step) exactly once each, and the step-0 row (the evaluation before RL) at most
once (runs written before that row existed have none); a missing, duplicated or unreadable row
up to k is refused (the checkpoint has no copy of the log to rebuild it from); when an older
checkpoint's steps are intact (a torn last row), the message names the newer checkpoint
directories to delete to resume from it. Before anything is read, the run directory is checked
for symlinks and for files that are not regular with one link (safe_files.run_dir_links). A
checkpoint resumes only the run that wrote it (`require_own_checkpoint`: its run_id and settings
match config.json), and a ``module:function`` task or reward function in it is imported only when
the command line names it again (config/code_specs.py). Every problem is a ConfigError naming
the flag (exit 2, nothing written). See docs/reliability.md.
"""

from __future__ import annotations

import json
import os
import shlex
from dataclasses import fields

from noma_prorl_bench.config import RESUME_SAFE_FIELDS, ConfigError, RunConfig, validate
from noma_prorl_bench.config.code_specs import refuse_code_from
from noma_prorl_bench.io import lock
from noma_prorl_bench.io.checkpoint import (
    CKPT_DIR,
    Checkpoint,
    CheckpointError,
    list_checkpoints,
    prune,
    read,
)
from noma_prorl_bench.io.safe_files import RunDirRefused, read_bytes, run_dir_links, write_bytes

JSONL_FILES = ("metrics.jsonl", "events.jsonl", "samples.jsonl", "timeline.jsonl")


def truncate_jsonl(path: str, step: int) -> dict[str, int]:
    """Keep the records with "step" <= `step`; drop a partial last line and unparseable lines.
    Rewritten atomically. Returns {"kept", "dropped", "partial"}. A file that is not a regular file
    with one link raises RunDirRefused (safe_files.open_nofollow)."""
    try:
        raw = read_bytes(path)
    except FileNotFoundError:
        return {"kept": 0, "dropped": 0, "partial": 0}
    lines = raw.split(b"\n")
    partial = int(lines[-1] != b"")  # no trailing newline: killed mid-write
    kept, dropped = [], 0
    for line in lines[:-1]:
        try:
            rec = json.loads(line)
            ok = isinstance(rec, dict) and not (isinstance(rec.get("step"), (int, float)) and rec["step"] > step)
        except (ValueError, RecursionError):  # RecursionError: deeply nested JSON
            ok = False
        if ok:
            kept.append(line)
        else:
            dropped += 1
    write_bytes(path, b"".join(x + b"\n" for x in kept), fsync=True)  # exclusive temp file, no link followed
    return {"kept": len(kept), "dropped": dropped, "partial": partial}


def check_metrics_log(path: str, step: int) -> str | None:
    """Why metrics.jsonl cannot be continued from checkpoint `step`, else None: its records with
    "step" <= `step` must be steps 1..`step`, each exactly once, and step 0 (the evaluation
    before RL) at most once, absent in older runs (lines after them, a partial last line and
    records past `step` are what a kill leaves and are cut back later)."""
    try:
        raw = read_bytes(path)
    except FileNotFoundError:
        return f"{path} is missing" if step else None
    except RunDirRefused as e:  # a symlink, FIFO, socket, device or hard link
        return str(e).removeprefix("argument --outdir: ")
    except OSError as e:
        return f"{path} is unreadable: {e}"
    lines = raw.split(b"\n")
    counts: dict[int, int] = {}
    for i, line in enumerate(lines[:-1], 1):
        try:
            rec = json.loads(line)
        except (ValueError, RecursionError):
            rec = None
        s = rec.get("step") if isinstance(rec, dict) else None
        if not (isinstance(s, int) and not isinstance(s, bool)):
            return f"{path} line {i} is not a metrics record with an integer step"
        if s <= step:
            counts[s] = counts.get(s, 0) + 1
    missing = [s for s in range(1, step + 1) if s not in counts]
    repeated = sorted(s for s, n in counts.items() if n > 1)
    foreign = sorted(s for s in counts if s < 0)
    if missing or repeated or foreign:
        parts = [
            f"missing steps {_ranges(missing)}" if missing else "",
            f"repeated steps {_ranges(repeated)}" if repeated else "",
            f"steps out of range {_ranges(foreign)}" if foreign else "",
        ]
        return (
            f"{path} does not hold steps 1..{step} exactly once and step 0 at most once "
            f"({'; '.join(p for p in parts if p)})"
        )
    return None


def require_verified(ckpt: Checkpoint) -> None:
    """CheckpointError if the checkpoint's files do not match the sha256 digests in its COMPLETE
    marker (checked by `read`; raised here, after the state was tried on the trainer)."""
    if ckpt.digest_error:
        raise CheckpointError(f"{ckpt.digest_error} (delete that checkpoint directory to resume from an older one)")


def require_intact_log(cfg: RunConfig, ckpt: Checkpoint) -> None:
    """ConfigError (--resume) unless the run's metrics.jsonl holds steps 1..k exactly once
    (`check_metrics_log`); called by the CLI after `resume_config` (under the lock), before anything
    is written."""
    problem = check_metrics_log(os.path.join(cfg.outdir, "metrics.jsonl"), ckpt.step)
    if problem:
        raise ConfigError(
            "resume",
            f"{problem}; the log cannot be continued exactly from {ckpt.path}: "
            f"{_older_fit(cfg.outdir, ckpt.step)}restore the log, or start the run again "
            "with --overwrite",
        )


def _older_fit(outdir: str, step: int) -> str:
    """'delete X (`rm -r X`) to resume from Y (step k), ' when metrics.jsonl can be continued from the newest
    checkpoint Y older than `step` (e.g. a torn or lost last row after the final checkpoint), else ''."""
    log = os.path.join(outdir, "metrics.jsonl")
    fit = next(
        ((s, p) for s, p in reversed(list_checkpoints(outdir)) if s < step and check_metrics_log(log, s) is None), None
    )
    if fit is None:
        return ""
    newer = [p for s, p in list_checkpoints(outdir) if s > fit[0]]
    return (
        f"delete {' and '.join(newer)} (`{shlex.join(['rm', '-r', *newer])}`) to resume from {fit[1]} (step {fit[0]}), "
    )


def require_own_checkpoint(outdir: str, ckpt: Checkpoint, names: set) -> None:
    """ConfigError (--resume) unless `ckpt` was written by the run in `outdir`: the run_id it
    records equals the one in outdir's config.json (a checkpoint written before run ids were
    recorded has none), and its settings equal config.json's in every field that a resume may not
    change. A checkpoint directory copied in from another run is refused, never continued under
    this run's name."""
    path = os.path.join(outdir, "config.json")
    name = os.path.relpath(ckpt.path, outdir)
    drop = f"remove {name} to resume from an older checkpoint of this run, or start it again with --overwrite"
    try:
        rec = json.loads(read_bytes(path))
    except FileNotFoundError:
        rec = None
    except (OSError, RunDirRefused, ValueError, RecursionError, UnicodeDecodeError) as e:
        raise ConfigError(
            "resume", f"{path} is unreadable ({str(e)[:100]}); the checkpoint cannot be tied to this run"
        ) from e
    if not isinstance(rec, dict):
        raise ConfigError(
            "resume",
            f"{path} is missing or not a run's config: a checkpoint resumes only in the run "
            "directory whose config.json names the run (start again with --overwrite)",
        )
    own = rec.get("run_id")
    if ckpt.run_id is not None and ckpt.run_id != own:
        raise ConfigError(
            "resume",
            f"{name} belongs to another run (its run_id {ckpt.run_id[:12]}..., this run's "
            f"config.json: {str(own)[:12]}...): a checkpoint continues only the run that "
            f"wrote it; {drop}",
        )
    differ = sorted(
        k for k in names if k not in RESUME_SAFE_FIELDS and k in rec and k in ckpt.config and rec[k] != ckpt.config[k]
    )
    if differ:
        shown = ", ".join(f"--{k} (checkpoint {ckpt.config[k]!r}, config.json {rec[k]!r})" for k in differ[:4])
        raise ConfigError(
            "resume",
            f"{name} was written with other settings than this run's config.json: {shown}"
            f"{' ...' if len(differ) > 4 else ''}; {drop}",
        )


def _ranges(xs: list[int]) -> str:
    """[1, 2, 3, 7] -> '1-3, 7' (at most 5 runs shown)."""
    runs: list[list[int]] = []
    for x in xs:
        if runs and x == runs[-1][1] + 1:
            runs[-1][1] = x
        else:
            runs.append([x, x])
    text = ", ".join(f"{a}-{b}" if a != b else str(a) for a, b in runs[:5])
    return text + (", ..." if len(runs) > 5 else "")


def find_resumable(outdir: str) -> str:
    """Path of the newest complete checkpoint in `outdir`, or a ConfigError saying why not."""
    if not os.path.isdir(outdir):
        raise ConfigError("resume", f"{outdir!r} does not exist: there is no run to resume")
    ckpts = list_checkpoints(outdir)
    if ckpts:
        return ckpts[-1][1]
    if not os.path.isfile(os.path.join(outdir, "config.json")):
        raise ConfigError("resume", f"{outdir!r} is not a run directory (no config.json, no {CKPT_DIR}/)")
    raise ConfigError(
        "resume",
        f"{outdir!r} has no complete checkpoint (checkpoints are written every "
        "--save_every steps and at the end); start it again with --overwrite",
    )


def resume_config(explicit: dict) -> tuple[RunConfig, Checkpoint]:
    """The config of a resumed run: the checkpoint's config, then the flags given now. Refused
    (ConfigError) if a given flag changes a field outside RESUME_SAFE_FIELDS. The run lock is taken
    before the checkpoint is read and kept for the run (`lock.hold`; given back on a refusal, and by
    `lock.release_held` when the caller stops): a second resume of the directory is refused."""
    if not explicit.get("outdir"):
        raise ConfigError("outdir", "is required")
    if explicit.get("overwrite"):
        raise ConfigError("resume", "continues the run in --outdir and --overwrite starts a new one: pass one of them")
    err = run_dir_links(explicit["outdir"])  # a symlink, FIFO, socket, hard link: before anything is read
    if err:
        raise ConfigError("outdir", err.removeprefix("argument --outdir: "))
    find_resumable(explicit["outdir"])  # a run with a checkpoint, before the lock file is made
    try:
        lock.hold(explicit["outdir"])  # kept for the run: no other resume cuts back what this one writes
    except (lock.RunLocked, RunDirRefused) as e:
        raise ConfigError("outdir", str(e).removeprefix("argument --outdir: ")) from e
    try:
        return _resume_config(explicit)
    except BaseException:
        lock.release_held(explicit["outdir"])
        raise


def _resume_config(explicit: dict) -> tuple[RunConfig, Checkpoint]:
    """resume_config under the run lock: the newest checkpoint read, tied to the run, merged with the flags."""
    try:
        ckpt = read(find_resumable(explicit["outdir"]), defer_digests=True)  # raised by require_verified
    except CheckpointError as e:
        raise ConfigError("resume", f"{e} (delete that checkpoint directory to resume from an older one)") from e
    known = {f.name: f.default for f in fields(RunConfig)}
    unknown = sorted(set(ckpt.config) - set(known))
    if unknown:
        raise ConfigError("resume", f"the checkpoint's config has fields this version does not know: {unknown}")
    require_own_checkpoint(explicit["outdir"], ckpt, set(known))
    refuse_code_from(ckpt.config, f"the checkpoint {ckpt.path}", explicit)  # before anything is built
    saved = {**known, **ckpt.config}
    changed = {k: (saved[k], v) for k, v in explicit.items() if k in known and saved[k] != v}
    unsafe = [k for k in changed if k not in RESUME_SAFE_FIELDS]
    if unsafe:
        diffs = ", ".join(f"--{k} (checkpoint {changed[k][0]!r}, now {changed[k][1]!r})" for k in unsafe)
        raise ConfigError(
            "resume",
            f"refusing to resume with a different config: {diffs}. Fields safe to change "
            f"on resume: {', '.join('--' + f for f in RESUME_SAFE_FIELDS)}",
        )
    cfg = RunConfig(**{**saved, **explicit, "resume": True, "overwrite": False})
    validate(cfg, set(explicit))
    if ckpt.step > cfg.steps:
        raise ConfigError("steps", f"the last checkpoint is at step {ckpt.step}, beyond --steps {cfg.steps}")
    problem = inexact_steps_change(int(saved["steps"]), ckpt.step, cfg)
    if problem:
        raise ConfigError(
            "steps",
            f"refusing to resume with --steps {cfg.steps} (the run had --steps "
            f"{saved['steps']}): {problem}. Start a new run with --steps {cfg.steps} "
            "(--overwrite), or resume without changing --steps",
        )
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
        return (
            f"--lr_schedule {cfg.lr_schedule} spans --steps, so a {cfg.steps}-step run has other learning "
            f"rates from step 1 on"
        )
    if cfg.engine == "ray_async" and step + cfg.max_staleness > old_steps:
        return (
            f"--engine ray_async samples batches ahead of training (--max_staleness {cfg.max_staleness}), "
            f"but the {old_steps}-step run sampled none for the steps after {old_steps}, so steps "
            f"{old_steps + 1}.. would train on batches sampled by newer policy versions than in a "
            f"{cfg.steps}-step run"
        )
    if step == old_steps < cfg.steps and step % cfg.eval_every:
        return (
            f"its last step {step} evaluated (a run always evaluates its last step) off the --eval_every "
            f"{cfg.eval_every} cadence, which a {cfg.steps}-step run does not do, so the metrics would differ "
            f"from step {step} on"
        )
    return None


def changed_since_read(outdir: str, ckpt: Checkpoint) -> str | None:
    """Why the run must not be cut back to `ckpt` now (under the lock, right before it is): a newer
    checkpoint or a log that no longer continues from it (another process wrote the run meanwhile)."""
    newest = list_checkpoints(outdir)
    problem = check_metrics_log(os.path.join(outdir, "metrics.jsonl"), ckpt.step)
    if (newest and newest[-1][1] != ckpt.path) or not newest or problem:
        return (
            f"argument --resume: {outdir!r} changed since its checkpoint {ckpt.path} was read "
            f"({problem or 'another checkpoint is now the newest'}); nothing was cut back: run the resume again"
        )
    return None


def prepare_outdir_for_resume(outdir: str, step: int, keep: int) -> dict[str, dict]:
    """Cut the run's JSONL files back to `step`, drop summary.json and newer or partial
    checkpoints. Returns what was dropped per file."""
    dropped = {
        f: truncate_jsonl(os.path.join(outdir, f), step)
        for f in JSONL_FILES
        if os.path.lexists(os.path.join(outdir, f))
    }
    summary = os.path.join(outdir, "summary.json")
    if os.path.lexists(summary):
        os.remove(summary)  # a link is removed, its target left alone
    prune(outdir, keep, after_step=step)
    return dropped
