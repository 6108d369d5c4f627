"""The `anchors` suite preset (matrix.py): one arm per KL anchor (fixed, hard reset, moving reference,
Elastic Reset, clamped log-ratio), each a valid run config that differs from the fixed arm only in its
anchor flags; its comparisons form one Holm family. Config only: no run, no committed results."""

import os

import pytest

from noma_prorl_bench.config import make_config
from noma_prorl_bench.config.parser import build_parser
from noma_prorl_bench.config.validate import validate
from noma_prorl_bench.matrix import FAMILIES, PRESETS, comparisons_for, expand, preset_arms

pytestmark = pytest.mark.unit
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _config(flags):
    return make_config(vars(build_parser().parse_args(["--outdir", "x", *flags])))


def test_anchor_arms_are_valid_and_differ_only_in_their_anchor():
    assert list(preset_arms("anchors")) == [
        "anchor-fixed",
        "anchor-reset",
        "anchor-ema",
        "anchor-elastic",
        "anchor-klclip",
    ]
    cfgs = {r.arm: vars(_config(r.flags)) for r in expand("anchors", seeds=1)}
    for c in cfgs.values():
        validate(make_config(c))
    fixed = cfgs["anchor-fixed"]
    want = {
        "anchor-reset": {"reset_every": PRESETS["anchors"]["reset_every"]},
        "anchor-ema": {"ref_update": "ema"},
        "anchor-elastic": {"reset_every": PRESETS["anchors"]["reset_every"], "reset_to": "elastic"},
        "anchor-klclip": {"kl_clip": 0.2},
    }
    for arm, diff in want.items():
        got = {k: v for k, v in cfgs[arm].items() if v != fixed[k]}
        assert got == diff, arm
    assert fixed["beta"] == 1.0 and fixed["steps"] == PRESETS["anchors"]["steps"]


def test_anchor_comparisons_one_family_and_no_committed_results():
    comps = comparisons_for(list(preset_arms("anchors")))
    assert len(comps) == 6 and {FAMILIES[c[0]] for c in comps} == {"anchors"}
    assert not os.path.exists(os.path.join(ROOT, "docs", "suite_anchors"))
