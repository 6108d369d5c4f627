"""Step time against the step's FLOPs at several response lengths, from real_speed.py results.

Reads real_speed.py files made at different --max_new_tokens (the demo preset, one dtype) and
prints, per file, the median CPU s per timed step (rollout + reference + train) and the step's
model FLOPs, then each length's CPU s per TFLOP (all timed steps' CPU s over all their FLOPs) over the
shortest length's (1.00 = linear in FLOPs).

FLOPs of one A1 step of SmolLM2-135M (30 layers, hidden 576, 9 query / 3 KV heads of 64, MLP 1536,
vocabulary 49,152; LoRA r8 products left out, < 1%), N rows = B x G, prompt length P, T_used the
padded response length (the longest response of the batch), as real_speed.py records them per step
(`shape/P`, `shape/T_used`; older files: solved from the step's two counters,
`count/tokens_ref` = N (P + T_used) and `count/tokens_policy` = B P (shared prefill) + N (T_used - 1)
(decode) + N (P + T_used) (the learner's pass)):
    W = 2 x 3,538,944 x 30 per token (the layers' matmuls), H = 2 x 576 x 49,152 (the head)
    attention forward of a token at context c: 30 x 4 x 576 x c
    rollout    prefill B x P tokens (W, attention) + N x (T - 1) decode tokens (W + H + attention)
    reference  N x (P + T) tokens (W, attention) + N x (T + 1) head rows
    train      3 x the reference pass (forward + backward through the frozen base)
    --shared_prompt (settings.shared_prompt, U = `shape/U` distinct prompts): a teacher-forced pass
    runs U x (P - 1) prompt positions (W, attention) and N x (T + 1) positions on their cache

    PYTHONPATH=src python benchmarks/speed/linearity.py benchmarks/results/real_speed.json \\
        benchmarks/results/real_speed_T64.json benchmarks/results/real_speed_T128.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

LAYERS, HIDDEN, MLP, VOCAB = 30, 576, 1536, 49152
W = 2 * (HIDDEN * (HIDDEN + 192 + 192 + HIDDEN) + 3 * HIDDEN * MLP) * LAYERS
H = 2 * HIDDEN * VOCAB


def attn(c: float) -> float:
    return LAYERS * 4 * HIDDEN * c


def step_flops(N: int, B: int, P: int, T: int, U: int | None = None) -> float:
    """One step's model FLOPs; U: --shared_prompt's distinct prompts (the teacher-forced passes
    run U x (P - 1) prompt positions and N x (T + 1) positions on their cache), None: off."""
    prefill = B * P * W + B * sum(attn(c) for c in range(1, P + 1))
    decode = N * sum(W + H + attn(P + t) for t in range(1, T))
    if U is None:
        ref = N * (P + T) * W + N * (T + 1) * H + N * sum(attn(c) for c in range(1, P + T + 1))
    else:
        ref = (U * (P - 1) + N * (T + 1)) * W + N * (T + 1) * H
        ref += U * sum(attn(c) for c in range(1, P)) + N * sum(attn(c) for c in range(P, P + T + 1))
    return prefill + decode + 4 * ref


def summarise(path: str, dtype: str) -> dict:
    d = json.load(open(path))
    s = d["settings"]
    N, B, T = s["B"] * s["G"], s["B"], s["max_new_tokens"]
    cpu, flops, used = [], [], []
    for run in d["runs"].get(dtype, []):
        for st in run["per_step"][run.get("drop_first", 1) :]:
            U = None
            if "shape/P" in st:  # recorded by real_speed.py (needed with --shared_prompt)
                P, T_used = st["shape/P"], st["shape/T_used"]
                U = st["shape/U"] if s.get("shared_prompt") else None
            else:
                P, T_used = prompt_and_length(N, B, st["count/tokens_policy"], st["count/tokens_ref"])
            cpu.append(st["time/rollout"] + st["time/ref"] + st["time/train"])
            flops.append(step_flops(N, B, P, T_used, U))
            used.append(T_used)
    return {
        "T": T,
        "cpu_s": statistics.median(cpu),
        "tflop": statistics.median(flops) / 1e12,
        "s_per_tflop": sum(cpu) / sum(flops) * 1e12,
        "T_used": used,
        "steps": len(cpu),
    }


def prompt_and_length(N: int, B: int, tokens_policy: int, tokens_ref: int) -> tuple[int, int]:
    """(P, T_used) from a step's counters: R = tokens_ref / N = P + T_used and
    tokens_policy - tokens_ref = B P + N (T_used - 1), so P = (N (R - 1) - (tokens_policy - tokens_ref)) / (N - B)."""
    R = tokens_ref / N
    P = (N * (R - 1) - (tokens_policy - tokens_ref)) / (N - B)
    if P != int(P) or R != int(R) or not 0 < P < R:
        raise ValueError(f"counters {tokens_policy}, {tokens_ref} do not fit N {N} B {B} with a shared prefill")
    return int(P), int(R - P)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+", help="real_speed.py result files, one per --max_new_tokens")
    ap.add_argument("--dtype", default="bf16_mixed", help="the runs of this dtype in each file")
    a = ap.parse_args(sys.argv[1:] if argv is None else argv)
    rows = sorted((summarise(p, a.dtype) for p in a.files), key=lambda r: r["T"])
    base = rows[0]["s_per_tflop"]
    print(
        f"| T (max) | padded lengths of the timed steps | CPU s/step (median) | TFLOP/step (median) "
        f"| CPU s per TFLOP (all timed steps) | / T={rows[0]['T']}'s | steps |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['T']} | {', '.join(map(str, r['T_used']))} | {r['cpu_s']:.2f} | {r['tflop']:.3f} "
            f"| {r['s_per_tflop']:.2f} | **{r['s_per_tflop'] / base:.2f}** | {r['steps']} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
