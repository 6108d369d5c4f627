"""Resident memory and CPU time of one training forward + backward on the real model, with and
without `--grad_checkpoint`, and what the autograd graph actually saves.

    .venv/bin/python benchmarks/micro/update_rss.py [--grad_checkpoint] [--rows 16] [--prompt 90] [--reps 3]
    MALLOC_MMAP_THRESHOLD_=131072 .venv/bin/python benchmarks/micro/update_rss.py --grad_checkpoint

Builds the smollm2_demo preset's policy (SmolLM2-135M-Instruct + LoRA r8 on q/k/v/o, base frozen),
then `--reps` times: logits of the last T + 1 positions of `--rows` random sequences of
`--prompt` + 32 tokens, log-softmax at temperature 0.7, backward of a mean log-prob. Prints per
repetition the resident size after the forward and after the backward, ru_maxrss (all relative to
the resident size before the first forward; the first forward also pages in the 0.51 GiB of
weights, which the safetensors file maps lazily) and the process CPU seconds; once, the bytes of
the distinct storages the autograd graph saves. Compare a run under the glibc default with one
under `MALLOC_MMAP_THRESHOLD_=131072` to see how much resident memory is the allocator's, not
tensors'. Needs the converted model (`prorl-bench get-model smollm2-135m-instruct`).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "src"))

T = 32  # the demo's max_new_tokens


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def build(grad_checkpoint: bool):
    from noma_prorl_bench.config.parser import parse_config  # noqa: PLC0415
    from noma_prorl_bench.models.build import build_policy  # noqa: PLC0415
    from noma_prorl_bench.training.growth_loop import attach_adapters  # noqa: PLC0415

    cfg = parse_config(
        ["--preset", "smollm2_demo", "--outdir", os.devnull] + (["--grad_checkpoint"] if grad_checkpoint else [])
    )
    policy, _ = build_policy(cfg)
    from noma_prorl_bench.config.specs import RunSpecs  # noqa: PLC0415

    attach_adapters(RunSpecs.from_config(cfg).growth, policy, lambda *a, **k: None)
    policy.train()
    return policy


def saved_mib(policy, tokens) -> float:
    """MiB of the distinct storages saved for backward by one forward (not run backward)."""
    import torch  # noqa: PLC0415

    sizes: dict[int, int] = {}

    def pack(t):
        s = t.untyped_storage()
        sizes[s.data_ptr()] = max(sizes.get(s.data_ptr(), 0), s.nbytes())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        logits = policy(tokens, keep_last=T + 1)
        torch.log_softmax(logits.float() / 0.7, -1)
    return sum(sizes.values()) / 2**20


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--grad_checkpoint", action="store_true")
    ap.add_argument("--rows", type=int, default=16)
    ap.add_argument("--prompt", type=int, default=90)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    import torch  # noqa: PLC0415

    torch.set_num_threads(1)
    torch.manual_seed(0)
    policy = build(args.grad_checkpoint)
    tokens = torch.randint(5, 1000, (args.rows, args.prompt + T))
    r0 = rss_mib()
    for rep in range(args.reps):
        c0 = time.process_time()
        logp = torch.log_softmax(policy(tokens, keep_last=T + 1).float() / 0.7, -1)
        fwd = rss_mib() - r0
        logp[..., 5].mean().backward()
        del logp
        row = {
            "rep": rep,
            "after_forward_mib": round(fwd),
            "after_backward_mib": round(rss_mib() - r0),
            "ru_maxrss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - r0),
            "cpu_s": round(time.process_time() - c0, 2),
        }
        print(json.dumps(row), flush=True)
    print(
        json.dumps(
            {
                "grad_checkpoint": args.grad_checkpoint,
                "saved_for_backward_mib": round(saved_mib(policy, tokens)),
                "rows": args.rows,
                "tokens": args.prompt + T,
                "base_rss_mib": round(r0),
                "malloc_mmap_threshold": os.environ.get("MALLOC_MMAP_THRESHOLD_", "glibc default (dynamic)"),
                "loadavg": os.getloadavg(),
            }
        )
    )


if __name__ == "__main__":
    main()
