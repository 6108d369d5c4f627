"""The Ray-session reaper without Ray (engines/reaper.py): stand-in "session" processes carry the
session marker; a driver that is SIGKILLed leaves its reaper to kill exactly them and remove the
temp dir, while a process of another session (another temp dir) is left alone."""

import os
import signal
import subprocess
import sys
import time

import pytest

from noma_prorl_bench.engines.reaper import SESSION_ENV, Reaper, session_processes

pytestmark = pytest.mark.unit
psutil = pytest.importorskip("psutil")

SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "src")


def _sleeper(session: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(120)"], env={**os.environ, SESSION_ENV: session}
    )


def _gone(p: subprocess.Popen, within: float = 30.0) -> bool:
    try:
        p.wait(timeout=within)
        return True
    except subprocess.TimeoutExpired:
        return False


def _wait_for(pred, within: float = 30.0) -> bool:
    deadline = time.time() + within
    while time.time() < deadline:
        if pred():
            return True
        time.sleep(0.1)
    return pred()


def test_reaper_of_a_sigkilled_driver_kills_its_session_only(tmp_path):
    ours, other = tmp_path / "ours", tmp_path / "other"
    ours.mkdir()
    other.mkdir()
    mine, theirs = _sleeper(str(ours)), _sleeper(str(other))
    code = (
        f"import sys, time; sys.path.insert(0, {SRC!r}); from noma_prorl_bench.engines.reaper import Reaper; "
        f"Reaper({str(ours)!r}); print('up', flush=True); time.sleep(120)"
    )
    driver = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert driver.stdout.readline().strip() == "up"
        found = {p.pid for p in session_processes(str(ours))}  # with the reaper (its argv names the dir)
        assert mine.pid in found and theirs.pid not in found and driver.pid not in found
        driver.send_signal(signal.SIGKILL)
        driver.wait(timeout=30)
        assert _gone(mine) and mine.returncode == -signal.SIGKILL
        assert _wait_for(lambda: not ours.exists() and session_processes(str(ours)) == [])  # the reaper exited too
        assert theirs.poll() is None and other.is_dir()  # another session: untouched
    finally:
        for p in (mine, theirs, driver):
            if p.poll() is None:
                p.kill()
                p.wait(timeout=30)


def test_finish_after_a_clean_shutdown_sweeps_leftovers_and_spares_the_driver(tmp_path):
    """A driver that shut Ray down closes the pipe: a straggler of its session is killed, the
    driver itself (which carries no marker once Ray is up, but is excluded anyway) lives on."""
    ours = tmp_path / "ours"
    ours.mkdir()
    straggler = _sleeper(str(ours))
    reaper = Reaper(str(ours))
    reaper.finish()
    assert reaper.proc.returncode == 0 and _gone(straggler) and not ours.exists()
