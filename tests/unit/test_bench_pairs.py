"""The pairing arithmetic of the speed benchmarks (benchmarks/_pairs.py) on hand-made timings."""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

from _pairs import check_alternating, pair_ratios  # noqa: E402


def run(cpu, tokens, t0, t1):
    return {"step_cpu_s": cpu, "gen_tokens": tokens, "t_start": t0, "t_end": t1}


def alternating(a_cpu, b_cpu, a_tok=None, b_tok=None):
    """A_i at [10i, 10i+4], B_i at [10i+5, 10i+9]."""
    n = len(a_cpu)
    a_tok = a_tok or [[100, 100]] * n
    b_tok = b_tok or [[100, 100]] * n
    a = [run(a_cpu[i], a_tok[i], 10 * i, 10 * i + 4) for i in range(n)]
    b = [run(b_cpu[i], b_tok[i], 10 * i + 5, 10 * i + 9) for i in range(n)]
    return a, b


def test_pairs_are_kept_in_run_order_and_the_headline_is_their_median():
    # pair 1: B/A = 3/2 = 1.5; pair 2: 2/4 = 0.5 (the machine slowed A's run); pair 3: 6/5 = 1.2
    a, b = alternating([[2.0, 2.0], [4.0, 4.0], [5.0, 5.0]], [[3.0, 3.0], [2.0, 2.0], [6.0, 6.0]])
    r = pair_ratios(a, b)
    assert r["pair_ratios"] == pytest.approx([1.5, 0.5, 1.2])  # not sorted
    assert r["ratio"] == pytest.approx(1.2)
    # the pooled ratio of medians (the old headline) would be 3/4 here: the pairing changes the answer
    pooled = statistics.median([3, 3, 2, 2, 6, 6]) / statistics.median([2, 2, 4, 4, 5, 5])
    assert pooled == pytest.approx(0.75) and r["ratio"] != pytest.approx(pooled)


def test_a_run_costs_its_mean_cpu_seconds_per_step():
    a, b = alternating([[1.0, 3.0]], [[4.0, 4.0, 7.0]])
    r = pair_ratios(a, b)
    assert r["cpu_s_per_step_a"] == [2.0] and r["cpu_s_per_step_b"] == [5.0]
    assert r["pair_ratios"] == pytest.approx([2.5])


def test_per_token_ratio_divides_out_the_tokens_each_side_generated():
    # B takes 1.2x the CPU per step but generates 1.2x the tokens: the same cost per token
    a, b = alternating([[10.0, 10.0]], [[12.0, 12.0]], a_tok=[[500, 500]], b_tok=[[600, 600]])
    r = pair_ratios(a, b)
    assert r["pair_ratios"] == pytest.approx([1.2])
    assert r["pair_ratios_per_token"] == pytest.approx([1.0])
    assert r["tokens_per_step_a"] == [500.0] and r["tokens_per_step_b"] == [600.0]
    # per pair, not pooled: pair 2 generated fewer tokens on B
    a, b = alternating([[10.0], [10.0]], [[12.0], [12.0]], a_tok=[[500], [500]], b_tok=[[600], [400]])
    r = pair_ratios(a, b)
    assert r["pair_ratios_per_token"] == pytest.approx([1.0, 1.5])
    assert r["ratio_per_token"] == pytest.approx(1.25)


def test_runs_that_did_not_alternate_in_time_are_refused():
    a, b = alternating([[1.0], [1.0]], [[1.0], [1.0]])
    check_alternating(a, b)
    check_alternating(b, a)  # B first within each pair is as good
    b[0]["t_start"] = 2  # B_1 started while A_1 was running
    with pytest.raises(ValueError, match="alternating"):
        pair_ratios(a, b)
    a, b = alternating([[1.0], [1.0]], [[1.0], [1.0]])
    a[0], a[1] = a[1], a[0]  # pairs shuffled out of run order
    with pytest.raises(ValueError, match="alternating"):
        pair_ratios(a, b)
    assert pair_ratios(a, b, check_order=False)["pair_ratios"] == pytest.approx([1.0, 1.0])


def test_unequal_or_empty_sides_are_refused():
    a, b = alternating([[1.0], [1.0]], [[1.0], [1.0]])
    with pytest.raises(ValueError, match="unequal"):
        pair_ratios(a, b[:1])
    with pytest.raises(ValueError, match="unequal"):
        pair_ratios([], [])
    a[0]["step_cpu_s"] = []
    with pytest.raises(ValueError, match="no timed steps"):
        pair_ratios(a, b)


def test_vs_trl_rows_report_the_pairs_in_run_order(monkeypatch):
    """vs_trl.compare on faked workers: the row's pair ratios are run i of TRL over run i of ours."""
    import vs_trl

    ours_cpu, trl_cpu = iter([2.0, 4.0, 5.0]), iter([3.0, 2.0, 6.0])
    clock = iter(range(100))

    def fake_spawn(side, a, beta, ckpt="off"):
        c = next(ours_cpu if side == "ours" else trl_cpu)
        t0 = next(clock)
        return {
            "step_cpu_s": [c, c],
            "step_s": [c, c],
            "gen_s": [1.0, 1.0],
            "gen_tokens": [100, 100] if side == "ours" else [120, 120],
            "completion_len_mean": 6.0,
            "peak_rss_mb": 1.0,
            "t_start": t0,
            "t_end": t0 + 0.5,
            "loadavg_end": [1.0, 1.0, 1.0],
        }

    monkeypatch.setattr(vs_trl, "spawn", fake_spawn)
    a = vs_trl.build_parser().parse_args(["--repeats", "3"])
    row = vs_trl.compare(a, 0.01, "off")
    assert row["pair_ratios"] == pytest.approx([1.5, 0.5, 1.2])
    assert row["ratio_trl_over_ours"] == pytest.approx(1.2)
    assert row["pair_ratios_per_token"] == pytest.approx([1.25, 5 / 12, 1.0])
    assert row["tokens_per_step_ours"] == [100.0] * 3 and row["tokens_per_step_trl"] == [120.0] * 3


def test_step_matched_ratios_pair_the_same_step_of_each_run():
    from _pairs import step_matched_ratios

    a, b = alternating(
        [[2.0, 4.0], [2.0, 5.0]],
        [[3.0, 4.0], [4.0, 4.0]],
        a_tok=[[200, 300], [200, 300]],
        b_tok=[[350, 300], [350, 300]],
    )
    rows = step_matched_ratios(a, b)
    assert [r["step"] for r in rows] == [0, 1]
    assert rows[0]["pair_ratios"] == pytest.approx([1.5, 2.0]) and rows[0]["ratio"] == pytest.approx(1.75)
    assert rows[1]["pair_ratios"] == pytest.approx([1.0, 0.8])
    assert rows[1]["tokens_a"] == [300, 300] and rows[1]["tokens_b"] == [300, 300]


def test_real_speed_pairs_float32_and_bf16_runs_in_the_order_the_driver_makes_them():
    """real_speed.py runs float32 then bf16_mixed in each pair; ratio_bf16_over_float32 is the
    median of float32 / bf16 CPU s per step (rollout + reference + train; first step dropped)."""
    import argparse

    import real_speed

    def rs_run(step_cpu, t0):
        steps = [
            {"time/rollout": c / 2, "time/ref": c / 4, "time/train": c / 4, "response/len_mean": 20.0} for c in step_cpu
        ]
        return {"per_step": steps, "t_start": t0, "t_end": t0 + 1, "drop_first": 1}

    runs = {
        "float32": [rs_run([99.0, 15.0, 15.0], 0), rs_run([99.0, 16.0, 16.0], 2), rs_run([99.0, 12.0, 12.0], 4)],
        "bf16_mixed": [rs_run([99.0, 10.0, 10.0], 1), rs_run([99.0, 8.0, 8.0], 3), rs_run([99.0, 10.0, 10.0], 5)],
    }
    out = real_speed.paired(argparse.Namespace(batch_size=4, group_size=4), runs)
    assert out["pair_ratios"] == pytest.approx([1.5, 2.0, 1.2])
    assert out["ratio_bf16_over_float32"] == pytest.approx(1.5)
    assert out["tokens_per_step_bf16"] == [320.0] * 3
