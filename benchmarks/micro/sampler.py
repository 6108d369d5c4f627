"""Sampler tokens/s: our `rollout.generate` vs `transformers` `generate` on the same HF model.

Same model (a random Llama-style directory built offline by `models/tiny_hf.py`, float32), same
prompts (keyword_inclusion, the first B prompts of our trainer's data stream, each repeated G
times, left-padded: N = B*G), same sampling (temperature 1, no top-k / top-p, multinomial), and
exactly T new tokens per sequence on every path (EOS disabled: our sampler gets eos_id -1,
`generate` gets `eos_token_id=None` and `min_new_tokens=T`). Paths:
  ours                  rollout.generate on HFPolicy as the trainer calls it: each distinct prompt
                        prefilled once (group_size=G) into a preallocated StaticCache shared by
                        its G samples, in-place decode, device-side EOS bookkeeping
  ours_inverse_cdf      ours with --sample_draw inverse_cdf (one uniform per row and token instead
                        of generate's exponential race over the vocabulary: the same distribution)
  ours_plain, ours_inverse_cdf_plain
                        ours / ours_inverse_cdf with --decode_weights plain (the Linears' own
                        F.linear instead of weights packed once for MKL / oneDNN: the same bits)
  ours_noshare          the same without prefix sharing (all N rows prefilled)
  ours_dynamic_noshare  the same loop on the model's DynamicCache, all N rows prefilled (close to
                        the earlier sampler)
  hf_dynamic            model.generate(do_sample=True), default DynamicCache
  hf_static             model.generate(..., cache_implementation="static")
and, for reference only (a different model), our own `TransformerPolicy` of the same width
and depth (`transformer`); `--compile_transformer MODE` adds `transformer_compiled`, the same
policy with `--compile_decode MODE` (models/static_decode.py: the decode step through
torch.compile with static shapes). Every path is first run once untimed at each T (the same
shapes as the timed runs, so the compiled path compiles there, not inside a timed run); that
first call's time is recorded (`first_wall_s`, `first_cpu_s`) and, for the compiled path,
first call minus the median call is its compile time. Set TORCHINDUCTOR_FORCE_DISABLE_CACHES=1
to measure a cold compile (inductor otherwise reuses its on-disk cache from an earlier run).
Runs alternate path by path within each repeat; we report medians of tokens/s (N*T / wall
seconds of the call) and the ratios of ours to `generate`, from wall time and from process CPU
time (which a shared machine disturbs less).

On CUDA (`--device cuda`, untested so far: no GPU) each timing is
bracketed by torch.cuda.synchronize, and `--compile` adds `ours_compiled`
(HFPolicy.compile_decode: the static-cache decode step under torch.compile "reduce-overhead").

Run (CPU, one thread, as recorded in docs/performance.md):
    OMP_NUM_THREADS=1 nice -n 5 env PYTHONPATH=src .venv/bin/python benchmarks/micro/sampler.py \
        --hidden 256 --layers 4 --B 8 --G 8 --lengths 64 128 --repeats 5 --out sampler.json
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import statistics
import sys
import tempfile
import time

import torch

from noma_prorl_bench.rollout.sampling import generate

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # benchmarks/: _common
from _common import provenance


class DynamicOnly(torch.nn.Module):
    """Hides `prefill(capacity=...)` so that our sampler falls back to the DynamicCache."""

    def __init__(self, policy):
        super().__init__()
        self.policy = policy

    def prefill(self, tokens):
        return self.policy.prefill(tokens)

    def decode(self, tok, state):
        return self.policy.decode(tok, state)


def prompts_for(tok, B: int, G: int, which: str = "keyword_inclusion") -> torch.Tensor:
    """[N, P] left-padded prompts (B distinct, G copies each): keyword_inclusion, or `demo`: the
    smollm2_demo preset's rg:basic_arithmetic prompts (the caller's tokenizer wraps them in the chat
    template, as the demo's does; needs reasoning-gym)."""
    import numpy as np

    from noma_prorl_bench.config.specs import RunSpecs
    from noma_prorl_bench.tasks import make_task

    if which == "demo":
        from noma_prorl_bench.config import make_config

        cfg = make_config({"preset": "smollm2_demo", "outdir": "/dev/null"})
        task = make_task(cfg.task, n_val=8, spec=RunSpecs.from_config(cfg).task)
    else:
        task = make_task("keyword_inclusion", n_val=8)
    ex = task.sample(np.random.default_rng([0, 1]), B)
    return tok.encode_prompts([e.prompt for e in ex for _ in range(G)])


def _sync(ids) -> None:
    if ids.device.type == "cuda":
        torch.cuda.synchronize()


def run_ours(policy, ids, T, pad_id, seed, G=1, draw="exponential", weights="packed") -> tuple[float, float]:
    if hasattr(policy, "decode_weights"):
        policy.decode_weights = weights  # --decode_weights (models/packed.py)
    g = torch.Generator(device=ids.device).manual_seed(seed)
    _sync(ids)
    t0, c0 = time.perf_counter(), time.process_time()
    resp, *_ = generate(policy, ids, T, 1.0, eos_id=-1, pad_id=pad_id, generator=g, group_size=G, draw=draw)
    _sync(ids)
    dt, ct = time.perf_counter() - t0, time.process_time() - c0
    assert resp.shape == (ids.shape[0], T), resp.shape
    return dt, ct


def run_hf(model, ids, T, pad_id, seed, static: bool) -> tuple[float, float]:
    torch.manual_seed(seed)
    mask = (ids != pad_id).long().cumsum(1).gt(0).long()
    kw = {"cache_implementation": "static"} if static else {}
    _sync(ids)
    t0, c0 = time.perf_counter(), time.process_time()
    with torch.inference_mode():
        out = model.generate(
            input_ids=ids,
            attention_mask=mask,
            do_sample=True,
            temperature=1.0,
            top_k=0,
            top_p=1.0,
            max_new_tokens=T,
            min_new_tokens=T,
            eos_token_id=None,
            pad_token_id=pad_id,
            **kw,
        )
    _sync(ids)
    dt, ct = time.perf_counter() - t0, time.process_time() - c0
    assert out.shape[1] - ids.shape[1] == T, out.shape
    return dt, ct


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description="sampler tokens/s: ours vs transformers generate")
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--B", type=int, default=8)
    p.add_argument("--G", type=int, default=8)
    p.add_argument("--lengths", type=int, nargs="+", default=[64, 128])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    p.add_argument(
        "--paths",
        nargs="+",
        default=["ours", "ours_noshare", "ours_dynamic_noshare", "hf_dynamic", "hf_static", "transformer"],
    )
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument(
        "--compile",
        action="store_true",
        help="CUDA only: also time ours_compiled (HFPolicy.compile_decode, CUDA graphs)",
    )
    p.add_argument(
        "--compile_transformer",
        default="off",
        choices=["off", "default", "reduce-overhead"],
        help="also time transformer_compiled: our TransformerPolicy with --compile_decode MODE",
    )
    p.add_argument(
        "--model_dir",
        default=None,
        help="a converted HF model directory (e.g. SmolLM2-135M-Instruct) instead of the random tiny Llama; "
        "the `transformer` path is then left out (no model of that size)",
    )
    p.add_argument(
        "--prompts",
        default="keyword_inclusion",
        choices=["keyword_inclusion", "demo"],
        help="keyword_inclusion (no chat template), or demo: the smollm2_demo preset's rg:basic_arithmetic "
        "chat prompts (P ~55 with SmolLM2's template; needs reasoning-gym)",
    )
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)
    import transformers

    from noma_prorl_bench.models.hf import load_hf_policy
    from noma_prorl_bench.models.tiny_hf import build_tiny_hf_model
    from noma_prorl_bench.models.transformer import TransformerPolicy

    torch.set_num_threads(a.threads)
    device = a.device
    name = torch.cuda.get_device_name() if device == "cuda" else (platform.processor() or platform.machine())
    info = {
        **provenance(),
        "device": f"{device} ({name})",
        "threads": a.threads,
        "loadavg_start": os.getloadavg(),
        "inductor_caches_disabled": os.environ.get("TORCHINDUCTOR_FORCE_DISABLE_CACHES", ""),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        # the home directory as ~ (a result file names no machine's paths)
        "args": {
            k: (v.replace(os.path.expanduser("~"), "~", 1) if isinstance(v, str) else v) for k, v in vars(a).items()
        },
    }
    print(
        f"# {info['device']}, torch {torch.__version__}, transformers {transformers.__version__}, "
        f"threads={a.threads}; "
        + (a.model_dir if a.model_dir else f"llama hidden={a.hidden} layers={a.layers} heads={a.heads}")
        + f" {a.dtype}; "
        f"N={a.B * a.G} (B={a.B} x G={a.G}); temperature 1, EOS off; {a.repeats} alternating repeats, medians",
        flush=True,
    )
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        if a.model_dir:
            path = os.path.expanduser(a.model_dir)
            a.paths = [k for k in a.paths if k != "transformer"]
        else:
            path = build_tiny_hf_model(f"{tmp}/llama", "llama", hidden=a.hidden, layers=a.layers, heads=a.heads, seed=0)
        policy, tok = load_hf_policy(path, device=device, dtype=a.dtype, chat=a.prompts == "demo")
        ids = prompts_for(tok, a.B, a.G, a.prompts).to(device)
        N, P = ids.shape
        torch.manual_seed(0)
        ours_tf = (
            None
            if a.model_dir
            else TransformerPolicy(tok.vocab_size, a.hidden, a.layers, a.heads, P + max(a.lengths)).eval().to(device)
        )
        G = a.G
        fns = {
            "ours": lambda T, s: run_ours(policy, ids, T, tok.pad_id, s, G),
            "ours_inverse_cdf": lambda T, s: run_ours(policy, ids, T, tok.pad_id, s, G, draw="inverse_cdf"),
            "ours_plain": lambda T, s: run_ours(policy, ids, T, tok.pad_id, s, G, weights="plain"),
            "ours_inverse_cdf_plain": lambda T, s: run_ours(
                policy, ids, T, tok.pad_id, s, G, draw="inverse_cdf", weights="plain"
            ),
            "ours_noshare": lambda T, s: run_ours(policy, ids, T, tok.pad_id, s),
            "ours_dynamic_noshare": lambda T, s: run_ours(DynamicOnly(policy), ids, T, tok.pad_id, s),
            "hf_dynamic": lambda T, s: run_hf(policy.model, ids, T, tok.pad_id, s, static=False),
            "hf_static": lambda T, s: run_hf(policy.model, ids, T, tok.pad_id, s, static=True),
            "transformer": lambda T, s: run_ours(ours_tf, ids, T, tok.pad_id, s, G),
        }
        fns = {k: fns[k] for k in a.paths}
        if a.compile_transformer != "off":
            tf_compiled = copy.deepcopy(ours_tf)
            tf_compiled.compile_decode(a.compile_transformer)
            fns["transformer_compiled"] = lambda T, s: run_ours(tf_compiled, ids, T, tok.pad_id, s, G)
        if a.compile:
            compiled = copy.deepcopy(policy)
            compiled.compile_decode()
            fns["ours_compiled"] = lambda T, s: run_ours(compiled, ids, T, tok.pad_id, s, G)
        print(f"# prompts: P={P} (left-padded, {int((ids == tok.pad_id).sum())} PAD tokens in all)")
        for T in a.lengths:
            first = {k: f(T, 0) for k, f in fns.items()}  # warm-up (compiles), not in the medians
            wall, cpu = {k: [] for k in fns}, {k: [] for k in fns}
            for r in range(a.repeats):
                order = list(fns) if r % 2 == 0 else list(reversed(list(fns)))
                for k in order:
                    w, c = fns[k](T, r)
                    wall[k].append(w)
                    cpu[k].append(c)
            row = {
                "N": N,
                "P": P,
                "T": T,
                "wall_s": wall,
                "cpu_s": cpu,
                "loadavg": os.getloadavg(),
                "first_wall_s": {k: v[0] for k, v in first.items()},
                "first_cpu_s": {k: v[1] for k, v in first.items()},
                "tok_s": {k: N * T / statistics.median(v) for k, v in wall.items()},
                "tok_cpu_s": {k: N * T / statistics.median(v) for k, v in cpu.items()},
                # per repeat (the paths of one repeat ran one after the other): generate's CPU s over ours
                "pair_ratios_cpu": {
                    f"{o}/{h}": [hc / oc for oc, hc in zip(cpu[o], cpu[h])]
                    for o in ("ours", "ours_inverse_cdf", "ours_plain", "ours_inverse_cdf_plain")
                    for h in ("hf_dynamic", "hf_static")
                    if o in cpu and h in cpu
                },
            }
            for key in ("tok_s", "tok_cpu_s"):
                ts = row[key]
                row[f"ratios_{key}"] = {
                    f"{o}/{h}": ts[o] / ts[h]
                    for o in (
                        "ours",
                        "ours_inverse_cdf",
                        "ours_plain",
                        "ours_inverse_cdf_plain",
                        "ours_noshare",
                        "ours_dynamic_noshare",
                    )
                    for h in ("hf_dynamic", "hf_static")
                    if o in ts and h in ts
                }
                print(f"T={T} {key}: " + ", ".join(f"{k} {v:,.0f}" for k, v in ts.items()), flush=True)
                if "transformer" in ts and "transformer_compiled" in ts:
                    tc = ts["transformer_compiled"] / ts["transformer"]
                    row[f"ratios_{key}"]["transformer_compiled/transformer"] = tc
                print("   ratios: " + ", ".join(f"{k} {v:.2f}x" for k, v in row[f"ratios_{key}"].items()), flush=True)
            for k, v in row["pair_ratios_cpu"].items():
                print(f"   {k} per repeat (CPU): " + ", ".join(f"{x:.2f}" for x in v), flush=True)
            if "transformer_compiled" in fns:
                for kind in ("wall", "cpu"):
                    med = statistics.median((wall if kind == "wall" else cpu)["transformer_compiled"])
                    row[f"compile_{kind}_s"] = row[f"first_{kind}_s"]["transformer_compiled"] - med
                fw, fc = row["first_wall_s"]["transformer_compiled"], row["first_cpu_s"]["transformer_compiled"]
                print(
                    f"T={T} transformer_compiled: first call {fw:.1f} s wall / {fc:.1f} s CPU; compile "
                    f"~{row['compile_wall_s']:.1f} s wall / {row['compile_cpu_s']:.1f} s CPU",
                    flush=True,
                )
            rows.append(row)
    if a.out:
        with open(a.out, "w") as f:
            json.dump({**info, "rows": rows}, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
