"""Rollout tokens/s with the KV cache vs without it (full recompute of the prefix every step).

Both paths run the real sampler (``rollout.generate``: prefill, then one ``decode`` per token);
"no cache" wraps the same policy in ``NoCachePolicy``, whose decode recomputes the whole
prefix (only the last position goes through the output head). EOS is disabled so every run
produces exactly N * T tokens. Cache and no-cache runs alternate; we report medians.

Models: the tiny transformer policy (``--model transformer``) and a tiny random Llama built
offline by ``models/tiny_hf.py`` (the ``--model hf:PATH`` code path).

Run (1 thread, as recorded in docs/models.md):
    PYTHONPATH=src python benchmarks/micro/rollout_kv.py --lengths 16 64 256 --repeats 5
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import tempfile
import time

import torch

from noma_prorl_bench.models.transformer import NoCachePolicy, TransformerPolicy
from noma_prorl_bench.rollout.sampling import generate


def build_models(d_model: int, layers: int, heads: int, max_len: int, tmp: str):
    """{name: (policy, vocab_size, pad_id)} for the tiny transformer and the tiny HF Llama."""
    from noma_prorl_bench.models.hf import load_hf_policy
    from noma_prorl_bench.models.tiny_hf import build_tiny_hf_model
    from noma_prorl_bench.tasks.base import CharTokenizer

    tok = CharTokenizer()
    torch.manual_seed(0)
    transformer = TransformerPolicy(tok.vocab_size, d_model, layers, heads, max_len).eval()
    path = build_tiny_hf_model(f"{tmp}/llama", "llama", hidden=d_model, layers=layers, heads=heads, seed=0)
    hf, hf_tok = load_hf_policy(path, device="cpu", dtype="float32")
    return {
        f"transformer d{d_model} L{layers}": (transformer, tok.vocab_size, tok.pad_id),
        f"hf-llama h{d_model} L{layers}": (hf, hf_tok.vocab_size, hf_tok.pad_id),
    }


def time_rollout(policy, prompts: torch.Tensor, T: int, pad_id: int, seed: int) -> float:
    """Seconds for one rollout of T tokens per sequence (EOS disabled, so exactly T)."""
    g = torch.Generator().manual_seed(seed)
    t0 = time.perf_counter()
    resp, *_ = generate(policy, prompts, T, 1.0, eos_id=-1, pad_id=pad_id, generator=g)
    dt = time.perf_counter() - t0
    assert resp.shape[1] == T
    return dt


def bench(models: dict, N: int, P: int, lengths: list[int], repeats: int) -> list[dict]:
    """Alternating cache / no-cache runs per (model, T); median tokens/s of each."""
    rows = []
    for name, (policy, vocab, pad_id) in models.items():
        g = torch.Generator().manual_seed(0)
        prompts = torch.randint(4, min(vocab, 60), (N, P), generator=g)  # [N, P], no padding
        paths = {"cache": policy, "no_cache": NoCachePolicy(policy)}
        for T in lengths:
            times = {k: [] for k in paths}
            for k, p in paths.items():  # warm-up, not timed
                time_rollout(p, prompts, min(T, 8), pad_id, seed=0)
            for r in range(repeats):
                order = list(paths) if r % 2 == 0 else list(reversed(paths))
                for k in order:
                    times[k].append(time_rollout(paths[k], prompts, T, pad_id, seed=r))
            med = {k: statistics.median(v) for k, v in times.items()}
            rows.append(
                {
                    "model": name,
                    "T": T,
                    "N": N,
                    "P": P,
                    "cache_tok_s": N * T / med["cache"],
                    "no_cache_tok_s": N * T / med["no_cache"],
                    "cache_s": med["cache"],
                    "no_cache_s": med["no_cache"],
                    "speedup": med["no_cache"] / med["cache"],
                }
            )
            print_row(rows[-1])
    return rows


def print_row(r: dict) -> None:
    print(
        f"| {r['model']:<20} | {r['T']:>4} | {r['cache_tok_s']:>12,.0f} | {r['no_cache_tok_s']:>15,.0f} "
        f"| {r['speedup']:>8.2f}x |",
        flush=True,
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="rollout tokens/s: KV cache vs full recompute")
    p.add_argument("--lengths", type=int, nargs="+", default=[16, 64, 256])
    p.add_argument("--batch", type=int, default=16, help="N sequences per rollout")
    p.add_argument("--prompt_len", type=int, default=16, help="P prompt tokens")
    p.add_argument("--d_model", type=int, default=64)
    p.add_argument("--n_layers", type=int, default=2)
    p.add_argument("--n_heads", type=int, default=4)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", default=None, help="optional JSON file for the rows")
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    print(
        f"# torch {torch.__version__}, {platform.processor() or platform.machine()}, threads={a.threads}, "
        f"N={a.batch}, P={a.prompt_len}, repeats={a.repeats} (alternating, medians)"
    )
    print("| model                |    T | cache tok/s  | no-cache tok/s  | speedup   |")
    print("|----------------------|-----:|-------------:|----------------:|----------:|")
    with tempfile.TemporaryDirectory() as tmp, torch.no_grad():
        models = build_models(a.d_model, a.n_layers, a.n_heads, a.prompt_len + max(a.lengths), tmp)
        rows = bench(models, a.batch, a.prompt_len, a.lengths, a.repeats)
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"args": vars(a), "rows": rows}, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
