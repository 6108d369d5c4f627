"""pass@1 of SmolLM2-135M-Instruct (dequantised Q4_1) on reasoning-gym tasks, before any RL.

For each task: the first ``--n_val`` validation prompts of ``--task rg:NAME`` (exactly the
prompts a run validates on: tasks/reasoning_gym.py, chat template applied), one **greedy**
response each (temperature irrelevant; ``--max_new_tokens`` cap), scored three ways per prompt:
``lenient`` = score_answer on the lenient extraction (the training reward's default),
``strict`` = score_answer on the <answer> tag only, ``format`` = exactly one non-empty tag.
pass@1 = mean over prompts (greedy: one sample per prompt). 95% CI: bootstrap over prompts.

    PYTHONPATH=src OMP_NUM_THREADS=1 nice -n 5 python benchmarks/studies/real_baseline.py \\
        --out benchmarks/results/real_baseline.json

Needs the real extra and `prorl-bench get-model smollm2-135m-instruct`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np
import torch

from noma_prorl_bench.config.presets import SMOLLM2_DIR
from noma_prorl_bench.models.hf import load_hf_policy
from noma_prorl_bench.rollout.sampling import generate
from noma_prorl_bench.tasks.reasoning_gym import ReasoningGymTask, extract_answer, format_ok

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # benchmarks/: _common
from _common import provenance

# (label, rg dataset, task_kwargs): defaults of reasoning-gym unless stated
TASKS = (
    (
        "basic_arithmetic 2 terms, 1-2 digits",
        "basic_arithmetic",
        {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 2},
    ),
    ("chain_sum (default)", "chain_sum", {}),
    ("leg_counting (default)", "leg_counting", {}),
    ("letter_counting (default)", "letter_counting", {}),
    ("spell_backward (default)", "spell_backward", {}),
    ("simple_equations (default)", "simple_equations", {}),
    ("basic_arithmetic (default)", "basic_arithmetic", {}),
    (
        "basic_arithmetic 2 terms, 1 digit",
        "basic_arithmetic",
        {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1},
    ),
)


def bootstrap_ci(x: np.ndarray, n_boot: int = 2000, seed: int = 0) -> tuple[float, float]:
    """95% percentile bootstrap CI of the mean of x (resampling prompts)."""
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, len(x), size=(n_boot, len(x)))].mean(1)
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


@torch.no_grad()
def greedy_texts(policy, tok, prompts: list[str], max_new_tokens: int, chunk: int) -> list[str]:
    out = []
    for i in range(0, len(prompts), chunk):
        ids = tok.encode_prompts(prompts[i : i + chunk])
        resp, *_ = generate(policy, ids, max_new_tokens, 1.0, tok.eos_id, tok.pad_id, greedy=True)
        out += [tok.decode(r) for r in resp.tolist()]
    return out


def score(task: ReasoningGymTask, texts: list[str], answers: list[str]) -> dict[str, np.ndarray]:
    """Per-prompt lenient / strict correctness and format, each an array over prompts."""
    rows = {"lenient": [], "strict": [], "format": []}
    for s, a in zip(texts, answers):
        entry = json.loads(a)
        for mode, key in (("lenient", "lenient"), ("tag", "strict")):
            ext = extract_answer(s, str(entry["answer"]), mode)
            rows[key].append(float(task._train.score_answer(ext, entry)) if ext is not None else 0.0)
        rows["format"].append(format_ok(s))
    return {k: np.array(v) for k, v in rows.items()}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default=SMOLLM2_DIR)
    p.add_argument("--n_val", type=int, default=200)
    p.add_argument("--max_new_tokens", type=int, default=32)
    p.add_argument("--chunk", type=int, default=50, help="prompts per generation batch")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument(
        "--tasks",
        default="",
        help="comma-separated indices into TASKS (default: all); to split the "
        "work over processes, then --merge their JSON files",
    )
    p.add_argument("--merge", nargs="*", default=None, help="merge these result files into --out and exit")
    p.add_argument("--out", default="benchmarks/results/real_baseline.json")
    args = p.parse_args(argv)
    if args.merge is not None:
        parts = [json.load(open(f)) for f in args.merge]
        merged = {"settings": parts[0]["settings"], "results": [r for part in parts for r in part["results"]]}
        merged.update({k: parts[0][k] for k in ("commit", "machine") if k in parts[0]})
        json.dump(merged, open(args.out, "w"), indent=1)
        return 0
    torch.set_num_threads(args.threads)
    policy, tok = load_hf_policy(os.path.expanduser(args.model), chat=True)
    results = []
    chosen = [TASKS[int(i)] for i in args.tasks.split(",")] if args.tasks else TASKS
    for label, name, kw in chosen:
        t0 = time.perf_counter()
        task = ReasoningGymTask(name, n_val=args.n_val, task_kwargs=kw)
        val = task.validation_set()
        texts = greedy_texts(policy, tok, [e.prompt for e in val], args.max_new_tokens, args.chunk)
        sc = score(task, texts, [e.answer for e in val])
        row = {
            "label": label,
            "task": f"rg:{name}",
            "task_kwargs": kw,
            "n": len(val),
            "seconds": round(time.perf_counter() - t0, 1),
            "examples": [{"prompt": e.prompt, "response": s} for e, s in list(zip(val, texts))[:3]],
        }
        for k, v in sc.items():
            row[k] = float(v.mean())
            row[f"{k}_ci"] = bootstrap_ci(v)
        results.append(row)
        print(
            f"{label:40s} lenient {row['lenient']:.3f} strict {row['strict']:.3f} "
            f"format {row['format']:.3f} ({row['seconds']} s)",
            flush=True,
        )
        os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
        with open(args.out, "w") as fh:
            json.dump(
                {
                    **provenance(),
                    "settings": {**vars(args), "decoding": "greedy", "chat_template": True, "torch": torch.__version__},
                    "results": results,
                },
                fh,
                indent=1,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
