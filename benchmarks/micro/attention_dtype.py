"""SDPA at the demo's training shapes: float32 vs bf16 vs bf16 inputs computed in float32.

One SmolLM2-135M attention layer as the learner sees it in the demo step (N = 16 rows, 9 heads after
the GQA repeat, L = 85 positions, head dim 64), with a boolean mask like the one the HF model
passes (causal, the first 12 columns of half the rows left-padded off): forward only (the rollout's
prefill and the reference pass), and forward + backward (the learner's pass). One torch thread,
process CPU time; the three variants alternate within each repeat, the first repeat is dropped;
per-pair ratios bf16 / float32 in run order.

    PYTHONPATH=src OMP_NUM_THREADS=1 setsid python benchmarks/micro/attention_dtype.py \\
        --out benchmarks/results/attention_dtype.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # benchmarks/: _common
from _common import provenance

VARIANTS = ("float32", "bf16", "bf16_upcast")


def mask(N: int, L: int, pad: int) -> torch.Tensor:
    m = torch.ones(L, L, dtype=torch.bool).tril().expand(N, 1, L, L).clone()
    m[: N // 2, :, :, :pad] = False
    idx = torch.arange(L)
    m[: N // 2, :, idx, idx] = True  # a padded position attends to itself (no all-masked row)
    return m


def run(variant: str, grad: bool, shape, m, reps: int) -> float:
    dt = torch.float32 if variant == "float32" else torch.bfloat16
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(*shape, generator=g).to(dt).requires_grad_(grad) for _ in range(3))
    t0 = time.process_time()
    for _ in range(reps):
        if variant == "bf16_upcast":
            o = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask=m).to(dt)
        else:
            o = F.scaled_dot_product_attention(q, k, v, attn_mask=m)
        if grad:
            o.sum().backward()
    return (time.process_time() - t0) / reps * 1e3


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--N", type=int, default=16)
    ap.add_argument("--L", type=int, default=85)
    ap.add_argument("--repeats", type=int, default=6)
    ap.add_argument("--reps", type=int, default=5, help="calls per timing")
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    shape, m = (a.N, 9, a.L, 64), mask(a.N, a.L, 12)
    out = {**provenance(), "loadavg_start": os.getloadavg(), "shape": list(shape), "rows": {}}
    for grad in (False, True):
        ms: dict[str, list[float]] = {k: [] for k in VARIANTS}
        for _ in range(a.repeats):
            for k in VARIANTS:
                ms[k].append(run(k, grad, shape, m, a.reps))
        ms = {k: v[1:] for k, v in ms.items()}  # the first repeat warms up
        key = "forward_backward" if grad else "forward"
        out["rows"][key] = {
            "ms_per_call": ms,
            "median_ms": {k: statistics.median(v) for k, v in ms.items()},
            "pair_ratios_bf16_over_float32": [b / f for f, b in zip(ms["float32"], ms["bf16"])],
            "pair_ratios_upcast_over_float32": [u / f for f, u in zip(ms["float32"], ms["bf16_upcast"])],
        }
        print(key, {k: round(v, 1) for k, v in out["rows"][key]["median_ms"].items()}, "ms per call", flush=True)
    out["loadavg_end"] = os.getloadavg()
    if a.out:
        with open(a.out, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
