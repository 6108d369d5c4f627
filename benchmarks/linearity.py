"""Step time against the step's FLOPs at several response lengths, from real_speed.py results.

Reads real_speed.py files made at different --max_new_tokens (the demo preset, one dtype) and
prints, per file, the median CPU s per timed step (rollout + reference + train) and the step's
model FLOPs, then each length's CPU s per TFLOP over the shortest length's (1.00 = linear in FLOPs).

FLOPs of one A1 step of SmolLM2-135M (30 layers, hidden 576, 9 query / 3 KV heads of 64, MLP 1536,
vocabulary 49,152; LoRA r8 products left out, < 1%), N rows = B x G, prompt length P, T_used the
padded response length (the step's `count/tokens_ref` / N - P; taken as T, i.e. at least one row of
the batch truncated, which every demo batch of 16 rows at T <= 128 was):
    W = 2 x 3,538,944 x 30 per token (the layers' matmuls), H = 2 x 576 x 49,152 (the head)
    attention forward of a token at context c: 30 x 4 x 576 x c
    rollout    prefill B x P tokens (W, attention) + N x (T - 1) decode tokens (W + H + attention)
    reference  N x (P + T) tokens (W, attention) + N x (T + 1) head rows
    train      3 x the reference pass (forward + backward through the frozen base)

    PYTHONPATH=src python benchmarks/linearity.py benchmarks/results/real_speed.json \\
        benchmarks/results/real_speed_T64.json benchmarks/results/real_speed_T128.json
"""

from __future__ import annotations

import json
import statistics
import sys

LAYERS, HIDDEN, MLP, VOCAB = 30, 576, 1536, 49152
W = 2 * (HIDDEN * (HIDDEN + 192 + 192 + HIDDEN) + 3 * HIDDEN * MLP) * LAYERS
H = 2 * HIDDEN * VOCAB


def attn(c: float) -> float:
    return LAYERS * 4 * HIDDEN * c


def step_flops(N: int, B: int, P: int, T: int) -> float:
    prefill = B * P * W + B * sum(attn(c) for c in range(1, P + 1))
    decode = N * sum(W + H + attn(P + t) for t in range(1, T))
    ref = N * (P + T) * W + N * (T + 1) * H + N * sum(attn(c) for c in range(1, P + T + 1))
    return prefill + decode + 4 * ref


def summarise(path: str, dtype: str) -> dict:
    d = json.load(open(path))
    s = d["settings"]
    N, B, T = s["B"] * s["G"], s["B"], s["max_new_tokens"]
    cpu, flops = [], []
    for run in d["runs"].get(dtype, []):
        for st in run["per_step"][run.get("drop_first", 1) :]:
            P = round(st["count/tokens_ref"] / N) - T
            cpu.append(st["time/rollout"] + st["time/ref"] + st["time/train"])
            flops.append(step_flops(N, B, P, T))
    return {"T": T, "cpu_s": statistics.median(cpu), "tflop": statistics.median(flops) / 1e12, "steps": len(cpu)}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    dtype = "bf16_mixed"
    if argv and argv[0].startswith("--dtype="):
        dtype, argv = argv[0].split("=", 1)[1], argv[1:]
    rows = sorted((summarise(p, dtype) for p in argv), key=lambda r: r["T"])
    base = rows[0]["cpu_s"] / rows[0]["tflop"]
    print(f"| T | CPU s/step | TFLOP/step | time x | FLOPs x | CPU s per TFLOP / T={rows[0]['T']}'s | steps |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['T']} | {r['cpu_s']:.2f} | {r['tflop']:.3f} | {r['cpu_s'] / rows[0]['cpu_s']:.2f} "
            f"| {r['tflop'] / rows[0]['tflop']:.2f} | {r['cpu_s'] / r['tflop'] / base:.2f} | {r['steps']} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
