"""A run states its result: one stdout line with the validation score before RL and after, 95%
intervals over the prompts and the paired change; summary.json holds the same numbers under
"validation" and val_reward_before_rl; the evaluation before RL shows progress."""

import json
import math
import subprocess
import sys

import numpy as np
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
    # 0/1 rewards: Wilson's interval (2 of 4: centre 0.5, half 1.96 * sqrt(1/16 + 1.96^2/64) / (1 + 1.96^2/4))
    z = 1.959964
    half = z * math.sqrt(0.25 / 4 + z * z / 64) / (1 + z * z / 4)
    assert ci([0.0, 1.0, 1.0, 0.0]) == {"mean": 0.5, "ci95": pytest.approx([0.5 - half, 0.5 + half]), "n": 4}
    # other rewards: Student's t (2 degrees of freedom: 4.303), cut to [0, 1] only where it passes an end
    t2 = 4.302653
    assert ci([0.4, 0.5, 0.6])["ci95"] == pytest.approx([0.5 - t2 * 0.1 / math.sqrt(3), 0.5 + t2 * 0.1 / math.sqrt(3)])
    assert ci([0.0, 0.1, 0.5, 0.1, 0.0])["ci95"] == pytest.approx(
        [0.0, 0.14 + 2.776445 * math.sqrt(0.043) / math.sqrt(5)]
    )
    before = {"reward": [0.0, 0.5, 1.0], "correct": [0.0, 0.0, 1.0], "format": [0.0, 1.0, 1.0]}
    after = {"reward": [0.5, 1.0, 1.0], "correct": [1.0, 0.0, 1.0], "format": [1.0, 1.0, 1.0]}
    v = before_after(before, after)
    assert v["correct"]["change"]["mean"] == pytest.approx(1 / 3)
    d = [0.5, 0.5, 0.0]  # the reward's changes: not 0/1, so the t interval on them, cut to [-1, 1]
    half = t2 * math.sqrt(sum((x - 1 / 3) ** 2 for x in d) / 2) / math.sqrt(3)
    assert v["reward"]["change"]["ci95"] == pytest.approx([max(-1.0, 1 / 3 - half), min(1.0, 1 / 3 + half)])
    line = result_line(v)
    assert line.startswith("greedy correctness on 3 held-out prompts") and "format 0.667 -> 1.000" in line


def test_a_jsonl_sized_result_stays_in_the_rewards_range_and_says_three_prompts_show_nothing():
    v = before_after({"reward": [0.0, 0.0, 1.0]}, {"reward": [1.0, 0.0, 0.0]})
    for d in (v["reward"]["before"], v["reward"]["after"]):
        assert 0.0 < d["ci95"][0] < d["mean"] < d["ci95"][1] < 1.0
    lo, hi = v["reward"]["change"]["ci95"]
    assert -1.0 <= lo < 0.0 < hi <= 1.0
    assert ci([1.0, 1.0, 1.0])["ci95"][1] == 1.0 and ci([1.0, 1.0, 1.0])["ci95"][0] < 0.5  # not [1, 1]
    line = result_line(v)
    assert "before RL 0.333 [0.061, 0.792]" in line and "3 prompts cannot show a difference" in line
    many = before_after({"reward": [0.0, 1.0] * 3}, {"reward": [1.0, 1.0] * 3})
    assert "cannot show" not in result_line(many)


@pytest.mark.parametrize("n", [3, 10, 40])
def test_the_intervals_cover_the_true_value_95_percent_of_the_time(n):
    """A simulation: 0/1 rewards (per-prompt success p, after RL p + 0.15, correlated pairs) and
    rewards in [0, 1] (beta-distributed), 2000 draws each: every interval inside its range and
    covering the true mean or change in >= 93% of draws (Wilson and the adjusted Wald interval hold this down to 3
    prompts; the t interval is cut only outside the range, where the true mean never is)."""
    from noma_prorl_bench.training.result import change_ci

    rng = np.random.default_rng(n)
    reps, hits = 2000, {"level": 0, "change": 0, "bounded": 0}
    for _ in range(reps):
        u = rng.random(n)
        before = (u < 0.4).astype(float).tolist()
        after = (u < 0.55).astype(float).tolist()  # the same prompts: correlated
        lo, hi = ci(before)["ci95"]
        hits["level"] += lo <= 0.4 <= hi and 0.0 <= lo and hi <= 1.0
        lo, hi = change_ci(before, after)["ci95"]
        hits["change"] += lo <= 0.15 <= hi and -1.0 <= lo and hi <= 1.0
        x = rng.beta(2.0, 5.0, n).tolist()  # mean 2/7
        lo, hi = ci(x)["ci95"]
        hits["bounded"] += lo <= 2 / 7 <= hi and 0.0 <= lo and hi <= 1.0
    cover = {k: h / reps for k, h in hits.items()}
    floor = {"level": 0.93, "change": 0.93, "bounded": 0.92}
    assert all(cover[k] >= floor[k] for k in cover), cover
