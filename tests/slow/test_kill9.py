"""kill -9 at random moments, then --resume: the run completes, every output file is whole, and
metrics.jsonl equals an uninterrupted run's (apart from time/* and perf/* keys).

A run in a subprocess is SIGKILLed a little after its first checkpoint; its --resume is killed
again at random moments (during start-up, training, or a checkpoint write), and a last
--resume finishes it. Total well under a minute on 2 CPU cores.
"""

import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest

from noma_prorl_bench.io import checkpoint as ck
from noma_prorl_bench.run import main

pytestmark = pytest.mark.slow

SRC = os.path.join(os.path.dirname(__file__), "..", "..", "src")
FLAGS = [
    "--batch_size",
    "4",
    "--group_size",
    "4",
    "--warmstart_steps",
    "5",
    "--n_val",
    "16",
    "--eval_every",
    "3",
    "--quiet",
    "--steps",
    "40",
    "--reset_every",
    "7",
    "--opt_reset",
    "soft",
]
VOLATILE = ("time/", "perf/")


def _spawn(argv):
    env = dict(os.environ, PYTHONPATH=os.path.abspath(SRC))
    return subprocess.Popen(
        [sys.executable, "-m", "noma_prorl_bench.run", *argv],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def _kill(proc):
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=30)


def _records(d, name):
    """Every line must parse (the resume dropped any partial line)."""
    with open(os.path.join(d, name)) as f:
        text = f.read()
    assert text == "" or text.endswith("\n")
    return [json.loads(line) for line in text.splitlines()]


def _check_whole(d):
    """Every checkpoint directory that looks complete reads back (a killed save is only a .tmp_ dir)."""
    for step, path in ck.list_checkpoints(d):
        assert ck.read(path).step == step
    n_lines = sum(1 for _ in open(os.path.join(d, "metrics.jsonl")))
    print(
        f"after kill: checkpoints {[s for s, _ in ck.list_checkpoints(d)]}, metrics lines {n_lines}, "
        f"leftovers {[n for n in os.listdir(os.path.join(d, 'checkpoints')) if n.startswith('.tmp_')]}"
    )


def _lines(d):
    p = os.path.join(d, "metrics.jsonl")
    return sum(1 for _ in open(p)) if os.path.isfile(p) else 0


def _wait(cond, proc, timeout=40.0):
    deadline = time.time() + timeout
    while not cond() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.01)


def test_kill9_at_random_moments_then_resume(tmp_path):
    rng = random.Random(9)
    full = str(tmp_path / "full")
    assert main(["--outdir", full, *FLAGS]) == 0
    d = str(tmp_path / "killed")
    # 1. a fresh run, killed a moment after its first checkpoint
    proc = _spawn(["--outdir", d, *FLAGS, "--save_every", "2"])
    _wait(lambda: ck.list_checkpoints(d), proc)
    assert ck.list_checkpoints(d), "the run wrote no checkpoint"
    time.sleep(rng.uniform(0.0, 0.6))
    _kill(proc)
    _check_whole(d)
    # 2. a resume killed during its start-up (warm start re-run, nothing written yet)
    proc = _spawn(["--outdir", d, "--resume"])
    time.sleep(rng.uniform(0.1, 1.5))
    _kill(proc)
    _check_whole(d)
    # 3. resumes killed while training (possibly mid-line or mid-checkpoint)
    for _ in range(2):
        before = _lines(d)
        proc = _spawn(["--outdir", d, "--resume"])
        _wait(lambda: _lines(d) > before, proc)
        time.sleep(rng.uniform(0.0, 0.8))
        assert proc.poll() is None, "the resumed run finished before it could be killed"
        _kill(proc)
        _check_whole(d)
    # 4. the last resume completes
    assert main(["--outdir", d, "--resume"]) == 0
    got = _records(d, "metrics.jsonl")
    assert [r["step"] for r in got] == list(range(0, 41))  # 0: the evaluation before RL, once

    def stable(records):
        return [{k: v for k, v in r.items() if not k.startswith(VOLATILE)} for r in records]

    assert stable(got) == stable(_records(full, "metrics.jsonl"))
    events = _records(d, "events.jsonl")
    assert [e["step"] for e in events] == sorted(e["step"] for e in events)
    assert len([e for e in events if e["event"] == "resume"]) >= 3
    _records(d, "samples.jsonl")
    assert json.load(open(os.path.join(d, "summary.json")))["complete"] is True
    assert not [n for n in os.listdir(os.path.join(d, "checkpoints")) if n.startswith(".tmp_")]
