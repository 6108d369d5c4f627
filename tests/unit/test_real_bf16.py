"""benchmarks/studies/real_bf16.py (equal learning in bf16: the demo's per-seed lifts, bf16 vs float32) on a
hand-worked example: the lift difference, its t interval and sign-flip p, final correctness, the
recipe check and the form summary."""

import json
import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "studies"))
import real_bf16  # noqa: E402

pytestmark = pytest.mark.unit
RECIPE = ["--steps", "16", "--batch_size", "4", "--group_size", "4", "--eval_every", "16"]


def _arm(before, afters, dtype):
    return {
        s: {
            "before": before,
            "after": a,
            "flags": [*RECIPE, "--dtype", dtype],
            "answer_form_before": 0.9,
            "answer_form_after": 0.8,
            "correct_in_form_before": before,
            "correct_in_form_after": a - 0.01,
        }
        for s, a in enumerate(afters)
    }


def test_lift_difference_by_hand():
    f32 = _arm(0.10, [0.15, 0.12, 0.16], "float32")  # lifts 0.05, 0.02, 0.06
    b16 = _arm(0.08, [0.14, 0.11, 0.12], "bf16_mixed")  # lifts 0.06, 0.03, 0.04
    res = real_bf16.compare(f32, b16)
    d = [0.01, 0.01, -0.02]  # bf16 lift - float32 lift per seed
    mean = sum(d) / 3
    sd = math.sqrt(sum((x - mean) ** 2 for x in d) / 2)
    half = 4.302652729911275 * sd / math.sqrt(3)  # t(0.975, 2)
    row = res["lift_diff"]
    assert row["mean"] == pytest.approx(mean) and row["sd"] == pytest.approx(sd)
    assert row["ci95"] == pytest.approx([mean - half, mean + half])
    assert row["sign_flip_p"] == pytest.approx(1.0)  # |mean| 0: every sign pattern is as extreme
    assert row["positive"] == 2 and row["negative"] == 1 and math.isinf(row["mde80"])  # 3 pairs cannot reach 0.05
    assert res["after_diff"]["mean"] == pytest.approx((-0.01 - 0.01 - 0.04) / 3)
    assert res["before"] == {"float32": [0.1], "bf16_mixed": [0.08]}
    assert res["form"]["bf16_mixed"]["correct_in_form_after"] == pytest.approx((0.13 + 0.10 + 0.11) / 3)
    md = real_bf16.markdown(res)
    assert "no detectable difference" in md and "| 2 | 0.100 -> 0.160 | 0.080 -> 0.120 | -0.020 |" in md


def test_a_different_recipe_is_refused():
    f32 = _arm(0.10, [0.15, 0.12], "float32")
    b16 = _arm(0.08, [0.14, 0.11], "bf16_mixed")
    b16[1]["flags"] = ["--steps", "8", *RECIPE[2:], "--dtype", "bf16_mixed"]
    with pytest.raises(SystemExit, match="seed 1: flags differ"):
        real_bf16.compare(f32, b16)


def test_float32_from_the_recorded_demo_json(tmp_path):
    path = tmp_path / "demo.json"
    path.write_text(
        json.dumps(
            {
                "rows": [
                    {
                        "seed": 0,
                        "n": 200,
                        "flags": RECIPE,
                        "correct_before": [0.135, 0.1, 0.2],
                        "correct_after": [0.185, 0.1, 0.2],
                    }
                ]
            }
        )
    )
    got = real_bf16.load_float32(str(path))
    assert got == {0: {"before": 0.135, "after": 0.185, "flags": RECIPE, "n_prompts": 200}}


def test_against_a_previous_bf16_file_by_hand(tmp_path):
    """--previous: this bf16 arm's lift minus the lift an earlier bf16 code path had for the same seed."""
    f32 = _arm(0.10, [0.15, 0.12, 0.16], "float32")
    b16 = _arm(0.08, [0.14, 0.11, 0.12], "bf16_mixed")  # lifts 0.06, 0.03, 0.04
    prev_path = tmp_path / "bf16.json"
    prev_path.write_text(json.dumps(real_bf16.compare(f32, _arm(0.08, [0.12, 0.12, 0.10], "bf16_mixed"))))
    prev = real_bf16.load_previous(str(prev_path))  # lifts 0.04, 0.04, 0.02
    assert prev == pytest.approx({0: 0.04, 1: 0.04, 2: 0.02})
    res = real_bf16.compare(f32, b16, prev)
    row = res["lift_vs_previous"]
    assert row["mean"] == pytest.approx((0.02 - 0.01 + 0.02) / 3) and row["positive"] == 2 and row["negative"] == 1
    assert res["previous_seeds"] == [0, 1, 2]
    assert "Against the previous bf16 code path" in real_bf16.markdown(res)
    assert "previous" not in real_bf16.markdown(real_bf16.compare(f32, b16))


def test_speed_flags_only_with_the_switch_and_only_the_speed_switches():
    """--speed_flags: the bf16 arm may add --sample_draw X and --shared_prompt (recorded in the
    result and named in the report); anything else, or the same flags without the switch, is refused."""
    f32 = _arm(0.10, [0.15, 0.12, 0.16], "float32")
    b16 = _arm(0.08, [0.14, 0.11, 0.12], "bf16_mixed")
    for r in b16.values():
        r["flags"] = [*r["flags"], "--sample_draw", "inverse_cdf", "--shared_prompt"]
    with pytest.raises(SystemExit, match="flags differ"):
        real_bf16.compare(f32, b16)
    res = real_bf16.compare(f32, b16, speed_flags=True)
    assert res["bf16_speed_flags"] == ["--sample_draw", "inverse_cdf", "--shared_prompt"]
    assert "with `--sample_draw inverse_cdf --shared_prompt`" in real_bf16.markdown(res)
    assert (
        real_bf16.compare(f32, _arm(0.08, [0.14, 0.11, 0.12], "bf16_mixed"), speed_flags=True)["bf16_speed_flags"] == []
    )
    b16[1]["flags"] = [*RECIPE, "--dtype", "bf16_mixed", "--lr", "1e-3", "--shared_prompt"]
    with pytest.raises(SystemExit, match="flags differ"):
        real_bf16.compare(f32, b16, speed_flags=True)
    b16[1]["flags"] = [*RECIPE, "--dtype", "bf16_mixed", "--shared_prompt"]  # seeds with other speed flags
    with pytest.raises(SystemExit, match="differ in their speed flags"):
        real_bf16.compare(f32, b16, speed_flags=True)
    assert real_bf16.split_speed_flags(["--a", "1", "--sample_draw", "x", "--shared_prompt", "--b"]) == (
        ["--a", "1", "--b"],
        ["--sample_draw", "x", "--shared_prompt"],
    )
