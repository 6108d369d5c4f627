"""The matmul floor of one decode step: how fast could any sampler decode this model on this CPU?

One decode step of N rows runs every Linear of the model (per layer q, k, v, o, gate, up, down, then
the output head) on an [N, in] activation. This script times exactly those matmuls, with the
model's own weight tensors (so the bytes read from memory are the real ones), N rows at a time,
nothing else: no norms, rotary, attention, cache writes, sampling or Python between layers. Divide a
sampler's measured time per token by it to see how far above the floor it runs, and divide
`generate`'s time per token by it for the largest speed-up over `generate` that any sampler could
show with these weights (if everything but the matmuls cost nothing). `F.linear` repacks each
weight for MKL / oneDNN inside every call; the packed floor multiplies by weights packed once
(what our sampler does under --decode_weights packed), so it is the lower of the two.

    OMP_NUM_THREADS=1 PYTHONPATH=src python benchmarks/micro/decode_floor.py \\
        --model_dir ~/.cache/noma_prorl_bench/models/smollm2-135m-instruct-q4_1-dequant \\
        --rows 16 --sampler benchmarks/results/sampler_smollm2_float32_draws.json \\
        benchmarks/results/sampler_smollm2_bfloat16_draws.json --out benchmarks/results/decode_floor.json

`--sampler FILE ...`: result files of benchmarks/micro/sampler.py at the same rows; their per-token CPU
times (N x T tokens per call, medians) are set beside the floor of the same dtype.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # benchmarks/: _common, _pairs
from _common import SRC, run_record

DTYPES = ("float32", "bfloat16")


def linears(model) -> list:
    """The weight of every Linear a decode step multiplies by, in order (the head last)."""
    import torch

    return [m.weight for m in model.modules() if isinstance(m, torch.nn.Linear)]


def floor_ms(weights: list, rows: int, repeats: int) -> list[float]:
    """CPU ms of one pass of [rows, in] @ W.T over `weights` (one thread), per repeat."""
    import torch

    xs = {w.shape[1]: torch.randn(rows, w.shape[1], dtype=w.dtype) for w in weights}
    out = []
    with torch.inference_mode():
        for r in range(repeats + 1):
            t = time.process_time()
            for w in weights:
                torch.nn.functional.linear(xs[w.shape[1]], w)
            if r:  # the first pass warms caches and kernels
                out.append((time.process_time() - t) * 1e3)
    return out


def packed_floor_ms(weights: list, rows: int, repeats: int) -> list[float] | None:
    """The same pass with every weight packed once for its library (models/packed.py: MKL for float32,
    oneDNN for bf16), as the sampler multiplies under --decode_weights packed; None without the library."""
    import torch

    from noma_prorl_bench.models import packed

    lib = packed.library_for(weights[0].dtype)
    if lib is None:
        return None
    xs = {w.shape[1]: torch.randn(rows, w.shape[1], dtype=w.dtype) for w in weights}
    out = []
    with torch.inference_mode():
        ps = [packed._pack(lib, w, rows) for w in weights]
        for r in range(repeats + 1):
            t = time.process_time()
            for w, p in zip(weights, ps):
                packed._apply(lib, xs[w.shape[1]], p, w, None, rows)
            if r:
                out.append((time.process_time() - t) * 1e3)
    return out


def sampler_ms(path: str) -> dict:
    """benchmarks/micro/sampler.py result -> {dtype, rows, per-path CPU ms per decoded token (median)}."""
    d = json.load(open(path))
    row = d["rows"][0]
    n_tok = row["N"] * row["T"]
    return {
        "file": os.path.relpath(path),
        "dtype": d["args"]["dtype"],
        "rows": row["N"],
        "ms_per_token_step": {k: statistics.median(v) / row["T"] * 1e3 for k, v in row["cpu_s"].items()},
        "tokens_per_call": n_tok,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model_dir", required=True)
    ap.add_argument("--rows", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--sampler", nargs="*", default=[], help="benchmarks/micro/sampler.py result files to set beside")
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    sys.path.insert(0, SRC)
    import torch

    from noma_prorl_bench.models.hf import load_hf_policy

    torch.set_num_threads(1)
    load0 = os.getloadavg()
    result: dict = {"rows": a.rows, "floor_ms_per_token_step": {}, "floor_repeats_ms": {}}
    for dtype in DTYPES:
        policy, _ = load_hf_policy(os.path.expanduser(a.model_dir), dtype=dtype)
        ws = linears(policy.model)
        ws = [w.detach() for w in ws]
        ms = floor_ms(ws, a.rows, a.repeats)
        result["floor_ms_per_token_step"][dtype] = statistics.median(ms)
        result["floor_repeats_ms"][dtype] = ms
        pk = packed_floor_ms(ws, a.rows, a.repeats)
        if pk is not None:
            result.setdefault("packed_floor_ms_per_token_step", {})[dtype] = statistics.median(pk)
            result.setdefault("packed_floor_repeats_ms", {})[dtype] = pk
            print(
                f"{dtype}: the same weights packed once: {statistics.median(pk):.1f} CPU ms per decode step", flush=True
            )
        result.setdefault("linears", len(ws))
        result.setdefault("params_in_linears", sum(w.numel() for w in ws))
        print(
            f"{dtype}: {len(ws)} Linears, matmuls alone {statistics.median(ms):.1f} CPU ms per decode step", flush=True
        )
        del policy
    result["samplers"] = []
    for path in a.sampler:
        s = sampler_ms(path)
        fl = result["floor_ms_per_token_step"][s["dtype"]]
        s["over_floor"] = {k: v / fl for k, v in s["ms_per_token_step"].items()}
        pfl = result.get("packed_floor_ms_per_token_step", {}).get(s["dtype"])
        if pfl:
            s["over_packed_floor"] = {k: v / pfl for k, v in s["ms_per_token_step"].items()}
        result["samplers"].append(s)
        for k, v in s["ms_per_token_step"].items():
            print(f"  {s['dtype']} {k}: {v:.1f} ms per token step = {v / fl:.2f}x the floor", flush=True)
    result.update(
        {
            "definition": "floor: CPU ms of one pass over every Linear of the model (rows x in @ W.T, the "
            "model's own weights, one thread, median of repeats); packed floor: the same pass with each "
            "weight packed once for MKL (float32) / oneDNN (bf16) (models/packed.py); samplers: CPU ms per decode step "
            "(a call's median CPU s / T, prefill included) and that over the floor of the same dtype",
            **run_record(a.model_dir, load0),
        }
    )
    if a.out:
        with open(a.out, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
