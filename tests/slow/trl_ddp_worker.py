"""One process of a multi-process ResetGRPOTrainer run (accelerate launch / torch.distributed.run, CPU, gloo).

    accelerate launch --cpu --num_processes 2 tests/slow/trl_ddp_worker.py OUTDIR [--peft]

With --peft the policy is a LoRA adapter (r 4 on q_proj, v_proj) and the reference the plug-in's
`"ref"` adapter on the same frozen base.

Builds a tiny random Llama in OUTDIR/model (rank 0; the others wait), then per rank:
1. an unbroken run of 4 optimizer steps with a checkpoint after every step, where only rank 1 sees a
   KL spike after step 2 (its own `kl` value is replaced by 1e3): the plug-in reduces the trigger
   inputs across ranks before deciding, so every rank resets after step 2 (soft Adam, step reset);
2. a run resumed from checkpoint-2 (right after the reset) to step 4.
Each rank writes OUTDIR/rank{R}.json: its reset events, the sha256 of its reference, policy and
optimizer state after each run, and its log history without wall-clock keys.
"""

from __future__ import annotations

import json
import os
import sys

import torch
import torch.distributed as dist

TIME_KEYS: tuple[str, ...] = ("step_time", "ref/forward_s", "reset/seconds", "train_runtime", "train_loss")
TIME_KEYS += ("train_samples_per_second", "train_steps_per_second")


def reward(completions, **_):
    return [(sum(map(ord, c)) % 17) / 17 for c in completions]


def optimizer_digest(opt):
    from noma_prorl_bench.integrations.trl_parts import reference_checksum, torch_optimizer

    sd = torch_optimizer(opt).state_dict()["state"]
    return reference_checksum({f"{i}/{k}": v for i, st in sd.items() for k, v in st.items() if torch.is_tensor(v)})


def make_trainer(model_dir, out, spike_rank, peft=False):
    from datasets import Dataset
    from trl import GRPOConfig

    from noma_prorl_bench.integrations.trl import ResetConfig, ResetGRPOTrainer

    class Spiky(ResetGRPOTrainer):
        def _step_kl(self):  # this rank alone sees a KL spike after step 2
            kl = super()._step_kl()
            return 1e3 if self.state.global_step == 2 and self.accelerator.process_index == spike_rank else kl

    args = GRPOConfig(
        output_dir=out,
        use_cpu=True,
        bf16=False,
        report_to="none",
        save_strategy="steps",
        save_steps=1,
        logging_steps=1,
        disable_tqdm=True,
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=6,
        max_steps=4,
        learning_rate=1e-2,
        beta=0.1,
        seed=0,
        lr_scheduler_type="constant",
        dataloader_num_workers=0,
    )
    cfg = ResetConfig(reset_kl_above=100.0, reset_kl_min_gap=1, opt_reset="soft", soft_factor=0.5, reset_opt_step=1)
    train = Dataset.from_dict({"prompt": ["ab", "cd", "ef", "gh"] * 8})
    lora = None
    if peft:
        from peft import LoraConfig

        lora = LoraConfig(
            r=4, lora_alpha=8, lora_dropout=0.0, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"
        )
    return Spiky(
        model=model_dir, reward_funcs=reward, args=args, train_dataset=train, reset_config=cfg, peft_config=lora
    )


def summary(tr):
    from noma_prorl_bench.integrations.trl_parts import reference_checksum as digest

    policy = tr.accelerator.unwrap_model(tr.model)
    return {
        "ref_numel": sum(t.numel() for t in tr._ref_tensors().values()),
        "trainable_numel": sum(p.numel() for p in policy.parameters() if p.requires_grad),
        "events": [{k: v for k, v in e.items() if k != "seconds"} for e in tr.reset_events],
        "ref": digest(tr._ref_tensors()),
        "policy": digest(policy.state_dict()),
        "optimizer": optimizer_digest(tr.optimizer),
        "logs": [{k: v for k, v in h.items() if k not in TIME_KEYS} for h in tr.state.log_history],
        "world_size": tr.accelerator.num_processes,
        "distributed_type": str(tr.accelerator.distributed_type),
    }


def main(outdir: str, peft: bool = False) -> None:
    torch.set_num_threads(1)
    from accelerate import PartialState

    state = PartialState()
    model_dir = os.path.join(outdir, "model")
    if state.is_main_process:
        from noma_prorl_bench.models.tiny_hf import build_tiny_hf_model

        build_tiny_hf_model(model_dir, hidden=32, layers=1, heads=2)
    state.wait_for_everyone()
    full = make_trainer(model_dir, os.path.join(outdir, "full"), spike_rank=1, peft=peft)
    full.train()
    result = {"full": summary(full)}
    resumed = make_trainer(model_dir, os.path.join(outdir, "resumed"), spike_rank=1, peft=peft)
    resumed.train(resume_from_checkpoint=os.path.join(outdir, "full", "checkpoint-2"))
    result["resumed"] = summary(resumed)
    with open(os.path.join(outdir, f"rank{state.process_index}.json"), "w") as f:
        json.dump(result, f, indent=1)
    state.wait_for_everyone()
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], peft="--peft" in sys.argv[2:])
