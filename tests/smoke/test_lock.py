"""One outdir, one run, with real processes: while a run holds OUTDIR/run.lock a
second run (even with --overwrite) and a --resume are refused with exit 2 naming the holder's pid,
and leave its files alone; a lock left by a process killed with SIGKILL is taken over with a
warning; the lock is gone after a run ends."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from noma_prorl_bench.io.checkpoint import list_checkpoints

# tests/conftest.py's FAST (a name `from conftest import` cannot reach in a full run: tests/ray has one too)
FAST = [
    "--steps",
    "3",
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
]

pytestmark = pytest.mark.smoke
FLAGS = [f for f in FAST if f != "--quiet"] + ["--quiet", "--threads", "1"]


def start(outdir, *extra, steps="400"):
    cmd = [sys.executable, "-m", "noma_prorl_bench.run", "--outdir", str(outdir), *FLAGS, "--steps", steps, *extra]
    return subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"}
    )


def run(outdir, *extra, steps="400"):
    p = start(outdir, *extra, steps=steps)
    out, err = p.communicate(timeout=300)
    return p.returncode, err


def wait_for(path, lines=1, timeout=120):
    t0 = time.time()
    while time.time() - t0 < timeout:
        if path.exists() and len(path.read_text().splitlines()) >= lines:
            return
        time.sleep(0.2)
    raise AssertionError(f"{path} never had {lines} lines")


def test_second_run_and_resume_refused_while_the_first_lives(tmp_path):
    out = tmp_path / "run"
    a = start(out, "--save_every", "2")
    try:
        wait_for(out / "metrics.jsonl", 3)
        holder = json.loads((out / "run.lock").read_text())
        assert holder["pid"] == a.pid
        before = (out / "config.json").read_text()
        for extra in (["--overwrite"], ["--resume"]):
            code, err = run(out, *extra)
            assert code == 2, err
            assert f"pid {a.pid}" in err and "--outdir" in err and "Traceback" not in err
        assert (out / "config.json").read_text() == before  # the live run's files untouched
        assert a.poll() is None  # and it is still training
    finally:
        a.send_signal(signal.SIGTERM)
        _, err_a = a.communicate(timeout=120)
    assert a.returncode == 143, err_a
    assert not (out / "run.lock").exists()  # released on a signal stop
    done = len((out / "metrics.jsonl").read_text().splitlines()) - 1  # the SIGTERM checkpoint's step (less step 0)
    code, err = run(out, "--resume", steps=str(done + 2))  # now free: resume works, no warning
    assert code == 0, err
    assert "stale lock" not in err and not (out / "run.lock").exists()


def test_stale_lock_of_a_killed_run_is_taken_over_with_a_warning(tmp_path):
    out = tmp_path / "run"
    a = start(out, "--save_every", "2")
    wait_for(out / "metrics.jsonl", 3)
    t0 = time.time()  # the step-2 checkpoint is written after its metrics row: kill only once it is complete
    while not list_checkpoints(out) and time.time() - t0 < 120:
        time.sleep(0.1)
    assert list_checkpoints(out), "no complete checkpoint within 120 s"
    a.kill()  # SIGKILL: no clean-up at all
    a.wait(timeout=60)
    assert json.loads((out / "run.lock").read_text())["pid"] == a.pid
    done = len((out / "metrics.jsonl").read_text().splitlines()) - 1  # less the step-0 row
    code, err = run(out, "--resume", steps=str(done + 2))
    assert code == 0, err
    assert "taking over the stale lock" in err and f"pid {a.pid}" in err
    assert not (out / "run.lock").exists()
    assert json.loads((out / "summary.json").read_text())["complete"] is True


def test_lock_file_alone_does_not_make_a_new_outdir_non_empty(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "run.lock").write_text(json.dumps({"pid": 2**22 + 7, "host": "elsewhere-or-dead"}))
    code, err = run(out, steps="3")
    assert code == 0, err
    assert "taking over the stale lock" in err
    assert sorted(os.listdir(out)) == [
        "checkpoints",
        "config.json",
        "events.jsonl",
        "metrics.jsonl",
        "samples.jsonl",
        "summary.json",
    ]
