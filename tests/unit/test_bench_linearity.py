"""The FLOP bookkeeping of benchmarks/speed/linearity.py: prompt and padded response length solved from a
step's two token counters, on hand-made counts (including a batch whose longest response ended
before the limit, which the old "padded length = T" reading got wrong)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "speed"))

from linearity import prompt_and_length, step_flops  # noqa: E402


def counters(N: int, B: int, P: int, T_used: int) -> tuple[int, int]:
    """(tokens_policy, tokens_ref) of one A1 step: shared prefill B P, N (T_used - 1) decode positions,
    the learner's N (P + T_used); the reference's N (P + T_used)."""
    return B * P + N * (T_used - 1) + N * (P + T_used), N * (P + T_used)


@pytest.mark.parametrize("P,T_used", [(55, 128), (53, 49), (55, 120), (1, 1), (54, 32)])
def test_prompt_and_length_round_trip(P, T_used):
    assert prompt_and_length(16, 4, *counters(16, 4, P, T_used)) == (P, T_used)


def test_measured_steps_and_a_short_batch_costs_fewer_flops():
    assert prompt_and_length(16, 4, 5180, 2928) == (55, 128)  # real_speed_T128_lean.json, first timed step
    assert prompt_and_length(16, 4, 2612, 1632) == (53, 49)  # every row ended by 49 tokens
    assert step_flops(16, 4, 53, 49) < 0.6 * step_flops(16, 4, 55, 128)  # 1.85 vs 3.64 TFLOP


def test_counters_that_do_not_fit_raise():
    with pytest.raises(ValueError, match="do not fit"):
        prompt_and_length(16, 4, 5181, 2928)


def test_shared_prompt_flops_count_the_shared_prefix_once():
    """--shared_prompt: with every row's prompt its own (U = N) the model is the unshared one
    (same positions, same contexts); with U = B the teacher-forced passes drop (N - B)(P - 1)
    prompt positions, W each plus their attention, four times (reference + 3 x learner)."""
    from linearity import HIDDEN, LAYERS, W, attn

    assert step_flops(16, 16, 39, 32, U=16) == pytest.approx(step_flops(16, 16, 39, 32), rel=1e-12)
    saved = step_flops(16, 4, 39, 32) - step_flops(16, 4, 39, 32, U=4)
    expected = 4 * (16 - 4) * ((39 - 1) * W + sum(attn(c) for c in range(1, 39)))
    assert saved == pytest.approx(expected, rel=1e-12)
    assert attn(10) == LAYERS * 4 * HIDDEN * 10


def test_a_measured_shared_prompt_step_counts_what_ran():
    """real_speed_T128.json (--shared_prompt), a timed step: P 53, padded length 128, U 4 distinct
    prompts; the reference ran U (P - 1) + N (T + 1) positions and the policy the shared prefill,
    the decode steps and the learner's pass of the same size."""
    N, B, U, P, T = 16, 4, 4, 53, 128
    tokens_ref = U * (P - 1) + N * (T + 1)
    assert tokens_ref == 2272
    assert B * P + N * (T - 1) + tokens_ref == 4516
