"""The `real_resets` suite preset (matrix.py): its arms run the same real-model settings and differ
only in the reset flags; every arm's flags make a valid run config; its comparisons are in the
outcome family. No model is loaded (config only)."""

import pytest

from noma_prorl_bench.config import make_config
from noma_prorl_bench.config.parser import build_parser
from noma_prorl_bench.matrix import FAMILIES, PRESETS, comparisons_for, expand, preset_arms

pytestmark = pytest.mark.unit
RESET_FLAGS = ("--reset_every", "--opt_reset")


def _without_reset_flags(flags: list[str]) -> list[str]:
    out, skip = [], False
    for f in flags:
        if skip:
            skip = False
        elif f in RESET_FLAGS:
            skip = True
        else:
            out.append(f)
    return out


def _config(flags: list[str]):
    return make_config(vars(build_parser().parse_args(["--outdir", "x", *flags])))


def test_arms_are_none_keep_hard_on_the_same_seeds():
    assert list(preset_arms("real_resets")) == ["real-none", "real-keep", "real-hard"]
    runs = expand("real_resets", seeds=3)
    assert [r.name for r in runs[:4]] == ["real-none_s0", "real-keep_s0", "real-hard_s0", "real-none_s1"]
    assert len(runs) == 9 and {r.pair for r in runs} == {0, 1, 2}
    assert all(r.flags[r.flags.index("--seed") + 1] == str(r.pair) for r in runs)


def test_arms_differ_only_in_the_reset_flags():
    by_arm = {r.arm: r.flags for r in expand("real_resets", seeds=1)}
    stripped = {a: _without_reset_flags(f) for a, f in by_arm.items()}
    assert stripped["real-none"] == stripped["real-keep"] == stripped["real-hard"]
    assert not set(RESET_FLAGS) & set(by_arm["real-none"])
    cadence = str(PRESETS["real_resets"]["reset_every"])
    for arm, mode in (("real-keep", "keep"), ("real-hard", "hard")):
        f = by_arm[arm]
        assert f[f.index("--reset_every") + 1] == cadence and f[f.index("--opt_reset") + 1] == mode


def test_arm_configs_are_the_real_model_and_differ_in_reset_fields_only():
    cfgs = {r.arm: vars(_config(r.flags)) for r in expand("real_resets", seeds=1)}
    none, keep, hard = cfgs["real-none"], cfgs["real-keep"], cfgs["real-hard"]
    assert none["task"] == "rg:basic_arithmetic" and none["model"].startswith("hf:")
    assert none["n_val"] >= 200 and none["steps"] == PRESETS["real_resets"]["steps"]
    assert (none["beta"], none["lr"]) == (1.0, 1e-3)
    assert none["reset_every"] == 0 and keep["reset_every"] == hard["reset_every"] == 4
    # hard also rebuilds Adam's step count and schedule: config.validate fills those in
    assert {k for k in none if none[k] != keep[k]} <= {"reset_every", "opt_reset"}
    assert {k for k in keep if keep[k] != hard[k]} <= {
        "opt_reset",
        "reset_opt_step",
        "reset_lr_schedule",
        "reset_kl_coef",
    }


def test_comparisons_are_in_the_outcome_family():
    comps = comparisons_for(list(preset_arms("real_resets")))
    assert [c[0] for c in comps] == ["real: reset-keep vs no reset", "real: reset-hard vs reset-keep"]
    assert all(FAMILIES[c[0]] == "outcome" for c in comps)
    assert [c[0] for c in comparisons_for(["real-none", "real-keep"])] == ["real: reset-keep vs no reset"]
