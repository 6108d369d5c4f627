"""The suite's child runs on disk and as processes: is a run directory complete, resumable or
new, and what to do with SIGINT / SIGTERM while runs are going (suite.run_all uses both).

State of a run directory for a given list of flags (`run_state`):

    complete    summary.json says complete and config.json was made with the same flags
    resumable   same flags, not complete, and a complete checkpoint under checkpoints/
                (the run was interrupted): the suite continues it with `--resume`
    new         anything else (absent, other flags, stopped before its first checkpoint):
                the suite starts it with `--overwrite`

"Same flags" ignores `--outdir X`, `--overwrite` and `--resume`, so a run that was resumed
(config.json then holds the resume's argv) still counts as the same run. Only the standard
library (and io/safe_files.py) is used here: the suite process stays light while its children train.
A run's files are read through io/safe_files.py, and `suite_dir_error` refuses a suite whose
suite or run files are links, FIFOs, sockets, devices or hard links before any run starts.

Signals (`SuiteSignals`): children are started in their own session (`start_new_session`), so a
Ctrl-C in the terminal reaches only the suite, which forwards it once to every running child;
each child finishes its current step, writes a checkpoint and exits 130 / 143 (run.py). A
second signal is forwarded too: the children then abort at once, keeping their previous
checkpoint. No new run starts after a signal.

Executors (how a run's command is started; suite.run_all drives either): `LocalExecutor` starts
each run as a child process of the suite (the default); io/ray_procs.py `RayExecutor` as a Ray
task on a cluster. Both: `start(name, cmd, log_path, append)` -> a Popen-like handle (`poll`,
`returncode`, `send_signal`), `wait(timeout)`, `capacity()` (runs at once), `describe()`, `close()`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from typing import Optional

from noma_prorl_bench.io import safe_files
from noma_prorl_bench.io.lock import LOCK_FILE, lock_error, read_lock

IGNORED_FLAGS = ("--overwrite", "--resume")


def run_flags(argv: list[str]) -> list[str]:
    """argv without `--outdir X`, `--overwrite` and `--resume` (what identifies a run)."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a == "--outdir":
            skip = True
        elif a not in IGNORED_FLAGS and not a.startswith("--outdir="):
            out.append(a)
    return out


def _read_json(path: str) -> Optional[dict]:
    """A JSON object from a run file (never through a link, from a FIFO or a hard link), else None."""
    try:
        data = json.loads(safe_files.read_bytes(path))
        return data if isinstance(data, dict) else None
    except (OSError, ValueError, RecursionError, safe_files.RunDirRefused):
        return None


def has_checkpoint(run_dir: str) -> bool:
    """True if run_dir/checkpoints holds a complete checkpoint (io.checkpoint's layout:
    `step_XXXXXX/COMPLETE`, no link followed), without importing torch."""
    root = os.path.join(run_dir, "checkpoints")
    names = os.listdir(root) if os.path.isdir(root) and not safe_files.is_link(root) else []
    return any(
        n.startswith("step_")
        and n[5:].isdigit()
        and not safe_files.is_link(os.path.join(root, n))
        and safe_files.entry_error(os.path.join(root, n, "COMPLETE")) is None
        and os.path.isfile(os.path.join(root, n, "COMPLETE"))
        for n in names
    )


def suite_dir_error(outdir: str, names: list[str]) -> Optional[str]:
    """The refusal message (exit 2, before any run starts) when a file of suite directory `outdir`
    that the suite opens (suite.json, settings.json, report files, the runs' logs NAME.log) or an
    entry of a run directory NAME/ (safe_files.kind_error) is a symlink, a FIFO, socket, device or
    hard link, or NAME/ is not a directory; else None. Nothing is opened."""
    if not os.path.isdir(outdir):
        return None
    files = [*safe_files.REPORT_FILES, "summary.json", *(f"{n}.log" for n in names)]
    dirs = [*safe_files.REPORT_DIRS, *(n for n in names if not safe_files.is_link(os.path.join(outdir, n)))]
    for path, directory in [(os.path.join(outdir, f), False) for f in files] + [
        (os.path.join(outdir, d), True) for d in dirs
    ]:
        err = safe_files.entry_error(path, directory)
        if err:
            return err
    return next((e for n in names if (e := safe_files.kind_error(os.path.join(outdir, n)))), None)


def run_state(run_dir: str, argv: list[str]) -> str:
    """ "complete", "resumable" or "new" for the run `argv` would make in run_dir (see above)."""
    config = _read_json(os.path.join(run_dir, "config.json"))
    if config is None or run_flags(config.get("argv", [])) != run_flags(argv):
        return "new"
    summary = _read_json(os.path.join(run_dir, "summary.json")) or {}
    if summary.get("complete"):
        return "complete"
    return "resumable" if has_checkpoint(run_dir) else "new"


def live_holder(run_dir: str) -> Optional[dict]:
    """The lock record of a live process that holds run_dir (a run an earlier suite started and
    that outlived it), else None. io/lock.py: an flock, so a dead holder never counts."""
    if not os.path.isdir(run_dir) or safe_files.entry_error(os.path.join(run_dir, LOCK_FILE)):
        return None  # a link, FIFO or hard link is no lock (refused up front)
    return (read_lock(run_dir) or {}) if lock_error(run_dir) else None


def report_end(name: str, proc, outdir: str, stop: SuiteSignals, failures: list) -> None:
    """Print how a run that ended did; append it to `failures` unless it succeeded or was stopped."""
    run_dir = os.path.join(outdir, name)
    then = (
        "the same command resumes it from its checkpoint"
        if has_checkpoint(run_dir)
        else "the same command restarts it (no checkpoint)"
    )
    error, node = getattr(proc, "error", None), getattr(proc, "node", None)
    if error is not None:  # a Ray task lost with its worker or node, or refused to start
        failures.append(name)
        print(f"suite: run {name} lost{f' on node {node}' if node else ''}: {error}; {then}", file=sys.stderr)
    elif proc.returncode != 0 and stop.signum is not None:
        where = (
            "at a checkpoint; the same command resumes it"
            if has_checkpoint(run_dir)
            else "before its first checkpoint; the same command restarts it"
        )
        print(f"suite: run {name} stopped (exit {proc.returncode}) {where}", file=sys.stderr)
    elif proc.returncode != 0:
        failures.append(name)
        print(
            f"suite: run {name} failed (exit {proc.returncode}{f' on node {node}' if node else ''}); "
            f"see {outdir}/{name}.log",
            file=sys.stderr,
        )


class CaughtSignal:
    """What a stop-signal context records: the first of SIGNALS it caught (`signum`, None before
    one), its name and the exit code, 128 + its number, the shell's convention (130 SIGINT, 143
    SIGTERM, 129 SIGHUP, 138 SIGUSR1). The suite (`SuiteSignals`) and a run (training/guards.py's
    `GracefulStop`) share it."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1)  # HUP: the terminal closed
    signum: Optional[int] = None

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name if self.signum else ""

    @property
    def exit_code(self) -> int:
        return 128 + int(self.signum or 0)


class SuiteSignals(CaughtSignal):
    """Context manager for the suite process: SIGINT / SIGTERM set `.signum` (first one) and
    are forwarded to the registered child processes (every one of them, each time).

    `exit_code` is 128 + the first signal's number (130 SIGINT, 143 SIGTERM), as for a run.
    Handlers are installed only from the main thread."""

    def __init__(self):
        self.signum: Optional[int] = None
        self.count = 0
        self.children: dict = {}  # name -> Popen
        self._old: dict = {}

    def forward(self, signum: int) -> int:
        """Send `signum` to every child still running; returns how many got it."""
        n = 0
        for proc in list(self.children.values()):
            if proc.poll() is None:
                try:
                    proc.send_signal(signum)
                    n += 1
                except OSError:  # exited in between
                    pass
        return n

    def _handle(self, signum, _frame) -> None:
        self.count += 1
        if self.signum is None:
            self.signum = signum
        n = self.forward(signum)
        name = signal.Signals(signum).name
        if self.count == 1:
            print(
                f"\nsuite: received {name}: forwarded to {n} running run(s), which finish their step and write "
                "a checkpoint; no new run starts. Send it again to abort them at once (their previous "
                "checkpoints stay).",
                file=sys.stderr,
                flush=True,
            )
        else:
            print(
                f"\nsuite: received {name} again: forwarded to {n} running run(s) (abort at once).",
                file=sys.stderr,
                flush=True,
            )

    def install(self) -> "SuiteSignals":
        try:
            for sig in self.SIGNALS:
                self._old[sig] = signal.signal(sig, self._handle)
        except ValueError:  # not the main thread
            self._old.clear()
        return self

    def restore(self) -> None:
        for sig, h in self._old.items():
            signal.signal(sig, h)
        self._old.clear()

    def __enter__(self) -> "SuiteSignals":
        return self.install()

    def __exit__(self, *exc) -> None:
        self.restore()


class LocalExecutor:
    """Runs as child processes of the suite, each in its own session (signals come from the
    suite), at most `jobs` at once, with `env` (the suite's environment, its package first)."""

    def __init__(self, jobs: int, env: dict):
        self.jobs, self.env = jobs, env

    def describe(self) -> str:
        return f"local processes, {self.jobs} in parallel"

    def capacity(self) -> int:
        return self.jobs

    def start(self, name: str, cmd: list[str], log_path: str, append: bool) -> subprocess.Popen:
        flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if append else os.O_TRUNC)
        with os.fdopen(safe_files.open_nofollow(log_path, flags), "w") as log:
            return subprocess.Popen(cmd, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def wait(self, timeout: float) -> None:
        time.sleep(timeout)

    def close(self) -> None:
        pass
