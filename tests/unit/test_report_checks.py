"""The report's questions (analysis/report.py, compare.py, atlas.py, plan.py): pairs identical by
construction are checked step by step, not tested (a perturbed copy fails the check, the report
says **identical: NO** and the suite exits non-zero); timing rows and the cost-model check only
for interleaved runs; Holm within each family; mde80 on every row; rows whose own CI excludes 0
but which did not survive Holm say so; summary.json's schema and portable provenance; the atlas
map; `prorl-bench plan` on a synthetic pilot."""

from __future__ import annotations

import json
import math
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from fakeruns import write_run  # noqa: E402

from noma_prorl_bench import suite as suite_mod  # noqa: E402
from noma_prorl_bench.analysis import compare as cmp  # noqa: E402
from noma_prorl_bench.analysis import report as rp  # noqa: E402
from noma_prorl_bench.analysis import stats  # noqa: E402
from noma_prorl_bench.analysis.atlas import effect_cells, parse_arms  # noqa: E402
from noma_prorl_bench.analysis.commands import plan_main, report_main  # noqa: E402
from noma_prorl_bench.analysis.plot_parts import run_lines  # noqa: E402
from noma_prorl_bench.analysis.plots import summary_figure  # noqa: E402
from noma_prorl_bench.analysis.runlog import load_runs  # noqa: E402
from noma_prorl_bench.suite import command as suite_command  # noqa: E402

pytestmark = pytest.mark.unit
K = 5


def _suite_json(root: Path, arms_seeds: dict[str, list[int]], comparisons, families=None, checks=()) -> dict:
    suite = {
        "preset": "unit",
        "runs": [{"name": f"{a}_s{s}", "arm": a, "pair": s} for a, seeds in arms_seeds.items() for s in seeds],
        "comparisons": [list(c) for c in comparisons],
        "checks": [list(c) for c in checks],
    }
    if families is not None:
        suite["families"] = families
    (root / "suite.json").write_text(json.dumps(suite))
    return suite


def _twin(src: Path, dst: Path, perturb_step: int | None = None) -> None:
    """Copy run `src` to `dst` as an A0 run: same learning, other cost (times x 1.3, four
    reference forwards); `perturb_step` changes reward/mean there by 1e-9."""
    shutil.copytree(src, dst)
    cfg = json.loads((dst / "config.json").read_text())
    cfg.update(ref_compute="naive_epoch", outdir=str(dst))
    (dst / "config.json").write_text(json.dumps(cfg))
    rows = [json.loads(line) for line in (dst / "metrics.jsonl").read_text().splitlines()]
    for row in rows:
        row["time/step"] *= 1.3
        row["count/ref_fwd"] = 4
        row["perf/peak_rss_mb"] += 50
        if row["step"] == perturb_step:
            row["reward/mean"] += 1e-9
    (dst / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


@pytest.fixture()
def twins(tmp_path):
    seeds = [0, 1, 2]
    for s in seeds:
        write_run(tmp_path / f"A1_s{s}", seed=s)
        _twin(tmp_path / f"A1_s{s}", tmp_path / f"A0_s{s}", perturb_step=7 if s == 1 else None)
    for s in seeds:
        _twin(tmp_path / f"A1_s{s}", tmp_path / f"A2_s{s}")
    suite = _suite_json(
        tmp_path,
        {"A0": seeds, "A1": seeds, "A2": seeds},
        [("A0 vs A1", "A0", "A1"), ("A2 vs A1", "A2", "A1")],
        {"A0 vs A1": "outcome", "A2 vs A1": "outcome"},
        [("A0 = A1", "A0", "A1"), ("A2 = A1", "A2", "A1")],
    )
    return tmp_path, suite


def test_identity_checks_pass_for_twins_and_fail_for_a_perturbed_run(twins, tmp_path, capsys):
    root, suite = twins
    arms = cmp.arm_table(load_runs(sorted(p for p in root.iterdir() if p.is_dir())), suite)
    ok = cmp.identity_check(arms, "A2 = A1", "A2", "A1")
    assert ok["identical"] is True and ok["pairs"] == 3
    bad = cmp.identity_check(arms, "A0 = A1", "A0", "A1")
    assert bad["identical"] is False
    assert bad["first_difference"]["pair"] == "1" and bad["first_difference"]["metric"] == "reward/mean"
    assert bad["first_difference"]["step"] == 7
    # the report: checks instead of tests (no score row for a check pair), NO marked as an error
    assert report_main([str(root), "--out", str(tmp_path / "rep" / "report.md")]) == 1
    assert "identical-by-construction check(s) failed: A0 = A1" in capsys.readouterr().err
    assert "Not made: the arms did not run interleaved" in (tmp_path / "rep" / "report.md").read_text()
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "| A2 = A1 | A2 = A1 | 3 | identical: yes |" in md
    assert "**identical: NO** (ERROR; first difference pair 1, `reward/mean` at step 7" in md
    assert "**ERROR: identical-by-construction check failed: A0 = A1.**" in md.split("\n\n")[1]
    summary = json.loads((tmp_path / "rep" / "summary.json").read_text())
    assert [(c["name"], c["identical"]) for c in summary["checks"]] == [("A0 = A1", False), ("A2 = A1", True)]
    assert summary["comparisons"] == []  # not interleaved: no timing rows either
    assert rp.failed_checks(tmp_path / "rep" / "report.md") == ["A0 = A1"]


def test_suite_exit_code_reflects_a_failed_check(tmp_path, monkeypatch):
    # the suite's runs are pre-written fake runs (run_all does nothing): A0 a perturbed twin of A1
    out = tmp_path / "suite"
    write_run(out / "A1_s0", seed=0)
    _twin(out / "A1_s0", out / "A0_s0", perturb_step=3)
    monkeypatch.setattr(suite_command, "run_all", lambda *a, **kw: [])
    argv = ["--preset", "smoke", "--arms", "A0,A1", "--outdir", str(out), "--quiet"]
    assert suite_mod.main(argv) == 1
    assert "**identical: NO**" in (out / "report.md").read_text()
    shutil.rmtree(out / "A0_s0")
    _twin(out / "A1_s0", out / "A0_s0")
    assert suite_mod.main(argv) == 0
    assert "identical: yes" in (out / "report.md").read_text()


def test_summary_figure_draws_identical_arms_once(twins):
    root, suite = twins
    runs = load_runs([root / f"{a}_s{s}" for a in ("A1", "A2") for s in (0, 1, 2)])
    for r in runs:
        r.arm = r.path.name.split("_")[0]
    fig = summary_figure(runs, by_config=True, throughput=False, twins={"A2": "A1"})
    labels = [ln.get_label() for ln in run_lines(fig.axes[1])]
    assert labels == ["A1 (3 seeds) = A2 (identical by construction)"]
    assert fig.axes[3].get_title().startswith("KL to the warm-started policy")
    # line styles differ between neighbouring entries, not only colours
    fig = summary_figure(runs, by_config=True)
    assert [ln.get_linestyle() for ln in run_lines(fig.axes[1])] == ["-", "--"]


# ---------------------------------------------------------------- families, timing, schema


@pytest.fixture(scope="module")
def five(tmp_path_factory):
    """A1, hard (quality 0.97, every pair the same difference), B (0.85) and soft (0.995 or 1.005 by seed) on 6 seeds;
    suite.json puts hard and B in family `one`, soft in family `two`."""
    root = tmp_path_factory.mktemp("five")
    seeds = [0, 1, 2, 3, 4, 5]
    for s in seeds:
        write_run(root / f"A1_s{s}", seed=s)
        write_run(root / f"hard_s{s}", seed=s, quality=0.97, opt_reset="hard")
        write_run(root / f"B_s{s}", seed=s, quality=0.85, variant="B")
        write_run(root / f"soft_s{s}", seed=s, quality=0.995 + 0.01 * (s % 2), opt_reset="soft")
    comps = [("hard vs A1", "hard", "A1"), ("B vs A1", "B", "A1"), ("soft vs A1", "soft", "A1")]
    suite = _suite_json(
        root,
        {a: seeds for a in ("A1", "hard", "B", "soft")},
        comps,
        {"hard vs A1": "one", "B vs A1": "one", "soft vs A1": "two"},
    )
    return root, suite


def test_holm_within_families_mde80_and_timing_only_when_interleaved(five):
    root, suite = five
    arms = cmp.arm_table(load_runs(sorted(p for p in root.iterdir() if p.is_dir())), suite)
    rows = cmp.compare(arms, suite["comparisons"], K, suite["families"])
    assert [(r["name"], r["metric"], r["family"]) for r in rows] == [
        ("hard vs A1", "score", "one"),
        ("B vs A1", "score", "one"),
        ("soft vs A1", "score", "two"),
    ]
    for fam in ("one", "two"):
        members = [r for r in rows if r["family"] == fam]
        assert [r["p_holm"] for r in members] == pytest.approx(stats.holm([r["p"] for r in members]))
        assert all(r["family_size"] == len(members) for r in members)
    soft = rows[2]
    # family `two` holds one question: 6 pairs reach 2/2^6 = 0.031 < 0.05, so mde80 is finite
    assert math.isfinite(soft["mde80"]) and soft["mde80"] == pytest.approx(stats.mde80(soft["sd"], 6, 1))
    # 6 pairs in a family of 2: 2/2^6 = 0.031 >= 0.025, nothing is detectable -> mde80 = inf
    assert rows[0]["mde80"] == math.inf and rows[1]["mde80"] == math.inf
    timed = cmp.compare(arms, suite["comparisons"], K, suite["families"], timing=True)
    cost = [r for r in timed if r["family"] == cmp.COST_FAMILY]
    assert {(r["name"], r["metric"]) for r in cost} == {("B vs A1", "s_step"), ("B vs A1", "s_token")}
    # the outcome families are unchanged by the timing rows
    assert [r["p_holm"] for r in timed if r["family"] != "cost"] == [r["p_holm"] for r in rows]


def test_report_rows_schema_notes_and_provenance(five, tmp_path):
    root, suite = five
    settings = {
        "score_evals": K,
        "preset": "unit",
        "commit": "abc",
        "command": f"prorl-bench suite --preset unit --outdir {root}",
        "machine": "test box",
    }
    out = rp.write_report(
        sorted(p for p in root.iterdir() if p.is_dir()),
        tmp_path / "rep" / "report.md",
        tmp_path / "rep" / "figures",
        settings,
        suite,
    )
    md = out.read_text()
    summary = json.loads((out.parent / "summary.json").read_text())
    for c in summary["comparisons"]:
        assert set(c) >= set(rp.SUMMARY_KEYS) and c["beta"] == 0.05 and c["metric"] == "score"
    assert set(summary) >= {"comparisons", "checks", "provenance"} and summary["checks"] == []
    assert summary["families"] == {"one": 2, "two": 1}
    # no machine path anywhere: the absolute --outdir is printed relative to the report
    assert str(tmp_path) not in json.dumps(summary) and str(tmp_path) not in md
    assert summary["provenance"]["command"].endswith("--outdir five0")  # outside report, cwd
    # every pair of hard vs A1 differs by the same amount: its CI is a point that excludes 0,
    # but 6 pairs cannot reach p < 0.05/2 -> the row says which is which, and its mde80 is inf
    hard = next(ln for ln in md.splitlines() if ln.startswith("| hard vs A1 |"))
    assert "no detectable difference; *CI excludes 0 (uncorrected)*" in hard and hard.endswith(
        "| ∞ | none |"
    )  # 6 pairs of one sign: no flip can lower p below 2/64
    assert next(c for c in summary["comparisons"] if c["name"] == "hard vs A1")["mde80"] is None
    # the first paragraph: what was found and how sure; no timing rows and it says why
    opening, first = md.split("\n\n")[1:3]
    # every question asked is named, not only those that reached a verdict
    assert opening.startswith(
        "**Answer.** No question reached a verdict: 3 of 3 questions found no detectable difference ("
    ) and opening.endswith(" reward are not ruled out.")
    assert all(q in opening for q in ("hard vs A1", "soft vs A1", "B vs A1")), opening
    assert first.startswith("**What it found.** 3 questions in 2 Holm families")
    assert "0 reached a verdict" in first and "with 80% power they could have detected" in first
    assert "2 of them could detect no effect at all" in first
    assert rp.TIMING_NOTE in md and "## Cost model check" not in md  # no A0 arm here
    assert "### Family `one`: 2 questions, Holm within" in md
    for line in md.splitlines():
        if line.startswith("| soft vs A1 |") or line.startswith("| B vs A1 |"):
            assert "mde80" not in line and line.split(" | ")[-1].rstrip(" |") not in ("", "—")


def test_report_interleaved_has_timing_family_and_cost_section(five, tmp_path):
    root, suite = five
    out = rp.write_report(
        sorted(p for p in root.iterdir() if p.is_dir()),
        tmp_path / "report.md",
        tmp_path / "figures",
        {"score_evals": K, "interleaved": True},
        suite,
    )
    md = out.read_text()
    assert "### Family `cost`: 2 questions, Holm within" in md and rp.TIMING_NOTE not in md
    assert "Throughput" in md or (tmp_path / "figures" / "summary.png").is_file()
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["families"] == {"one": 2, "two": 1, "cost": 2}


# ---------------------------------------------------------------- atlas and plan


@pytest.fixture(scope="module")
def atlas(tmp_path_factory):
    root = tmp_path_factory.mktemp("atlas")
    seeds = list(range(6))
    qual = {"none": 1.0, "keep": 0.96, "hard": 0.95}
    arms = {}
    for beta in ("0.05", "1"):
        for t, q in qual.items():
            arm = f"b{beta}-{t}"
            arms[arm] = seeds
            for s in seeds:
                jitter = 0.01 * ((s * 7 + len(arm)) % 3)
                write_run(
                    root / f"{arm}_s{s}",
                    seed=s,
                    beta=float(beta),
                    quality=q + jitter,
                    opt_reset="keep" if t != "hard" else "hard",
                    reset_every=0 if t == "none" else 10,
                )
    comps = [
        c
        for b in ("0.05", "1")
        for c in (
            (f"beta {b}: reset-keep vs no reset", f"b{b}-keep", f"b{b}-none"),
            (f"beta {b}: reset-hard vs reset-keep", f"b{b}-hard", f"b{b}-keep"),
        )
    ]
    suite = _suite_json(root, arms, comps, {c[0]: c[0].split(":")[0] for c in comps})
    (root / "settings.json").write_text(json.dumps({"score_evals": K}))
    return root, suite


def test_atlas_map_cells_and_figures(atlas, tmp_path):
    root, suite = atlas
    dirs = sorted(p for p in root.iterdir() if p.is_dir())
    arms = cmp.arm_table(load_runs(dirs), suite)
    assert parse_arms(arms) == {
        "0.05": {"none": "b0.05-none", "keep": "b0.05-keep", "hard": "b0.05-hard"},
        "1": {"none": "b1-none", "keep": "b1-keep", "hard": "b1-hard"},
    }
    rows = cmp.compare(arms, suite["comparisons"], K, suite["families"])
    cells = effect_cells(arms, rows, K)
    # a cell is one comparison, its tested question: hard vs keep (number, interval and verdict agree)
    d = [cmp.run_score(arms["b1-hard"][s], K) - cmp.run_score(arms["b1-keep"][s], K) for s in range(6)]
    cell = cells[("1", "hard")]
    assert cell["diff"] == pytest.approx(np.mean(d)) and cell["tested"] == "hard vs keep"
    assert cell["ci95"] == pytest.approx(stats.paired_interval(np.array(d), resolution=0.001))
    hard_row = next(r for r in rows if r["name"] == "beta 1: reset-hard vs reset-keep")
    assert cell["verdict"] == hard_row["verdict"] and cell["diff"] == pytest.approx(hard_row["diff"])
    assert cell["ci95"] == pytest.approx(hard_row["ci95"])
    keep_row = next(r for r in rows if r["name"] == "beta 1: reset-keep vs no reset")
    assert cells[("1", "keep")]["diff"] == pytest.approx(keep_row["diff"])
    out = rp.write_report(dirs, tmp_path / "report.md", tmp_path / "figures", {"score_evals": K}, suite)
    md = out.read_text()
    assert "## The map: reference treatment x beta" in md and "| beta 1 |" in md
    for png in ("atlas_heatmap.png", "atlas_clamp.png"):
        assert (tmp_path / "figures" / png).stat().st_size > 10_000
    assert md.index("b0.05-none") < md.index("b0.05-keep") < md.index("b1-none")  # matrix order


def test_plan_on_a_synthetic_pilot(atlas, capsys):
    root, suite = atlas
    assert plan_main([str(root), "--effect", "0.02"]) == 0
    text = capsys.readouterr().out
    arms = cmp.arm_table(load_runs(sorted(p for p in root.iterdir() if p.is_dir())), suite)
    d = np.array([cmp.run_score(arms["b1-keep"][s], K) - cmp.run_score(arms["b1-none"][s], K) for s in range(6)])
    need = int(stats.seeds_needed(float(d.std(ddof=1)), 0.02, 2))
    line = next(ln for ln in text.splitlines() if ln.startswith("beta 1: reset-keep vs no reset"))
    assert line.split()[-1] == str(need) and "beta 1 (2)" in line
    with pytest.raises(SystemExit) as err:
        plan_main([str(root), "--power", "1.5"])
    assert err.value.code == 2 and "--power: must be in (0, 1)" in capsys.readouterr().err


def test_the_answer_names_every_question_asked_the_nulls_too():
    from noma_prorl_bench.analysis.conclusion import answer

    def row(beta, name, verdict, diff, mde):
        fam = f"beta {beta}"
        return dict(arm="x", family=fam, name=f"{fam}: {name}", metric="score", verdict=verdict, diff=diff,
                    ci95=[diff - 0.01, diff + 0.01], mde80=mde)  # fmt: skip

    rows = [
        row(0.05, "reset-keep vs no reset", "worse", -0.017, 0.02),
        row(1, "reset-keep vs no reset", "better", 0.024, 0.02),
        row(0.05, "reset-hard vs reset-keep", "no detectable difference", 0.01, 0.017),
        row(1, "reset-hard vs reset-keep", "no detectable difference", 0.0, 0.025),
    ]
    text = answer(rows)
    assert "reset-keep vs no reset: worse at beta 0.05 (-0.017 [-0.027, -0.007]), better at beta 1" in text
    assert (
        "2 of 4 questions found no detectable difference (reset-hard vs reset-keep at beta 0.05 and at beta 1)" in text
    )
    assert text.endswith("effects below mde80 0.017-0.025 reward are not ruled out.")


def test_the_answer_places_a_question_at_its_beta_inside_a_wider_family():
    from noma_prorl_bench.analysis.conclusion import answer

    def row(beta, name, verdict, diff):
        return dict(arm="x", family="anchors", name=f"anchors: beta {beta}: {name}", metric="score",
                    verdict=verdict, diff=diff, ci95=[diff - 0.01, diff + 0.01], mde80=0.02)  # fmt: skip

    text = answer([row(0.05, "reset vs fixed", "worse", -0.015), row(1, "reset vs fixed", "better", 0.026)])
    assert "reset vs fixed: worse at beta 0.05 (-0.015 [-0.025, -0.005]), better at beta 1" in text
    assert "at anchors" not in text
