"""A run states its result: one stdout line with the validation score before RL and after, 95%
intervals over the prompts and the paired change; summary.json holds the same numbers under
"validation" and val_reward_before_rl; the evaluation before RL shows progress."""

import json
import math
import subprocess
import sys

import pytest
from runhelp import read_jsonl

from noma_prorl_bench.training.result import before_after, ci, result_line

pytestmark = pytest.mark.smoke


def test_the_result_line_and_summary_match_the_metrics(tmp_path):
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "noma_prorl_bench.run",
            "--outdir",
            str(tmp_path / "r"),
            "--steps",
            "4",
            "--eval_every",
            "2",
            "--batch_size",
            "4",
            "--group_size",
            "2",
            "--n_val",
            "24",
            "--warmstart_steps",
            "10",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert len(lines) == 1 and "greedy validation reward on 24 held-out prompts" in lines[0], r.stdout
    assert "evaluating before RL" in r.stderr  # progress of the first evaluation
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    v = summary["validation"]["reward"]
    events = read_jsonl(tmp_path / "r" / "events.jsonl")
    warm = next(e for e in events if e["event"] == "warmstart")["val_reward"]
    last = [m for m in read_jsonl(tmp_path / "r" / "metrics.jsonl") if "reward/val" in m][-1]["reward/val"]
    assert v["before"]["mean"] == pytest.approx(warm) == pytest.approx(summary["val_reward_before_rl"])
    assert v["after"]["mean"] == pytest.approx(last) == pytest.approx(summary["final_val_reward"])
    assert v["change"]["mean"] == pytest.approx(last - warm)
    assert all(d["n"] == 24 and d["ci95"][0] <= d["mean"] <= d["ci95"][1] for d in v.values())
    assert f"{v['before']['mean']:.3f}" in lines[0] and f"{v['change']['mean']:+.3f}" in lines[0]


def test_intervals_are_over_prompts_and_the_change_is_paired():
    assert ci([0.0, 1.0, 1.0, 0.0]) == {
        "mean": 0.5,
        "ci95": [0.5 - 1.96 * math.sqrt(1 / 3) / 2, 0.5 + 1.96 * math.sqrt(1 / 3) / 2],
        "n": 4,
    }
    before = {"reward": [0.0, 0.5, 1.0], "correct": [0.0, 0.0, 1.0], "format": [0.0, 1.0, 1.0]}
    after = {"reward": [0.5, 1.0, 1.0], "correct": [1.0, 0.0, 1.0], "format": [1.0, 1.0, 1.0]}
    v = before_after(before, after)
    assert v["correct"]["change"]["mean"] == pytest.approx(1 / 3)
    assert v["reward"]["change"]["ci95"] == pytest.approx(ci([0.5, 0.5, 0.0])["ci95"])
    line = result_line(v)
    assert line.startswith("greedy correctness on 3 held-out prompts") and "format 0.667 -> 1.000" in line
