"""One outdir, one run: `OUTDIR/run.lock` names the process that writes the directory.

The lock is an exclusive `flock` on that file, taken just before the first run file is written
and held until the run ends; the kernel drops it when the process dies, however it dies, so a
live holder is never mistaken for a dead one (nor a reused pid for a live run). The file records
`{"pid", "host"}` for the message. A second run or `--resume` on the same outdir while the
holder lives is refused (`RunLocked`, exit 2 naming the pid); a lock file left behind by a dead
process (kill -9, power loss) is stale and taken over with a warning. `--resume` takes the lock
(`hold`) before it reads the checkpoint and keeps it for the run. The lock file is never
opened through a symlink (`run.lock -> VICTIM` is refused, exit 2, and VICTIM is left alone), nor
when it is a FIFO, socket or device (it would block or misbehave) or a hard link (the other name's
contents would be replaced): safe_files.open_nofollow.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import sys
from contextlib import contextmanager
from typing import Optional

from noma_prorl_bench.io.safe_files import LOCK_FILE, RunDirRefused, entry_error, makedirs, open_nofollow


class RunLocked(RuntimeError):
    """Another live process holds the outdir's lock."""

    def __init__(self, outdir: str, holder: dict):
        super().__init__(
            f"argument --outdir: {outdir!r} is in use by another run (pid {holder.get('pid')} on "
            f"{holder.get('host', '?')}, lock file {os.path.join(outdir, LOCK_FILE)}); wait for it "
            "to finish or stop it (SIGTERM writes a checkpoint), then --resume"
        )
        self.holder = holder


def read_lock(outdir: str) -> Optional[dict]:
    """The holder recorded in the lock file ({} if unreadable), or None when there is none."""
    try:
        with os.fdopen(open_nofollow(os.path.join(outdir, LOCK_FILE), os.O_RDONLY)) as f:
            holder = json.loads(f.read(4096) or "{}")
        return holder if isinstance(holder, dict) else {}
    except FileNotFoundError:
        return None
    except (OSError, ValueError, RunDirRefused, RecursionError):
        return {}


def _held(fd: int) -> bool:
    """True when another open file description holds the flock on fd."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    return False


#: outdirs whose lock this process took ahead of its run (`hold`: --resume, before it reads the
#: checkpoint), keyed by real path; `run_lock` then keeps it instead of taking it again
_HELD: dict[str, int] = {}


def hold(outdir: str) -> None:
    """Take the outdir's lock now and keep it for this process's later `run_lock` (RunLocked while another
    live process holds it): a resume reads the checkpoint and the log only under the lock, so a second
    resume of the same directory cannot cut back what the first one wrote meanwhile."""
    key = os.path.realpath(outdir)
    if key not in _HELD:
        _HELD[key] = acquire(outdir)


def release_held(outdir: str) -> None:
    """Give back a lock taken by `hold` that no `run_lock` took over (the run was refused or stopped)."""
    fd = _HELD.pop(os.path.realpath(outdir), None)
    if fd is not None:
        release(outdir, fd)


def lock_error(outdir: str) -> Optional[str]:
    """The refusal message if a live process holds the outdir (or its lock file is a symlink, not a
    regular file, or a hard link), else None (writes nothing); None when this process holds it (`hold`)."""
    if os.path.realpath(outdir) in _HELD:
        return None
    path = os.path.join(outdir, LOCK_FILE)
    err = entry_error(path)
    if err:
        return err
    try:
        fd = open_nofollow(path, os.O_RDONLY)
    except RunDirRefused as e:
        return str(e)
    except OSError:
        return None
    try:
        return str(RunLocked(outdir, read_lock(outdir) or {})) if _held(fd) else None
    finally:
        os.close(fd)  # also drops the probe's own flock


def acquire(outdir: str) -> int:
    """Create and flock the lock file (the outdir too) and record this process in it; a lock
    file left by a dead process is taken over with a warning. Returns the fd to keep open.
    Raises RunLocked while the holder lives, UnsafePath if the lock file is a symlink,
    NotRegularFile if it is a FIFO, socket, device, directory or hard link."""
    makedirs(outdir)
    path = os.path.join(outdir, LOCK_FILE)
    while True:
        fd = open_nofollow(path, os.O_RDWR | os.O_CREAT, 0o644)
        if _held(fd):
            os.close(fd)
            raise RunLocked(outdir, read_lock(outdir) or {})
        try:
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:  # not a file its holder unlinked meanwhile
            break
        os.close(fd)
    old = read_lock(outdir)
    if old:
        print(
            f"warning: taking over the stale lock {path} (pid {old.get('pid')} on {old.get('host', '?')} "
            "is not running)",
            file=sys.stderr,
            flush=True,
        )
    me = {"pid": os.getpid(), "host": socket.gethostname()}
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps(me).encode(), 0)
    return fd


def release(outdir: str, fd: int) -> None:
    """Remove the lock file, then drop the flock."""
    try:
        os.remove(os.path.join(outdir, LOCK_FILE))
    except FileNotFoundError:
        pass
    os.close(fd)


@contextmanager
def run_lock(outdir: str):
    """Hold the outdir's lock for the duration of the block (the one `hold` took, if it did)."""
    fd = _HELD.pop(os.path.realpath(outdir), None)
    if fd is None:
        fd = acquire(outdir)
    try:
        yield
    finally:
        release(outdir, fd)
