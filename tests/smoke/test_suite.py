"""`prorl-bench suite --preset smoke` end to end: every run completes, report.md is written, and
the report's matrix numbers equal those recomputed here from the runs' metrics.jsonl."""

import json
import math
import os
import statistics

import pytest

from noma_prorl_bench.analysis.runlog import group_runs, load_runs
from noma_prorl_bench.suite import expand, main

pytestmark = pytest.mark.smoke


def _metrics(run_dir):
    """The RL steps' rows (the report reads those; the step-0 row, before RL, checked and left out)."""
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        rows = [json.loads(line) for line in f]
    assert rows[0]["step"] == 0
    return rows[1:]


def test_smoke_suite_report_matches_metrics(tmp_path, capsys):
    out = tmp_path / "suite"
    assert main(["--preset", "smoke", "--outdir", str(out), "--jobs", "2", "--quiet"]) == 0
    err = capsys.readouterr().err
    specs = expand("smoke")
    for s in specs:  # every command printed before running
        assert f"--outdir {out}/{s.name} " in err
        assert json.load(open(out / s.name / "summary.json"))["complete"] is True
    report = (out / "report.md").read_text()
    assert "## Paired comparisons" in report and "## Arms" in report and "figures/summary.png" in report
    assert "Smoke run, not evidence" in report and (out / "summary.json").is_file()
    assert (out / "figures" / "summary.png").stat().st_size > 0
    data = json.loads((out / "report.json").read_text())
    groups = group_runs(load_runs([out / s.name for s in specs]))
    assert set(groups) == set(data["matrix"])
    for label, runs in groups.items():
        cell = data["matrix"][label]
        recs = [_metrics(r.path) for r in runs]
        final_val = statistics.mean([[m["reward/val"] for m in rs if "reward/val" in m][-1] for rs in recs])
        ref_fwd = statistics.mean([statistics.mean(m["count/ref_fwd"] for m in rs) for rs in recs])
        step_time = statistics.mean([statistics.median(m["time/step"] for m in rs) for rs in recs])
        peak = statistics.mean([max(m["perf/peak_rss_mb"] for m in rs) for rs in recs])
        assert math.isclose(cell["final_val"]["mean"], final_val, rel_tol=1e-9)
        assert math.isclose(cell["ref_fwd"]["mean"], ref_fwd, rel_tol=1e-9)
        assert math.isclose(cell["step_time"]["mean"], step_time, rel_tol=1e-9)
        assert math.isclose(cell["peak_mem"]["mean"], peak, rel_tol=1e-9)
    # a second invocation skips every complete run (resume)
    assert main(["--preset", "smoke", "--outdir", str(out), "--jobs", "2", "--quiet"]) == 0
    assert f"{len(specs)} already complete (skipped), 0 to run" in capsys.readouterr().err
