"""benchmarks/studies/gpu_study.py end to end on CPU (`device --device cpu --tiny`): every phase on a tiny
random llama (the CUDA-only tests skip, ours vs trl.GRPOTrainer with LoRA, the real_resets matrix on
one seed), its result files, a second call that finds every phase done, and a fresh state restored
from what came back."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "benchmarks" / "studies"), str(ROOT / "scripts" / "device")]
import carry  # noqa: E402

pytestmark = pytest.mark.smoke


def _device(tmp_path, *flags):
    env = {**os.environ, "NOMA_PRORL_BENCH_CACHE": str(tmp_path / "cache")}
    return subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "studies" / "gpu_study.py"),
            "device",
            "--device",
            "cpu",
            "--tiny",
            "--state",
            str(tmp_path / "state"),
            "--out",
            str(tmp_path / "out"),
            *flags,
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=600,
    )


def test_dry_run_of_every_phase_then_a_second_call_and_a_restored_state(tmp_path):
    pytest.importorskip("trl")
    p = _device(tmp_path)  # tiny: LoRA only
    assert p.returncode == 0, p.stderr[-3000:]
    lines = p.stdout.splitlines()
    assert lines[0].startswith("budget: 540 s for this command, 30 s kept to save results")
    assert (
        "| tests/smoke/test_cuda_only.py::test_bf16_mixed_run_on_cuda_trains_and_logs_finite_metrics | skipped"
        in p.stdout
    )
    assert "| lora | 2x2x8 |" in p.stdout and "resets: 3 of 3 runs complete" in p.stdout
    assert lines[-1] == "done: every phase finished"
    out = tmp_path / "out"
    assert sorted(os.listdir(out)) == [
        "gpu_tests.json",
        "report.md",
        "resets_gpu.json",
        "resets_logs.tar.gz",
        "vs_trl_gpu.json",
    ]
    tests, trl, resets = (
        json.loads((out / f).read_text()) for f in ("gpu_tests.json", "vs_trl_gpu.json", "resets_gpu.json")
    )
    for r in (tests, trl, resets):
        carry.check_result(r)
        assert r["complete"] and r["device"]["gpu"] is None
    assert tests["counts"]["failed"] == tests["counts"]["error"] == 0 and tests["counts"]["skipped"] >= 5
    (row,) = trl["pairs"]
    assert row["mode"] == "lora" and row["pairs"] == 1 and row["median_ratio"] > 0
    assert row["ours"]["tokens_per_step"] > 0 and row["trl"]["tokens_per_step"] > 0
    assert len(trl["runs"]) == 2 and all(len(r["step_s"]) == 1 for r in trl["runs"].values())  # 2 steps, 1 timed
    assert resets["complete_runs"] == 3 and resets["settings"]["reset_every"] == 1 and resets["report"]
    assert "real: reset-keep vs no reset" in (out / "report.md").read_text()

    again = _device(tmp_path)  # the state holds every phase: nothing reruns
    assert again.returncode == 0
    for phase in ("tests", "vs_trl", "resets"):
        assert f"{phase}: already complete" in again.stdout
    shutil.rmtree(tmp_path / "state")  # a fresh machine: restore what came back
    back = tmp_path / "back"
    shutil.copytree(out, back)
    (back / "resets_gpu.json").unlink()  # the runs themselves come from the logs
    third = _device(tmp_path, "--phases", "resets", "--restore", str(back))
    assert third.returncode == 0, third.stderr[-2000:]
    assert "suite: 3 runs, 3 already complete (skipped), 0 to run" in third.stderr
    assert "resets: 3 of 3 runs complete" in third.stdout
