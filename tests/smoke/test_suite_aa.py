"""The A/A test of the suite's statistics: `prorl-bench suite --preset aa` runs two
arms with identical settings that differ only in their seeds (the second arm uses seed + 1000,
paired with the first arm's seed). The report must find `no detectable difference`: anything
else would be a false positive of the method itself."""

import json

import pytest

from noma_prorl_bench.suite import AA_OFFSET, expand, main

pytestmark = pytest.mark.smoke


def test_aa_preset_reports_no_detectable_difference(tmp_path):
    out = tmp_path / "aa"
    assert main(["--preset", "aa", "--outdir", str(out), "--jobs", "2", "--quiet"]) == 0
    specs = expand("aa")
    # two arms, the same pairs, identical flags but the seed; the second arm's seed is offset
    assert sorted({s.arm for s in specs}) == ["AA-1", "AA-2"]
    by_arm = {arm: {s.pair: s for s in specs if s.arm == arm} for arm in ("AA-1", "AA-2")}
    assert set(by_arm["AA-1"]) == set(by_arm["AA-2"]) == {0, 1, 2}
    for pair, s1 in by_arm["AA-1"].items():
        s2 = by_arm["AA-2"][pair]
        assert s1.flags[:-1] == s2.flags[:-1] and int(s2.flags[-1]) == int(s1.flags[-1]) + AA_OFFSET
    summary = json.loads((out / "summary.json").read_text())
    (row,) = summary["comparisons"]
    assert (row["name"], row["metric"], row["n_pairs"]) == ("AA-2 vs AA-1", "score", 3)
    assert row["verdict"] == "no detectable difference"
    assert row["ci95"][0] <= row["diff"] <= row["ci95"][1]
    assert row["ci95"][0] < 0 < row["ci95"][1] and row["ci95"][1] > row["ci95"][0]  # covers 0, never a point
    report = (out / "report.md").read_text()
    assert "no detectable difference" in report and "Smoke run, not evidence" in report
    assert "last K = 5 evaluations" in report
