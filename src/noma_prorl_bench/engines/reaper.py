"""The reaper of a driver's private Ray cluster: when the driver dies without shutting Ray down
(kill -9, the OOM killer), it kills every process of that Ray session and removes its temp dir.

    python .../engines/reaper.py DRIVER_PID TEMP_DIR    (started by RayEngine.start_ray; stdlib + psutil only)

Why it is needed. Ray starts gcs_server, raylet, the monitor, the dashboard head and the log
monitor with prctl(PR_SET_PDEATHSIG, SIGKILL) (its "kernel fate sharing"), so those die with the
driver. The raylet's own children do not: `ray::DashboardAgent` and `ray::RuntimeEnvAgent` notice
the raylet's death but then try to report it to the dead GCS and stay alive until that request
times out (`RAY_gcs_server_request_timeout_seconds`, 60 s; measured with Ray 2.60), and nothing
in Ray removes the `_temp_dir` (session logs, sockets). Ray has no setting for this case:
`RAY_kill_child_processes_on_worker_exit` (and its `..._with_raylet_subreaper` variant) only
kill the children of a worker that exits, not the raylet's agents.

How the session's processes are found (`belongs`). Before `ray.init` the driver puts
SESSION_ENV=TEMP_DIR in its environment (`session_env`); the processes Ray starts inherit it
(gcs_server, raylet and, through the raylet, the workers: `ray::IDLE`, `ray::Learner`). The
agents' environment reads as empty once they retitle themselves, so a `ray::...` process with a
file open under TEMP_DIR (its logs) counts too, as does any process whose command line names
TEMP_DIR. Only this exact TEMP_DIR matches: another cluster on the machine (a test session's,
another run's) is never touched.

When it acts. Its stdin is a pipe whose other end only the driver holds: EOF means the driver
is gone, however it died (the driver's pid is polled as well). A driver that shut Ray down
itself closes the pipe too (`Reaper.finish`): the sweep then finds nothing and the reaper exits.
It runs in its own session, so a Ctrl-C or a closed terminal reaches the driver, not the reaper.
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import sys
import time
from contextlib import contextmanager

SESSION_ENV = "NOMA_PRORL_RAY_SESSION"
POLL_S = 1.0  # how often the driver's pid is checked while the pipe stays open
SWEEP_S = 20.0  # the longest a sweep keeps killing (a dying raylet may still start a worker)


class Reaper:
    """The driver's handle on its reaper process."""

    def __init__(self, temp_dir: str):
        self.temp_dir = temp_dir
        self.proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), str(os.getpid()), temp_dir],  # by path: no torch
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )

    def finish(self, timeout: float = 30.0) -> None:
        """Ray is shut down: close the pipe (the reaper sweeps what is left, then exits) and wait."""
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pass


@contextmanager
def session_env(temp_dir: str):
    """SESSION_ENV=temp_dir in this process's environment while Ray starts its processes."""
    old = os.environ.get(SESSION_ENV)
    os.environ[SESSION_ENV] = temp_dir
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(SESSION_ENV, None)
        else:
            os.environ[SESSION_ENV] = old


def session_processes(temp_dir: str, exclude: tuple[int, ...] = ()) -> list:
    """psutil.Process objects (alive, not zombies) of the Ray session under temp_dir."""
    import psutil  # noqa: PLC0415  (a dependency of ray)

    found = []
    for p in psutil.process_iter():
        if p.pid in exclude:
            continue
        try:
            if belongs(p, temp_dir):
                found.append(p)
        except (psutil.Error, OSError):  # gone, a zombie, or not ours to read
            continue
    return found


def belongs(p, temp_dir: str) -> bool:
    """Whether process `p` is part of the session: SESSION_ENV=temp_dir in its environment, or a
    command line naming temp_dir (gcs_server, raylet, monitors), or, for a process named `ray::...`
    by Ray, a file open under temp_dir (the agents: their titles overwrite the memory that
    /proc/PID/environ reads, so their environment reads as empty; their logs stay open)."""
    if p.environ().get(SESSION_ENV) == temp_dir:
        return True
    inside = temp_dir.rstrip("/") + "/"
    argv = p.cmdline()
    if any(a == temp_dir or a.endswith("=" + temp_dir) or inside in a for a in argv):
        return True
    return bool(argv) and argv[0].startswith("ray::") and any(f.path.startswith(inside) for f in p.open_files())


def reap(temp_dir: str, exclude: tuple[int, ...] = (), budget_s: float = SWEEP_S) -> int:
    """SIGKILL every process of the session until a scan finds none (or `budget_s` passes), then
    remove temp_dir; returns how many processes were killed."""
    import psutil  # noqa: PLC0415

    killed, deadline = set(), time.time() + budget_s
    while time.time() < deadline:
        procs = session_processes(temp_dir, exclude)
        if not procs:
            break
        for p in procs:
            try:
                p.kill()
                killed.add(p.pid)
            except psutil.Error:
                pass
        psutil.wait_procs(procs, timeout=2.0)
    shutil.rmtree(temp_dir, ignore_errors=True)
    return len(killed)


def wait_for_driver(driver_pid: int) -> None:
    """Return when stdin reaches EOF (the driver closed it or died) or the driver's pid is gone."""
    import psutil  # noqa: PLC0415

    try:
        born = psutil.Process(driver_pid).create_time()
    except psutil.Error:
        return
    fd = sys.stdin.fileno()
    while True:
        ready, _, _ = select.select([fd], [], [], POLL_S)
        if ready and not os.read(fd, 4096):
            return
        try:
            if psutil.Process(driver_pid).create_time() != born:  # the pid was reused
                return
        except psutil.Error:
            return


def main(argv: list[str]) -> int:
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)  # outlive the driver's own stop; only SIGKILL ends it early
    driver_pid, temp_dir = int(argv[0]), argv[1]
    wait_for_driver(driver_pid)
    reap(temp_dir, exclude=(os.getpid(), driver_pid))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
