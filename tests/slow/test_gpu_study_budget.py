"""benchmarks/studies/gpu_study.py, the slower CPU checks (tiny model): the reset study stops for its budget
(on a clock the test holds, $GPU_STUDY_CLOCK_FILE: the budget's watch sends the suite SIGTERM, the runs
checkpoint, the command exits 0 with "continue with: ..."), a second call resumes the runs from their checkpoints and reports; the full fine-tune pair of
the vs_trl phase."""

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slow, pytest.mark.study]


STEPS = 100


def _argv(tmp_path, *flags):
    return [
        sys.executable,
        str(ROOT / "benchmarks" / "studies" / "gpu_study.py"),
        "device",
        "--device",
        "cpu",
        "--tiny",
        "--phases",
        "resets",
        "--steps",
        str(STEPS),
        "--state",
        str(tmp_path / "state"),
        "--out",
        str(tmp_path / "out"),
        *flags,
    ]


def _env(tmp_path, clock_file=None):
    env = {k: v for k, v in os.environ.items() if k != "GPU_STUDY_CLOCK_FILE"}
    env["NOMA_PRORL_BENCH_CACHE"] = str(tmp_path / "cache")
    if clock_file is not None:
        env["GPU_STUDY_CLOCK_FILE"] = str(clock_file)
    return env


def _steps(run_dir: Path) -> int:
    """RL steps in a run's metrics.jsonl so far (its lines less the step-0 row)."""
    try:
        lines = (run_dir / "metrics.jsonl").read_bytes().splitlines()
    except OSError:
        return 0
    return sum(1 for line in lines if line.strip() and not line.startswith(b'{"step": 0,'))


def _first_call_stopped_by_the_clock(tmp_path) -> subprocess.CompletedProcess:
    """The first call on a clock the test holds: it stands at 0 until each of the 3 runs has written a
    step, then jumps past the budget, so the stop lands mid-run whatever the machine's speed."""
    clock = tmp_path / "clock"
    clock.write_text("0")
    env = _env(tmp_path, clock)
    flags = ("--budget_s", "70", "--reserve_s", "5", "--stop_margin_s", "48")
    with open(tmp_path / "first.out", "w+") as out, open(tmp_path / "first.err", "w+") as err:
        p = subprocess.Popen(_argv(tmp_path, *flags), stdout=out, stderr=err, text=True, env=env, cwd=ROOT)
        deadline = time.monotonic() + 900
        try:
            while p.poll() is None and time.monotonic() < deadline:
                runs = [d for d in (tmp_path / "state" / "resets").glob("*") if d.is_dir()]
                if len(runs) == 3 and all(_steps(d) > 0 for d in runs):
                    clock.write_text("1000")  # 1000 s spent: past the 70 - 5 - 48 = 17 s of work time
                    break
                time.sleep(0.05)
            p.wait(timeout=max(deadline - time.monotonic(), 1))
        finally:
            if p.poll() is None:
                p.kill()
        out.seek(0), err.seek(0)
        return subprocess.CompletedProcess(p.args, p.returncode, out.read(), err.read())


def test_reset_study_stops_before_its_budget_and_a_second_call_resumes_it(tmp_path):
    first = _first_call_stopped_by_the_clock(tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    assert "SIGTERM to the suite in 17 s" in first.stdout, first.stdout[-3000:]
    last = first.stdout.strip().splitlines()[-1]
    assert last.startswith("continue with: bash scripts/gpu_study.sh device") and "(left: resets)" in last
    assert "--budget_s 70" in last
    res = json.loads((tmp_path / "out" / "resets_gpu.json").read_text())
    assert not res["complete"] and res["suite_exit"] == 143
    done = {n: r["steps_done"] for n, r in res["runs"].items()}
    # every run got past its first step and the stop came right after the last run's first step
    assert len(done) == 3 and all(0 < s <= STEPS for s in done.values()) and any(s < STEPS for s in done.values())
    cut = [n for n, s in done.items() if s < STEPS]
    assert all(os.path.isdir(tmp_path / "state" / "resets" / n / "checkpoints") for n in cut)
    second = subprocess.run(_argv(tmp_path), capture_output=True, text=True, env=_env(tmp_path), cwd=ROOT, timeout=900)
    assert second.returncode == 0, second.stderr[-3000:]
    m = re.search(
        r"(\d+) already complete \(skipped\), (\d+) to run \((\d+) resumed from their checkpoints\)", second.stderr
    )
    assert m, second.stderr[-3000:]
    skipped, to_run, resumed = int(m[1]), int(m[2]), int(m[3])
    assert skipped + to_run == 3 and resumed == to_run >= len(cut)  # nothing started again from scratch
    assert second.stdout.strip().splitlines()[-1] == "done: every phase finished"
    res2 = json.loads((tmp_path / "out" / "resets_gpu.json").read_text())
    assert (
        res2["complete"] and res2["complete_runs"] == 3 and all(r["steps_done"] == STEPS for r in res2["runs"].values())
    )


def test_full_fine_tune_pair_of_the_dry_run(tmp_path):
    """The vs_trl phase's other mode (every weight trained, both sides keeping a reference copy) on
    the tiny model: one ours / TRL pair, each with one timed step and generated tokens."""
    pytest.importorskip("trl")
    env = {**os.environ, "NOMA_PRORL_BENCH_CACHE": str(tmp_path / "cache")}
    p = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "studies" / "gpu_study.py"),
            "device",
            "--device",
            "cpu",
            "--tiny",
            "--phases",
            "vs_trl",
            "--modes",
            "full",
            "--state",
            str(tmp_path / "state"),
            "--out",
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=900,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    res = json.loads((tmp_path / "out" / "vs_trl_gpu.json").read_text())
    (row,) = res["pairs"]
    assert res["complete"] and row["mode"] == "full" and row["pairs"] == 1
    assert row["ours"]["tokens_per_step"] > 0 and row["trl"]["tokens_per_step"] > 0
