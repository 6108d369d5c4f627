"""metrics.jsonl starts with the step-0 row (the greedy evaluation before RL), end to end: its
reward/val is the warmstart event's val_reward, training rows are unchanged by it, and exact
resume works with it and on run directories written before it existed (no step-0 row)."""

import json
import os
import shutil
from pathlib import Path

import pytest
from runhelp import read_jsonl
from runhelp import stable as _stable

from noma_prorl_bench.run import main

pytestmark = pytest.mark.smoke


def _rows(d, name="metrics.jsonl"):
    return read_jsonl(Path(d) / name)


def test_metrics_start_with_step_0_equal_to_the_warm_start_evaluation(tmp_path, fast_flags):
    d = str(tmp_path / "run")
    assert main(["--outdir", d, *fast_flags, "--steps", "4"]) == 0
    rows = _rows(d)
    warm = next(e for e in _rows(d, "events.jsonl") if e["event"] == "warmstart")
    assert [r["step"] for r in rows] == [0, 1, 2, 3, 4]
    assert (
        rows[0]["reward/val"]
        == warm["val_reward"]
        == json.load(open(os.path.join(d, "summary.json")))["val_reward_before_rl"]
    )
    assert set(rows[0]) == {"step", "reward/val", "perf/peak_rss_mb"}  # toy task: no reward parts
    assert rows[0]["perf/peak_rss_mb"] <= rows[1]["perf/peak_rss_mb"]


def test_old_run_dir_without_step_0_resumes_exactly(tmp_path, fast_flags):
    full, d = str(tmp_path / "full"), str(tmp_path / "old")
    assert main(["--outdir", full, *fast_flags, "--steps", "6"]) == 0
    assert main(["--outdir", d, *fast_flags, "--steps", "6", "--save_every", "3"]) == 0
    shutil.rmtree(os.path.join(d, "checkpoints", "step_000006"))
    os.remove(os.path.join(d, "summary.json"))
    with open(os.path.join(d, "metrics.jsonl")) as f:
        lines = f.readlines()
    assert lines[0].startswith('{"step": 0,')
    with open(os.path.join(d, "metrics.jsonl"), "w") as f:  # as written before the step-0 row existed
        f.writelines(lines[1:])
    assert main(["--outdir", d, "--resume"]) == 0
    assert _stable(_rows(d)) == _stable(_rows(full))[1:]  # steps 1..6, nothing added at step 0
    again = str(tmp_path / "new")  # and with it: kept once, exactly
    assert main(["--outdir", again, *fast_flags, "--steps", "6", "--save_every", "3"]) == 0
    shutil.rmtree(os.path.join(again, "checkpoints", "step_000006"))
    assert main(["--outdir", again, "--resume"]) == 0
    assert _stable(_rows(again)) == _stable(_rows(full))
