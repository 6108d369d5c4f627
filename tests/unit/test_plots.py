"""Tests for plots.py and scripts/plot_runs.py: panels, lines, event markers, valid PNGs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.image as mpimg  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
from fakeruns import write_run, write_suite  # noqa: E402

from noma_prorl_bench.analysis.plot_parts import run_lines  # noqa: E402
from noma_prorl_bench.analysis.plots import (  # noqa: E402
    STAGES,
    ref_cost_figure,
    run_plots,
    save_summary,
    stage_means,
    summary_figure,
)
from noma_prorl_bench.analysis.runlog import group_runs, load_runs  # noqa: E402

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    return write_suite(tmp_path_factory.mktemp("suite"), seeds=(0, 1))


@pytest.fixture(scope="module")
def five(suite):
    """A0, A1, B, hard and grow at seed 0: resets in all A runs, growth in one."""
    names = ["A0_s0", "A1_s0", "B_s0", "hard_s0", "grow_s0"]
    return load_runs([d for d in suite if d.name in names])


def _assert_png(path: Path) -> None:
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC and len(data) > 1000
    img = mpimg.imread(path)
    assert img.ndim == 3 and img.shape[2] in (3, 4) and img.shape[0] > 100


@pytest.mark.unit
def test_summary_figure_panels_and_lines(five):
    fig = summary_figure(five)
    axes = fig.axes
    assert len(axes) == 4
    titles = [ax.get_title() for ax in axes]
    assert titles[0].startswith("Train reward") and titles[1] == "Validation reward"
    assert titles[2].startswith("KL in the loss") and titles[3].startswith("Throughput")
    labels = [r.label for r in five]
    for ax in axes:
        assert [ln.get_label() for ln in run_lines(ax)] == labels  # one line per run
    # validation line holds exactly the run's logged reward/val
    val_line = run_lines(axes[1])[1]
    np.testing.assert_allclose(val_line.get_ydata(), five[1].series("reward/val")[1])
    np.testing.assert_array_equal(val_line.get_xdata(), five[1].series("reward/val")[0])
    # B logs no KL to a reference in the fake runs: its KL line is empty
    assert len(run_lines(axes[2])[2].get_xdata()) == 0


@pytest.mark.unit
def test_events_are_dotted_and_dashed_lines_and_in_legend(five):
    fig = summary_figure(five)
    ax = fig.axes[0]
    resets = [ln for ln in ax.get_lines() if ln.get_label() == "_reset"]
    growth = [ln for ln in ax.get_lines() if ln.get_label() == "_growth"]
    # ref resets at 10, 20, 30 in the four A runs; B has none; growth at 15, 30 in one run
    assert len(resets) == 4 * 3 and len(growth) == 2
    assert {ln.get_linestyle() for ln in resets} == {":"}
    assert {ln.get_linestyle() for ln in growth} == {"--"}
    assert sorted(ln.get_xdata()[0] for ln in growth) == [15, 30]
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "reset (dotted)" in legend and "growth (dashed)" in legend
    assert all(r.label in legend for r in five)


@pytest.mark.unit
def test_by_config_draws_one_line_per_configuration_with_band(suite):
    runs = load_runs(suite)
    n_groups = len(group_runs(runs))
    fig = summary_figure(runs, by_config=True)
    for ax in fig.axes:
        assert len(run_lines(ax)) == n_groups
    assert len(fig.axes[1].collections) == n_groups  # min-max bands
    first = run_lines(fig.axes[1])[0]
    seeds = [r for r in runs if r.path.name in ("A0_s0", "A0_s1")]
    np.testing.assert_allclose(first.get_ydata(), np.mean([r.series("reward/val")[1] for r in seeds], axis=0))


@pytest.mark.unit
def test_by_config_keeps_suite_arms_apart(suite):
    """An A/A control has A1's configuration with other seeds: grouped by configuration it would
    merge into A1 (one line, 4 seeds); with the suite's arm names set it is its own line."""
    runs = load_runs([d for d in suite if d.name.startswith("A1_")])
    runs += load_runs([d for d in suite if d.name.startswith("A1_")])  # the same configuration again
    for r in runs[:2]:
        r.arm = "A1"
    for r in runs[2:]:
        r.arm = "A1-aa"
    fig = summary_figure(runs, by_config=True)
    labels = [ln.get_label() for ln in run_lines(fig.axes[1])]
    assert labels == ["A1 (2 seeds)", "A1-aa (2 seeds)"]
    for r in runs:
        r.arm = ""
    assert len(run_lines(summary_figure(runs, by_config=True).axes[1])) == 1  # configuration only


@pytest.mark.unit
def test_ref_cost_figure_panels_bars_and_lines(five):
    fig = ref_cost_figure(five)
    assert [ax.get_title() for ax in fig.axes] == [
        "Reference forwards per step",
        "Reference time per step",
        "Mean stage time per step",
    ]
    assert len(run_lines(fig.axes[0])) == len(run_lines(fig.axes[1])) == len(five)
    assert run_lines(fig.axes[0])[0].get_ydata().tolist() == [4.0] * 40  # A0: E*M = 2*2
    assert run_lines(fig.axes[0])[2].get_ydata().tolist() == [0.0] * 40  # B: none
    bars = fig.axes[2].patches
    assert len(bars) == len(five) * len(STAGES)
    # the stacked widths of each run add up to its mean step time
    totals = np.zeros(len(five))
    for i, bar in enumerate(bars):
        totals[i % len(five)] += bar.get_width()
    np.testing.assert_allclose(totals, [r.metrics["time/step"].mean() for r in five])
    assert stage_means(five[0])["ref"] == pytest.approx(0.04)


@pytest.mark.unit
def test_save_summary_writes_two_valid_pngs(five, tmp_path):
    out, ref = save_summary(five, tmp_path / "figs" / "summary.png", dpi=60)
    assert out == tmp_path / "figs" / "summary.png" and ref == tmp_path / "figs" / "ref_cost.png"
    _assert_png(out)
    _assert_png(ref)


@pytest.mark.unit
def test_run_plots_writes_under_outdir_plots(tmp_path):
    d = write_run(tmp_path / "run", steps=10, enable_growth=True, grow_every=5)
    paths = run_plots(d, dpi=50)
    assert [p.name for p in paths] == ["summary.png", "ref_cost.png", "diagnostics.png"]
    assert all(p.parent == d / "plots" for p in paths)
    for p in paths:
        _assert_png(p)


def _script(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # must work uninstalled
    env["MPLBACKEND"] = "Agg"
    return subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "plot_runs.py"), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.smoke
def test_plot_script_writes_both_pngs(suite, tmp_path):
    dirs = [str(d) for d in suite if d.name in ("A0_s0", "A1_s0", "hard_s0")]
    res = _script("--runs", *dirs, "--out", str(tmp_path / "out" / "summary.png"), "--dpi", "50")
    assert res.returncode == 0, res.stderr
    _assert_png(tmp_path / "out" / "summary.png")
    _assert_png(tmp_path / "out" / "ref_cost.png")


@pytest.mark.smoke
def test_plot_script_exits_2_on_bad_dirs(suite, tmp_path):
    out = str(tmp_path / "s.png")
    res = _script("--runs", str(suite[0]), str(tmp_path / "missing"), "--out", out)
    assert res.returncode == 2 and "--runs" in res.stderr and "missing" in res.stderr
    res = _script("--runs", str(tmp_path), "--out", out)
    assert res.returncode == 2 and "not a run directory" in res.stderr
    assert not (tmp_path / "s.png").exists()
