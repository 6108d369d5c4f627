"""The run directory: checks before anything is written, config.json, the JSONL sinks and
their resume cut-back, summary.json (written atomically).

Files a run writes (safe_files.RUN_FILES, RUN_DIRS): config.json, metrics.jsonl, events.jsonl,
samples.jsonl, summary.json, timeline.jsonl (Ray engines), plots/, checkpoints/.

A run directory is untrusted input (it may come from someone else): every file is opened
through io/safe_files.py (no symlink is ever followed, only regular files are opened), a
directory whose run files are symlinks, FIFOs, sockets, devices or hard links is refused, and
`--overwrite` clears only a directory that is empty or "ours": one whose config.json this tool
wrote (its `versions` name the package; new runs also carry a `run_id`). That check is repeated
under the run lock just before files are cleared or created.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import uuid
from typing import Any, Optional

from noma_prorl_bench._version import __version__
from noma_prorl_bench.config import RunConfig
from noma_prorl_bench.io import resume
from noma_prorl_bench.io.lock import LOCK_FILE
from noma_prorl_bench.io.machine import machine_info
from noma_prorl_bench.io.metrics import JsonlSink, MultiSink, report_sink
from noma_prorl_bench.io.safe_files import (  # noqa: F401  (LINK_CHECKED, run_dir_links: re-exported)
    LINK_CHECKED,
    RUN_DIRS,
    RUN_FILES,
    RunDirRefused,
    is_link,
    makedirs,
    read_bytes,
    remove_tree,
    run_dir_links,
)
from noma_prorl_bench.io.safe_files import write_json as _write_json

SINK_FILES = ("metrics.jsonl", "events.jsonl", "samples.jsonl")


PACKAGE = "noma_prorl_bench"


def run_marker(outdir: str) -> Optional[dict]:
    """The run's config.json if this tool wrote it (a JSON object whose `versions` name the
    package; runs made since run ids were added also carry `run_id`), else None."""
    try:
        d = json.loads(read_bytes(os.path.join(outdir, "config.json")))  # never a link, FIFO or hard link
    except (OSError, ValueError, RecursionError, RunDirRefused):
        return None
    ok = isinstance(d, dict) and isinstance(d.get("versions"), dict) and PACKAGE in d["versions"]
    return d if ok else None


def _protected(d: str) -> Optional[str]:
    """Why `d` may never be cleared (/, the home directory, the working directory or one of their
    parents), else None."""
    real = os.path.realpath(d)
    for what, p in (("the home directory", os.path.expanduser("~")), ("the working directory", os.getcwd())):
        p = os.path.realpath(p)
        if real == p or p.startswith(real.rstrip(os.sep) + os.sep):
            return what if real == p else f"a parent of {what}"
    return "the root directory" if real == os.sep else None


def ownership_error(d: str, overwrite: bool) -> Optional[str]:
    """Why a new run may not write into `d`, else None: a non-empty directory needs --overwrite,
    and --overwrite clears only an empty directory or one holding this tool's run (never /, the
    home or working directory). Repeated under the lock right before files are cleared."""
    if overwrite and _protected(d):
        return f"argument --overwrite: refusing to clear {d!r}: it is {_protected(d)}"
    if not os.path.isdir(d) or not set(os.listdir(d)) - {LOCK_FILE}:
        return None
    if not overwrite:
        return f"argument --outdir: {d!r} exists and is not empty (pass --overwrite to replace its run files)"
    if run_marker(d) is None:
        return (
            f"argument --overwrite: {d!r} is not a run directory of this tool (no config.json written by "
            f"{PACKAGE}); refusing to delete its files: choose an empty or new --outdir"
        )
    return None


def check_outdir(cfg: RunConfig) -> Optional[str]:
    """An error message if --outdir cannot be used, else None (nothing is created here)."""
    d = cfg.outdir
    if os.path.exists(d) and not os.path.isdir(d):
        return f"argument --outdir: {d!r} exists and is not a directory"
    return run_dir_links(d) or (None if cfg.resume else ownership_error(d, cfg.overwrite))


def check_inputs(cfg: RunConfig) -> Optional[str]:
    """An error message for inputs that would only fail after the run has started, else None."""
    from noma_prorl_bench.io import preflight

    err = preflight.outdir_error(cfg.outdir) or preflight.missing_dependency(cfg)
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
    err = preflight.memory_error(cfg)  # builds the policy on the meta device (a valid model dir)
    if err:
        return err
    if cfg.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            return "argument --device: cuda requested but no CUDA device is available (choose from cpu, cuda, auto)"
    return None


def clear_run_files(outdir: str) -> None:
    """Remove a previous run's files (only the ones a run writes; a symlink is removed, never
    its target)."""
    for f in RUN_FILES + RUN_DIRS:
        remove_tree(os.path.join(outdir, f))


def prepare_new_outdir(cfg: RunConfig) -> None:
    """Under the run lock: check again that --outdir is empty or ours and holds no symlinked run
    file (another run may have written it since the first check), then clear the old run's
    files. Raises RunDirRefused."""
    err = run_dir_links(cfg.outdir) or ownership_error(cfg.outdir, cfg.overwrite)
    if err:
        raise RunDirRefused(err)
    clear_run_files(cfg.outdir)


def git_commit(mark_dirty: bool = False) -> Optional[str]:
    """HEAD of the checkout the package runs from (with mark_dirty, + " (+ uncommitted changes)"
    when the package's files differ from it); None outside a git checkout."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the package directory
    try:
        out = subprocess.run(["git", "-C", here, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        dirty = (
            mark_dirty
            and subprocess.run(
                ["git", "-C", here, "status", "--porcelain", "--", "."], capture_output=True, text=True, timeout=10
            ).stdout.strip()
        )
    except (OSError, subprocess.SubprocessError):
        return None
    head = out.stdout.strip() if out.returncode == 0 else ""
    return (head + (" (+ uncommitted changes)" if dirty else "")) if head else None


def resolved_device(name: str) -> str:
    """--device with auto resolved (cuda when available, else cpu)."""
    import torch

    return ("cuda" if torch.cuda.is_available() else "cpu") if name == "auto" else name


def resolved_config(cfg: RunConfig) -> dict:
    """config.json: every field plus derived values (the dtype used: --dtype auto resolved, and why),
    versions and the machine (io/machine.py; a resume records the machine it continued on)."""
    import numpy
    import torch

    from noma_prorl_bench.models.precision import resolve_dtype_choice

    d = cfg.to_dict()
    device = resolved_device(cfg.device)
    dtype, why = resolve_dtype_choice(cfg.dtype, cfg.model, device)
    d["derived"] = {
        "variant_label": cfg.variant_label,
        **cfg.clip_used,
        "loss_agg": cfg.loss_agg_resolved,
        "warmstart_steps": cfg.warmstart_steps_resolved,
        "device": device,
        "dtype": dtype,
        "dtype_reason": why,
    }
    if cfg.adv == "gae":  # the critic's learning rate (-1 resolved); other runs' config.json unchanged
        d["derived"]["critic_lr"] = cfg.critic_lr_resolved
    d["versions"] = {
        "noma_prorl_bench": __version__,
        "torch": torch.__version__,
        "numpy": numpy.__version__,
        "python": platform.python_version(),
        "git_commit": git_commit(),
    }
    d["machine"] = machine_info()  # the kernels a run's numbers depend on (io/machine.py)
    d["argv"] = sys.argv[1:]
    d["run_id"] = uuid.uuid4().hex
    return d


def write_json(path: str, obj: dict) -> None:
    """Write JSON atomically (an exclusive temporary file, then rename; no symlink followed)."""
    _write_json(path, obj)


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

    return tqdm(
        total=total,
        desc=os.path.basename(cfg.outdir.rstrip("/")) or "run",
        file=sys.stderr,
        dynamic_ncols=True,
        leave=True,
    )


def _read_jsonl(path: str) -> list[dict]:
    text = read_bytes(path).decode("utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def record_resume(cfg: RunConfig, ckpt) -> dict:
    """Cut the run files back to the checkpoint's step and write config.json with this resume
    appended to its `resumes` list; returns the fields of the `resume` event (both engines).
    Under the run lock: refuses (RunDirRefused) a run file that became a symlink meanwhile."""
    err = run_dir_links(cfg.outdir) or resume.changed_since_read(cfg.outdir, ckpt)
    if err:
        raise RunDirRefused(err)
    dropped = resume.prepare_outdir_for_resume(cfg.outdir, ckpt.step, cfg.keep_checkpoints)
    config = resolved_config(cfg)
    old = run_marker(cfg.outdir) or {}
    config["resumes"] = old.get("resumes", []) if isinstance(old.get("resumes"), list) else []
    if isinstance(old.get("run_id"), str):
        config["run_id"] = old["run_id"]  # the same run, continued
    changed = {
        k: [ckpt.config.get(k), v] for k, v in cfg.to_dict().items() if ckpt.config.get(k) != v and k != "resume"
    }
    config["resumes"].append({"from_step": ckpt.step, "argv": config["argv"], "changed": changed})
    write_json(os.path.join(cfg.outdir, "config.json"), config)
    return {
        "checkpoint": os.path.relpath(ckpt.path, cfg.outdir),
        "changed": changed,
        "dropped_lines": {f: d["dropped"] + d["partial"] for f, d in dropped.items()},
    }


def open_outputs(cfg: RunConfig, trainer, buffers, ckpt=None) -> list:
    """Create or (resume) cut back the run files, attach JSONL sinks to the trainer."""
    if ckpt is None:
        makedirs(cfg.outdir)
        prepare_new_outdir(cfg)
        write_json(os.path.join(cfg.outdir, "config.json"), resolved_config(cfg))
    else:
        resumed = record_resume(cfg, ckpt)
    sinks: list[Any] = [JsonlSink(os.path.join(cfg.outdir, f), "a" if ckpt else "w") for f in SINK_FILES]
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
