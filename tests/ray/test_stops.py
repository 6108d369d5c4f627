"""Ray engines stopping as the local engine stops: a signal during the set-up (Ray's start, the
learner's warm start) writes nothing and leaves OUTDIR ready for the same command; the learner's
NaN guard under --on_nan stop exits 3 with the local engine's one line and nan_guard event."""

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest
from runhelp import read_jsonl, rl_rows

from noma_prorl_bench.engines.reaper import session_processes
from noma_prorl_bench.run import main

pytestmark = [pytest.mark.ray, pytest.mark.smoke]

PROG = "python -m noma_prorl_bench.run"
SETUP_STOP = (
    "{prog}: interrupted by {sig} during the set-up (warm start); there is no checkpoint yet and nothing "
    "was written: run the same command to start over"
)


def _titles(procs) -> set:
    """The titles Ray gives its processes (argv[0]), e.g. ray::Learner.__init__."""
    out = set()
    for q in procs:
        try:
            out.add((q.cmdline() or [""])[0].strip())
        except psutil.Error:  # gone meanwhile
            pass
    return out


def _private_temp_dir(driver_pid: int):
    """The temp dir of the private cluster that `driver_pid` is starting, named on its reaper's
    command line (`reaper.py DRIVER_PID TEMP_DIR`, started right before ray.init); None before."""
    for q in psutil.process_iter():
        try:
            argv = q.cmdline()
        except psutil.Error:
            continue
        if len(argv) >= 3 and argv[-3].endswith("reaper.py") and argv[-2] == str(driver_pid):
            return argv[-1]
    return None


def test_sigterm_while_ray_starts_leaves_nothing_and_the_same_command_runs(
    ray_cluster, tmp_path, fast_flags, alive_actors
):
    """SIGTERM once the run's own cluster has its first process (gcs_server: inside ray.init,
    which installs a SIGTERM handler of its own): exit 143 with the local engine's set-up line, no
    OUTDIR at all (no config.json, no lock), the cluster's processes and temp dir gone. Then the
    same command (in-process, on the session cluster) runs to the end."""
    out = tmp_path / "term"
    flags = ["--outdir", str(out), *fast_flags, "--engine", "ray_colocated"]
    p = subprocess.Popen([sys.executable, "-m", "noma_prorl_bench.run", *flags], stderr=subprocess.PIPE, text=True)
    t0, temp_dir = time.time(), None
    while temp_dir is None or not session_processes(temp_dir):
        assert time.time() - t0 < 240 and p.poll() is None
        temp_dir = temp_dir or _private_temp_dir(p.pid)
        time.sleep(0.05)
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 143, err[-3000:]
    assert err.strip() == SETUP_STOP.format(prog=PROG, sig="SIGTERM")
    assert not out.exists()
    t0 = time.time()  # the reaper sweeps the session once the driver is gone
    while session_processes(temp_dir) or os.path.exists(temp_dir):
        assert time.time() - t0 < 60, _titles(session_processes(temp_dir))
        time.sleep(0.5)
    assert main(flags) == 0
    assert [r["step"] for r in rl_rows(out / "metrics.jsonl")] == [1, 2, 3]
    assert not (out / "run.lock").exists() and alive_actors() == []


def test_sighup_during_the_warm_start_writes_nothing(ray_cluster, tmp_path, fast_flags, alive_actors):
    """SIGHUP while the learner actor runs its warm start, the driver blocked in a Ray wait (where
    Ray runs the signal handler and wraps what it raises in a SystemError): exit 129 with the local
    engine's one-line set-up stop, no traceback, OUTDIR not created, no actor left."""
    import ray

    temp_dir = ray._private.worker._global_node.get_temp_dir_path()  # the session cluster's
    out = tmp_path / "hup"
    cmd = [
        sys.executable,
        "-m",
        "noma_prorl_bench.run",
        "--outdir",
        str(out),
        *fast_flags,
        "--steps",
        "4",
        "--warmstart_steps",
        "100000",
        "--engine",
        "ray_colocated",
        "--ray_address",
        ray_cluster,
    ]
    p = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    t0 = time.time()
    while "ray::Learner.__init__" not in _titles(session_processes(temp_dir)):
        assert time.time() - t0 < 240 and p.poll() is None  # the learner's __init__ runs the warm start
        time.sleep(0.5)
    time.sleep(2.0)
    p.send_signal(signal.SIGHUP)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 129, err[-3000:]
    assert err.strip() == SETUP_STOP.format(prog=PROG, sig="SIGHUP")
    assert not out.exists()
    assert alive_actors() == []


def test_on_nan_stop_in_the_learner_stops_a_ray_run_as_a_local_one(ray_cluster, tmp_path, capsys, alive_actors):
    """--lr 1e6 makes the first update non-finite; under --on_nan stop the learner's NaN guard
    raises inside the actor. Both engines: exit 3, the same single stderr line (no traceback), the
    same nan_guard events (action stop) and metrics steps; no actor left."""
    flags = [
        "--steps",
        "4",
        "--batch_size",
        "4",
        "--group_size",
        "4",
        "--warmstart_steps",
        "5",
        "--n_val",
        "16",
        "--eval_every",
        "2",
        "--quiet",
        "--model",
        "transformer",
        "--lr",
        "1e6",
        "--on_nan",
        "stop",
    ]
    got = {}
    for engine in ("local", "ray_colocated"):
        d = tmp_path / engine
        code = main(["--outdir", str(d), *flags, "--engine", engine])
        err = capsys.readouterr().err.replace(str(d), "OUTDIR")
        guard = [e for e in read_jsonl(d / "events.jsonl") if e["event"] == "nan_guard"]
        got[engine] = (code, err.strip().splitlines(), guard, [r["step"] for r in rl_rows(d / "metrics.jsonl")])
    assert got["local"] == got["ray_colocated"]
    code, lines, guard, steps = got["ray_colocated"]
    assert code == 3 and len(lines) == 1 and lines[0].startswith(f"{PROG}: stopped (--on_nan stop): non-finite ")
    assert lines[0].endswith(". Outputs up to that step are in OUTDIR")
    assert [e["action"] for e in guard] == ["stop"] and guard[0]["step"] == len(steps) + 1
    assert alive_actors() == []
