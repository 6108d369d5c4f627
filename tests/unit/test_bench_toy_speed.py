"""The arithmetic of benchmarks/speed/toy_speed.py on hand-made CPU times (nothing is timed)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "speed"))

from toy_speed import QUICK, summarise  # noqa: E402

pytestmark = pytest.mark.unit


def runs(pairs):
    out = []
    for i, (b, c) in enumerate(pairs):
        sides = [("base", b), ("current", c)] if i % 2 == 0 else [("current", c), ("base", b)]
        out += [{"pair": i, "side": s, "cpu_s": v} for s, v in sides]
    return out


def test_ratios_are_base_over_current_per_pair_in_pair_order():
    # pair 0: 9/3 = 3; pair 1: 8/4 = 2 (the machine was slower for both); pair 2: 10/2 = 5
    r = summarise(runs([(9.0, 3.0), (8.0, 4.0), (10.0, 2.0)]))
    assert r["pair_ratios"] == pytest.approx([3.0, 2.0, 5.0])
    assert r["ratio_median"] == pytest.approx(3.0)
    assert (r["ratio_min"], r["ratio_max"]) == pytest.approx((2.0, 5.0))
    assert r["cpu_s_base"] == [9.0, 8.0, 10.0] and r["cpu_s_current"] == [3.0, 4.0, 2.0]
    assert r["cpu_s_base_median"] == 9.0 and r["cpu_s_current_median"] == 3.0
    # the ratio of the medians (9 / 3) happens to agree here; with an even count the median averages
    r2 = summarise(runs([(6.0, 3.0), (8.0, 2.0)]))
    assert r2["ratio_median"] == pytest.approx(3.0) and r2["cpu_s_base_median"] / r2["cpu_s_current_median"] == 2.8


@pytest.mark.parametrize(
    "bad",
    [
        [{"pair": 0, "side": "base", "cpu_s": 1.0}],
        [{"pair": 0, "side": "base", "cpu_s": 1.0}, {"pair": 0, "side": "base", "cpu_s": 2.0}],
        [{"pair": 0, "side": "base", "cpu_s": 1.0}, {"pair": 0, "side": "other", "cpu_s": 2.0}],
        [],
    ],
)
def test_a_pair_without_both_sides_is_refused(bad):
    with pytest.raises(ValueError):
        summarise(bad)


def test_the_command_is_the_quick_presets_with_one_thread():
    assert QUICK[QUICK.index("--threads") + 1] == "1"
    assert "--steps" not in QUICK  # the script sets the step count
    assert {"--batch_size", "--group_size", "--variant", "--ref_compute"} <= set(QUICK)
