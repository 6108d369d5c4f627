"""Writing into a run directory without following symbolic links.

A run directory may come from someone else (a copied run, an archive, a shared folder), so its
entries are untrusted: a `metrics.jsonl.tmp -> ~/.bashrc` or `run.lock -> VICTIM` must not make
this tool write into the link's target. Every run file is therefore written by one of these
helpers:

- `open_nofollow(path, flags)`: `os.open` with `O_NOFOLLOW`; a symlink is `UnsafePath`.
- `write_bytes(path, data)` / `write_json(path, obj)` / `write_text(path, text)`: atomic
  replace through a temporary file created exclusively (`O_EXCL | O_NOFOLLOW`, a random name)
  in the same directory, so neither the temporary nor the target is ever opened through a link
  (`os.replace` replaces a link itself, never its target; a link at `path` is refused first).
- `remove_tree(path)`: removes a directory tree, or only the link when `path` is a symlink.
- `link_error(dirpath, names)`: the refusal message (exit 2) when any of `names` in `dirpath`
  is a symlink; callers check their run directory with it before writing anything.

See docs/reliability.md, "Run directories are untrusted input".
"""
from __future__ import annotations

import io
import json
import os
import shutil
import stat
import tempfile
from typing import Iterable, Optional


class RunDirRefused(Exception):
    """A run directory this tool will not write into (a symlinked run file, a directory that is
    not ours); the message names the flag and the file. Reported as one line, exit 2."""


class UnsafePath(RunDirRefused):
    """A run file (or a directory holding run files) is a symbolic link."""

    def __init__(self, path: str, flag: str = "--outdir"):
        super().__init__(f"argument {flag}: {path!r} is a symbolic link; refusing to write through it "
                         "(a run directory's files must be regular files: remove the link)")
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


def open_nofollow(path: str, flags: int, mode: int = 0o644) -> int:
    """`os.open(path, flags | O_NOFOLLOW | O_CLOEXEC)`; a symlink at `path` raises UnsafePath."""
    try:
        return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    except OSError as e:
        if is_link(path):
            raise UnsafePath(path) from e
        raise


def write_bytes(path: str, data: bytes, fsync: bool = False) -> None:
    """Replace `path` by `data` atomically: a fresh temporary file (exclusive create, random name,
    no link followed) in the same directory, then `os.replace`. A symlink at `path` is refused."""
    if is_link(path):
        raise UnsafePath(path)
    d, base = os.path.split(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{base}.", suffix=".tmp", dir=d or ".")   # O_EXCL | O_NOFOLLOW
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


def read_bytes(path: str) -> bytes:
    """Read a run file, never through a symlink."""
    with os.fdopen(open_nofollow(path, os.O_RDONLY), "rb") as f:
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
    """Remove a directory tree (or a file); a symlink is unlinked, its target left alone."""
    if is_link(path) or os.path.isfile(path):
        os.remove(path)
    elif os.path.isdir(path):
        shutil.rmtree(path)                 # fd-based: never descends through links
