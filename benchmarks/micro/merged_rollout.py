"""What the rollout on a merged copy of base + LoRA adapter would buy, measured before building it.

The demo policy (`--preset smollm2_demo`: SmolLM2-135M-Instruct, LoRA r8 on q/k/v/o) after a few
RL steps, so the adapters are not zero, in `--dtype` float32 or bf16_mixed. A merged copy replaces
each LoRALinear by one Linear with weight W + scale * B @ A (computed in float32, then held in the
policy's frozen-weight dtype: bf16 under bf16_mixed). Both sample the demo's first batch (B x G rows,
exactly T tokens, EOS off), alternating, each call timed in process CPU time; per-pair ratios in run
order. Then the learner (the unmerged policy, teacher-forced) scores the merged sampler's tokens:
max |logp_old - logp_learner| over the response, beside the same number for the unmerged sampler
(tests/unit/test_bf16_hf.py bounds it by 0.05 in bf16).

    PYTHONPATH=src OMP_NUM_THREADS=1 setsid python benchmarks/micro/merged_rollout.py --dtype bf16_mixed

The lever is built now (the bf16 fast path: `rollout/sampling.generate` merges the adapters itself
under bf16_mixed), so at the current code both paths of this script sample through merged weights
in bf16; its committed result (benchmarks/results/merged_rollout_bf16.json) was measured before.
In float32 the "unmerged" path is still the adapters' own.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # benchmarks/: _common, _pairs
from _common import git_commit


def merge(policy):
    """A copy of the policy with every LoRALinear folded into a plain Linear (frozen)."""
    import torch.nn as nn

    from noma_prorl_bench.models.lora import LoRALinear

    merged = copy.deepcopy(policy)
    for name, mod in list(merged.named_modules()):
        for child_name, child in list(mod.named_children()):
            if isinstance(child, LoRALinear):
                w = child.base.weight
                delta = child.scale * (child.lora_B.detach().float() @ child.lora_A.detach().float())
                lin = nn.Linear(child.in_features, child.out_features, bias=child.base.bias is not None)
                lin.weight = nn.Parameter((w.detach().float() + delta).to(w.dtype), requires_grad=False)
                if child.base.bias is not None:
                    lin.bias = nn.Parameter(child.base.bias.detach().clone(), requires_grad=False)
                setattr(mod, child_name, lin)
    for p in merged.parameters():
        p.requires_grad_(False)
    return merged


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtype", default="bf16_mixed", choices=["float32", "bf16_mixed"])
    ap.add_argument("--train_steps", type=int, default=2)
    ap.add_argument("--T", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    import numpy as np
    import torch

    from noma_prorl_bench.config import make_config
    from noma_prorl_bench.io.machine import machine_info
    from noma_prorl_bench.io.metrics import MemorySink
    from noma_prorl_bench.models.base import response_logprobs
    from noma_prorl_bench.rollout.sampling import generate
    from noma_prorl_bench.training.trainer import Trainer

    torch.set_num_threads(1)
    load0 = os.getloadavg()
    cfg = make_config(
        {
            "preset": "smollm2_demo",
            "outdir": "/dev/null",
            "quiet": True,
            "threads": 1,
            "seed": 0,
            "steps": a.train_steps,
            "n_val": 4,
            "eval_every": 10**6,
            "dtype": a.dtype,
        }
    )
    trainer = Trainer.from_config(cfg, events_sink=MemorySink()).start()
    for _ in range(a.train_steps):  # adapters away from B = 0
        trainer.train_step()
    policy, tok = trainer.policy, trainer.tok
    merged = merge(policy)
    ex = trainer.task.sample(np.random.default_rng([0, 7]), cfg.batch_size)
    G = cfg.group_size
    prompts = tok.encode_prompts([e.prompt for e in ex for _ in range(G)])
    temp = cfg.temperature

    def sample(pol, seed):
        g = torch.Generator().manual_seed(seed)
        c0 = time.process_time()
        resp, logp, mask, *_ = generate(
            pol, prompts, a.T, temp, eos_id=-1, pad_id=tok.pad_id, generator=g, group_size=G
        )
        return time.process_time() - c0, resp, logp

    sample(policy, 0), sample(merged, 0)  # warm-up
    cpu = {"lora": [], "merged": []}
    for r in range(a.repeats):
        for k in ("lora", "merged") if r % 2 == 0 else ("merged", "lora"):
            cpu[k].append(sample(policy if k == "lora" else merged, r + 1)[0])
    gap = {}
    for k, pol in (("lora", policy), ("merged", merged)):
        _, resp, logp = sample(pol, 99)
        with torch.no_grad():
            learner, _, _ = response_logprobs(policy, torch.cat([prompts, resp], 1), prompts.shape[1], temp)
        gap[k] = float((learner - logp).abs().max())
    pairs = [lc / mc for lc, mc in zip(cpu["lora"], cpu["merged"])]
    out = {
        "dtype": a.dtype,
        "rows": prompts.shape[0],
        "P": prompts.shape[1],
        "T": a.T,
        "cpu_s": cpu,
        "pair_ratios_lora_over_merged": pairs,
        "ratio_lora_over_merged": statistics.median(pairs),
        "max_abs_logp_gap_to_learner": gap,
        "machine": machine_info(),
        "commit": git_commit(),
        "loadavg_start": load0,
        "loadavg_end": os.getloadavg(),
    }
    print(json.dumps({k: v for k, v in out.items() if k != "machine"}, indent=1))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
