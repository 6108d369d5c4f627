"""Seconds per GRPO step: this harness vs `trl.GRPOTrainer` on the same model, prompts and reward.

The same work on both sides, CPU, float32 (or bf16: `--dtype bf16`), one torch thread per process:
  model       a tiny random Llama built offline (`models/tiny_hf.build_tiny_hf_model`), loaded
              from its directory by both (TRL gets the path, so with beta > 0 it loads pi_ref too)
  prompts     keyword_inclusion, the exact sequence our trainer samples: B prompts per
              step replayed from its data stream into a `datasets.Dataset` (TRL: shuffle off)
  reward      `KeywordInclusionTask.reward` (= rewards.keyword_inclusion_reward_fn) on both
  one step    B prompts x G samples of at most T tokens (temperature 1, no top-k/top-p) -> rewards
              -> group-normalised advantages -> (beta > 0: one pi_ref forward over the batch) ->
              ONE forward/backward over all B*G sequences -> ONE optimizer step (clip 0.2,
              grad-norm clip 1.0, constant LR, k3 KL in the loss, token-mean loss).
              Ours: --ppo_epochs 1 --minibatches 1 --kl_estimator k3 (beta 0: --variant B, no
              reference model, like TRL). TRL: num_iterations=1, steps_per_generation=1,
              gradient_accumulation_steps=1, per_device_train_batch_size=B*G, loss_type="dapo"
              (token-level normalisation), no vLLM, bf16=False.
Runs alternate (ours, TRL, ours, TRL, ...) in separate subprocesses; each reports the wall time
and the process CPU time between consecutive step ends (the first step, which pays one-off
warm-up costs, is dropped), the response tokens it generated in each timed step, and its start and
end on the wall clock. Pair i is run i of ours and run i of TRL, made one after the other; the
headline `ratio_trl_over_ours` is the median over pairs of TRL's mean process CPU s per timed step
over ours (`_pairs.pair_ratios`: the pairs stay in run order, never sorted, and runs that did not
alternate in time are refused), `pair_ratios` lists them; `ratio_trl_over_ours_per_token` does the
same per generated response token (the two sides sample different completions, so their tokens
per step differ: `tokens_per_step_ours`, `tokens_per_step_trl`). Wall-clock pair ratios are kept
(`pair_ratios_wall`) but a shared machine makes them mostly a measure of waiting for a core. Also
generation tokens per CPU second of each side's generate call, and our sampler with and without
the KV cache on the same model and shapes (`rollout_kv.py`'s timing, EOS off; `--rollout_kv off`
skips it: the no-cache path costs minutes per repeat at hidden 512). Every results file carries the
machine record (`io/machine.machine_info`), the commit and the load averages at the start, after
each run and at the end.

`--dtype bf16`: ours `--dtype bf16_mixed` (float32 adapters and Adam state, frozen Linear weights
held in bf16, forwards under bf16 autocast); TRL `bf16=True` with the model loaded in bf16
(`model_init_kwargs={"dtype": torch.bfloat16}`). Default float32 on both sides.

Gradient checkpointing is set the same on both sides, one row per setting (`--ckpt off on`):
TRL's GRPOConfig turns it on by default (`gradient_checkpointing=True`), which the runs before
the memory work left on for TRL and off for us. Each worker also reports its peak RSS (ru_maxrss: the
model, optimizer, activations and every imported library, so TRL's larger import set counts).

`--real`: the real model instead (SmolLM2-135M-Instruct from `prorl-bench get-model
smollm2-135m-instruct`) with the smollm2_demo recipe on both sides: LoRA rank 8 (alpha 16, no
dropout) on q/k/v/o with the base frozen (TRL: a PEFT LoraConfig, so its reference with beta > 0 is
the base with the adapters disabled; ours: a frozen copy of the adapted policy, one A1 forward per
step), rg:basic_arithmetic prompts (the preset's task_kwargs) as one chat user turn on both sides
(TRL: conversational prompts, the same chat template), the task's own reward, temperature 0.7.
Writes {"ratio_trl_over_ours", "pair_ratios", "ratio_trl_over_ours_per_token", "tokens_per_step_ours",
"tokens_per_step_trl", "machine", "settings", "runs", ...} (the first beta / checkpointing row).

Run (recorded in docs/models.md and docs/performance.md):
    PYTHONPATH=src python benchmarks/speed/vs_trl.py --betas 0.04 0 --repeats 5 --steps 8
    PYTHONPATH=src python benchmarks/speed/vs_trl.py --betas 0.04 --ckpt off on --repeats 3 --steps 6 \
        --hidden 256 --layers 4 --heads 8 --T 64
    PYTHONPATH=src python benchmarks/speed/vs_trl.py --betas 0.04 --ckpt off on --repeats 3 --steps 6 \
        --hidden 512 --layers 8 --heads 8 --T 64 --rollout_kv off
    for d in float32 bf16; do PYTHONPATH=src setsid python benchmarks/speed/vs_trl.py --real --betas 0.01 --ckpt off \
        --repeats 3 --steps 3 --lr 2e-4 --dtype $d --out benchmarks/results/vs_trl_smollm2_$d.json; done
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # benchmarks/: _common, _pairs
from _common import SRC, git_commit, run_worker, sample_draws
from _pairs import pair_ratios, step_matched_ratios
from vs_trl_workers import REAL_TASK, WORKERS, real_config


# ============================================================================ driver
def count_params(model_dir: str) -> dict:
    """Parameter count of the benchmark model (all tensors; the input embedding separately)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir)
    return {
        "total": sum(p.numel() for p in model.parameters()),
        "input_embedding": model.get_input_embeddings().weight.numel(),
        "vocab": model.config.vocab_size,
    }


def spawn(worker: str, a, beta: float, ckpt: str = "off") -> dict:
    argv = (
        [
            "--worker",
            worker,
            "--model_dir",
            a.model_dir,
            "--beta",
            str(beta),
            "--B",
            str(a.B),
            "--G",
            str(a.G),
            "--T",
            str(a.T),
            "--lr",
            str(a.lr),
            "--steps",
            str(a.steps),
            "--seed",
            str(a.seed),
            "--repeats",
            str(a.repeats),
            "--grad_ckpt",
            ckpt,
            "--logprob_chunk",
            str(a.logprob_chunk),
            "--dtype",
            a.dtype,
            "--temperature",
            str(a.temperature),
            "--sample_draw",
            a.sample_draw,
        ]
        + (["--real"] if a.real else [])
        + (["--shared_prompt"] if a.shared_prompt else [])
    )
    return run_worker(__file__, argv, worker)


def rollout_kv(a) -> dict:
    """Our sampler with vs without the KV cache on the benchmark model (a worker process)."""
    ro = spawn("rollout", a, 0.0)
    print(
        f"\n# our sampler, same model, N={ro['N']} P={ro['P']} T={ro['T']} (EOS disabled): "
        f"KV cache {ro['cache_tok_s']:,.0f} tok/s, no cache {ro['no_cache_tok_s']:,.0f} tok/s "
        f"({ro['cache_tok_s'] / ro['no_cache_tok_s']:.2f}x)",
        flush=True,
    )
    return ro


def summarise(runs: list[dict]) -> dict:
    """Medians over every timed step of every run: wall and CPU seconds; generation tokens per
    CPU second of the generate calls."""
    gen_s = sum(s for r in runs for s in r["gen_s"])
    gen_tok = sum(t for r in runs for t in r["gen_tokens"])
    return {
        "median_step_s": statistics.median(s for r in runs for s in r["step_s"]),
        "median_step_cpu_s": statistics.median(s for r in runs for s in r["step_cpu_s"]),
        "run_medians": [statistics.median(r["step_s"]) for r in runs],
        "gen_tok_s": gen_tok / gen_s if gen_s else None,
        "completion_len_mean": statistics.mean(
            r["completion_len_mean"] for r in runs if r["completion_len_mean"] is not None
        ),
        "peak_rss_mb": statistics.median(r["peak_rss_mb"] for r in runs),
        "gen_tokens_per_step": statistics.mean(t for r in runs for t in r["gen_tokens"]),
    }


def compare(a, beta: float, ckpt: str) -> dict:
    """Alternating ours / TRL runs at one (beta, checkpointing) setting -> the table row. The ratios
    are per pair (run i of ours, run i of TRL, made one after the other), in the order run, and
    their medians (`_pairs.pair_ratios`): process CPU s per step, and per generated token."""
    runs = {"ours": [], "trl": []}
    loads = []
    for _ in range(a.repeats):
        for side in ("ours", "trl"):
            runs[side].append(spawn(side, a, beta, ckpt))
            loads.append(runs[side][-1]["loadavg_end"])
    s = {k: summarise(v) for k, v in runs.items()}
    pr = pair_ratios(runs["ours"], runs["trl"])
    row = {
        "grad_ckpt": ckpt,
        "beta": beta,
        "ours": s["ours"],
        "trl": s["trl"],
        "ratio_trl_over_ours": pr["ratio"],
        "ratio_trl_over_ours_per_token": pr["ratio_per_token"],
        "pair_ratios": pr["pair_ratios"],
        "pair_ratios_per_token": pr["pair_ratios_per_token"],
        "cpu_s_per_step_ours": pr["cpu_s_per_step_a"],
        "cpu_s_per_step_trl": pr["cpu_s_per_step_b"],
        "tokens_per_step_ours": pr["tokens_per_step_a"],
        "tokens_per_step_trl": pr["tokens_per_step_b"],
        "pair_ratios_wall": [t / o for o, t in zip(s["ours"]["run_medians"], s["trl"]["run_medians"])],
        "step_matched": step_matched_ratios(runs["ours"], runs["trl"]),
        "loadavg_after_each_run": loads,
        "runs": runs,
    }
    o, t = s["ours"], s["trl"]
    pairs = ", ".join(f"{r:.2f}" for r in pr["pair_ratios"])
    pairs_tok = ", ".join(f"{r:.2f}" for r in pr["pair_ratios_per_token"])
    print(
        f"| {ckpt} | {beta:g} | {statistics.median(pr['cpu_s_per_step_a']):.3f} "
        f"| {statistics.median(pr['cpu_s_per_step_b']):.3f} | **{pr['ratio']:.2f}x** ({pairs}) "
        f"| {pr['ratio_per_token']:.2f}x ({pairs_tok}) "
        f"| {statistics.median(pr['tokens_per_step_a']):.0f} / {statistics.median(pr['tokens_per_step_b']):.0f} "
        f"| {o['gen_tok_s']:,.0f} / {t['gen_tok_s']:,.0f} "
        f"| {o['peak_rss_mb']:.0f} / {t['peak_rss_mb']:.0f} "
        f"| {min(x[0] for x in loads):.1f}-{max(x[0] for x in loads):.1f} |",
        flush=True,
    )
    for st in row["step_matched"]:
        print(
            f"#   timed step {st['step'] + 1}: tokens ours {st['tokens_a']} / TRL {st['tokens_b']}; TRL / ours "
            f"{st['ratio']:.2f}x ({', '.join(f'{r:.2f}' for r in st['pair_ratios'])})",
            flush=True,
        )
    return row


def real_summary(a, results: dict) -> dict:
    """--real: {"ratio_trl_over_ours", "settings", "runs"} first (the first row's numbers), then the rest."""
    row = results["rows"][0]
    settings = {
        "model": "SmolLM2-135M-Instruct (dequantised Q4_1)",
        "task": REAL_TASK,
        "task_kwargs": real_config(a).task_kwargs,
        "chat_template": True,
        "B": a.B,
        "G": a.G,
        "max_new_tokens": a.T,
        "temperature": a.temperature,
        "lr": a.lr,
        "beta": row["beta"],
        "kl": "k3 in the loss",
        "loss": "clipped ratio 0.2, token-mean (TRL loss_type dapo)",
        "lora": "r 8, alpha 16, q/k/v/o, no dropout, base frozen",
        "ppo_epochs": 1,
        "minibatches": 1,
        "dtype": (
            "bf16: ours --dtype bf16_mixed (float32 adapters and Adam, frozen Linear weights in bf16, "
            "bf16 autocast); TRL bf16=True with the model loaded in bf16"
            if a.dtype == "bf16"
            else "float32 both"
        ),
        "grad_checkpoint": row["grad_ckpt"],
        "sample_draw": f"ours --sample_draw {a.sample_draw}; TRL: transformers' generate (the exponential race)",
        "shared_prompt": (
            "ours --shared_prompt: teacher-forced passes encode each distinct prompt once; TRL: every row's"
            if a.shared_prompt
            else "off: both encode every row's prompt in the teacher-forced passes"
        ),
        "threads": 1,
        "steps_per_run": a.steps,
        "dropped_first_steps": 1,
        "repeats": a.repeats,
        "reference": "ours: a frozen copy of the adapted policy (A1 cached, one forward per step); "
        "TRL: the base with the adapters disabled",
        **results["versions"],
    }
    # the ratio of process CPU seconds per step (one torch thread each): on a shared machine wall time
    # mostly measures how long each process waited for a core; the wall ratio is kept beside it
    keys = (
        "ratio_trl_over_ours",
        "ratio_trl_over_ours_per_token",
        "pair_ratios",
        "pair_ratios_per_token",
        "tokens_per_step_ours",
        "tokens_per_step_trl",
        "cpu_s_per_step_ours",
        "cpu_s_per_step_trl",
        "pair_ratios_wall",
        "step_matched",
    )
    return {
        **{k: row[k] for k in keys},
        "ratio_clock": "median over pairs (run i of ours, run i of TRL, made one after the other, in run order) "
        "of TRL's mean process CPU s per timed step over ours; per token: CPU s per generated response token",
        "settings": settings,
        "machine": results["machine"],
        "loadavg_start": results["loadavg_start"],
        "loadavg_end": results["loadavg_end"],
        "loadavg_after_each_run": row["loadavg_after_each_run"],
        "commit": results["commit"],
        "summary": {"ours": row["ours"], "trl": row["trl"]},
        "runs": row["runs"],
        "params": results["params"],
        "rows": [{k: v for k, v in r.items() if k != "runs"} for r in results["rows"]],
    }


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description="seconds per GRPO step: noma_prorl_bench vs trl.GRPOTrainer (CPU)")
    p.add_argument("--betas", type=float, nargs="+", default=[0.04, 0.0], help="KL coefficients (equal in both)")
    p.add_argument("--repeats", type=int, default=3, help="alternating run pairs per beta")
    p.add_argument("--steps", type=int, default=8, help="optimizer steps per run (the first is not timed)")
    p.add_argument("--B", type=int, default=4, help="prompts per step")
    p.add_argument("--G", type=int, default=4, help="samples per prompt (group size)")
    p.add_argument("--T", type=int, default=32, help="max completion tokens")
    p.add_argument("--lr", type=float, default=1e-5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument(
        "--ckpt",
        nargs="+",
        default=["off", "on"],
        choices=["off", "on"],
        help="gradient checkpointing, set the same on both sides (TRL's GRPOConfig default is on)",
    )
    p.add_argument("--logprob_chunk", type=int, default=0, help="ours: --logprob_chunk")
    p.add_argument(
        "--rollout_kv",
        default="on",
        choices=["on", "off"],
        help="also time our sampler with vs without the KV cache (off for large models: the "
        "no-cache path recomputes the whole sequence per token)",
    )
    p.add_argument(
        "--dtype",
        default="float32",
        choices=["float32", "bf16"],
        help="float32 on both sides, or bf16: ours --dtype bf16_mixed, TRL bf16=True with bf16 weights",
    )
    p.add_argument(
        "--temperature",
        type=float,
        default=None,
        help="sampling temperature on both sides (default 1.0; 0.7, the demo's, with --real)",
    )
    p.add_argument(
        "--sample_draw",
        default="exponential",
        choices=sample_draws(),
        help="ours: --sample_draw (the same distribution as TRL's draw; inverse_cdf reads one uniform per row)",
    )
    p.add_argument(
        "--shared_prompt",
        action="store_true",
        help="ours: --shared_prompt (the learner and reference passes encode each distinct prompt once)",
    )
    p.add_argument(
        "--real",
        action="store_true",
        help="SmolLM2-135M-Instruct (prorl-bench get-model) with the smollm2_demo recipe: LoRA r8 "
        "on q/k/v/o (PEFT on TRL's side), rg:basic_arithmetic chat prompts, instead of a tiny model",
    )
    p.add_argument("--real_model_dir", default=None, help="--real: the converted model (default: the preset's)")
    p.add_argument("--out", default=None, help="optional JSON file for every run")
    p.add_argument("--grad_ckpt", default="off", help=argparse.SUPPRESS)
    p.add_argument("--worker", choices=["ours", "trl", "rollout"], help=argparse.SUPPRESS)
    p.add_argument("--model_dir", help=argparse.SUPPRESS)
    p.add_argument("--beta", type=float, default=0.0, help=argparse.SUPPRESS)
    return p


def main(argv=None) -> int:
    parser = build_parser()
    a = parser.parse_args(argv)
    if a.shared_prompt and not a.worker and "on" in a.ckpt:
        parser.error(
            "argument --shared_prompt: our --shared_prompt cannot run with gradient checkpointing; use --ckpt off"
        )
    if a.temperature is None:
        a.temperature = 0.7 if a.real else 1.0
    if a.worker:
        WORKERS[a.worker](a)
        return 0
    import torch
    import transformers
    import trl

    sys.path.insert(0, SRC)
    from noma_prorl_bench.models.tiny_hf import build_tiny_hf_model

    print(
        f"# torch {torch.__version__}, transformers {transformers.__version__}, trl {trl.__version__}, "
        f"{platform.machine()}, 1 thread per process; B={a.B} G={a.G} T={a.T} lr={a.lr}, "
        + (
            "SmolLM2-135M-Instruct + LoRA r8 q/k/v/o, rg:basic_arithmetic; "
            if a.real
            else f"tiny llama hidden={a.hidden} layers={a.layers} heads={a.heads}; "
        )
        + f"steps/run={a.steps} "
        f"(first untimed), {a.repeats} alternating pairs per (grad ckpt, beta); ckpt {a.ckpt}",
        flush=True,
    )
    from noma_prorl_bench.io.machine import machine_info

    results = {
        "machine": machine_info(),
        "commit": git_commit(),
        "loadavg_start": os.getloadavg(),
        "args": vars(a),
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__, "trl": trl.__version__},
        "rows": [],
    }
    if a.real:
        from noma_prorl_bench.config.presets import SMOLLM2_DIR

        a.rollout_kv = "off"
    with tempfile.TemporaryDirectory() as tmp:
        a.model_dir = (
            os.path.expanduser(a.real_model_dir or SMOLLM2_DIR)
            if a.real
            else str(
                build_tiny_hf_model(
                    os.path.join(tmp, "llama"), "llama", hidden=a.hidden, layers=a.layers, heads=a.heads, seed=0
                )
            )
        )
        results["params"] = count_params(a.model_dir)
        print(
            f"# parameters: {results['params']['total']:,} ({results['params']['input_embedding']:,} in the "
            f"input embedding, vocab {results['params']['vocab']})",
            flush=True,
        )
        print(
            "| grad ckpt | beta | ours CPU s/step | TRL CPU s/step | TRL / ours per step (pairs) "
            "| TRL / ours per token (pairs) | gen tokens/step ours / TRL | gen tok/CPU-s ours / TRL "
            "| peak RSS MB ours / TRL | load (1 min) |"
        )
        print("|---|-----:|-----:|-----:|-----|-----|-----|-----|-----|-----|")
        for ckpt in a.ckpt:
            for beta in a.betas:
                results["rows"].append(compare(a, beta, ckpt))
        if a.rollout_kv == "on":
            results["rollout_kv"] = rollout_kv(a)
    results["loadavg_end"] = os.getloadavg()
    if a.real:
        results = real_summary(a, results)
    if a.out:
        with open(a.out, "w") as f:
            json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
