"""--shared_prompt, pass by pass: the teacher-forced passes with each distinct prompt encoded once
against every row's prompt encoded, side by side in one process.

The demo's shapes: SmolLM2-135M-Instruct + LoRA r8 (alpha 16) on q/k/v/o, `rg:basic_arithmetic`
chat prompts (B distinct prompts, left-padded to the longest), G rows each with T random response
tokens, temperature 0.7. Two passes, each timed off / on alternately (`--repeats` pairs, process
CPU time, one thread, the first pair dropped): the reference pass (no_grad log-probs) and the
learner's pass (log-probs and entropy, forward and backward into the adapters). Prints each pass's
per-pair ratios (off / on) and their median, the token positions each runs, and the largest
log-prob difference between the two (the same function up to float rounding).

    OMP_NUM_THREADS=1 PYTHONPATH=src python benchmarks/micro/shared_prompt.py \\
        --model_dir ~/.cache/noma_prorl_bench/models/smollm2-135m-instruct-q4_1-dequant \\
        --dtype float32 --out benchmarks/results/shared_prompt_float32.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from types import SimpleNamespace

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # benchmarks/: _common, _pairs
from _common import SRC, run_record

PROMPTS = (
    "Calculate 5 - 3.",
    "Calculate 2 - -1.",
    "Calculate ( -9 / 9 ).",
    "Calculate 85 / 17.",
    "Calculate 12 + 47.",
    "Calculate 6 * -8.",
    "Calculate 90 - 13.",
    "Calculate 3 + 3.",
)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model_dir", required=True)
    ap.add_argument("--dtype", default="float32", choices=["float32", "bf16_mixed"])
    ap.add_argument("--B", type=int, default=4, help="distinct prompts (at most 8)")
    ap.add_argument("--G", type=int, default=4, help="rows per prompt")
    ap.add_argument("--T", type=int, default=32, help="response tokens per row")
    ap.add_argument("--repeats", type=int, default=4, help="off/on pairs per pass (the first dropped)")
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    if not 1 <= a.B <= len(PROMPTS):
        ap.error(f"argument --B: must be in 1..{len(PROMPTS)}")
    sys.path.insert(0, SRC)
    import torch

    from noma_prorl_bench.models.base import fed_tokens, policy_logprobs
    from noma_prorl_bench.models.hf import load_hf_policy
    from noma_prorl_bench.models.lora import attach_lora
    from noma_prorl_bench.training.setup import hold_precision

    torch.set_num_threads(1)
    load0 = os.getloadavg()
    policy, tok = load_hf_policy(os.path.expanduser(a.model_dir), dtype="float32", chat=True)
    attach_lora(policy.model, ["q_proj", "k_proj", "v_proj", "o_proj"], 8, 16.0)
    policy.compute_dtype = torch.bfloat16 if a.dtype == "bf16_mixed" else None  # as models/build.py sets it
    hold_precision(SimpleNamespace(dtype=a.dtype), policy, lambda *args, **kw: None)  # the trainer's set-up
    gen = torch.Generator().manual_seed(0)
    prompts = tok.encode_prompts(list(PROMPTS[: a.B])).repeat_interleave(a.G, 0)
    P = prompts.shape[1]
    tokens = torch.cat([prompts, torch.randint(100, 40000, (prompts.shape[0], a.T), generator=gen)], 1)

    def ref(shared: bool):
        policy.shared_prompt = shared
        with torch.no_grad():
            return policy_logprobs(policy, tokens, P, 0.7)[0]

    def learner(shared: bool):
        policy.shared_prompt = shared
        policy.zero_grad()
        logp, ent, _ = policy_logprobs(policy, tokens, P, 0.7, with_entropy=True)
        (logp.sum() + 0.01 * ent.sum()).backward()
        return logp.detach()

    result: dict = {"passes": {}}
    for name, fn in (("reference", ref), ("learner", learner)):
        cpu: dict[bool, list[float]] = {False: [], True: []}
        out = {}
        for r in range(a.repeats):
            for shared in (False, True):
                t = time.process_time()
                out[shared] = fn(shared)
                if r:
                    cpu[shared].append(time.process_time() - t)
        pairs = [off / on for off, on in zip(cpu[False], cpu[True])]
        policy.shared_prompt = True
        fed = {"off": tokens.numel(), "on": fed_tokens(policy, tokens, P)}
        result["passes"][name] = {
            "cpu_s_off": cpu[False],
            "cpu_s_on": cpu[True],
            "pair_ratios": pairs,
            "ratio_off_over_on": statistics.median(pairs),
            "token_positions": fed,
            "max_abs_logp_diff": float((out[False] - out[True]).abs().max()),
        }
        print(
            f"{name}: off {statistics.median(cpu[False]):.2f} / on {statistics.median(cpu[True]):.2f} CPU s, "
            f"off/on {statistics.median(pairs):.2f}x (pairs {', '.join(f'{x:.2f}' for x in pairs)}); "
            f"positions {fed['off']} / {fed['on']}; max |logp diff| {result['passes'][name]['max_abs_logp_diff']:.2e}",
            flush=True,
        )
    result.update(
        {
            "settings": {
                "dtype": a.dtype,
                "B": a.B,
                "G": a.G,
                "P": P,
                "T": a.T,
                "temperature": 0.7,
                "lora": "r8 q/k/v/o",
            },
            "definition": "per pass: CPU s off (every row's prompt) and on (--shared_prompt), alternating, "
            "first pair dropped; ratio = median of per-pair off / on",
            **run_record(a.model_dir, load0),
        }
    )
    if a.out:
        with open(a.out, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
