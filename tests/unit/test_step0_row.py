"""metrics.jsonl's step-0 row (the greedy evaluation before RL) in the analysis layer: kept apart in
`Run.initial`, never counted in a score or a per-run number, taken from the `warmstart` event for
runs written before the row existed, and the first point of the validation curve."""

import json
import math

import numpy as np
import pytest

from noma_prorl_bench.analysis.compare import run_numbers, run_score
from noma_prorl_bench.analysis.plot_parts import curve
from noma_prorl_bench.analysis.runlog import load_run, run_stats
from tests.fakeruns import write_run

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("k", [1, 3, 9, 10])
def test_score_and_numbers_unchanged_by_the_step0_row(tmp_path, k):
    """steps 40, eval_every 5: 8 evaluations (k 9 and 10: more than the run has -> NaN either way)."""
    old = load_run(write_run(tmp_path / "old", seed=2))
    new = load_run(write_run(tmp_path / "new", seed=2, step0=True))
    assert (tmp_path / "new" / "metrics.jsonl").read_text().startswith('{"step": 0,')
    s_old, s_new = run_score(old, k), run_score(new, k)
    assert (math.isnan(s_old) and math.isnan(s_new)) if k > 8 else s_old == s_new
    assert np.array_equal(old.steps, new.steps) and new.steps[0] == 1
    a, b = run_numbers(old, k), run_numbers(new, k)
    assert {x: v for x, v in a.items() if not math.isnan(v)} == {x: v for x, v in b.items() if not math.isnan(v)}
    sa = run_stats(old, threshold=0.0, source="val")
    sb = run_stats(new, threshold=0.0, source="val")
    assert sa == sb and sa["steps_to_thr"] == 5.0  # step 0's value reaches 0.0 but is not an RL step
    assert sb["peak_mem"] == sa["peak_mem"] > 290.0


def test_score_is_the_mean_of_the_last_k_rl_evaluations(tmp_path):
    run = load_run(write_run(tmp_path / "r", seed=1, step0=True))
    _, v = run.series("reward/val")
    assert v.size == 8 and run_score(run, 8) == pytest.approx(float(v.mean()))
    assert run.initial["reward/val"] == pytest.approx(0.01) and run_numbers(run, 3)["warm"] == pytest.approx(0.01)


def test_initial_value_of_an_old_run_comes_from_the_warmstart_event(tmp_path):
    d = write_run(tmp_path / "old", seed=3)
    assert load_run(d).initial == {}
    with open(d / "events.jsonl", "a") as f:
        f.write(json.dumps({"step": 0, "event": "warmstart", "val_reward": 0.25, "steps": 5}) + "\n")
    run = load_run(d)
    assert run.initial == {"reward/val": 0.25}
    steps, v = run.series("reward/val", initial=True)
    assert steps[0] == 0 and v[0] == 0.25 and np.array_equal(steps[1:], run.series("reward/val")[0])


def test_validation_curve_starts_at_step_0(tmp_path):
    runs = [load_run(write_run(tmp_path / f"s{s}", seed=s, step0=True)) for s in (0, 2)]
    steps, mean, lo, hi = curve(runs, "reward/val", initial=True)
    assert steps[0] == 0 and mean[0] == pytest.approx(0.01) and (lo[0], hi[0]) == pytest.approx((0.0, 0.02))
    assert curve(runs, "reward/val")[0][0] == 5  # without it: the first RL evaluation
    assert curve(runs, "reward/mean", initial=True)[0][0] == 1  # no step-0 value for train reward
