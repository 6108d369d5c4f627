"""kill -9 of a Ray driver that started its own cluster leaves nothing behind: its reaper
(engines/reaper.py) kills every process of that Ray session (gcs_server, raylet, the dashboard and
runtime-env agents, the actors) and removes the session's temp dir. Without it the agents outlive
the driver by about a minute and the temp dir stays for good."""

import os
import signal
import subprocess
import sys
import time

import pytest

from noma_prorl_bench.engines.reaper import SESSION_ENV, session_processes

pytestmark = [pytest.mark.slow, pytest.mark.ray]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FLAGS = [
    "--steps",
    "400",
    "--batch_size",
    "4",
    "--group_size",
    "4",
    "--warmstart_steps",
    "5",
    "--n_val",
    "16",
    "--quiet",
    "--engine",
    "ray_colocated",
]
GONE_WITHIN_S = 30.0


def _session_dir(psutil, driver_pid):
    """The temp dir of the driver's Ray session, read from its children's environment."""
    for child in psutil.Process(driver_pid).children():
        try:
            value = child.environ().get(SESSION_ENV)
        except psutil.Error:
            continue
        if value:
            return value
    return None


def _names(procs):
    """argv[0] of each process, e.g. .../gcs_server, ray::DashboardAgent, ray::Learner.__init__."""
    out = []
    for p in procs:
        try:
            out.append(os.path.basename(p.cmdline()[0].strip()))
        except Exception:  # noqa: BLE001  (gone meanwhile)
            pass
    return out


def _alive(psutil, p):
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def test_kill9_of_the_driver_leaves_no_ray_process_and_no_temp_dir(tmp_path):
    pytest.importorskip("ray")
    psutil = pytest.importorskip("psutil")
    env = dict(
        os.environ,
        PYTHONPATH=os.path.join(ROOT, "src"),
        OMP_NUM_THREADS="1",
        RAY_AUTH_MODE="disabled",
        RAY_memory_monitor_refresh_ms="0",
    )  # on a shared machine Ray's OOM killer may take an actor first
    with open(tmp_path / "stderr.txt", "w") as err:
        p = subprocess.Popen(
            [sys.executable, "-m", "noma_prorl_bench.run", "--outdir", str(tmp_path / "run"), *FLAGS],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    try:
        temp_dir, procs, t0 = None, [], time.time()
        while not {"ray::Learner", "ray::Generator"} <= {n.split(".")[0] for n in _names(procs)}:
            assert p.poll() is None and time.time() - t0 < 240, (tmp_path / "stderr.txt").read_text()[-2000:]
            time.sleep(0.5)
            temp_dir = temp_dir or _session_dir(psutil, p.pid)
            procs = session_processes(temp_dir) if temp_dir else []
        reaper = [c for c in psutil.Process(p.pid).children() if any(a.endswith("reaper.py") for a in c.cmdline())]
        names = " | ".join(_names(procs))
        assert os.path.isdir(temp_dir) and len(reaper) == 1
        for part in ("gcs_server", "raylet", "ray::DashboardAgent", "ray::RuntimeEnvAgent"):
            assert part in names  # the session marker reached every kind of Ray process
    finally:
        if p.poll() is None:
            os.kill(p.pid, signal.SIGKILL)
        p.wait(timeout=30)
    deadline = time.time() + GONE_WITHIN_S
    while time.time() < deadline and (os.path.exists(temp_dir) or any(_alive(psutil, q) for q in procs + reaper)):
        time.sleep(0.5)
    assert [q.pid for q in procs + reaper if _alive(psutil, q)] == [], names
    assert session_processes(temp_dir) == [] and not os.path.exists(temp_dir)
