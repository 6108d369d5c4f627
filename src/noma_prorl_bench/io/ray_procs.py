"""The suite's runs as Ray tasks (`prorl-bench suite --executor ray`): one task per run, on
whichever node Ray places it, each running the run's own command line as a subprocess there.

The local executor (io/run_procs.py `LocalExecutor`) starts each run as a child of the suite;
this one starts it as a child of a Ray worker, with the same semantics: the run writes its
directory, takes its lock, checkpoints on SIGINT / SIGTERM and is resumed with `--resume` by
the same suite logic (suite.run_all), so every node must see the suite's --outdir at the same
path (a shared filesystem; on one machine it trivially is).

- `RayExecutor(address, jobs, src)`: joins the cluster at `address` (or starts a private local
  one, removed at the end); `start(name, cmd, log_path, append)` submits one task
  (`num_cpus=1`, no retries) and returns a `RayRun`, a handle with Popen's `poll`,
  `returncode` and `send_signal`; `wait(timeout)` delivers the signals sent so far and collects
  the tasks that finished (`ray.wait`).
- The task (`run_command`) runs the command with the node's Python (`sys.executable` of the
  worker), its output to OUTDIR/NAME.log, in its own session, at the driver's niceness (where
  permitted: Ray starts its workers at niceness 15, which starves runs on a busy machine). It
  ends with its worker: a worker that exits (its raylet died, the job ended) kills its child
  processes (Ray's `kill_child_processes_on_worker_exit`), and a worker killed outright makes
  the kernel send the run SIGTERM (`PR_SET_PDEATHSIG`, Linux). It polls a small actor on the
  driver's node (`SignalBoard`) for the signals the suite forwards to it, and returns its exit code.
- A task that ends without an exit code (its worker or node died) is a lost run: `returncode`
  -1 and `error` says why. The suite counts it as failed; the same command continues it from
  its last checkpoint, or restarts it if it had none.

Environment of a run: the node's own, plus from the driver PYTHONPATH (the driver's `src`
first, as for local runs: on a shared filesystem every node runs the driver's code, elsewhere
the node's installed copy) and the variables in FORWARDED_ENV or with a FORWARDED_PREFIXES
prefix. Module level imports are the standard library only: this module is sent to the
workers by value, so a worker needs Ray, not this package, to run the task.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from typing import Any, Optional

POLL_S = 0.5
FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1)  # io/run_procs.py SuiteSignals
FORWARDED_ENV = ("PYTHONHASHSEED", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "RAY_AUTH_MODE")
FORWARDED_PREFIXES = ("NOMA_PRORL_", "PRORL_BENCH_")


# ---------------------------------------------------------------------------- on the node
class SignalBoard:
    """Ray actor on the driver's node: the signals the suite forwarded to each run, in order (the
    driver holds the lists and sets them again on every `wait`, so a restarted board catches up)."""

    def __init__(self):
        self.sent: dict[str, list[int]] = {}

    def set(self, name: str, signals: list[int]) -> None:
        self.sent[name] = [int(s) for s in signals]

    def get(self, name: str) -> list[int]:
        return self.sent.get(name, [])


def _signals_for(board, name: str) -> list[int]:
    """The signals sent to run `name` so far ([] if the board cannot be reached)."""
    import ray  # noqa: PLC0415

    try:
        return list(ray.get(board.get.remote(name), timeout=30))
    except Exception:  # noqa: BLE001  (the driver is gone: Ray ends this task's worker, PDEATHSIG the run)
        return []


def _child_setup(nice: int):
    """The child's set-up before exec: the signals the suite forwards unblocked and at their
    default action (as in a shell), SIGTERM when the worker that started it dies (Linux), and
    the driver's niceness `nice`, as a local run inherits the suite's (Ray starts its workers at
    niceness 15; raising a process's priority needs CAP_SYS_NICE, else the worker's stays)."""

    def setup() -> None:
        signal.pthread_sigmask(signal.SIG_SETMASK, set())  # a Ray worker blocks some: exec keeps the mask
        for signum in FORWARDED_SIGNALS:  # ... and ignored ones stay ignored
            signal.signal(signum, signal.SIG_DFL)
        if sys.platform.startswith("linux"):
            import ctypes  # noqa: PLC0415

            ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG
        try:
            os.setpriority(os.PRIO_PROCESS, 0, nice)
        except OSError:  # not permitted: keep the worker's
            pass

    return setup


def run_command(name: str, cmd: list[str], log_path: str, append: bool, env: dict, nice: int, board) -> dict:
    """The Ray task: run `cmd` (its interpreter replaced by this node's Python) with its output to
    `log_path`, forward the suite's signals to it, return {"rc", "node", "started"}."""
    import ray  # noqa: PLC0415

    node = f"{ray.util.get_node_ip_address()} {ray.get_runtime_context().get_node_id()[:8]}"
    outdir = os.path.dirname(log_path)
    if not os.path.isdir(outdir):
        return {
            "rc": None,
            "node": node,
            "started": False,
            "error": f"{outdir} does not exist on node {node}: "
            "the suite's --outdir must be on a filesystem every node sees, at the same path",
        }
    sent = _signals_for(board, name)
    if sent:  # stopped before it started: nothing to run
        return {"rc": 128 + sent[0], "node": node, "started": False}
    full_env = dict(os.environ)
    full_env.update(env)
    if env.get("PYTHONPATH") and os.environ.get("PYTHONPATH"):
        full_env["PYTHONPATH"] = env["PYTHONPATH"] + os.pathsep + os.environ["PYTHONPATH"]
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | (os.O_APPEND if append else os.O_TRUNC)
    with os.fdopen(os.open(log_path, flags, 0o644), "w") as log:
        proc = subprocess.Popen(
            [sys.executable, *cmd[1:]],
            env=full_env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_child_setup(nice),
        )
    forwarded = 0
    while True:
        try:
            return {"rc": proc.wait(timeout=POLL_S), "node": node, "started": True}
        except subprocess.TimeoutExpired:
            sent = _signals_for(board, name)
            for signum in sent[forwarded:]:
                proc.send_signal(signum)
            forwarded = max(forwarded, len(sent))


# ---------------------------------------------------------------------------- on the driver
class RayRun:
    """A run submitted as a Ray task, seen as a process: `poll()` / `returncode` once collected
    by `RayExecutor.wait`, `send_signal` queued for the next `wait`; `node` where it ran, `error`
    why it was lost (no exit code)."""

    def __init__(self, name: str, ref):
        self.name, self.ref = name, ref
        self.returncode: Optional[int] = None
        self.node: Optional[str] = None
        self.error: Optional[str] = None
        self.signals: list[int] = []  # every signal sent to it, in order

    def poll(self) -> Optional[int]:
        return self.returncode

    def send_signal(self, signum: int) -> None:
        self.signals.append(int(signum))


def forwarded_env(src: str) -> dict:
    """The driver's variables a run on another node gets: PYTHONPATH with `src` first, and the
    FORWARDED_ENV / FORWARDED_PREFIXES ones."""
    env = {k: v for k, v in os.environ.items() if k in FORWARDED_ENV or k.startswith(FORWARDED_PREFIXES)}
    env["PYTHONPATH"] = src + (os.pathsep + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else "")
    return env


def address_error(address: str, timeout: float = 10.0) -> Optional[str]:
    """Why a HOST:PORT cluster address cannot be joined (nothing listens there), else None
    (also for other forms, e.g. `auto`: Ray resolves those). `ray.init` itself retries a dead
    address for minutes."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit() or "://" in address:
        return None
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as e:
        return f"nothing answers at {address} ({e.strerror or type(e).__name__})"
    return None


class RayExecutor:
    """Runs as Ray tasks on the cluster at `address` (None: a private local cluster with `jobs`
    or all the cores as CPUs, scratch directory under /tmp, shut down and removed by `close`),
    at most `jobs` at once (None: as many as the cluster has CPUs, read again as nodes come and
    go); `src` is the package's source directory the runs import first."""

    def __init__(self, address: Optional[str], jobs: Optional[int], src: str):
        os.environ.setdefault("RAY_AUTH_MODE", "disabled")
        import ray  # noqa: PLC0415
        from ray import cloudpickle  # noqa: PLC0415
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy  # noqa: PLC0415

        self.ray, self.address, self.jobs, self.tmpdir = ray, address, jobs, None
        quiet: dict[str, Any] = {"logging_level": "ERROR", "log_to_driver": False}
        if address:
            ray.init(address=address, **quiet)
        else:
            self.tmpdir = tempfile.mkdtemp(prefix="nrb_suite_", dir="/tmp")  # short: Ray's unix sockets live here
            ray.init(num_cpus=jobs or os.cpu_count() or 1, include_dashboard=False, _temp_dir=self.tmpdir, **quiet)
        cloudpickle.register_pickle_by_value(sys.modules[__name__])
        here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
        options: dict[str, Any] = {
            "num_cpus": 0,
            "scheduling_strategy": here,
            "max_restarts": -1,
            "max_task_retries": -1,
        }
        self.board: Any = ray.remote(**options)(SignalBoard).remote()
        self.task = ray.remote(num_cpus=1, max_retries=0)(run_command)
        self.env, self.nice = forwarded_env(src), os.getpriority(os.PRIO_PROCESS, 0)
        self.runs: dict = {}  # ObjectRef -> RayRun, not yet collected

    def describe(self) -> str:
        nodes = [n for n in self.ray.nodes() if n.get("Alive")]
        cpus = sum(n.get("Resources", {}).get("CPU", 0) for n in nodes)
        where = f"cluster at {self.address}" if self.address else "a private local cluster"
        return f"Ray tasks on {where} ({len(nodes)} nodes, {cpus:g} CPUs)"

    def capacity(self) -> int:
        """Runs at once: `jobs`, else the cluster's CPUs now (one run per CPU)."""
        return self.jobs or max(1, int(self.ray.cluster_resources().get("CPU", 0)))

    def start(self, name: str, cmd: list[str], log_path: str, append: bool) -> RayRun:
        ref = self.task.options(name=f"run:{name}").remote(name, cmd, log_path, append, self.env, self.nice, self.board)
        run = self.runs[ref] = RayRun(name, ref)
        return run

    def wait(self, timeout: float) -> None:
        """Deliver queued signals, then wait up to `timeout` s and collect every finished task."""
        for run in self.runs.values():
            if run.signals:
                self.board.set.remote(run.name, run.signals)
        if not self.runs:
            return
        ready, _ = self.ray.wait(list(self.runs), num_returns=1, timeout=timeout)
        if ready:
            ready, _ = self.ray.wait(list(self.runs), num_returns=len(self.runs), timeout=0)
        for ref in ready:
            self._collect(self.runs.pop(ref), ref)

    def _collect(self, run: RayRun, ref) -> None:
        try:
            out = self.ray.get(ref)
        except self.ray.exceptions.RayError as e:
            run.returncode, run.error = (
                -1,
                f"its Ray task ended without an exit code ({type(e).__name__}: "
                f"{str(e).strip().splitlines()[0][:200] if str(e).strip() else ''})",
            )
            return
        run.node = out.get("node")
        run.returncode = -1 if out.get("rc") is None else int(out["rc"])
        run.error = out.get("error")

    def close(self) -> None:
        """Stop the signal board, leave (or shut down) Ray, remove a private cluster's scratch dir."""
        try:
            self.ray.kill(self.board)
        except Exception:  # noqa: BLE001  (already gone)
            pass
        self.ray.shutdown()
        if self.tmpdir:
            shutil.rmtree(self.tmpdir, ignore_errors=True)
