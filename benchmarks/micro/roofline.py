"""Roofline: how close the sampler and the training step come to what the hardware allows.

On the device it runs on, measures two ceilings with plain torch ops:
  peak_flops   a [2048 x 2048] @ [2048 x 2048] matmul in the model's dtype (median of repeats)
  bandwidth    a 256 MB tensor copy (read + write bytes / seconds)
then, on a random Llama-style model (`models/tiny_hf.py`, float32 on CPU):
  sampler      our `rollout.generate` (N sequences, T new tokens, EOS off) split into prefill and
               decode; the decode phase's tokens/s against two bounds per decode step:
               weight-read bound  N / ((weight bytes + mean KV-cache bytes) / bandwidth)
               compute bound      N / (2 * params * N / peak_flops)
               and the fraction of the lower one (the roofline) that the sampler reaches
  train step   one forward + backward + Adam step over the N rollout sequences (the update's
               minibatch step, median over Trainer steps), model FLOPs = 6 * params * tokens (the usual
               2 forward + 4 backward per parameter per token; attention scores not counted),
               as a fraction of peak_flops
`params` excludes the input embedding table (a gather, not a matmul) and counts the output head.
Times on CPU are process CPU seconds (the machine is shared; wall time would measure the other
jobs), on CUDA wall seconds. On CPU the "weight-read bound" is a loose ceiling (a 1-thread core rarely saturates DRAM) and
peak_flops is what one thread's matmul reaches, not a datasheet number.

Run (CPU, one thread, recorded in docs/performance.md):
    OMP_NUM_THREADS=1 nice -n 5 env PYTHONPATH=src .venv/bin/python benchmarks/micro/roofline.py \
        --hidden 256 --layers 4 --N 64 --T 64 --out roofline.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # benchmarks/: _common
from _common import provenance

# On a CPU shared with other jobs wall time measures the neighbours; one thread's process CPU
# time is the time it actually ran. CUDA timings (untested here) use the wall clock.
CLOCK = {"cpu": time.process_time, "cuda": time.perf_counter}
clock = time.process_time


def _median_time(fn, repeats: int) -> float:
    fn()  # warm-up
    ts = []
    for _ in range(repeats):
        t0 = clock()
        fn()
        ts.append(clock() - t0)
    return statistics.median(ts)


def ceilings(device: str, dtype: torch.dtype, repeats: int) -> dict:
    n = 2048
    a, b = torch.randn(n, n, device=device, dtype=dtype), torch.randn(n, n, device=device, dtype=dtype)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    t_mm = _median_time(lambda: (a @ b, sync()), repeats)
    x = torch.empty(64 * 2**20, device=device, dtype=torch.float32)  # 256 MB
    y = torch.empty_like(x)
    t_cp = _median_time(lambda: (y.copy_(x), sync()), repeats)
    return {"peak_flops": 2 * n**3 / t_mm, "bandwidth_Bps": 2 * x.numel() * 4 / t_cp}


def model_params(model) -> int:
    emb = model.get_input_embeddings().weight
    return sum(p.numel() for p in model.parameters() if p is not emb)


def sampler_roofline(policy, tok, N: int, T: int, ceil: dict, repeats: int) -> dict:
    from noma_prorl_bench.rollout.sampling import generate

    ids = torch.randint(4, 200, (N, 16), generator=torch.Generator().manual_seed(0))
    P = ids.shape[1]

    def run(n_new):
        return generate(policy, ids, n_new, 1.0, -1, tok.pad_id, torch.Generator().manual_seed(0))

    t_prefill = _median_time(lambda: run(1), repeats)  # prefill + one sample, no decode
    t_full = _median_time(lambda: run(T), repeats)
    decode_tok_s = N * (T - 1) / (t_full - t_prefill)
    cfg = policy.model.config
    params = model_params(policy.model)
    bytes_w = params * policy.model.dtype.itemsize
    kv_heads = getattr(cfg, "num_key_value_heads", cfg.num_attention_heads)
    head_dim = cfg.hidden_size // cfg.num_attention_heads
    kv_bytes = 2 * cfg.num_hidden_layers * N * kv_heads * head_dim * (P + T / 2) * 4  # mean filled length
    read_bound = N / ((bytes_w + kv_bytes) / ceil["bandwidth_Bps"])
    compute_bound = ceil["peak_flops"] / (2 * params)
    roof = min(read_bound, compute_bound)
    return {
        "N": N,
        "P": P,
        "T": T,
        "params": params,
        "weight_bytes": bytes_w,
        "kv_bytes_mean": kv_bytes,
        "decode_tok_s": decode_tok_s,
        "weight_read_bound_tok_s": read_bound,
        "compute_bound_tok_s": compute_bound,
        "binding": "weight-read" if read_bound < compute_bound else "compute",
        "fraction_of_roofline": decode_tok_s / roof,
        "fraction_of_weight_read_bound": decode_tok_s / read_bound,
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description="sampler and training step against the device's ceilings")
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--N", type=int, default=64)
    p.add_argument("--T", type=int, default=64)
    p.add_argument("--B", type=int, default=4, help="train step: prompts")
    p.add_argument("--G", type=int, default=4, help="train step: samples per prompt")
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)
    import transformers

    from noma_prorl_bench.models.hf import load_hf_policy
    from noma_prorl_bench.models.tiny_hf import build_tiny_hf_model

    torch.set_num_threads(a.threads)
    device = "cpu"
    global clock
    clock = CLOCK[device]
    out = {
        **provenance(),
        "device": f"cpu ({platform.processor() or platform.machine()}), {a.threads} thread(s)",
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "args": vars(a),
    }
    print(
        f"# {out['device']}, torch {torch.__version__}, transformers {transformers.__version__}; "
        f"llama hidden={a.hidden} layers={a.layers} float32",
        flush=True,
    )
    ceil = ceilings(device, torch.float32, a.repeats)
    out["ceilings"] = ceil
    print(
        f"peak matmul {ceil['peak_flops'] / 1e9:.1f} GFLOP/s (fp32, 2048^3), copy bandwidth "
        f"{ceil['bandwidth_Bps'] / 1e9:.1f} GB/s",
        flush=True,
    )
    with tempfile.TemporaryDirectory() as tmp:
        path = build_tiny_hf_model(f"{tmp}/llama", "llama", hidden=a.hidden, layers=a.layers, heads=a.heads, seed=0)
        policy, tok = load_hf_policy(path, device=device)
        s = sampler_roofline(policy, tok, a.N, a.T, ceil, a.repeats)
        out["sampler"] = s
        print(
            f"sampler decode: {s['decode_tok_s']:,.0f} tok/s; weight-read bound {s['weight_read_bound_tok_s']:,.0f}, "
            f"compute bound {s['compute_bound_tok_s']:,.0f} -> {100 * s['fraction_of_roofline']:.1f}% of the "
            f"{s['binding']} roofline ({100 * s['fraction_of_weight_read_bound']:.2f}% of the weight-read bound)",
            flush=True,
        )
        t = train_step_flops(str(path), a, s["params"], ceil)
        out["train"] = t
        print(
            f"train update (fwd+bwd+Adam over {t['update_tokens']:.0f} tokens): {t['time_train_s']:.3f} s, "
            f"{t['model_flops_per_s'] / 1e9:.2f} GFLOP/s = {100 * t['fraction_of_peak']:.1f}% of peak matmul",
            flush=True,
        )
    if a.out:
        with open(a.out, "w") as f:
            json.dump(out, f, indent=2)
    return 0


def train_step_flops(model_dir: str, a, params: int, ceil: dict) -> dict:
    """Median time of the update's minibatch steps (forward, backward, clip, Adam; first Trainer
    step dropped) and 6 * params * update tokens / it."""
    from noma_prorl_bench.config import make_config
    from noma_prorl_bench.training.trainer import Trainer

    with tempfile.TemporaryDirectory() as tmp:
        cfg = make_config(
            {
                "outdir": tmp,
                "model": f"hf:{model_dir}",
                "task": "keyword_inclusion",
                "batch_size": a.B,
                "group_size": a.G,
                "max_new_tokens": a.T,
                "ppo_epochs": 1,
                "minibatches": 1,
                "beta": 0.0,
                "variant": "B",
                "warmstart_steps": 0,
                "steps": a.steps,
                "eval_every": 10**6,
                "n_val": 8,
                "quiet": True,
                "lr": 1e-5,
                "threads": a.threads,
            }
        )
        tr = Trainer.from_config(cfg).start()
        seen, spent = [], []
        orig = tr.learner.minibatch_step

        def spy(batch, sl, inp, *args, **kwargs):
            seen.append(batch.tokens[sl].numel())  # positions through forward+backward
            t0 = clock()
            out = orig(batch, sl, inp, *args, **kwargs)
            spent.append(clock() - t0)
            return out

        tr.learner.minibatch_step = spy
        rows = []
        for _ in range(a.steps):
            seen.clear()
            spent.clear()
            tr.train_step()
            rows.append({"time_train_s": sum(spent), "update_tokens": sum(seen)})
    rows = rows[1:] or rows
    t = statistics.median(r["time_train_s"] for r in rows)
    n_tok = statistics.median(r["update_tokens"] for r in rows)
    fl = 6 * params * n_tok / t
    return {
        "time_train_s": t,
        "update_tokens": n_tok,
        "model_flops_per_s": fl,
        "fraction_of_peak": fl / ceil["peak_flops"],
        "steps": rows,
    }


if __name__ == "__main__":
    raise SystemExit(main())
