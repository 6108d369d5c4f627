"""What a reference reset costs inside TRL's GRPOTrainer (integrations.trl): seconds per reset and the
memory of the extra reference, full model vs a LoRA "ref" adapter, on tiny random Llamas (CPU).

For each model size and reference kind, two runs of --steps optimizer steps with the same seed are
interleaved: resets after every step (ResetConfig(reset_every=1, opt_reset="soft")) and none. Prints, per
row: the median seconds of one reset (its KL measurement before and after, the reference update, the
optimizer transform and its read-back check; `reset/seconds`), the wall time of both `train()` calls
and their ratio (TRL's `step_time` leaves out step-end callbacks, so it would not show the resets), and the bytes of the reference the plug-in resets (the full model's state, or the adapter)
next to the policy's. Timings on a shared machine: compare only rows of one invocation (load printed).

    .venv/bin/python benchmarks/micro/trl_reset_cost.py [--steps 6] [--sizes 64x2,256x4] [--out results/trl_reset_cost.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile

import torch
from datasets import Dataset
from peft import LoraConfig
from trl import GRPOConfig

from noma_prorl_bench.integrations.trl import ResetConfig, ResetGRPOTrainer
from noma_prorl_bench.models.tiny_hf import build_tiny_hf_model

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # benchmarks/: _common
from _common import provenance


def reward(completions, **_):
    return [(sum(map(ord, c)) % 17) / 17 for c in completions]


def run(model_dir: str, lora: bool, resets: bool, steps: int, tokens: int, tmp: str) -> dict:
    args = GRPOConfig(
        output_dir=tmp,
        use_cpu=True,
        bf16=False,
        report_to="none",
        save_strategy="no",
        logging_steps=1,
        disable_tqdm=True,
        per_device_train_batch_size=8,
        num_generations=4,
        max_completion_length=tokens,
        max_steps=steps,
        learning_rate=1e-3,
        beta=0.04,
        seed=0,
        lr_scheduler_type="constant",
    )
    peft = (
        LoraConfig(
            r=8,
            lora_alpha=16,
            lora_dropout=0.0,
            task_type="CAUSAL_LM",
            target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
        )
        if lora
        else None
    )
    cfg = ResetConfig(reset_every=1 if resets else 0, opt_reset="soft", soft_factor=0.2)
    tr = ResetGRPOTrainer(
        model=model_dir,
        reward_funcs=reward,
        args=args,
        peft_config=peft,
        reset_config=cfg,
        train_dataset=Dataset.from_dict({"prompt": ["ab", "cd", "ef", "gh"] * (2 * steps)}),
    )
    tr.train()
    policy = tr.accelerator.unwrap_model(tr.model)
    nbytes = sum(t.numel() * t.element_size() for t in tr._ref_tensors().values())
    trained = sum(p.numel() * p.element_size() for p in policy.parameters() if p.requires_grad)
    runtime = [h["train_runtime"] for h in tr.state.log_history if "train_runtime" in h][0]
    return {
        "reset_s": [e["seconds"] for e in tr.reset_events][1:],
        "runtime_s": runtime,
        "ref_bytes": nbytes,
        "policy_bytes": sum(p.numel() * p.element_size() for p in policy.parameters()),
        "trained_bytes": trained,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--tokens", type=int, default=16)
    p.add_argument("--sizes", default="64x2,256x4", help="HIDDENxLAYERS,...")
    p.add_argument("--out", default=None)
    a = p.parse_args()
    torch.set_num_threads(1)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for size in a.sizes.split(","):
            hidden, layers = (int(x) for x in size.split("x"))
            model_dir = str(build_tiny_hf_model(os.path.join(tmp, size), hidden=hidden, layers=layers, heads=4))
            for lora in (False, True):
                with_r = run(model_dir, lora, True, a.steps, a.tokens, os.path.join(tmp, "o1"))
                without = run(model_dir, lora, False, a.steps, a.tokens, os.path.join(tmp, "o2"))
                rows.append(
                    {
                        "model": f"llama h{hidden} L{layers}",
                        "reference": "LoRA 'ref' adapter" if lora else "full model",
                        "reset_s_median": statistics.median(with_r["reset_s"]),
                        "run_s_resets": with_r["runtime_s"],
                        "run_s_none": without["runtime_s"],
                        "ref_bytes": with_r["ref_bytes"],
                        "policy_bytes": with_r["policy_bytes"],
                    }
                )
    load = os.getloadavg()
    print(f"load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}; {a.steps} steps, 8 sequences x {a.tokens} tokens")
    print("| model | reference | s per reset | train() s (resets / none) | ratio | reference MiB | policy MiB |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['model']} | {r['reference']} | {r['reset_s_median']:.4f} | {r['run_s_resets']:.2f} / "
            f"{r['run_s_none']:.2f} | {r['run_s_resets'] / r['run_s_none']:.2f} | {r['ref_bytes'] / 2**20:.3f} | "
            f"{r['policy_bytes'] / 2**20:.3f} |"
        )
    if a.out:
        with open(a.out, "w") as f:
            json.dump({**provenance(), "load": load, "steps": a.steps, "tokens": a.tokens, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
