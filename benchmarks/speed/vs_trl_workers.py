"""The measured processes of vs_trl.py: our Trainer, trl.GRPOTrainer and our sampler, one per worker.

`vs_trl.py --worker ours|trl|rollout` runs one of these in a fresh process (one torch thread) and it
prints one RESULT line; the shared set-up (model, prompts, reward, step) is described in vs_trl.py.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # benchmarks/: _common, _pairs
from _common import peak_rss_mb, print_result

# ============================================================================ shared set-up
REAL_TASK = "rg:basic_arithmetic"  # --real: the smollm2_demo preset's task and task_kwargs
OUR_DTYPE = {"float32": "float32", "bf16": "bf16_mixed"}  # vs_trl.py --dtype -> our --dtype


def real_config(a, **over):
    """--real: our RunConfig, `--preset smollm2_demo` with this benchmark's B, G, T, lr, beta."""
    from noma_prorl_bench.config import make_config

    return make_config(
        {
            "preset": "smollm2_demo",
            "outdir": "/dev/null",
            "seed": a.seed,
            "batch_size": a.B,
            "group_size": a.G,
            "max_new_tokens": a.T,
            "lr": a.lr,
            "beta": a.beta,
            "n_val": 8,
            "temperature": a.temperature,
            **over,
        }
    )


def bench_task(a):
    """The task both sides train on: keyword_inclusion (tiny models) or the demo's rg task (--real)."""
    from noma_prorl_bench.config.specs import RunSpecs
    from noma_prorl_bench.tasks import make_task

    if a.real:
        return make_task(REAL_TASK, n_val=8, spec=RunSpecs.from_config(real_config(a)).task)
    return make_task("keyword_inclusion", n_val=8)


def replay_prompts(a, steps: int) -> list:
    """The Examples our Trainer samples, step by step (its data stream: default_rng([seed, 1]))."""
    import numpy as np

    task, rng = bench_task(a), np.random.default_rng([a.seed, 1])
    return [e for _ in range(steps) for e in task.sample(rng, a.B)]


def _diffs(ends: list) -> list:
    """Per-step durations from step-end clock readings [start, end_1, ..., end_n], step 1 dropped."""
    return [b - e for e, b in zip(ends[1:], ends[2:])]


def _timed_calls(fn, gen_s: list, gen_tok: list, n_tokens):
    """`fn` wrapped to append each call's process CPU seconds to gen_s and n_tokens(its output) to gen_tok."""

    def timed(*args, **kw):
        t0 = time.process_time()
        out = fn(*args, **kw)
        gen_s.append(time.process_time() - t0)
        gen_tok.append(n_tokens(out))
        return out

    return timed


# ============================================================================ workers
def worker_ours(a) -> None:
    """Our Trainer on the tiny model; times `train_step`, and the sampler's generate calls."""
    import torch

    from noma_prorl_bench.config import make_config
    from noma_prorl_bench.io.metrics import JsonlSink
    from noma_prorl_bench.rollout import sampling as rollout
    from noma_prorl_bench.training.trainer import Trainer

    torch.set_num_threads(1)
    t_start = time.time()
    gen_s, gen_tok = [], []
    rollout.generate = _timed_calls(
        rollout.generate, gen_s, gen_tok, lambda out: int(out[2].sum())
    )  # mask[N, T]: generated tokens
    variant = {"variant": "A", "ref_compute": "cached"} if a.beta > 0 else {"variant": "B"}
    with tempfile.TemporaryDirectory() as tmp:
        cfg = (
            real_config(
                a,
                outdir=tmp,
                ppo_epochs=1,
                minibatches=1,
                kl_estimator="k3",
                loss="grpo_clip",
                loss_agg="token-mean",
                steps=a.steps + 1,
                eval_every=10**6,
                threads=1,
                quiet=True,
                grad_checkpoint=a.grad_ckpt == "on",
                logprob_chunk=a.logprob_chunk,
                dtype=OUR_DTYPE[a.dtype],
                sample_draw=a.sample_draw,
                shared_prompt=a.shared_prompt,
                **variant,
            )
            if a.real
            else make_config(
                {
                    "outdir": tmp,
                    "model": f"hf:{a.model_dir}",
                    "task": "keyword_inclusion",
                    "seed": a.seed,
                    "batch_size": a.B,
                    "group_size": a.G,
                    "max_new_tokens": a.T,
                    "lr": a.lr,
                    "ppo_epochs": 1,
                    "minibatches": 1,
                    "beta": a.beta,
                    "kl_estimator": "k3",
                    "loss": "grpo_clip",
                    "loss_agg": "token-mean",
                    "warmstart_steps": 0,
                    "steps": a.steps + 1,
                    "eval_every": 10**6,
                    "n_val": 8,
                    "threads": 1,
                    "quiet": True,
                    "grad_checkpoint": a.grad_ckpt == "on",
                    "logprob_chunk": a.logprob_chunk,
                    "dtype": OUR_DTYPE[a.dtype],
                    "sample_draw": a.sample_draw,
                    "shared_prompt": a.shared_prompt,
                    **variant,
                }
            )
        )
        sinks = [JsonlSink(os.path.join(tmp, f)) for f in ("metrics.jsonl", "events.jsonl", "samples.jsonl")]
        trainer = Trainer.from_config(cfg, *sinks).start()
        gen_s.clear(), gen_tok.clear()  # drop the monitors' set-up rollout
        ends, cpu, lens = [time.perf_counter()], [time.process_time()], []
        for _ in range(a.steps):
            m = trainer.train_step()
            ends.append(time.perf_counter())
            cpu.append(time.process_time())
            lens.append(m["response/len_mean"])
        for s in sinks:
            s.close()
    print_result(
        {
            "side": "ours",
            "dtype": OUR_DTYPE[a.dtype],
            "t_start": t_start,
            "t_end": time.time(),
            "step_s": _diffs(ends),
            "step_cpu_s": _diffs(cpu),
            "gen_s": gen_s[1:],
            "gen_tokens": gen_tok[1:],
            "completion_len_mean": statistics.mean(lens),
            "peak_rss_mb": peak_rss_mb(),
        }
    )


def _grpo_config(a, output_dir: str):
    """TRL's side of one step (the module docstring): GRPOConfig in a temporary output_dir."""
    import torch
    from trl import GRPOConfig

    bf16 = a.dtype == "bf16"  # TRL's bf16: bf16 weights (model_init_kwargs) and bf16=True (autocast)
    return GRPOConfig(
        output_dir=output_dir,
        seed=a.seed,
        use_cpu=True,
        bf16=bf16,
        fp16=False,
        report_to="none",
        save_strategy="no",
        logging_steps=1,
        disable_tqdm=True,
        dataloader_num_workers=0,
        model_init_kwargs={"dtype": torch.bfloat16 if bf16 else torch.float32},
        per_device_train_batch_size=a.B * a.G,
        num_generations=a.G,
        max_completion_length=a.T,
        steps_per_generation=1,
        gradient_accumulation_steps=1,
        num_iterations=1,
        max_steps=a.steps,
        learning_rate=a.lr,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.0,
        max_grad_norm=1.0,
        beta=a.beta,
        epsilon=0.2,
        loss_type="dapo",
        scale_rewards="group",
        temperature=a.temperature,
        top_p=1.0,
        top_k=0,
        use_vllm=False,
        shuffle_dataset=False,
        log_completions=False,
        disable_dropout=True,
        gradient_checkpointing=a.grad_ckpt == "on",
    )


def worker_trl(a) -> None:
    """trl.GRPOTrainer on the same model directory, prompts and reward."""
    import torch
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOTrainer

    torch.set_num_threads(1)
    t_start = time.time()
    task = bench_task(a)
    examples = replay_prompts(a, a.steps)
    # --real: conversational prompts, so TRL applies the model's chat template (add_generation_prompt),
    # as our HFTokenizerAdapter does for rg: tasks
    prompts = [[{"role": "user", "content": e.prompt}] for e in examples] if a.real else [e.prompt for e in examples]
    ds = Dataset.from_dict({"prompt": prompts, "answer": [e.answer for e in examples]})
    peft_config = None
    if a.real:  # the preset's adapters: LoRA rank 8, alpha 16, q/k/v/o, no dropout; beta > 0: TRL's
        from peft import LoraConfig  # reference is the base with the adapters disabled

        peft_config = LoraConfig(
            r=8,
            lora_alpha=16,
            lora_dropout=0.0,
            bias="none",
            task_type="CAUSAL_LM",
            target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
        )

    def keyword_reward(completions, answer, **_):
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]  # conversational: last turn
        return [task.reward(c, k) for c, k in zip(texts, answer)]

    ends, cpu, lens = [], [], []

    class StepClock(TrainerCallback):
        def on_train_begin(self, args, state, control, **kw):
            ends.append(time.perf_counter())
            cpu.append(time.process_time())

        def on_step_end(self, args, state, control, **kw):
            ends.append(time.perf_counter())
            cpu.append(time.process_time())

        def on_log(self, args, state, control, logs=None, **kw):
            if logs and "completions/mean_length" in logs:
                lens.append(logs["completions/mean_length"])

    with tempfile.TemporaryDirectory() as tmp:
        trainer = GRPOTrainer(
            model=a.model_dir,
            reward_funcs=keyword_reward,
            args=_grpo_config(a, tmp),
            train_dataset=ds,
            callbacks=[StepClock()],
            peft_config=peft_config,
        )
        gen_s, gen_tok = [], []
        # tokens: the completion ids, each up to its first EOS
        trainer._generate_single_turn = _timed_calls(
            trainer._generate_single_turn, gen_s, gen_tok, lambda out: sum(len(c) for c in out[0])
        )
        trainer.train()
    print_result(
        {
            "side": "trl",
            "dtype": "bf16 weights, bf16=True" if a.dtype == "bf16" else "float32",
            "t_start": t_start,
            "t_end": time.time(),
            "step_s": _diffs(ends),
            "step_cpu_s": _diffs(cpu),
            "gen_s": gen_s[1:],
            "gen_tokens": gen_tok[1:],
            "completion_len_mean": statistics.mean(lens) if lens else None,
            "peak_rss_mb": peak_rss_mb(),
        }
    )


def worker_rollout(a) -> None:
    """Our sampler on the same model and shapes, KV cache vs full recompute (EOS disabled)."""
    import torch

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "micro"))
    from rollout_kv import time_rollout

    from noma_prorl_bench.models.hf import load_hf_policy
    from noma_prorl_bench.models.transformer import NoCachePolicy

    torch.set_num_threads(1)
    policy, tok = load_hf_policy(a.model_dir)
    examples = replay_prompts(a, 1)
    prompts = tok.encode_prompts([e.prompt for e in examples for _ in range(a.G)])  # [N, P]
    N, P = prompts.shape
    out = {"side": "rollout", "N": N, "P": P, "T": a.T}
    with torch.no_grad():
        paths = {"cache": policy, "no_cache": NoCachePolicy(policy)}
        for p in paths.values():
            time_rollout(p, prompts, 4, tok.pad_id, seed=0)  # warm-up
        times = {k: [] for k in paths}
        for r in range(a.repeats):
            for k in paths if r % 2 == 0 else reversed(list(paths)):
                times[k].append(time_rollout(paths[k], prompts, a.T, tok.pad_id, seed=r))
    for k, v in times.items():
        out[f"{k}_tok_s"] = N * a.T / statistics.median(v)
    print_result(out)


WORKERS = {"ours": worker_ours, "trl": worker_trl, "rollout": worker_rollout}
