"""Tests for report.py: every matrix number is recomputed here straight from metrics.jsonl /
events.jsonl (plain json + numpy, no runlog), plus the cost model, the paired comparisons
(score = mean of the last K val rewards; verdicts from Holm-corrected sign-flip tests), the
B-vs-A share of the RL gain, the conclusion and the written report / summary.json."""

from __future__ import annotations

import json
import math
import re
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.stats

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from fakeruns import SUITE, write_suite  # noqa: E402

from noma_prorl_bench.analysis import compare as cmp  # noqa: E402
from noma_prorl_bench.analysis import conclusion as cc  # noqa: E402
from noma_prorl_bench.analysis import findings as fd  # noqa: E402
from noma_prorl_bench.analysis import report as rp  # noqa: E402
from noma_prorl_bench.analysis import runlog  # noqa: E402
from noma_prorl_bench.analysis.commands import report_main  # noqa: E402
from noma_prorl_bench.analysis.runlog import group_runs, load_runs  # noqa: E402

pytestmark = pytest.mark.unit
SEEDS = (0, 1, 2)
THRESHOLD, K = 0.7, 10
GROUP = {
    "A0": "A0 naive_epoch, opt=keep, no-grow",
    "A1": "A1 cached, opt=keep, no-grow",
    "A2": "A2 ring, opt=keep, no-grow",
    "B": "B no-ref, opt=keep, no-grow",
    "hard": "A1 cached, opt=hard, no-grow",
    "soft": "A1 cached, opt=soft, no-grow",
    "asym": "A1 cached, opt=asym, no-grow",
    "grow": "A1 cached, opt=keep, grow:adam_map",
}


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    root = tmp_path_factory.mktemp("suite")
    return root, write_suite(root, seeds=SEEDS)


@pytest.fixture(scope="module")
def groups(suite):
    return group_runs(load_runs(suite[1]))


@pytest.fixture(scope="module")
def matrix(groups):
    return fd.result_matrix(groups, threshold=THRESHOLD, source="val", k=K)


# ---------------------------------------------------------------- independent recomputation


def _rows(d: Path, name: str) -> list[dict]:
    return [json.loads(line) for line in (d / name).read_text().splitlines() if line.strip()]


def _col(rows: list[dict], key: str) -> tuple[np.ndarray, np.ndarray]:
    pts = [(r["step"], r[key]) for r in rows if r.get(key) is not None]
    return np.array([p[0] for p in pts]), np.array([p[1] for p in pts], dtype=float)


def _expected(d: Path) -> dict[str, float]:
    rows = _rows(d, "metrics.jsonl")
    val_s, val = _col(rows, "reward/val")
    kl_s, kl = _col(rows, "kl/k3")  # fake runs use kl_estimator k3
    resets = sorted({e["step"] for e in _rows(d, "events.jsonl") if e["event"] in ("ref_reset", "opt_reset")})
    spikes = [kl[(kl_s > s) & (kl_s <= s + K)].max() for s in resets]
    hit = [s for s, v in zip(val_s, val) if v >= THRESHOLD]
    tok, step_t = _col(rows, "count/tokens_policy")[1], _col(rows, "time/step")[1]
    return {
        "final_val": val[-1],
        "steps_to_thr": hit[0] if hit else math.nan,
        "kl_mean": kl.mean() if kl.size else math.nan,
        "kl_max": kl.max() if kl.size else math.nan,
        "kl_spike": max(spikes) if spikes else math.nan,
        "ref_fwd": _col(rows, "count/ref_fwd")[1].mean(),
        "step_time": np.median(step_t),
        "tokens_per_s": np.median(tok / step_t),
        "peak_mem": _col(rows, "perf/peak_rss_mb")[1].max(),
    }


@pytest.mark.parametrize("stem", [s for s, _, _ in SUITE])
def test_matrix_equals_numbers_recomputed_from_jsonl(suite, matrix, stem):
    root = suite[0]
    per_seed = [_expected(root / f"{stem}_s{seed}") for seed in SEEDS]
    row = matrix[GROUP[stem]]
    for metric in fd.COLUMNS:
        vals = np.array([p[metric] for p in per_seed], dtype=float)
        vals = vals[np.isfinite(vals)]
        st = row[metric]
        assert st.n == vals.size and st.n_total == len(SEEDS), metric
        if vals.size == 0:
            assert math.isnan(st.mean)
            continue
        assert st.mean == pytest.approx(vals.mean(), rel=1e-12, abs=1e-12), metric
        assert st.min == pytest.approx(vals.min()) and st.max == pytest.approx(vals.max())
        assert st.std == pytest.approx(vals.std(ddof=1), rel=1e-9, abs=1e-12), metric


def test_kl_is_absent_for_b_and_spike_sees_hard_reset(matrix):
    assert matrix[GROUP["B"]]["kl_mean"].n == 0 and matrix[GROUP["B"]]["ref_fwd"].mean == 0
    # hard reset: +0.05 in the two steps after each reset; keep: linear ramp only
    assert matrix[GROUP["hard"]]["kl_spike"].mean > matrix[GROUP["A1"]]["kl_spike"].mean + 0.03


def test_stat_of_and_format():
    st = fd.Stat.of([1.0, 2.0, math.nan, 3.0])
    assert (st.mean, st.std, st.min, st.max, st.n, st.n_total) == (2.0, 1.0, 1.0, 3.0, 3, 4)
    # fixed decimals with units (the old 4-significant-digit format printed 7.252e+04)
    assert st.fmt() == "2.000 ± 1.000" and st.fmt(1, counts=True) == "2.0 ± 1.0 [3/4]"
    assert fd.Stat.of([72520.0, 72530.0]).fmt(0, unit="tok/s") == "72525 ± 7 tok/s"
    one = fd.Stat.of([0.5])
    assert one.fmt() == "0.500" and math.isnan(one.std)
    assert fd.Stat.of([]).fmt() == "—"


def test_threshold_source_and_default(groups):
    runs = [r for rs in groups.values() for r in rs]
    assert fd.threshold_source(runs) == "val"
    best = max(np.mean([r.series("reward/val")[1][-1] for r in rs]) for rs in groups.values())
    assert fd.default_threshold(groups, "val") == pytest.approx(round(0.8 * best, 4))


# ---------------------------------------------------------------- comparisons


def test_cost_model_matches_hand_formula(suite, groups):
    (c,) = fd.cost_model_check(groups)
    assert (c["a0"], c["a1"], c["unit"]) == (GROUP["A0"], GROUP["A1"], "tokens_ref")
    assert c["differs_in"] == []
    root = suite[0]

    def mean_over_seeds(stem: str, key: str) -> float:
        return np.mean([_col(_rows(root / f"{stem}_s{s}", "metrics.jsonl"), key)[1].mean() for s in SEEDS])

    step1, ref1 = mean_over_seeds("A1", "time/step"), mean_over_seeds("A1", "time/ref")
    f_tok = ref1 / mean_over_seeds("A1", "count/tokens_ref")
    predicted = step1 - ref1 + mean_over_seeds("A0", "count/tokens_ref") * f_tok
    assert c["predicted_ratio"] == pytest.approx(predicted / step1, rel=1e-12)
    assert c["measured_ratio"] == pytest.approx(mean_over_seeds("A0", "time/step") / step1)
    # the fake runs obey the cost model up to the stage-time jitter
    assert c["predicted_ratio"] == pytest.approx(c["measured_ratio"], rel=0.01)
    assert c["expected_ref_fwd"] == 4 and c["ref_fwd_a0"] == 4 and c["ref_fwd_a1"] == 1


def _score(d: Path, k: int) -> float:
    """Mean of the last k reward/val values, recomputed from metrics.jsonl."""
    return float(_col(_rows(d, "metrics.jsonl"), "reward/val")[1][-k:].mean())


TEN = tuple(range(10))
KS = 5  # 8 evaluations per fake run: score = mean of the last 5
PAIR = [("A1", dict(ref_compute="cached"), 1.0), ("B", dict(variant="B"), 0.85), ("hard", dict(opt_reset="hard"), 0.97)]
G10 = {"A1": "A1 cached, opt=keep", "B": "B no-ref, opt=keep", "hard": "A1 cached, opt=hard"}


@pytest.fixture(scope="module")
def ten(tmp_path_factory):
    """A1, B (quality 0.85) and hard (0.97) on 10 seeds: arms are configurations, pairs seeds."""
    root = tmp_path_factory.mktemp("ten")
    runs = load_runs(write_suite(root, seeds=TEN, suite=PAIR))
    return root, cmp.arm_table(runs)


def test_scores_and_paired_differences_recomputed(ten):
    root, arms = ten
    rows = cmp.compare(arms, cmp.default_comparisons(arms), KS, timing=True)  # interleaved
    assert {(r["name"], r["metric"]) for r in rows} == {
        (f"{G10['B']} vs {G10['A1']}", m) for m in ("score", "s_step", "s_token")
    } | {(f"{G10['hard']} vs {G10['A1']}", "score")}
    hard = next(r for r in rows if r["arm"] == G10["hard"])
    d = [_score(root / f"hard_s{s}", KS) - _score(root / f"A1_s{s}", KS) for s in TEN]
    assert hard["n_pairs"] == 10 and hard["diff"] == pytest.approx(np.mean(d), rel=1e-12)
    # the seed offset (0.01 * seed) cancels in the pairs: every d_i is the same -0.03 * curve (up to
    # float rounding), so the CI is the t interval with sd = the printed resolution (never zero
    # width), all 2^10 sign patterns but two fall short: p = 2/1024, and Holm over the 4 rows
    # multiplies the smallest p by at most 4
    half = scipy.stats.t.ppf(0.975, 9) * cmp.resolution("score") / np.sqrt(10)
    assert np.ptp(d) < 1e-12 and hard["ci95"] == pytest.approx([np.mean(d) - half, np.mean(d) + half], abs=1e-9)
    assert hard["p"] == pytest.approx(2 / 1024) and hard["p_holm"] <= 4 * 2 / 1024
    assert hard["verdict"] == "worse"
    # B has no reference forward: its step time is lower in every pair -> "better" (faster)
    fast = next(r for r in rows if r["arm"] == G10["B"] and r["metric"] == "s_step")
    assert fast["diff"] < 0 and fast["verdict"] == "better"


def test_three_seeds_never_give_a_verdict(groups):
    # the old rule called keep > hard "beyond the seed spread" from 3 seeds (ranges 0.868..0.888
    # vs 0.842..0.862); with 3 pairs the smallest sign-flip p is 2/8 = 0.25: no verdict possible
    arms = {label: {json.dumps(r.seed): r for r in rs} for label, rs in groups.items()}
    rows = cmp.compare(arms, [["hard vs A1", GROUP["hard"], GROUP["A1"]]], KS)
    (row,) = rows
    assert row["diff"] < 0 and row["p"] == pytest.approx(0.25)
    assert row["verdict"] == "no detectable difference"


def test_gain_kept_share_and_criterion(ten):
    root, arms = ten
    rows = cmp.compare(arms, [["B vs A1", G10["B"], G10["A1"]]], KS, timing=True)
    (g,) = cmp.gain_kept(arms, rows, KS)
    # warm-start score = 0.01 * seed = the curve at t = 0; gains scale with quality: B keeps 85%
    gb = [_score(root / f"B_s{s}", KS) - 0.01 * s for s in TEN]
    ga = [_score(root / f"A1_s{s}", KS) - 0.01 * s for s in TEN]
    assert g["share"] == pytest.approx(np.mean(gb) / np.mean(ga)) == pytest.approx(0.85)
    assert g["ci95"] == pytest.approx([0.85, 0.85], abs=1e-6) and g["speed"] == "better"
    assert (g["held_80"], g["held_90"]) == ("held", "not held")
    assert g["warm"] == pytest.approx(0.045)


def test_conclusion_states_verdicts_and_caveats(ten, groups):
    _, arms = ten
    rows = cmp.compare(arms, cmp.default_comparisons(arms), KS, timing=True)
    gains = cmp.gain_kept(arms, rows, KS)
    text = "\n".join(cc.conclusion(fd.cost_model_check(groups), rows, gains, n_pairs=10))
    assert "took 1.06× A1's step time" in text
    assert "kept 85% of" in text and "'keeps >= 80% at lower step time': held" in text
    assert f"{G10['hard']} is worse than {G10['A1']}" in text
    assert "Caveat" not in text and "smoke run" not in text
    short = " ".join(cc.conclusion([], rows, [], n_pairs=3, partial=1, evidence=False))
    assert "smoke run, not evidence" in short and "as few as 3 paired seed" in short
    assert "1 run(s) are incomplete" in short


def test_steps_to_threshold_train_source_and_not_reached(groups):
    run = groups[GROUP["A1"]][0]
    steps, rew = run.series("reward/mean")
    trailing = np.array([rew[max(0, i - 9) : i + 1].mean() for i in range(rew.size)])
    first = steps[np.nonzero(trailing >= 0.5)[0][0]]
    assert runlog.run_stats(run, threshold=0.5, source="train")["steps_to_thr"] == first
    assert math.isnan(runlog.run_stats(run, threshold=2.0, source="val")["steps_to_thr"])


# ---------------------------------------------------------------- the written report


def test_write_report_files_sections_and_numbers(suite, tmp_path):
    root, dirs = suite
    out = rp.write_report(
        dirs,
        tmp_path / "rep" / "report.md",
        tmp_path / "rep" / "figures",
        {
            "preset": "unit-test",
            "reward_threshold": THRESHOLD,
            "score_evals": 5,
            "commit": "abc123",
            "command": "prorl-bench suite --preset x",
            "machine": "test box",
        },
    )
    md = out.read_text()
    for heading in (
        "## Conclusion",
        "## Paired comparisons",
        "## Arms",
        "## B (no reference model) vs A: share of the RL gain",
        "## Cost model check (A0 vs A1)",
        "# Appendix",
        "## Per-seed numbers",
        "## Configuration details",
        "## Sample rollouts",
        "## Settings",
        "## Runs",
    ):
        assert heading in md
    assert "abc123" in md and "prorl-bench suite --preset x" in md and "test box" in md
    assert "last K = 5 evaluations" in md and "reaches 0.700" in md
    for link in re.findall(r"!\[[^]]*\]\(([^)]+)\)", md):
        assert not Path(link).is_absolute() and (out.parent / link).is_file()
    # tables a person reads: at most 8 columns, no scientific notation
    for line in md.splitlines():
        if line.startswith("|") and "---" not in line and not line.startswith("| `"):
            assert line.count(" | ") + 1 <= 8, line
    assert not re.search(r"\d\.\d+e[+-]\d", md.split("## Settings")[0])
    # the per-seed score printed for A1 seed 1 is the recomputed mean of its last 5 val rewards
    line = next(ln for ln in md.splitlines() if ln.startswith(f"| {GROUP['A1']} | 1 | 1 |"))
    assert line.split(" | ")[3] == f"{_score(root / 'A1_s1', 5):.3f}"
    summary = json.loads((out.parent / "summary.json").read_text())
    assert summary["score"]["k"] == 5 and summary["evidence"] is True
    for c in summary["comparisons"]:
        assert set(c) >= {"name", "metric", "n_pairs", "diff", "ci95", "p_holm", "verdict"}
        assert c["verdict"] in ("better", "worse", "no detectable difference") and c["n_pairs"] == 3
    numbers = json.loads(out.with_suffix(".json").read_text())
    vals = np.array([_expected(root / f"A1_s{s}")["final_val"] for s in SEEDS])
    assert numbers["matrix"][GROUP["A1"]]["final_val"]["mean"] == pytest.approx(vals.mean())
    # samples from the earliest (5) and latest (40) logged step
    sample_steps = {
        int(ln.split(" | ")[1])
        for ln in md.split("## Sample rollouts")[1].split("## Settings")[0].splitlines()
        if ln.startswith("| A")
    }
    assert sample_steps == {5, 40}


def test_report_main_cli(suite, tmp_path, capsys):
    root, _ = suite
    assert report_main([str(root), "--out", str(tmp_path / "r.md")]) == 0
    assert (tmp_path / "r.md").is_file() and (tmp_path / "figures" / "ref_cost.png").is_file()
    (tmp_path / "empty").mkdir()
    with pytest.raises(SystemExit) as err:
        report_main([str(tmp_path / "empty")])
    assert err.value.code == 2 and "not a run directory" in capsys.readouterr().err


def test_arms_with_one_reference_compute_get_no_flat_ref_cost_figure_and_whole_labels(tmp_path):
    """All arms A1 cached (a reset preset): no ref_cost.png and a line saying why; the sample table's
    configuration labels are whole (their beta is at the end); the threshold says where it comes from."""
    arms = [(s, dict(opt_reset=o, beta=b), q) for s, o, b, q in (("k", "keep", 0.05, 1.0), ("h", "hard", 1.0, 0.9))]
    dirs = write_suite(tmp_path / "runs", seeds=SEEDS, suite=arms)
    out = rp.write_report(dirs, tmp_path / "rep" / "report.md", tmp_path / "rep" / "figures", {"score_evals": 5})
    md = out.read_text()
    assert not (tmp_path / "rep" / "figures" / "ref_cost.png").exists() and "![Reference cost]" not in md
    assert "No reference-cost figure: every arm gets its reference log-probs the same way (A1 cached)." in md
    assert (tmp_path / "rep" / "figures" / "summary.png").is_file()
    samples = md.split("## Sample rollouts")[1].split("## Settings")[0]
    labels = {ln.split(" | ")[0].lstrip("| ") for ln in samples.splitlines() if ln.startswith("| A")}
    assert labels and all("…" not in lab and "beta=" in lab for lab in labels), labels
    label, best = fd.best_final(group_runs(load_runs(dirs)), "val")
    assert f"reaches {round(0.8 * best, 4):.3f} (0.8 x {best:.3f}, the best configuration's mean final value: " in md
    assert label in md.split("Steps to threshold:")[1].split("\n")[0]
    # arms that differ in it (the module's suite: A0, A1, A2, B) keep the figure: the default


def test_whole_words_never_cuts_a_word():
    from noma_prorl_bench.analysis.tables import whole_words

    label = "A1 cached, opt=hard, reset every 50, beta=0.05"
    assert whole_words(label, 80) == label
    assert whole_words(label, 40) == "A1 cached, opt=hard, reset every 50…"
    assert whole_words("x" * 50, 10) == "x" * 9 + "…"


def test_margin_by_hand_fragile_and_robust_verdicts():
    # six equal differences: p = 2/64 < 0.05, better; one flipped: |sum| >= 4 in 14 of 64 sign
    # patterns (k = 0, 1, 5, 6 negative), p 0.219: the verdict changes with one seed -> fragile
    six = [dict(name="q", family="f", metric="score", verdict="better")]
    cmp.add_margins(six, [np.full(6, 0.03)])
    assert six[0]["margin"] == 1 and six[0]["margin_exact"] and six[0]["fragile"]
    # ten equal -0.03: one flipped leaves 22/1024 = 0.021 (k = 0, 1, 9, 10) and one removed 2/512,
    # both still worse; two flipped: 112/1024 = 0.109 -> no verdict: margin 2, not fragile
    ten = [dict(name="q", family="f", metric="score", verdict="worse")]
    cmp.add_margins(ten, [np.full(10, -0.03)])
    assert ten[0]["margin"] == 2 and ten[0]["margin_exact"] and not ten[0]["fragile"]
    # a family of two: with one of a's differences flipped, a's p (0.021) is the family's largest and
    # Holm's last step compares it with 0.05 unmultiplied (b: 2 x 2/1024): still worse; two flipped
    # (0.109) is not: margin 2 for each
    two = [dict(name=n, family="f", metric="score", verdict="worse") for n in ("a", "b")]
    cmp.add_margins(two, [np.full(10, -0.03), np.full(10, -0.03)])
    assert [r["margin"] for r in two] == [2, 2]
    timing = [dict(name="t", family="cost", metric="s_step", verdict="better")]
    cmp.add_margins(timing, [np.full(10, -0.03)])
    assert "margin" not in timing[0]  # timing rows have none


def test_three_pairs_cannot_change_a_null_into_a_verdict(groups):
    arms = {label: {json.dumps(r.seed): r for r in rs} for label, rs in groups.items()}
    (row,) = cmp.compare(arms, [["hard vs A1", GROUP["hard"], GROUP["A1"]]], KS)
    assert row["margin"] is None and not row["fragile"]  # the smallest p at n = 3 is 0.25
