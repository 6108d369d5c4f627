"""The cross-task map (analysis/gridmap.py) on two fabricated grid suites: every cell's effect,
interval, Holm p and verdict recomputed by hand from fakeruns' formulas (the equality with each
suite's own report: tests/smoke/test_map_cli.py); two identical arms give `no detectable difference`;
a cell on fewer pairs than listed says so; the answer states what holds on both tasks; untrusted
task names are escaped; bad suites are one-line errors."""

from __future__ import annotations

import json
import math
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from fakeruns import GRID_EVERY as EVERY  # noqa: E402
from fakeruns import GRID_K as K  # noqa: E402
from fakeruns import GRID_QUALITY as QUALITY  # noqa: E402
from fakeruns import GRID_SEEDS as SEEDS  # noqa: E402
from fakeruns import GRID_STEPS as STEPS  # noqa: E402
from fakeruns import grid_jitter as _jitter  # noqa: E402
from fakeruns import write_grid as _write_grid  # noqa: E402

from noma_prorl_bench.analysis import gridmap, gridmap_read, stats  # noqa: E402

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def grids(tmp_path_factory):
    return {t: _write_grid(tmp_path_factory.mktemp(t), t) for t in QUALITY}


def _hand_score(q: float, seed: int) -> float:
    """fakeruns' score by its formula: the mean of the last K evaluations (t = 20..40)."""
    evals = [t for t in range(1, STEPS + 1) if t % EVERY == 0][-K:]
    return float(np.mean([round(0.9 * q * (1 - math.exp(-t / 12)) + 0.01 * seed, 6) for t in evals]))


def _hand_diffs(task: str, beta: str, arm: str, base: str) -> np.ndarray:
    qs, out = QUALITY[task][beta], []
    flat = task == "sort_digits" and beta == "0.1"
    for s in SEEDS:
        ja = 0.0 if flat else _jitter(f"b{beta}-{arm}".replace("hard", "keep"), s)
        jb = 0.0 if flat else _jitter(f"b{beta}-{base}".replace("hard", "keep"), s)
        out.append(_hand_score(qs[arm] + ja, s) - _hand_score(qs[base] + jb, s))
    return np.array(out)


def test_cells_recomputed_by_hand(grids):
    maps = gridmap_read.read_suites([grids["reverse_digits"], grids["sort_digits"]])
    rev = maps[0]
    assert rev.task == "reverse_digits" and rev.k == K and rev.runs == 48 and rev.listed == 48
    # beta 1, keep vs none on reverse_digits: every seed up by ~0.9 x 0.1 x mean(1 - exp(-t/12))
    d = _hand_diffs("reverse_digits", "1", "keep", "none")
    assert (d > 0).all()
    cell = rev.cells[("1", "keep")]
    assert cell["diff"] == pytest.approx(d.mean(), abs=1e-9)
    assert cell["ci95"] == pytest.approx(list(stats.paired_interval(d, resolution=0.001)), abs=1e-9)
    # all 8 differences positive: the exact sign-flip p is 2/2^8; Holm in the beta's family of 2
    # (its other p is 1: hard = keep), so p_holm = 2 x 2/256
    assert cell["p_holm"] == pytest.approx(2 * 2 / 2**8)
    assert cell["verdict"] == "better" and cell["n_pairs"] == 8 == cell["n_listed"]
    assert cell["comparison"] == "beta 1: reset-keep vs no reset" and cell["family"] == "beta 1"
    low = rev.cells[("0.1", "keep")]
    assert low["diff"] == pytest.approx(_hand_diffs("reverse_digits", "0.1", "keep", "none").mean(), abs=1e-9)
    assert low["verdict"] == "worse"
    # two identical arms (hard = keep, same rewards): zero effect, no detectable difference
    same = rev.cells[("1", "hard")]
    assert same["diff"] == 0.0 and same["verdict"] == "no detectable difference" and same["p_holm"] == 1.0
    lo, hi = same["ci95"]
    assert lo < 0 < hi  # never of zero width
    flat = maps[1].cells[("0.1", "keep")]
    assert flat["diff"] == 0.0 and flat["verdict"] == "no detectable difference"


def test_answer_states_what_holds_on_both_tasks(grids):
    text = gridmap.map_answer(gridmap_read.read_suites(list(grids.values())))
    assert text.startswith("**On both tasks (reverse_digits, sort_digits), reset + keep beats no reset at beta 1**")
    assert "the tasks differ at beta 0.1" in text
    assert "reverse_digits: worse at beta 0.1, better at beta 1" in text
    assert "sort_digits: n.d. at beta 0.1, better at beta 1" in text
    assert "`hard` is not distinguishable from keep at every beta on every task" in text
    assert "fewer pairs" not in text


def test_a_cell_on_fewer_pairs_says_so(grids, tmp_path):
    root = tmp_path / "partial"
    shutil.copytree(grids["sort_digits"], root)
    (root / "b1-keep_s3" / "summary.json").unlink()  # a run still going: not complete
    shutil.rmtree(root / "b1-hard_s5")  # a run not started yet
    for s in SEEDS:  # an arm not started yet: its comparison is not made
        shutil.rmtree(root / f"b0.1-hard_s{s}")
    m = gridmap_read.read_suite(root)
    assert m.cells[("1", "keep")]["n_pairs"] == 7 and m.cells[("1", "keep")]["n_listed"] == 8
    assert m.cells[("1", "hard")]["n_pairs"] == 6  # seed 3 (keep unfinished) and seed 5 (hard absent)
    assert "**7 of 8 pairs**" in gridmap.cell_text(m.cells[("1", "keep")])
    assert "rest on fewer pairs than their suite lists" in gridmap.map_answer([m])
    md = "\n".join(gridmap.map_lines([m]))
    assert "**6 of 8 pairs**" in md and "| 0.1 |" in md
    gone = m.cells[("0.1", "hard")]
    assert gone["verdict"] is None and gone["n_pairs"] == 0 and math.isnan(gone["diff"])
    assert gridmap.cell_text(gone) == "not tested (**0 of 8 pairs**)"
    # hard is compared at beta 1 only: its one verdict is not said of every beta
    # no hard cell has all its pairs (b0.1-hard not started, b1-hard on 6 of 8): nothing is claimed for it
    assert "`hard`: too few pairs yet to say." in gridmap.map_answer([m])
    assert "`hard` is not distinguishable" not in gridmap.map_answer([m])


def test_machine_line_from_the_runs_records_and_untrusted_task(grids, tmp_path):
    root = tmp_path / "odd"
    shutil.copytree(grids["reverse_digits"], root)
    for cfg_path in root.glob("*/config.json"):
        cfg = json.loads(cfg_path.read_text())
        cfg["task"] = "<b>x</b>|[y](z)"
        cfg["machine"] = {"cpu": "Test CPU <i>", "cores": 2, "arch": "x86_64", "cpu_flags": ["avx2"], "torch": "t"}
        cfg_path.write_text(json.dumps(cfg))
    arm = sorted(root.glob("b1-none_s*/config.json"))  # every run of one arm: an arm's runs share a machine
    for cfg_path in arm:
        bad = json.loads(cfg_path.read_text())
        bad["machine"] = {"cpu": "Other", "env": ["not", "a", "dict"]}
        cfg_path.write_text(json.dumps(bad))
    m = gridmap_read.read_suite(root)
    assert dict(m.machines)["unreadable machine record"] == len(arm) >= 2
    assert m.machines[0][1] == 48 - len(arm) and m.machines[0][0].startswith("Test CPU <i>, 2 cores, x86_64; avx2")
    md = "\n".join(gridmap.map_lines([m]))
    assert "<b>" not in md and "<i>" not in md and "&lt;b&gt;" in md and f"{48 - len(arm)} runs" in md


def test_bad_suites_are_one_line_errors(tmp_path, grids):
    with pytest.raises(ValueError, match="no such directory"):
        gridmap_read.read_suite(tmp_path / "missing")
    (tmp_path / "plain").mkdir()
    with pytest.raises(ValueError, match="no suite.json"):
        gridmap_read.read_suite(tmp_path / "plain")
    other = tmp_path / "other"
    other.mkdir()
    (other / "suite.json").write_text(json.dumps({"runs": [{"name": "A1_s0", "arm": "A1", "pair": 0}]}))
    with pytest.raises(ValueError, match="no grid arms"):
        gridmap_read.read_suite(other)
    with pytest.raises(ValueError, match="one suite per task"):
        gridmap_read.read_suites([grids["sort_digits"], grids["sort_digits"]])


def test_answer_before_any_keep_run_finished(grids, tmp_path):
    root = tmp_path / "early"
    shutil.copytree(grids["reverse_digits"], root)
    for run in root.glob("b*-keep_s*"):
        (run / "summary.json").unlink()  # every keep run still going
    text = gridmap.map_answer([gridmap_read.read_suite(root)])
    assert text.startswith("On reverse_digits, reset + keep vs no reset is tested at no beta yet.")
    assert "No optimizer treatment was compared with keep on all its pairs yet." in text


def test_a_verdict_whose_interval_reaches_zero_says_so():
    cell = dict(diff=0.037, ci95=[-0.004, 0.060], verdict="better", p_holm=0.012, mde80=0.02, n_pairs=10, n_listed=10)
    assert gridmap.cell_text(cell) == "+0.037 [-0.004, +0.060] better (p_holm 0.012; CI includes 0, 10 pairs)"
    cell.update(ci95=[0.004, 0.060])
    assert "CI includes 0" not in gridmap.cell_text(cell)


def _cell(beta, t, diff, p, n=10):
    base = "none" if t == "keep" else "keep"
    tested = math.isfinite(p)
    verdict = "no detectable difference" if tested else None  # the per-beta families' verdicts: not these tests'
    cell = dict(beta=beta, treatment=t, baseline=base, diff=diff, p=p, verdict=verdict, n_pairs=n, n_listed=n)
    return cell | dict(ci95=[diff - 0.01, diff + 0.01], p_holm=p, mde80=0.01, comparison="", family="")


def test_wider_holm_families_per_task_and_over_the_whole_map_by_hand():
    # task a: p = 0.002, 0.02, 0.5 -> Holm over its 3: 0.006, 0.04, 0.5 -> two survive
    # task b: p = 0.01, 0.3 -> 0.02, 0.3 -> one survives
    # whole map, m = 5: sorted 0.002, 0.01, 0.02, 0.3, 0.5 -> 0.010, 0.040, 0.060, 0.6, 0.6 -> two survive
    a = gridmap_read.SuiteMap("ga", "a", 5)
    a.cells = {("1", "keep"): _cell("1", "keep", 0.1, 0.002), ("1", "soft"): _cell("1", "soft", -0.05, 0.02)}
    a.cells[("2", "keep")] = _cell("2", "keep", 0.01, 0.5)
    b = gridmap_read.SuiteMap("gb", "b", 5)
    b.cells = {("1", "keep"): _cell("1", "keep", 0.2, 0.01), ("1", "hard"): _cell("1", "hard", 0.0, 0.3)}
    b.cells[("2", "keep")] = _cell("2", "keep", math.nan, math.nan)  # not tested: in no family
    fams = gridmap.wide_holm([a, b])
    assert {k: v["m"] for k, v in fams.items()} == {"task a": 3, "task b": 2, "whole map": 5}
    got = {
        k: [(c["task"], c["beta"], c["treatment"], c["verdict"], round(c["p_holm"], 6)) for c in v["survivors"]]
        for k, v in fams.items()
    }
    assert got == {
        "task a": [("a", "1", "keep", "better", 0.006), ("a", "1", "soft", "worse", 0.04)],
        "task b": [("b", "1", "keep", "better", 0.02)],
        "whole map": [("a", "1", "keep", "better", 0.01), ("b", "1", "keep", "better", 0.04)],
    }
    md = "\n".join(gridmap.wide_holm_lines([a, b]))
    assert "- a, one family of 3 questions: 2 survive: a beta 1 keep vs none better (+0.100, p 0.0020" in md
    assert "- the whole map, one family of 5 questions: 2 survive:" in md
    assert "## Holm families" in "\n".join(gridmap.map_lines([a, b]))


def test_a_family_too_large_for_its_pairs_says_so():
    # 10 pairs: the smallest sign-flip p is 2/1024; 26 questions x 2/1024 = 0.0508 >= 0.05
    m = gridmap_read.SuiteMap("g", "t", 5)
    m.cells = {(str(i), "keep"): _cell(str(i), "keep", 0.1, 2 / 1024) for i in range(26)}
    fam = gridmap.wide_holm([m])["task t"]
    assert fam["m"] == 26 and fam["survivors"] == []
    md = "\n".join(gridmap.wide_holm_lines([m]))
    assert "none survives (with 10 pairs the smallest sign-flip p is 2/2^10 = 0.0020, and 26 x 0.0020 >= 0.05" in md
    m.cells.pop(("0", "keep"))  # 25 x 2/1024 = 0.0488: every one survives
    assert len(gridmap.wide_holm([m])["task t"]["survivors"]) == 25
