"""`prorl-bench suite --executor ray` on a two-node Ray cluster started here, losing a node.

1. A head (1 CPU) and a second node (1 CPU) on this machine (`ray start --block`, each in its own
   session and temp dir); the suite (aa preset, 1 seed: 2 runs, one per node) joins with
   `--ray_address`. Once the run on the second node has logged a step, that node's raylet is
   killed by pid (`ray stop` would stop every cluster on the machine): the suite reports the run
   lost (exit 1, the only failure, its directory not complete), the other run completes.
2. The same command on a fresh one-node cluster skips the complete run and starts the lost one
   again; SIGINT to the suite once it trains reaches the run through Ray: exit 130, the run
   stopped at a checkpoint.
3. The same command on another fresh cluster resumes it (`--resume`) and exits 0: every run
   complete with steps 1..N once, the complete run's metrics.jsonl untouched since phase 1.

Every cluster is stopped in a `finally` by killing its process group.
Nodes start with Ray's memory monitor off (`RAY_memory_monitor_refresh_ms=0`: on a machine
shared with other jobs it counts their memory and kills our workers) and workers at niceness 0
(`RAY_worker_niceness=0`; Ray's 15 makes a worker's start take a minute on a loaded machine).
The suite runs at the test's niceness + 3 and every run it starts must have that niceness.
"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

T0 = time.time()


def _log(msg: str) -> None:
    print(f"[{time.time() - T0:6.1f} s] {msg}", flush=True)


pytestmark = [pytest.mark.slow, pytest.mark.ray]
pytest.importorskip("ray")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RAY = os.path.join(os.path.dirname(sys.executable), "ray")
if not os.path.isfile(RAY):
    pytest.skip("no `ray` command beside this Python", allow_module_level=True)
STEPS = 100  # a run trains for several seconds: a kill or a signal after a logged step lands mid-run
RUNS = ("AA-1_s0", "AA-2_s1000")  # the aa preset with --seeds 1
NODE_ENV = dict(os.environ, RAY_AUTH_MODE="disabled", RAY_memory_monitor_refresh_ms="0", RAY_worker_niceness="0")
NICE = 3  # the suite runs at the test's niceness + 3; its runs must too (their workers are at 0)


class Node:
    """One `ray start --block` in its own session; `kill()` ends its process group."""

    def __init__(self, tmp: str, name: str, *args: str):
        self.log = os.path.join(tmp, f"{name}.out")
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen(
                [
                    RAY,
                    "start",
                    "--block",
                    "--node-ip-address=127.0.0.1",
                    f"--temp-dir={tmp}/{name}",
                    "--disable-usage-stats",
                    *args,
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=NODE_ENV,
                start_new_session=True,
            )
        deadline = time.time() + 180
        while "Ray runtime started" not in self.text():
            assert self.proc.poll() is None and time.time() < deadline, f"{name} did not start:\n{self.text()}"
            time.sleep(0.5)

    def text(self) -> str:
        with open(self.log) as f:
            return f.read()

    def address(self) -> str:
        return re.search(r"ray start --address='([^']+)'", self.text()).group(1)

    def pids(self) -> list[int]:
        return [p for p in _pids() if _stat(p) and int(_stat(p)[2]) == self.proc.pid]  # its process group

    def raylet(self) -> int:
        (pid,) = [p for p in self.pids() if _cmdline(p)[:1] and _cmdline(p)[0].endswith("/raylet")]
        return pid

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=30)


def _pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def _stat(pid: int) -> list:
    """/proc/PID/stat fields after the command name: [state, ppid, pgrp, ..., nice at 16]."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except OSError:
        return []


def _cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return []


def _run_processes(out) -> list[int]:
    return [p for p in _pids() if "noma_prorl_bench.run" in _cmdline(p) and any(str(out) in a for a in _cmdline(p))]


def _runs_under(out, ancestor: int) -> dict:
    """run name -> pid of this suite's run processes that descend from `ancestor`."""
    found = {}
    for pid in _pids():
        cmd = _cmdline(pid)
        if "noma_prorl_bench.run" not in cmd or not any(a.startswith(str(out)) for a in cmd):
            continue
        p = pid
        for _ in range(4):
            p = int(_stat(p)[1]) if _stat(p) else 1
            if p == ancestor:
                found[os.path.basename(cmd[cmd.index("--outdir") + 1])] = pid
                break
    return found


def _lines(out, run) -> int:
    try:
        with open(out / run / "metrics.jsonl") as f:  # RL-step rows (the step-0 row not counted)
            return sum(1 for line in f if json.loads(line)["step"] > 0)
    except OSError:
        return 0


def _complete(out, run) -> bool:
    try:
        return json.loads((out / run / "summary.json").read_text()).get("complete") is True
    except (OSError, ValueError):
        return False


def _suite(out, address):
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "src"), OMP_NUM_THREADS="1", RAY_AUTH_MODE="disabled")
    cmd = [
        sys.executable,
        "-m",
        "noma_prorl_bench.cli",
        "suite",
        "--preset",
        "aa",
        "--seeds",
        "1",
        "--steps",
        str(STEPS),
        "--executor",
        "ray",
        "--ray_address",
        address,
        "--quiet",
        "--outdir",
        str(out),
    ]
    return subprocess.Popen(
        cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=lambda: os.nice(NICE)
    )


def _kill_a_run_on(node: Node, out, suite) -> str:
    """Wait for a run on `node` to log a step, kill the node's raylet; the run's name."""
    raylet, deadline = node.raylet(), time.time() + 240
    while True:
        assert suite.poll() is None, f"the suite ended first: {suite.communicate()}"
        assert time.time() < deadline, "no run reached the second node"
        started = {n: p for n, p in _runs_under(out, raylet).items() if _lines(out, n) >= 1}
        if started:
            name, pid = next(iter(started.items()))
            assert int(_stat(pid)[16]) == min(19, os.getpriority(os.PRIO_PROCESS, 0) + NICE)  # the suite's
            os.kill(raylet, signal.SIGKILL)
            return name
        time.sleep(0.2)


def _wait_for_nothing_left(out) -> None:
    deadline = time.time() + 60
    while _run_processes(out):
        assert time.time() < deadline, f"run processes outlived their nodes: {_run_processes(out)}"
        time.sleep(0.5)


def _lose_a_node(out, tmp) -> str:
    """Phase 1: a run lost with the second node; the other completes. The lost run's name."""
    nodes = [Node(tmp, "head", "--head", "--port=0", "--num-cpus=1", "--include-dashboard=false")]
    try:
        nodes.append(Node(tmp, "node2", f"--address={nodes[0].address()}", "--num-cpus=1"))
        _log("two nodes up")
        suite = _suite(out, nodes[0].address())
        lost = _kill_a_run_on(nodes[1], out, suite)
        _log(f"killed the second node's raylet under {lost}")
        _, err = suite.communicate(timeout=300)
        _log("first suite done")
    finally:
        for node in nodes:
            node.kill()
    assert suite.returncode == 1, err
    assert "(2 nodes, 2 CPUs)" in err and f"suite: run {lost} lost" in err and "Traceback" not in err
    assert f"1 runs failed: ['{lost}']" in err and not _complete(out, lost)
    assert all(_complete(out, r) for r in RUNS if r != lost)
    assert json.loads((out / "settings.json").read_text())["executor"].startswith("Ray tasks on cluster at")
    _wait_for_nothing_left(out)
    return lost


def _interrupt_the_rerun(out, tmp, lost) -> None:
    """Phase 2: the same command on a fresh cluster; SIGINT once the lost run trains again."""
    node, mtime = (
        Node(tmp, "head2", "--head", "--port=0", "--num-cpus=2", "--include-dashboard=false"),
        os.stat(out / lost / "metrics.jsonl").st_mtime_ns,
    )
    try:
        suite, deadline = _suite(out, node.address()), time.time() + 240
        while not (
            any(lost in a for p in _run_processes(out) for a in _cmdline(p))
            and _lines(out, lost) >= 1
            and os.stat(out / lost / "metrics.jsonl").st_mtime_ns != mtime
        ):
            assert suite.poll() is None and time.time() < deadline, f"{lost} did not train again"
            time.sleep(0.2)
        suite.send_signal(signal.SIGINT)
        _, err = suite.communicate(timeout=300)
        _log("second suite interrupted")
    finally:
        node.kill()
    assert suite.returncode == 130, err
    assert "2 runs, 1 already complete (skipped), 1 to run" in err and "forwarded to 1 running run(s)" in err
    assert f"run {lost} stopped (exit 130) at a checkpoint" in err and not _complete(out, lost)
    _wait_for_nothing_left(out)


def test_suite_on_ray_loses_a_node_and_the_same_command_completes_it(tmp_path):
    out, tmp = tmp_path / "suite", tempfile.mkdtemp(prefix="nrb_rs_", dir="/tmp")
    try:
        lost = _lose_a_node(out, tmp)
        (done,) = [r for r in RUNS if r != lost]
        mtime = os.stat(out / done / "metrics.jsonl").st_mtime_ns
        _interrupt_the_rerun(out, tmp, lost)
        node = Node(tmp, "head3", "--head", "--port=0", "--num-cpus=2", "--include-dashboard=false")
        try:
            suite = _suite(out, node.address())  # phase 3: the same command completes it
            _, err = suite.communicate(timeout=300)
            _log("third suite done")
        finally:
            node.kill()
        assert suite.returncode == 0, err
        assert "2 runs, 1 already complete (skipped), 1 to run (1 resumed from their checkpoints)" in err
        assert os.stat(out / done / "metrics.jsonl").st_mtime_ns == mtime  # skipped twice, untouched
        for run in RUNS:
            steps = [json.loads(x)["step"] for x in (out / run / "metrics.jsonl").read_text().splitlines()]
            assert steps == list(range(0, STEPS + 1)) and _complete(out, run)  # the step-0 row, then 1..N once
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
