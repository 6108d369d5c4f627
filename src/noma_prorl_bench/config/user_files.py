"""Files the user names on the command line (`--config FILE`, `--task jsonl:PATH`): read only when
they are regular files, and only up to a bound checked by size before any byte is read. A FIFO is
opened non-blocking (so it never waits for a writer) and refused, as are sockets and devices
(/dev/zero); links are followed (the path is the user's own)."""

from __future__ import annotations

import fcntl
import os
import stat
from typing import Optional

#: the most this tool reads from a --config file
CONFIG_LIMIT = 1 << 20

_KINDS = (
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISLNK, "a symbolic link"),
)


def not_regular(st: os.stat_result, links_ok: bool = False) -> Optional[str]:
    """What a file with status `st` is ("a FIFO (named pipe)", "has 2 hard links", ...) when it is not a
    regular file with one link (any link count with `links_ok`), else None."""
    if stat.S_ISREG(st.st_mode):
        return None if links_ok or st.st_nlink <= 1 else f"has {st.st_nlink} hard links"
    return next((what for test, what in _KINDS if test(st.st_mode)), "not a regular file")


class InputFileError(ValueError):
    """A file named on the command line (--config, --task jsonl:PATH) that is not a regular file or is
    larger than its bound; the message names the path, the caller adds the flag."""


def open_input(path: str) -> int:
    """A descriptor on a file the user named, refused with InputFileError unless it is a regular file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as e:
        try:
            what = not_regular(os.stat(path), links_ok=True)
        except OSError:
            raise e from None
        if what:
            raise InputFileError(f"{path!r} is {what}, not a regular file") from e
        raise
    try:
        what = not_regular(os.fstat(fd), links_ok=True)
        if what:
            raise InputFileError(f"{path!r} is {what}, not a regular file")
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_input(path: str, limit: int) -> bytes:
    """A user-named file's bytes (`open_input`), at most `limit`: InputFileError when larger, by its
    size before reading (and by what was read, should it grow meanwhile)."""
    with os.fdopen(open_input(path), "rb") as f:
        if os.fstat(f.fileno()).st_size > limit:
            raise InputFileError(f"{path!r} is larger than {limit:,} bytes")
        data = f.read(limit + 1)
    if len(data) > limit:
        raise InputFileError(f"{path!r} is larger than {limit:,} bytes")
    return data
