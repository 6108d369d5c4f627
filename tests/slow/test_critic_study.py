"""benchmarks/studies/critic_study.py keeps working: 2 seeds x 2 steps of both arms on tiny batches, the paired
summary written as JSON and text (the study itself, 10 seeds, is run by hand; its result is in
benchmarks/results/critic_study.*)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.study]
ROOT = Path(__file__).resolve().parents[2]


def test_critic_study_runs_both_arms_and_writes_the_paired_summary(tmp_path):
    out = tmp_path / "cs"
    cmd = [sys.executable, str(ROOT / "benchmarks" / "studies" / "critic_study.py")]
    cmd += ["--seeds", "2", "--steps", "2", "--tiny", "--jobs", "2", "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    res = json.loads(out.with_suffix(".json").read_text())
    assert {(r["arm"], r["seed"]) for r in res["runs"]} == {(a, s) for a in ("gae", "grpo") for s in (0, 1)}
    s = res["score"]
    assert len(s["differences"]) == 2 and s["ci95"][0] <= s["mean_diff"] <= s["ci95"][1]
    assert 0 < s["sign_flip_p"] <= 1
    assert all(r["critic_fwd_per_step"] == 5 for r in res["runs"] if r["arm"] == "gae")
    assert all(r["critic_fwd_per_step"] is None for r in res["runs"] if r["arm"] == "grpo")
    assert res["regime"]["steps"] == 2 and "gae" in out.with_suffix(".txt").read_text()
