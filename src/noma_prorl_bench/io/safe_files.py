"""Reading and writing a run directory without following symbolic links or opening special files.

A run directory may come from someone else (a copied run, an archive, a shared folder), so its
entries are untrusted: a `metrics.jsonl.tmp -> ~/.bashrc` or `run.lock -> VICTIM` must not make
this tool write into the link's target, a FIFO or socket at `metrics.jsonl` must not make it
block forever, and a hard link `run.lock` (one file under two names) must not make it rewrite
the other name's contents. Every run file is therefore opened by one of these helpers:

- `open_nofollow(path, flags)`: the one place run files are opened: `os.open` with `O_NOFOLLOW
  | O_NONBLOCK` (a FIFO never blocks), then `fstat`: a symlink is `UnsafePath`, anything but a
  regular file (FIFO, socket, device, directory) or a file with more than one hard link is
  `NotRegularFile`; `O_TRUNC` is applied only after that check.
- `write_bytes(path, data)` / `write_json(path, obj)` / `write_text(path, text)`: atomic
  replace through a temporary file created exclusively (`O_EXCL | O_NOFOLLOW`, a random name)
  in the same directory, so neither the temporary nor the target is ever opened through a link
  (`os.replace` replaces a link itself, never its target; a link at `path` is refused first).
- `remove_tree(path)`: removes a directory tree, or only the link when `path` is a symlink.
- `link_error(dirpath, names)`: the refusal message (exit 2) when any of `names` in `dirpath`
  is a symlink; `kind_error(dirpath)`: when a run file, the lock or a checkpoint file is not a
  regular file with one link, or a run subdirectory is not a directory. Callers check their run
  directory with both before reading or writing anything.

See docs/reliability.md, "Run directories are untrusted input".
"""

from __future__ import annotations

import fcntl
import io
import json
import os
import shutil
import stat
import tempfile
from typing import Iterable, Optional

from noma_prorl_bench.config.user_files import not_regular

#: a run directory's files and subdirectories (io/run_dir.py writes them, the suite reads some)
RUN_FILES = (
    "config.json",
    "metrics.jsonl",
    "events.jsonl",
    "samples.jsonl",
    "summary.json",
    "timeline.jsonl",
    "metrics.csv",
)
RUN_DIRS = ("plots", "checkpoints", "tb", "wandb")
LOCK_FILE = "run.lock"
#: files and directories of a report or a suite (analysis/report.py, suite/), also checked in a run directory
REPORT_FILES, REPORT_DIRS = ("report.md", "report.json", "settings.json", "suite.json"), ("figures",)


class RunDirRefused(Exception):
    """A run directory this tool will not write into (a symlinked run file, a directory that is
    not ours); the message names the flag and the file. Reported as one line, exit 2."""


class UnsafePath(RunDirRefused):
    """A run file (or a directory holding run files) is a symbolic link."""

    def __init__(self, path: str, flag: str = "--outdir"):
        super().__init__(
            f"argument {flag}: {path!r} is a symbolic link; refusing to write through it "
            "(a run directory's files must be regular files: remove the link)"
        )
        self.path = path


class NotRegularFile(RunDirRefused):
    """A run file is a FIFO, socket, device or directory, or a file with more than one hard link."""

    def __init__(self, path: str, what: str, flag: str = "--outdir"):
        if what.startswith("has "):
            why = (
                f"{what} (another name shares its contents, which this tool would change through it); a run "
                "directory's files have one link: replace it by a copy (cp, not ln) or remove it"
            )
        else:
            why = f"is {what}, not a regular file; a run directory holds only regular files: remove it"
        super().__init__(f"argument {flag}: {path!r} {why}")
        self.path = path


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def is_link(path: str) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(path).st_mode)
    except OSError:
        return False


def link_error(dirpath: str, names: Iterable[str], flag: str = "--outdir") -> Optional[str]:
    """The refusal message if `dirpath/name` is a symlink for any name, else None."""
    for name in names:
        p = os.path.join(dirpath, name)
        if is_link(p):
            return str(UnsafePath(p, flag))
    return None


def entry_error(path: str, directory: bool = False, flag: str = "--outdir") -> Optional[str]:
    """The refusal message when `path` exists and is a symlink, or (`directory`) not a directory, or
    not a regular file with one link; None when it is absent or fine (`os.lstat`: nothing is opened)."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if stat.S_ISLNK(st.st_mode) and directory:
        return (
            f"argument {flag}: {path!r} is a symbolic link (to {os.readlink(path)!r}), not a directory; a run "
            f"directory's {os.path.basename(path)}/ must be a directory inside it (this tool does not read or "
            "write through links): replace the link by a copy of what it points to, or remove it"
        )
    if stat.S_ISLNK(st.st_mode):
        return str(UnsafePath(path, flag))
    if directory:
        what = None if stat.S_ISDIR(st.st_mode) else not_regular(st, links_ok=True) or "a file"
        return (
            (
                f"argument {flag}: {path!r} is {what}, not a directory; a run directory's "
                f"{os.path.basename(path)}/ is a directory: remove it"
            )
            if what
            else None
        )
    what = not_regular(st)
    return str(NotRegularFile(path, what, flag)) if what else None


def kind_error(outdir: str, flag: str = "--outdir") -> Optional[str]:
    """The refusal message for the first entry of run directory `outdir` that this tool would open
    and that is not what it should be (`entry_error`): the run files, the lock and report files
    (regular, one link), the run subdirectories, checkpoints/step_*/ and every file in them; else None."""
    if not os.path.isdir(outdir) or is_link(outdir):
        return None
    for name in RUN_FILES + (LOCK_FILE,) + REPORT_FILES + RUN_DIRS + REPORT_DIRS:
        err = entry_error(os.path.join(outdir, name), name in RUN_DIRS + REPORT_DIRS, flag)
        if err:
            return err
    root = os.path.join(outdir, "checkpoints")
    steps = (
        [n for n in sorted(os.listdir(root)) if n.startswith("step_")]
        if os.path.isdir(root) and not is_link(root)
        else []
    )
    for step in steps:
        p = os.path.join(root, step)
        paths = [(p, True)] + (
            [(os.path.join(p, f), False) for f in sorted(os.listdir(p))] if os.path.isdir(p) and not is_link(p) else []
        )
        err = next((e for q, d in paths if (e := entry_error(q, d, flag))), None)
        if err:
            return err
    return None


def open_nofollow(path: str, flags: int, mode: int = 0o644, links_ok: bool = False) -> int:
    """`os.open(path, flags | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)`, then `fstat`: a symlink at `path`
    raises UnsafePath; a FIFO, socket, device or directory, or (unless `links_ok`) a file with more than
    one hard link raises NotRegularFile, before anything is written or truncated. The returned
    descriptor blocks again (O_NONBLOCK cleared); O_TRUNC is applied after the check."""
    try:
        fd = os.open(path, (flags & ~os.O_TRUNC) | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC, mode)
    except OSError as e:  # ELOOP: a link; ENXIO: a FIFO without reader, a socket
        try:
            st = os.lstat(path)
        except OSError:
            raise e from None
        if stat.S_ISLNK(st.st_mode):
            raise UnsafePath(path) from e
        what = not_regular(st, links_ok)
        if what:
            raise NotRegularFile(path, what) from e
        raise
    try:
        what = not_regular(os.fstat(fd), links_ok)
        if what:
            raise NotRegularFile(path, what)
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
        if flags & os.O_TRUNC:
            os.ftruncate(fd, 0)
    except BaseException:
        os.close(fd)
        raise
    return fd


def write_bytes(path: str, data: bytes, fsync: bool = False) -> None:
    """Replace `path` by `data` atomically: a fresh temporary file (exclusive create, random name,
    no link followed) in the same directory, then `os.replace`. A symlink at `path` is refused, and
    so is anything but a regular file (a FIFO, socket, device or directory)."""
    try:
        st = os.lstat(path)
    except OSError:
        st = None
    if st is not None and stat.S_ISLNK(st.st_mode):
        raise UnsafePath(path)
    if st is not None and not_regular(st, links_ok=True):
        raise NotRegularFile(path, not_regular(st, links_ok=True) or "")
    d, base = os.path.split(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{base}.", suffix=".tmp", dir=d or ".")  # O_EXCL | O_NOFOLLOW
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), 0o666 & ~_umask())
            f.write(data)
            f.flush()
            if fsync:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.remove(tmp)
        except OSError:
            pass
        raise


def write_text(path: str, text: str, fsync: bool = False) -> None:
    write_bytes(path, text.encode("utf-8"), fsync)


def write_json(path: str, obj, indent: Optional[int] = 2, fsync: bool = False, **kw) -> None:
    write_bytes(path, json.dumps(obj, indent=indent, **kw).encode("utf-8"), fsync)


def append_text(path: str, text: str) -> None:
    """Append to `path` (created if missing), never through a symlink."""
    fd = open_nofollow(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    with os.fdopen(fd, "a", encoding="utf-8") as f:
        f.write(text)


def read_bytes(path: str, links_ok: bool = False) -> bytes:
    """Read a run file, never through a symlink, never from a FIFO, socket or device (`open_nofollow`)."""
    with os.fdopen(open_nofollow(path, os.O_RDONLY, links_ok=links_ok), "rb") as f:
        return f.read()


def save_figure(fig, path: str, **kw) -> None:
    """`fig.savefig` into memory, then `write_bytes` (matplotlib itself would follow a link)."""
    fmt = os.path.splitext(path)[1].lstrip(".") or "png"
    buf = io.BytesIO()
    fig.savefig(buf, format=fmt, **kw)
    write_bytes(path, buf.getvalue())


def makedirs(path: str) -> None:
    """`os.makedirs(path, exist_ok=True)`, refusing when `path` itself is a symlink."""
    if is_link(path):
        raise UnsafePath(path)
    os.makedirs(path, exist_ok=True)


def remove_tree(path: str) -> None:
    """Remove a directory tree (or a file, FIFO, socket); a symlink is unlinked, its target left alone."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(path)  # fd-based: never descends through links
    else:
        os.remove(path)


# names in a run directory that must not be symlinks (also any name starting with one of them,
# e.g. a leftover `metrics.jsonl.tmp`, and any hidden entry: this tool's temporaries start with ".")
LINK_CHECKED = RUN_FILES + RUN_DIRS + (LOCK_FILE, "report.md", "report.json", "figures", "settings.json", "suite.json")


def run_dir_links(outdir: str) -> Optional[str]:
    """The refusal message (naming the file) if a run file, the lock, a report file or a run
    subdirectory's entry in `outdir` is a symlink, or one that this tool opens is not a regular
    file with one link (a FIFO, socket, device, directory, hard link; checkpoints/ and its step
    directories not directories: safe_files.kind_error), else None. Nothing is opened."""
    if not os.path.isdir(outdir):
        return None
    kind = kind_error(outdir)
    if kind:
        return kind
    names = [n for n in os.listdir(outdir) if n.startswith(".") or any(n.startswith(p) for p in LINK_CHECKED)]
    err = link_error(outdir, names)
    for sub in RUN_DIRS:
        root = os.path.join(outdir, sub)
        if err or is_link(root) or not os.path.isdir(root):
            continue
        err = link_error(root, [n for n in os.listdir(root) if not (sub == "wandb" and _wandb_own_link(root, n))])
        for name in os.listdir(root) if sub == "checkpoints" and not err else []:
            p = os.path.join(root, name)
            if os.path.isdir(p) and not is_link(p):
                err = err or link_error(p, os.listdir(p))
    return err


def _wandb_own_link(root: str, name: str) -> bool:
    """One of W&B's own links (`latest-run`, `debug.log`, ...) that points inside wandb/ itself;
    this tool never writes through them, and a link leading out of wandb/ is still refused."""
    p = os.path.join(root, name)
    if not is_link(p):
        return False
    base = os.path.realpath(root)
    return os.path.commonpath([base, os.path.realpath(p)]) == base and os.path.exists(p)
