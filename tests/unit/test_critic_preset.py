"""The `critic` suite preset (matrix.py): GRPO against a critic (--adv gae) at equal samples, arms that
differ only in --adv, one Holm family, runs interleaved so the report adds the critic's step-time cost
as timing rows. Config and statistics only: no run."""

from pathlib import Path

import numpy as np
import pytest

from noma_prorl_bench.analysis import compare as cmp
from noma_prorl_bench.analysis.runlog import Run
from noma_prorl_bench.config import make_config
from noma_prorl_bench.config.parser import build_parser
from noma_prorl_bench.config.validate import validate
from noma_prorl_bench.matrix import FAMILIES, PRESETS, comparisons_for, expand, preset_arms

pytestmark = pytest.mark.unit


def test_critic_arms_differ_only_in_the_advantage_estimator_at_equal_samples():
    assert list(preset_arms("critic")) == ["critic-grpo", "critic-gae"]
    runs = expand("critic", seeds=10)
    assert len(runs) == 20 and [r.arm for r in runs[:4]] == ["critic-grpo", "critic-gae"] * 2  # interleaved
    cfgs = {r.arm: vars(make_config(vars(build_parser().parse_args(["--outdir", "x", *r.flags])))) for r in runs[:2]}
    for c in cfgs.values():
        validate(make_config(c))
    grpo, gae = cfgs["critic-grpo"], cfgs["critic-gae"]
    assert {k: v for k, v in gae.items() if v != grpo[k]} == {"adv": "gae"}  # same steps, B, G, epochs, lr
    assert grpo["steps"] == PRESETS["critic"]["steps"] == 150 and grpo["beta"] == 0.05
    assert PRESETS["critic"]["interleaved"] and PRESETS["critic"]["seeds"] >= 10
    comps = comparisons_for(list(preset_arms("critic")))
    assert comps == [("critic: gae vs grpo", "critic-gae", "critic-grpo")] and FAMILIES[comps[0][0]] == "critic"


def _run(adv, seed, step_s):
    steps = np.arange(1, 11)
    metrics = {
        "reward/val": np.full(10, 0.5 + 0.01 * seed),
        "time/step": np.full(10, step_s),
        "response/len_mean": np.full(10, 4.0),
    }
    cfg = {"seed": seed, "adv": adv, "variant": "A", "ref_compute": "cached", "batch_size": 2, "group_size": 2}
    return Run(Path(f"{adv}{seed}"), cfg, steps, metrics, [], [], {"complete": True})


def test_interleaved_critic_runs_get_timing_rows_in_the_cost_family():
    arms = {
        "critic-gae": {s: _run("gae", s, 1.5 + 0.01 * s) for s in range(6)},
        "critic-grpo": {s: _run("grpo", s, 1.0) for s in range(6)},
    }
    comps = comparisons_for(list(arms))
    rows = cmp.compare(arms, comps, 5, FAMILIES, timing=True)
    by = {r["metric"]: r for r in rows}
    assert set(by) == {"score", "s_step", "s_token"} and by["s_step"]["family"] == "cost"
    assert by["s_step"]["diff"] == pytest.approx(0.525) and by["score"]["diff"] == pytest.approx(0.0)
    assert by["s_step"]["p"] == pytest.approx(2 / 64)  # all six pairs slower with the critic
    assert {r["metric"] for r in cmp.compare(arms, comps, 5, FAMILIES, timing=False)} == {"score"}
