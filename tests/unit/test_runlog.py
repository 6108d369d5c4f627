"""Unit tests for runlog: reading run directories, tolerant JSONL, labels and groups."""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from fakeruns import N_SEQ, T_TOK, write_run, write_suite  # noqa: E402

from noma_prorl_bench.analysis.run_files import align_metrics  # noqa: E402
from noma_prorl_bench.analysis.runlog import (  # noqa: E402
    THROUGHPUT_KEY,
    group_runs,
    load_run,
    load_runs,
    smooth,
)

pytestmark = pytest.mark.unit


def test_load_run_aligns_metrics_on_steps(tmp_path):
    run = load_run(write_run(tmp_path / "r", steps=12, eval_every=5))
    assert run.steps.tolist() == list(range(1, 13))
    assert all(v.shape == (12,) for v in run.metrics.values())
    val = run.metrics["reward/val"]
    # reward/val only on eval steps (5, 10) and the last step (12): NaN elsewhere
    assert np.isfinite(val).nonzero()[0].tolist() == [4, 9, 11]
    steps, values = run.series("reward/val")
    assert steps.tolist() == [5, 10, 12] and values.shape == (3,)
    assert run.metrics["count/ref_fwd"].tolist() == [1.0] * 12
    assert run.complete and run.label == "A1 cached" and run.seed == 0
    assert run.event_steps("ref_reset") == [10]
    assert len(run.samples) == 2 * 3 and run.samples[0]["step"] == 5


def test_partial_last_line_is_dropped_silently(tmp_path):
    d = write_run(tmp_path / "r", steps=6, partial_last_line=True, complete=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        run = load_run(d)
    assert run.steps.tolist() == [1, 2, 3, 4, 5, 6]  # step 7's half line is gone
    assert run.dropped == ["metrics.jsonl:7"]
    assert not run.complete


def test_bad_middle_line_warns_and_is_dropped(tmp_path):
    d = write_run(tmp_path / "r", steps=4)
    lines = (d / "metrics.jsonl").read_text().splitlines()
    lines.insert(2, '{"step": 3, "rew')
    (d / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.warns(UserWarning, match="line 3"):
        run = load_run(d)
    assert run.steps.tolist() == [1, 2, 3, 4] and run.dropped == ["metrics.jsonl:3"]


def test_not_a_run_raises_clear_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such directory"):
        load_run(tmp_path / "absent")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="not a run directory: missing config.json, metrics.jsonl"):
        load_run(tmp_path / "empty")
    (tmp_path / "file.txt").write_text("x")
    with pytest.raises(ValueError, match="not a run directory"):
        load_run(tmp_path / "file.txt")
    (tmp_path / "badcfg").mkdir()
    (tmp_path / "badcfg" / "config.json").write_text("{oops")
    (tmp_path / "badcfg" / "metrics.jsonl").write_text("")
    with pytest.raises(ValueError, match="config.json is not valid JSON"):
        load_run(tmp_path / "badcfg")


def test_repeated_step_keeps_last_row_and_non_numbers_are_skipped():
    steps, m = align_metrics(
        [{"step": 1, "a": 1.0, "s": "x"}, {"step": 2, "a": 2.0}, {"step": 1, "a": 5.0, "b": True}, {"no_step": 1}]
    )
    assert steps.tolist() == [1, 2]
    assert m["a"].tolist() == [5.0, 2.0]
    assert m["b"][0] == 1.0 and np.isnan(m["b"][1]) and "s" not in m


def test_smooth_is_a_trailing_mean_ignoring_nan():
    x = np.array([1.0, 3.0, np.nan, 5.0, 7.0])
    # window 2: [1], [1,3], [3], [5], [5,7]
    assert smooth(x, 2).tolist() == [1.0, 2.0, 3.0, 5.0, 6.0]
    assert smooth(x, 1)[1] == 3.0 and np.isnan(smooth(x, 1)[2])


def test_throughput_counts_policy_tokens_only(tmp_path):
    run = load_run(write_run(tmp_path / "a0", ref_compute="naive_epoch", steps=5))
    expected = N_SEQ * T_TOK / run.metrics["time/step"]
    np.testing.assert_allclose(run.metrics[THROUGHPUT_KEY], expected)


def test_labels_name_what_varies_and_groups_collect_seeds(tmp_path):
    dirs = write_suite(tmp_path, seeds=(0, 1))
    runs = load_runs(dirs)
    labels = {r.path.name: r.label for r in runs}
    assert labels["A0_s0"] == "A0 naive_epoch, opt=keep, no-grow, seed 0"
    assert labels["A2_s1"] == "A2 ring, opt=keep, no-grow, seed 1"
    assert labels["B_s0"] == "B no-ref, opt=keep, no-grow, seed 0"
    assert labels["hard_s1"] == "A1 cached, opt=hard, no-grow, seed 1"
    # grow_every exists only with growth and does not vary among growth runs: not in labels
    assert labels["grow_s0"] == "A1 cached, opt=keep, grow:adam_map, seed 0"
    groups = group_runs(runs)
    assert len(groups) == 8 and all(len(rs) == 2 for rs in groups.values())
    assert {r.path.name for r in groups["A1 cached, opt=soft, no-grow"]} == {"soft_s0", "soft_s1"}


def test_single_run_label_and_duplicate_labels(tmp_path):
    a = write_run(tmp_path / "x", seed=3)
    b = write_run(tmp_path / "y", seed=3)
    runs = load_runs([a, b])
    assert [r.label for r in runs] == ["A1 cached [x]", "A1 cached [y]"]
    cfg = json.loads((a / "config.json").read_text())
    assert cfg["versions"]["torch"] == "fake"  # bookkeeping never enters labels
