"""The same small reset study run by this harness and by TRL's GRPOTrainer + integrations.trl (CPU, tiny Llama).

Matched settings on both sides: one random tiny Llama directory (tiny_hf), a dense character-score task
(below; a random model never earns a 0/1 task reward), B prompts x G samples, T new tokens, lr, beta,
k3 KL in the loss, clipped ratio (epsilon 0.2), token-mean loss (TRL: loss_type="dapo"), one update per
batch, constant LR, grad-norm clip 1.0, Adam(W) without weight decay, seed; the reset cadence and the
optimizer-side switches from one ResetConfig / the CLI flags of the same names. Prints, per step, each
side's KL in the loss (harness `kl/k3`, TRL `kl`) and whether it reset, then per reset the steps, the
optimizer record (tensors scaled / cleared, step reset) and KL at the reset step and the step after.

What must agree: the reset steps, what the optimizer transform touched, and KL = 0 exactly at the step
after every hard-copy reset (both sides compute the loss's KL before their update, against a reference
equal to the policy). What differs, and why: the KL values between resets, because the two trainers sample
different completions (TRL's RepeatSampler and generate() vs this harness's data stream and sampler),
normalise the GRPO loss slightly differently, and so follow different trajectories from the same start.

    .venv/bin/python benchmarks/studies/trl_reset_study.py [--steps 8 --reset_every 3 --opt_reset soft] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

import numpy as np
import torch

from noma_prorl_bench.tasks.base import Example

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # benchmarks/: _common
from _common import provenance

PROMPTS = ["ab", "cd", "ef", "gh", "ij", "kl", "mn", "op"]


class CharScore:
    """Dense stand-in task: reward (sum of the completion's character codes mod 17) / 17."""

    name = "char_score"

    def __init__(self, max_new_tokens: int = 8, n_val: int = 8):
        self.max_new_tokens = max_new_tokens
        self._val = [Example(p, "") for p in PROMPTS[:n_val]]

    def sample(self, rng: np.random.Generator, n: int) -> list[Example]:
        return [Example(PROMPTS[int(i)], "") for i in rng.integers(0, len(PROMPTS), size=n)]

    def validation_set(self) -> list[Example]:
        return list(self._val)

    def reward(self, response: str, answer: str) -> float:
        return (sum(map(ord, response)) % 17) / 17


def make_task(max_new_tokens: int = 8, n_val: int = 8) -> CharScore:
    return CharScore(max_new_tokens, n_val)


def harness(a, model_dir: str, tmp: str) -> dict:
    """This project's Trainer: returns per-step KL and the ref_reset / opt_reset events."""
    from noma_prorl_bench.config import make_config
    from noma_prorl_bench.io.metrics import JsonlSink
    from noma_prorl_bench.training.trainer import Trainer

    cfg = make_config(
        {
            "outdir": tmp,
            "model": f"hf:{model_dir}",
            "task": "trl_reset_study:make_task",
            "task_kwargs": json.dumps({"max_new_tokens": a.T}),
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
            "steps": a.steps,
            "eval_every": 10**6,
            "n_val": 8,
            "threads": 1,
            "quiet": True,
            "variant": "A",
            "optimizer": "adamw",
            "weight_decay": 0.0,
            "max_grad_norm": 1.0,
            "lr_schedule": "constant",
            "reset_every": a.reset_every,
            "opt_reset": a.opt_reset,
            "soft_factor": a.soft_factor,
            "reset_opt_step": a.reset_opt_step,
            "ref_update": "hard",
        }
    )
    os.makedirs(tmp, exist_ok=True)
    sinks = [JsonlSink(os.path.join(tmp, f)) for f in ("metrics.jsonl", "events.jsonl", "samples.jsonl")]
    trainer = Trainer.from_config(cfg, *sinks).start()
    kl = [float(trainer.train_step()["kl/k3"]) for _ in range(a.steps)]
    for s in sinks:
        s.close()
    with open(os.path.join(tmp, "events.jsonl")) as f:
        events = [json.loads(line) for line in f]
    opt = {e["step"]: e for e in events if e["event"] == "opt_reset"}
    resets = [
        {
            "step": e["step"],
            "m_scaled": opt[e["step"]]["m_scaled"],
            "v_scaled": opt[e["step"]]["v_scaled"],
            "params_cleared": opt[e["step"]]["params_cleared"],
            "opt_step_reset": opt[e["step"]]["opt_step_reset"],
        }
        for e in events
        if e["event"] == "ref_reset"
    ]
    return {"kl": kl, "resets": resets}


def trl_side(a, model_dir: str, tmp: str) -> dict:
    """TRL's GRPOTrainer with the plug-in: per-step KL (TRL's `kl`) and the reset events."""
    from datasets import Dataset
    from trl import GRPOConfig

    from noma_prorl_bench.integrations.trl import ResetConfig, ResetGRPOTrainer

    task = make_task(a.T)
    data = [e.prompt for e in task.sample(np.random.default_rng(a.seed), a.steps * a.B)]

    def reward(completions, **_):
        return [task.reward(c, "") for c in completions]

    args = GRPOConfig(
        output_dir=tmp,
        use_cpu=True,
        bf16=False,
        report_to="none",
        save_strategy="no",
        logging_steps=1,
        disable_tqdm=True,
        seed=a.seed,
        per_device_train_batch_size=a.B * a.G,
        num_generations=a.G,
        max_completion_length=a.T,
        max_steps=a.steps,
        learning_rate=a.lr,
        beta=a.beta,
        epsilon=0.2,
        loss_type="dapo",
        scale_rewards="group",
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.0,
        max_grad_norm=1.0,
        optim="adamw_torch",
        num_iterations=1,
        steps_per_generation=1,
        gradient_accumulation_steps=1,
        shuffle_dataset=False,
        model_init_kwargs={"dtype": torch.float32},
    )
    cfg = ResetConfig(
        reset_every=a.reset_every, opt_reset=a.opt_reset, soft_factor=a.soft_factor, reset_opt_step=a.reset_opt_step
    )
    tr = ResetGRPOTrainer(
        model=model_dir,
        reward_funcs=reward,
        args=args,
        reset_config=cfg,
        train_dataset=Dataset.from_dict({"prompt": data}),
    )
    tr.train()
    kl = [h["kl"] for h in tr.state.log_history if "kl" in h]
    resets = [
        {k: e[k] for k in ("step", "m_scaled", "v_scaled", "params_cleared", "opt_step_reset")} for e in tr.reset_events
    ]
    return {"kl": kl, "resets": resets}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--reset_every", type=int, default=3)
    p.add_argument("--opt_reset", choices=("keep", "hard", "soft", "asym"), default="soft")
    p.add_argument("--soft_factor", type=float, default=0.2)
    p.add_argument("--reset_opt_step", type=int, choices=(0, 1), default=0)
    p.add_argument("--B", type=int, default=2)
    p.add_argument("--G", type=int, default=4)
    p.add_argument("--T", type=int, default=8)
    p.add_argument("--lr", type=float, default=5e-3)
    p.add_argument("--beta", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None)
    a = p.parse_args()
    torch.set_num_threads(1)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the harness imports this module's task
    from noma_prorl_bench.models.tiny_hf import build_tiny_hf_model

    with tempfile.TemporaryDirectory() as tmp:
        model_dir = str(build_tiny_hf_model(os.path.join(tmp, "model"), hidden=64, layers=2, heads=4, seed=a.seed))
        ours = harness(a, model_dir, os.path.join(tmp, "ours"))
        theirs = trl_side(a, model_dir, os.path.join(tmp, "trl"))
    r_ours, r_trl = {r["step"] for r in ours["resets"]}, {r["step"] for r in theirs["resets"]}
    print(f"settings: {vars(a)}")
    print("| step | harness kl/k3 | TRL kl | reset after (harness / TRL) |")
    print("|---|---|---|---|")
    for s in range(1, a.steps + 1):
        print(
            f"| {s} | {ours['kl'][s - 1]:.3e} | {theirs['kl'][s - 1]:.3e} | "
            f"{'yes' if s in r_ours else '-'} / {'yes' if s in r_trl else '-'} |"
        )
    print(
        "\n| reset step | side | m scaled | v scaled | params cleared | step reset | KL at reset step | KL next step |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for side, res in (("harness", ours), ("TRL", theirs)):
        for r in res["resets"]:
            nxt = res["kl"][r["step"]] if r["step"] < a.steps else float("nan")
            print(
                f"| {r['step']} | {side} | {r['m_scaled']} | {r['v_scaled']} | {r['params_cleared']} | "
                f"{r['opt_step_reset']} | {res['kl'][r['step'] - 1]:.3e} | {nxt:.3e} |"
            )
    same_steps = r_ours == r_trl
    same_opt = [{k: v for k, v in r.items()} for r in ours["resets"]] == theirs["resets"]
    zero_after = all(
        res["kl"][r["step"]] == 0.0 for res in (ours, theirs) for r in res["resets"] if r["step"] < a.steps
    )
    print(
        f"\nsame reset steps: {same_steps}; same optimizer records: {same_opt}; KL exactly 0 the step after "
        f"every reset on both sides: {zero_after}"
    )
    if a.out:
        with open(a.out, "w") as f:
            json.dump(
                {
                    **provenance(),
                    "settings": vars(a),
                    "harness": ours,
                    "trl": theirs,
                    "same_reset_steps": same_steps,
                    "same_optimizer_records": same_opt,
                    "kl_zero_after_reset": zero_after,
                },
                f,
                indent=1,
            )


if __name__ == "__main__":
    main()
