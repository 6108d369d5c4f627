"""Tests for report.py: every matrix number is recomputed here straight from metrics.jsonl /
events.jsonl (plain json + numpy, no runlog), plus the cost model, the B-vs-A criterion, the
reset ranking, the conclusion and the written report."""

from __future__ import annotations

import json
import math
import re
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from fakeruns import SUITE, write_suite  # noqa: E402

from noma_prorl_bench.analysis import findings as fd  # noqa: E402
from noma_prorl_bench.analysis import report as rp  # noqa: E402
from noma_prorl_bench.analysis import runlog  # noqa: E402
from noma_prorl_bench.analysis.runlog import group_runs, load_runs  # noqa: E402

pytestmark = pytest.mark.unit
SEEDS = (0, 1, 2)
THRESHOLD, K = 0.7, 10
GROUP = {"A0": "A0 naive_epoch, opt=keep, no-grow", "A1": "A1 cached, opt=keep, no-grow",
         "A2": "A2 ring, opt=keep, no-grow", "B": "B no-ref, opt=keep, no-grow",
         "hard": "A1 cached, opt=hard, no-grow", "soft": "A1 cached, opt=soft, no-grow",
         "asym": "A1 cached, opt=asym, no-grow", "grow": "A1 cached, opt=keep, grow:adam_map"}


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
    kl_s, kl = _col(rows, "kl/k3")                      # fake runs use kl_estimator k3
    resets = sorted({e["step"] for e in _rows(d, "events.jsonl")
                     if e["event"] in ("ref_reset", "opt_reset")})
    spikes = [kl[(kl_s > s) & (kl_s <= s + K)].max() for s in resets]
    hit = [s for s, v in zip(val_s, val) if v >= THRESHOLD]
    tok, step_t = _col(rows, "count/tokens_policy")[1], _col(rows, "time/step")[1]
    return {
        "final_val": val[-1], "steps_to_thr": hit[0] if hit else math.nan,
        "kl_mean": kl.mean() if kl.size else math.nan, "kl_max": kl.max() if kl.size else math.nan,
        "kl_spike": max(spikes) if spikes else math.nan,
        "ref_fwd": _col(rows, "count/ref_fwd")[1].mean(), "step_time": np.median(step_t),
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
    assert st.fmt() == "2 ± 1 (1–3)" and st.fmt(counts=True) == "2 ± 1 (1–3) [3/4]"
    one = fd.Stat.of([0.5])
    assert one.fmt() == "0.5" and math.isnan(one.std)
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
        return np.mean([_col(_rows(root / f"{stem}_s{s}", "metrics.jsonl"), key)[1].mean()
                        for s in SEEDS])

    step1, ref1 = mean_over_seeds("A1", "time/step"), mean_over_seeds("A1", "time/ref")
    f_tok = ref1 / mean_over_seeds("A1", "count/tokens_ref")
    predicted = step1 - ref1 + mean_over_seeds("A0", "count/tokens_ref") * f_tok
    assert c["predicted_ratio"] == pytest.approx(predicted / step1, rel=1e-12)
    assert c["measured_ratio"] == pytest.approx(mean_over_seeds("A0", "time/step") / step1)
    # the fake runs obey the cost model up to the stage-time jitter
    assert c["predicted_ratio"] == pytest.approx(c["measured_ratio"], rel=0.01)
    assert c["expected_ref_fwd"] == 4 and c["ref_fwd_a0"] == 4 and c["ref_fwd_a1"] == 1


def test_b_vs_a_criterion(groups, matrix):
    (b,) = fd.b_vs_a(groups, matrix)
    assert b["a"] == GROUP["A1"] and b["differs_in"] == []
    frac = matrix[GROUP["B"]]["final_val"].mean / matrix[GROUP["A1"]]["final_val"].mean
    assert b["fraction"] == pytest.approx(frac) and 0.8 <= frac < 0.9     # quality 0.85
    assert b["step_change"] < 0 and b["held_80"] and not b["held_90"]


def test_reset_ranking_and_separation(groups, matrix):
    (bucket,) = fd.reset_ranking(groups, matrix)
    rows = bucket["members"]
    assert [r["semantics"] for r in rows] == ["keep", "soft", "asym", "hard"]
    # seeds shift val by 0.01*seed: keep spans 0.868..0.888, hard 0.842..0.862 -> separated
    assert [r["separated_from_best"] for r in rows] == [None, False, False, True]


def test_conclusion_reports_only_supported_claims(groups, matrix):
    text = "\n".join(fd.conclusion(fd.cost_model_check(groups), fd.b_vs_a(groups, matrix),
                                   fd.reset_ranking(groups, matrix), groups))
    assert "took 1.06× A1's step time" in text
    assert "held at 80% but not at 90%" in text
    assert "keep beats hard beyond the seed spread" in text
    assert "Caveat" not in text                          # 3 seeds, all complete


def test_conclusion_says_within_noise_and_too_few_seeds(tmp_path):
    suite = [("keep", dict(opt_reset="keep"), 1.0), ("hard", dict(opt_reset="hard"), 0.995)]
    runs = load_runs(write_suite(tmp_path / "a", seeds=(0, 1, 2), suite=suite))
    groups = group_runs(runs)
    m = fd.result_matrix(groups, threshold=0.5, source="val")
    text = " ".join(fd.conclusion([], [], fd.reset_ranking(groups, m), groups))
    assert "within seed noise" in text and "Wedge B" in text and "not supported" in text
    one = group_runs(load_runs(write_suite(tmp_path / "b", seeds=(0,), suite=suite)))
    m1 = fd.result_matrix(one, threshold=0.5, source="val")
    text = " ".join(fd.conclusion([], [], fd.reset_ranking(one, m1), one))
    assert "too few seeds" in text and "as few as 1 seed" in text


def test_steps_to_threshold_train_source_and_not_reached(groups):
    run = groups[GROUP["A1"]][0]
    steps, rew = run.series("reward/mean")
    trailing = np.array([rew[max(0, i - 9): i + 1].mean() for i in range(rew.size)])
    first = steps[np.nonzero(trailing >= 0.5)[0][0]]
    assert runlog.run_stats(run, threshold=0.5, source="train")["steps_to_thr"] == first
    assert math.isnan(runlog.run_stats(run, threshold=2.0, source="val")["steps_to_thr"])


# ---------------------------------------------------------------- the written report


def test_write_report_files_sections_and_numbers(suite, tmp_path):
    root, dirs = suite
    out = rp.write_report(dirs, tmp_path / "rep" / "report.md", tmp_path / "rep" / "figures",
                          {"preset": "unit-test", "reward_threshold": THRESHOLD})
    md = out.read_text()
    for heading in ("## Conclusion", "## Result matrix", "## Cost model check (A0 vs A1)",
                    "## B (no reference) vs A", "## Reset semantics ranking",
                    "## Sample rollouts", "## Settings", "## Runs"):
        assert heading in md
    for link in re.findall(r"!\[[^]]*\]\(([^)]+)\)", md):
        assert not Path(link).is_absolute() and (out.parent / link).is_file()
    assert "unit-test" in md and "reaches 0.7" in md
    # the matrix cell printed for A1's final val reward is the recomputed mean ± std (min–max)
    vals = np.array([_expected(root / f"A1_s{s}")["final_val"] for s in SEEDS])
    cell = f"{vals.mean():.4g} ± {vals.std(ddof=1):.2g} ({vals.min():.4g}–{vals.max():.4g})"
    line = next(ln for ln in md.splitlines() if ln.startswith(f"| {GROUP['A1']} |"))
    assert line.split(" | ")[3] == cell
    numbers = json.loads(out.with_suffix(".json").read_text())
    assert numbers["matrix"][GROUP["A1"]]["final_val"]["mean"] == pytest.approx(vals.mean())
    # samples from the earliest (5) and latest (40) logged step
    sample_steps = {int(ln.split(" | ")[1]) for ln in md.split("## Sample rollouts")[1]
                    .split("## Settings")[0].splitlines() if ln.startswith("| A")}
    assert sample_steps == {5, 40}


def test_report_main_cli(suite, tmp_path, capsys):
    root, _ = suite
    assert rp.main([str(root), "--out", str(tmp_path / "r.md")]) == 0
    assert (tmp_path / "r.md").is_file() and (tmp_path / "figures" / "ref_cost.png").is_file()
    (tmp_path / "empty").mkdir()
    with pytest.raises(SystemExit) as err:
        rp.main([str(tmp_path / "empty")])
    assert err.value.code == 2 and "not a run directory" in capsys.readouterr().err
