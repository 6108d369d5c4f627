"""Checkpoints for exact resume: atomic save, validated load, pruning, JSONL truncation.

Layout (one directory per checkpoint, the newest `--keep_checkpoints` kept):

    OUTDIR/checkpoints/step_000006/
        tensors.safetensors   every tensor, flat names: policy/<param>, ref/model/<param>,
                              optimizer/state/<idx>/exp_avg, rng/torch/sample_gen, ...
        state.json            format tag, step, config (+ hash), the run's run_id (from its
                              config.json: the checkpoint resumes only that run), versions, and the state tree
                              with tensors replaced by {"__t__": name} (scalars, RNG states);
                              the engine's `extra` tree likewise (its tensors under extra/...)
        COMPLETE              written last: {"step", "sha256": {file: hex digest}} of the
                              two files above, verified on every read

A checkpoint is written into `checkpoints/.tmp_step_XXXXXX_*` (files fsynced, COMPLETE last)
and then `os.replace`d to its final name, so a directory named `step_*` is always whole; a
`kill -9` mid-save leaves only a `.tmp_*` directory, which the next save or resume deletes.

What is saved: the tree a stateful owner builds with io/state_tree.py's `state_tree`, encoded
by its `encode`. Resuming a run from a checkpoint is resume.py. See docs/reliability.md.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from dataclasses import dataclass
from typing import Optional

import torch

from noma_prorl_bench.config import RESUME_SAFE_FIELDS
from noma_prorl_bench.io.safe_files import RunDirRefused, UnsafePath, is_link, not_regular, open_nofollow, remove_tree
from noma_prorl_bench.io.state_tree import CheckpointError, decode, encode

FORMAT, FORMAT_VERSION = "noma_prorl_bench/checkpoint", 1
CKPT_DIR, TENSORS, STATE, MARKER = "checkpoints", "tensors.safetensors", "state.json", "COMPLETE"


# ============================================================================ files
def config_hash(cfg: dict) -> str:
    """Hash of the fields that must not change on resume."""
    core = {k: v for k, v in sorted(cfg.items()) if k not in RESUME_SAFE_FIELDS}
    return hashlib.sha256(json.dumps(core, sort_keys=True).encode()).hexdigest()[:16]


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def sha256_file(path: str) -> str:
    """Hex sha256 of a checkpoint file (read without following a symlink)."""
    h = hashlib.sha256()
    with os.fdopen(open_nofollow(path, os.O_RDONLY), "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _write_new(path: str, data: bytes) -> None:
    """Create `path` exclusively (no symlink followed, never an existing file) and write `data`."""
    with os.fdopen(open_nofollow(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666 & ~_umask()), "wb") as f:
        f.write(data)


def save(owner, outdir: str, keep: int, extra: Optional[dict] = None) -> str:
    """Write `owner.state_dict()` (a `state_tree`) atomically as the checkpoint of its step
    (`owner.step_idx`, config `owner.cfg`); keep the newest `keep`.
    COMPLETE records the sha256 of tensors.safetensors and state.json (checked by `read`)."""
    from safetensors.torch import save_file  # noqa: PLC0415

    from noma_prorl_bench._version import __version__  # noqa: PLC0415

    step, cfg = int(owner.step_idx), owner.cfg.to_dict()
    tensors: dict[str, torch.Tensor] = {}
    seen: dict = {}
    tree = encode(owner.state_dict(), "", tensors, seen)
    extra_tree = encode(extra or {}, "extra", tensors, seen)  # may hold tensors (ray_async's batches)
    root = os.path.join(outdir, CKPT_DIR)
    if is_link(root):
        raise UnsafePath(root)
    os.makedirs(root, exist_ok=True)
    tmp = os.path.join(root, f".tmp_step_{step:06d}_{os.getpid()}")
    remove_tree(tmp)  # a link is unlinked, not followed
    os.mkdir(tmp)  # made by this process: nothing in it is a link
    save_file(tensors, os.path.join(tmp, TENSORS), metadata={"format": FORMAT})
    os.chmod(os.path.join(tmp, TENSORS), 0o666 & ~_umask())
    meta = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "step": step,
        "config_hash": config_hash(cfg),
        "run_id": run_id_of(outdir),
        "config": cfg,
        "versions": {"noma_prorl_bench": __version__, "torch": torch.__version__},
        "n_tensors": len(tensors),
        "extra": extra_tree,
        "state": tree,
    }
    _write_new(os.path.join(tmp, STATE), json.dumps(meta).encode())
    digests = {name: sha256_file(os.path.join(tmp, name)) for name in (TENSORS, STATE)}
    _write_new(os.path.join(tmp, MARKER), (json.dumps({"step": step, "sha256": digests}) + "\n").encode())
    for name in (TENSORS, STATE, MARKER, ""):
        _fsync(os.path.join(tmp, name) if name else tmp)
    final = os.path.join(root, f"step_{step:06d}")
    remove_tree(final)
    os.replace(tmp, final)
    _fsync(root)
    prune(outdir, keep)
    return final


def run_id_of(outdir: str) -> Optional[str]:
    """The `run_id` in outdir's config.json (written before the first checkpoint), else None. A
    checkpoint records it: it resumes only the run that wrote it (io/resume.py)."""
    try:
        rec = json.loads(_read_small(os.path.join(outdir, "config.json"), 1 << 24))
    except (OSError, UnsafePath, ValueError, RecursionError):
        return None
    rid = rec.get("run_id") if isinstance(rec, dict) else None
    return rid if isinstance(rid, str) else None


def _is_file(path: str) -> bool:
    """True if `path` is a regular file (not followed if a link: then False)."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def list_checkpoints(outdir: str) -> list[tuple[int, str]]:
    """(step, path) of every complete checkpoint, oldest first (none through a symlinked checkpoints/)."""
    root = os.path.join(outdir, CKPT_DIR)
    out = []
    for name in os.listdir(root) if os.path.isdir(root) and not is_link(root) else []:
        path = os.path.join(root, name)
        if (
            name.startswith("step_")
            and name[5:].isdigit()
            and not is_link(path)
            and _is_file(os.path.join(path, MARKER))
        ):
            out.append((int(name[5:]), path))
    return sorted(out)


def prune(outdir: str, keep: int, after_step: Optional[int] = None) -> None:
    """Delete leftovers of interrupted saves, all but the newest `keep` complete checkpoints,
    incomplete step directories and (resume) checkpoints newer than `after_step`."""
    root = os.path.join(outdir, CKPT_DIR)
    if not os.path.isdir(root) or is_link(root):
        return
    complete = {p for _, p in list_checkpoints(outdir)}
    for name in os.listdir(root):
        path = os.path.join(root, name)
        if name.startswith(".tmp_") or (name.startswith("step_") and path not in complete):
            remove_tree(path)  # a link is unlinked, its target left alone
    ckpts = [(s, p) for s, p in list_checkpoints(outdir) if after_step is None or s <= after_step]
    for _, path in [c for c in list_checkpoints(outdir) if c not in ckpts] + ckpts[:-keep]:
        doomed = os.path.join(root, f".tmp_del_{os.path.basename(path)}")
        os.replace(path, doomed)  # atomic: a kill mid-delete leaves no half checkpoint
        remove_tree(doomed)


@dataclass
class Checkpoint:
    path: str
    step: int
    config: dict
    extra: dict
    state: dict
    digest_error: Optional[str] = None  # read(..., defer_digests=True): a sha256 mismatch to raise later
    run_id: Optional[str] = None  # the run that wrote it (None: written before run ids were recorded)


def _read_small(path: str, limit: int = 1 << 30) -> bytes:
    with os.fdopen(open_nofollow(path, os.O_RDONLY), "rb") as f:
        return f.read(limit)


def verify(path: str) -> Optional[int]:
    """Check the sha256 digests that COMPLETE records against the files; returns the step it
    records, or None for a checkpoint written before digests were recorded (COMPLETE holds only
    the step: not verified). CheckpointError names a file that is a symlink, missing or altered."""
    try:
        marker = json.loads(_read_small(os.path.join(path, MARKER), 1 << 16))
    except (OSError, RunDirRefused, ValueError, RecursionError) as e:
        raise CheckpointError(f"{path}/{MARKER} is unreadable: {e}") from e
    if isinstance(marker, int) and not isinstance(marker, bool):
        return None  # legacy marker: the step only
    if not isinstance(marker, dict) or not isinstance(marker.get("sha256"), dict):
        raise CheckpointError(f"{path}/{MARKER} is corrupt: no sha256 digests")
    for name in (TENSORS, STATE):
        want = marker["sha256"].get(name)
        try:
            got = sha256_file(os.path.join(path, name))
        except (OSError, RunDirRefused) as e:
            raise CheckpointError(f"{path}/{name} is unreadable: {e}") from e
        if got != want:
            raise CheckpointError(
                f"{path}/{name} does not match the sha256 recorded in {MARKER} (the file was "
                "altered, damaged or replaced)"
            )
    return marker.get("step")


def read(path: str, defer_digests: bool = False) -> Checkpoint:
    """Load and validate one checkpoint directory; CheckpointError says what is wrong. With
    `defer_digests` a sha256 mismatch is kept in `digest_error` instead, for the caller to raise
    after trying to load the state (whose "does not fit" names the problem more precisely)."""
    from safetensors.torch import load_file  # noqa: PLC0415

    if is_link(path):
        raise CheckpointError(f"{path} is a symbolic link; refusing to read a checkpoint through it")
    if not os.path.lexists(os.path.join(path, MARKER)):
        raise CheckpointError(f"{path} is incomplete (no {MARKER} marker)")
    for p in (os.path.join(path, name) for name in (MARKER, STATE, TENSORS)):
        try:
            st = os.lstat(p)
        except OSError:
            continue  # a missing file is named below
        what = "a symbolic link" if stat.S_ISLNK(st.st_mode) else not_regular(st)
        if what:  # safetensors would open a FIFO and block
            raise CheckpointError(
                f"{p} {what if what.startswith('has ') else 'is ' + what}, not a regular file "
                "with one link; refusing to read a checkpoint through it"
            )
    try:
        meta = json.loads(_read_small(os.path.join(path, STATE)))
    except (OSError, RunDirRefused, ValueError, RecursionError) as e:
        raise CheckpointError(f"{path}/{STATE} is unreadable: {str(e)[:200]}") from e
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise CheckpointError(f"{path} is not a noma_prorl_bench checkpoint (no format tag {FORMAT!r})")
    if meta.get("format_version") != FORMAT_VERSION:
        raise CheckpointError(
            f"{path} has checkpoint format {meta.get('format_version')}; this version reads {FORMAT_VERSION}"
        )
    if not isinstance(meta.get("config"), dict) or meta.get("config_hash") != config_hash(meta["config"]):
        raise CheckpointError(f"{path}/{STATE} is corrupt: its config does not match its config_hash")
    try:
        tensors = load_file(os.path.join(path, TENSORS))
    except Exception as e:  # noqa: BLE001  (safetensors raises its own error types)
        raise CheckpointError(f"{path}/{TENSORS} is unreadable: {str(e)[:200]}") from e
    if len(tensors) != meta.get("n_tensors"):
        raise CheckpointError(f"{path}/{TENSORS} holds {len(tensors)} tensors, {STATE} expects {meta.get('n_tensors')}")
    digest_error = None
    try:
        verify(path)  # after the checks above, which name the damage more precisely
    except CheckpointError as e:
        if not defer_digests:
            raise
        digest_error = str(e)
    try:
        state = decode(meta["state"], tensors)
        extra = decode(meta.get("extra") or {}, tensors)
        step = int(state["step"])
    except (KeyError, TypeError, ValueError, AttributeError, RecursionError) as e:
        raise CheckpointError(f"{path}/{STATE} is corrupt: {str(e)[:200]!r}") from e
    if step != meta.get("step"):
        raise CheckpointError(f"{path} is corrupt: step {meta.get('step')} vs state step {step}")
    run_id = meta.get("run_id")
    return Checkpoint(
        path, step, meta["config"], extra, state, digest_error, run_id if isinstance(run_id, str) else None
    )
