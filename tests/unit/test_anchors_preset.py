"""The `anchors` suite preset (matrix.py): one arm per KL anchor (fixed, reset with Adam kept, moving reference,
Elastic Reset) at two betas, each a valid run config that differs from the fixed arm only in its anchor
flags; its ten comparisons form one Holm family. Config only: no run."""

import os

import pytest

from noma_prorl_bench.config import make_config
from noma_prorl_bench.config.parser import build_parser
from noma_prorl_bench.config.validate import validate
from noma_prorl_bench.matrix import ATLAS_ARMS, FAMILIES, PRESETS, comparisons_for, expand, preset_arms

pytestmark = pytest.mark.unit
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _config(flags):
    return make_config(vars(build_parser().parse_args(["--outdir", "x", *flags])))


def test_anchor_arms_are_valid_and_differ_only_in_their_anchor():
    betas, anchors = ("0.05", "1"), ("fixed", "reset", "ema", "elastic")
    assert list(preset_arms("anchors")) == [f"anchor-b{b}-{a}" for b in betas for a in anchors]
    cfgs = {r.arm: vars(_config(r.flags)) for r in expand("anchors", seeds=1)}
    for c in cfgs.values():
        validate(make_config(c))
    every = PRESETS["anchors"]["reset_every"]
    for b in betas:
        fixed = cfgs[f"anchor-b{b}-fixed"]
        assert fixed["beta"] == float(b) and fixed["steps"] == PRESETS["anchors"]["steps"]
        assert fixed["reset_every"] == 0 and fixed["ref_update"] == "hard"
        want = {
            "reset": {"reset_every": every},
            "ema": {"ref_update": "ema"},
            "elastic": {"reset_every": every, "reset_to": "elastic", "elastic_decay": 0.975},
        }
        for a, diff in want.items():
            got = {k: v for k, v in cfgs[f"anchor-b{b}-{a}"].items() if v != fixed[k]}
            assert got == diff, (b, a)


def test_fixed_and_reset_anchors_are_the_atlas_runs():
    """Same flags as the atlas's b{beta}-none / b{beta}-keep: their complete runs can be copied in."""
    arms = preset_arms("anchors")
    for b in ("0.05", "1"):
        assert arms[f"anchor-b{b}-fixed"] == ATLAS_ARMS[f"b{b}-none"]
        assert arms[f"anchor-b{b}-reset"] == ATLAS_ARMS[f"b{b}-keep"]


def test_elastic_decay_matches_the_papers_weight_on_the_initial_model_at_a_reset():
    # the paper: decay 0.995, reset every 260 steps; here every 50: the EMA's weight on the initial
    # weights at a reset, decay^period, within 0.02 of the paper's
    assert abs(0.975 ** PRESETS["anchors"]["reset_every"] - 0.995**260) < 0.02


def test_anchor_comparisons_one_family_of_ten_and_enough_seeds():
    comps = comparisons_for(list(preset_arms("anchors")))
    assert len(comps) == 10 and {FAMILIES[c[0]] for c in comps} == {"anchors"}
    # the sign-flip test's smallest p, 2/2^n, must pass Holm's first step over the family
    assert 2 / 2 ** PRESETS["anchors"]["seeds"] < 0.05 / len(comps)
    assert PRESETS["anchors"]["seeds"] >= 20
