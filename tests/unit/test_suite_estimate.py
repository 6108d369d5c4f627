"""The duration the suite prints before it starts (suite.expected_duration): the pending runs' CPU
work (measured CPU-seconds per step x steps) over the cores its jobs can get at the current load."""

import json

import pytest

from noma_prorl_bench import suite

pytestmark = pytest.mark.unit


def test_expected_duration_hand_worked_from_the_measured_preset_run(tmp_path):
    specs = suite.expand("quick")  # 120 runs x 300 steps
    line = suite.expected_duration(specs, specs, str(tmp_path), jobs=2, cores=2, load=9.0)
    # 120 x 300 x 23.3 / 300 = 2796 CPU-s; each of 2 jobs gets 2 / (9 + 2) of a core:
    # 2796 / (2 x 2/11) = 7689 s
    assert "~128 min (7689 s)" in line and "120 runs, 2796 CPU-s" in line and "0.18 of a core" in line
    idle = suite.expected_duration(specs, specs, str(tmp_path), jobs=2, cores=2, load=0.0)
    assert "(1398 s)" in idle  # 2796 / 2, a whole core each


def test_expected_duration_prefers_the_suites_own_finished_runs(tmp_path):
    specs = suite.expand("smoke")
    assert "unknown until the first run finishes" in suite.expected_duration(specs, specs, str(tmp_path), 2)
    done, pending = specs[:2], specs[2:]
    for s, cpu in zip(done, (6.0, 12.0)):  # 0.5 and 1.0 CPU-s per step over 12 steps
        (tmp_path / s.name).mkdir()
        (tmp_path / s.name / "summary.json").write_text(json.dumps({"complete": True, "steps": 12, "cpu_seconds": cpu}))
    line = suite.expected_duration(pending, specs, str(tmp_path), jobs=1, cores=2, load=0.0)
    # median of (0.5, 1.0) with two values = the upper one, 1.0; pending x 12 steps x 1.0, one job
    work = 12.0 * len(pending)
    assert f"{work:.0f} CPU-s at 1.000 CPU-s/step (median of this suite's 2 finished runs)" in line
    assert f"({work:.0f} s)" in line
