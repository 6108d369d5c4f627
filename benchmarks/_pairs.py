"""Per-pair CPU-time ratios of two alternating sides (standard library only; unit-tested).

A speed comparison on a shared machine runs the two sides in turn, A, B, A, B, ..., each in its own
process, and pairs run i of A with run i of B: neighbours in time see about the same machine, so the
ratio within a pair cancels most of the drift between pairs. The pairing is kept in time order: a
list of ratios sorted before it is reported has lost which runs were measured together.

Per run (a worker's RESULT object): `step_cpu_s`, the process CPU seconds of each timed step, and
`gen_tokens`, the response tokens generated in each timed step (one entry per step), and the wall
clock at the run's start and end (`t_start`, `t_end`, seconds since the epoch) to check the order.

    per-step ratio of pair i   = (CPU s per step of B_i) / (CPU s per step of A_i)
    per-token ratio of pair i  = (CPU s per generated token of B_i) / (CPU s per generated token of A_i)
                               = per-step ratio x (tokens per step of A_i) / (tokens per step of B_i)

CPU s per step of a run = the mean over its timed steps (sum of CPU s / steps), so a run's
per-token cost is its CPU seconds over its tokens. The headline is the median of the per-pair
ratios, in pair order; > 1 means B is slower.
"""

from __future__ import annotations

import statistics


def run_cpu_per_step(run: dict) -> float:
    """Mean process CPU seconds per timed step of one run."""
    steps = run["step_cpu_s"]
    if not steps:
        raise ValueError("a run with no timed steps")
    return sum(steps) / len(steps)


def run_tokens_per_step(run: dict) -> float:
    """Mean generated response tokens per timed step of one run."""
    toks = run["gen_tokens"]
    if not toks:
        raise ValueError("a run with no generation counted")
    return sum(toks) / len(toks)


def check_alternating(a_runs: list[dict], b_runs: list[dict]) -> None:
    """ValueError unless the two sides have the same number of runs, the two runs of a pair did not
    overlap in time (either may come first), and pair i ended before pair i + 1 began (by the runs'
    t_start / t_end): A_1, B_1, A_2, B_2, ... or B_1, A_1, B_2, A_2, ..."""
    if len(a_runs) != len(b_runs) or not a_runs:
        raise ValueError(f"unequal or empty sides: {len(a_runs)} vs {len(b_runs)} runs")
    pairs = list(zip(a_runs, b_runs))
    for a, b in pairs:
        if not (a["t_end"] <= b["t_start"] or b["t_end"] <= a["t_start"]):
            raise ValueError("runs are not alternating in time (the two runs of a pair overlap)")
    for (a, b), (c, d) in zip(pairs, pairs[1:]):
        if max(a["t_end"], b["t_end"]) > min(c["t_start"], d["t_start"]):
            raise ValueError("runs are not alternating in time (a pair starts before the previous one ended)")


def pair_ratios(a_runs: list[dict], b_runs: list[dict], check_order: bool = True) -> dict:
    """{'pair_ratios', 'pair_ratios_per_token', 'ratio', 'ratio_per_token', 'tokens_per_step_a',
    'tokens_per_step_b', 'cpu_s_per_step_a', 'cpu_s_per_step_b'}: B over A, pair i = run i of each
    side, in the order the runs were made (not sorted); the ratios are the medians of the per-pair
    ratios. Tokens and CPU seconds per step are the per-run values, in pair order."""
    if check_order:
        check_alternating(a_runs, b_runs)
    elif len(a_runs) != len(b_runs) or not a_runs:
        raise ValueError(f"unequal or empty sides: {len(a_runs)} vs {len(b_runs)} runs")
    cpu_a = [run_cpu_per_step(r) for r in a_runs]
    cpu_b = [run_cpu_per_step(r) for r in b_runs]
    tok_a = [run_tokens_per_step(r) for r in a_runs]
    tok_b = [run_tokens_per_step(r) for r in b_runs]
    step = [b / a for a, b in zip(cpu_a, cpu_b)]
    token = [(cb / tb) / (ca / ta) for ca, cb, ta, tb in zip(cpu_a, cpu_b, tok_a, tok_b)]
    return {
        "pair_ratios": step,
        "pair_ratios_per_token": token,
        "ratio": statistics.median(step),
        "ratio_per_token": statistics.median(token),
        "cpu_s_per_step_a": cpu_a,
        "cpu_s_per_step_b": cpu_b,
        "tokens_per_step_a": tok_a,
        "tokens_per_step_b": tok_b,
    }


def step_matched_ratios(a_runs: list[dict], b_runs: list[dict]) -> list[dict]:
    """Per timed step index j: {'step', 'tokens_a', 'tokens_b', 'pair_ratios', 'ratio'}: B's CPU s of
    step j over A's, pair by pair in run order, with the tokens each side generated in that step
    (the same in every run of a side when its seeds are fixed). A step where both sides generated
    about the same number of tokens compares the same work without assuming that a step's cost is
    proportional to its token count (it is not: a batch costs what its longest response costs)."""
    n_steps = min(len(r["step_cpu_s"]) for r in a_runs + b_runs)
    out = []
    for j in range(n_steps):
        ratios = [b["step_cpu_s"][j] / a["step_cpu_s"][j] for a, b in zip(a_runs, b_runs)]
        out.append(
            {
                "step": j,
                "tokens_a": [r["gen_tokens"][j] for r in a_runs],
                "tokens_b": [r["gen_tokens"][j] for r in b_runs],
                "pair_ratios": ratios,
                "ratio": statistics.median(ratios),
            }
        )
    return out
