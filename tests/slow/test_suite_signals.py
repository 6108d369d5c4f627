"""`prorl-bench suite` under SIGTERM / SIGINT, with real processes.

One suite of three small runs (smoke preset flags, 40 steps, 2 in parallel) is interrupted twice
and re-run with the same command each time:
  1. SIGTERM while A1 and B train: both get it, checkpoint and exit 143; reset-soft never starts;
     the suite exits 143 without a traceback, no run process is left behind, no report (none finished).
  2. the same command resumes A1 and B from their checkpoints (`--resume`); SIGINT once both are
     complete and reset-soft trains: exit 130, a partial report of A1 and B only.
  3. the same command skips A1 and B and resumes reset-soft: exit 0, every run has steps 1..40 once.
"""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.slow

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STEPS = 40  # long enough that a signal sent after 2 logged steps lands mid-run on an idle machine
RUNS = ("A1_s0", "B_s0", "reset-soft_s0")


def _start(out):
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "src"), OMP_NUM_THREADS="1")
    cmd = [
        sys.executable,
        "-m",
        "noma_prorl_bench.cli",
        "suite",
        "--preset",
        "smoke",
        "--arms",
        "A1,B,reset-soft",
        "--steps",
        str(STEPS),
        "--jobs",
        "2",
        "--quiet",
        "--outdir",
        str(out),
    ]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _lines(out, run):
    try:
        with open(out / run / "metrics.jsonl") as f:  # RL-step rows (the step-0 row not counted)
            return sum(1 for line in f if json.loads(line)["step"] > 0)
    except OSError:
        return 0


def _complete(out, run):
    try:
        return json.loads((out / run / "summary.json").read_text()).get("complete") is True
    except (OSError, ValueError):
        return False


def _wait_then_signal(proc, cond, signum, what):
    deadline = time.time() + 300
    while not cond():
        assert proc.poll() is None, f"the suite ended before {what}: {proc.communicate()}"
        assert time.time() < deadline, f"timed out waiting for {what}"
        time.sleep(0.3)
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=300)
    return proc.returncode, err


def _live_run_processes(out):
    """pids of processes whose command line names a run directory of this suite."""
    pids = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if str(out).encode() in f.read():
                    pids.append(pid)
        except OSError:
            pass
    return pids


def _checkpoint_steps(out, run):
    d = out / run / "checkpoints"
    return sorted(int(n[5:]) for n in os.listdir(d) if n.startswith("step_")) if d.is_dir() else []


def test_suite_forwards_signals_writes_partial_report_and_resumes(tmp_path):
    out = tmp_path / "suite"
    # 1. SIGTERM with two runs training
    proc = _start(out)
    rc, err = _wait_then_signal(
        proc, lambda: _lines(out, "A1_s0") >= 2 and _lines(out, "B_s0") >= 2, signal.SIGTERM, "A1 and B to train"
    )
    assert rc == 143, err
    assert "Traceback" not in err and "forwarded to 2 running run(s)" in err
    assert _live_run_processes(out) == []  # no orphans
    for run in ("A1_s0", "B_s0"):
        assert f"run {run} stopped (exit 143) at a checkpoint" in err
        steps = _checkpoint_steps(out, run)
        assert steps and 2 <= steps[-1] < STEPS and _lines(out, run) == steps[-1]
        assert not _complete(out, run)
    assert not (out / "reset-soft_s0").exists()  # no new run after the signal
    assert "no finished run, no report written" in err and not (out / "report.md").exists()

    # 2. same command: A1 and B resume from their checkpoints; SIGINT while reset-soft trains
    proc = _start(out)
    rc, err = _wait_then_signal(
        proc,
        lambda: _complete(out, "A1_s0") and _complete(out, "B_s0") and _lines(out, "reset-soft_s0") >= 2,
        signal.SIGINT,
        "reset-soft to train",
    )
    assert rc == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    assert "3 runs, 0 already complete (skipped), 3 to run (2 resumed from their checkpoints)" in err
    assert err.count("--resume") == 2 and "--overwrite" in err  # reset-soft was new
    assert _live_run_processes(out) == []
    assert "run reset-soft_s0 stopped (exit 130) at a checkpoint" in err
    report = json.loads((out / "report.json").read_text())
    assert sorted(k.split()[0] for k in report["matrix"]) == ["A1", "B"]  # only what finished
    for run in ("A1_s0", "B_s0"):
        resumes = [json.loads(x) for x in (out / run / "events.jsonl").read_text().splitlines() if '"resume"' in x]
        assert len(resumes) == 1 and resumes[0]["step"] >= 2
        assert json.loads((out / run / "summary.json").read_text())["resumed_from_step"] == resumes[0]["step"]

    # 3. same command: only reset-soft runs, resumed
    proc = _start(out)
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    assert "3 runs, 2 already complete (skipped), 1 to run (1 resumed from their checkpoints)" in err
    for run in RUNS:
        steps = [json.loads(x)["step"] for x in (out / run / "metrics.jsonl").read_text().splitlines()]
        assert steps == list(range(0, STEPS + 1)) and _complete(out, run)  # the step-0 row, then 1..N once
    assert len(json.loads((out / "report.json").read_text())["matrix"]) == 3
