"""The A1 RL step on the real model in float32 vs bf16 (`--dtype bf16_mixed`): CPU seconds per
stage (rollout, reference, train), per step, and peak RSS.

Every run is `--preset smollm2_demo` (SmolLM2-135M-Instruct, dequantised Q4_1; LoRA rank 8 on
q/k/v/o, base frozen; Variant A with A1 caching) at the demo's shapes (B = 4 prompts x G = 4
samples, at most 32 new tokens, 1 PPO epoch x 1 minibatch), seed 0, one torch thread, in its own
process (so each run's peak RSS is its own). Runs alternate float32, bf16_mixed, float32, ... so
machine noise hits both alike; the first step of every run is dropped (warm-up); medians over the
rest. The stage timers read process CPU time (`real_wedge.use_cpu_clock`), which other processes
on shared cores disturb less than wall time. The load average is recorded at each run's start and
end, with the machine (CPU model, torch's CPU capability, the bf16 detector's verdict) and commit.

Where a step's CPU time goes, by operator and input shape (one worker, its last step profiled):

    PYTHONPATH=src OMP_NUM_THREADS=1 python benchmarks/speed/real_speed.py --worker --profile \\
        --dtype bf16_mixed --steps 2 > /dev/null

Also a one-thread matmul at two of SmolLM2's shapes in float32 and bf16 (GFLOP/s of process CPU
time), which says whether this CPU has bf16 units at all.

    PYTHONPATH=src OMP_NUM_THREADS=1 nice -n 5 python benchmarks/speed/real_speed.py --reps 2 --steps 3 \
        --out benchmarks/results/real_speed.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # benchmarks/: _common, _pairs
from _common import SRC, cpu_model, git_commit, peak_rss_mb, print_result, run_worker, sample_draws
from _pairs import pair_ratios

STAGES = ("time/step", "time/rollout", "time/ref", "time/train")
TOKEN_COUNTS = ("count/tokens_policy", "count/tokens_ref")  # tokens through the policy / reference per step
SHAPES = ("shape/P", "shape/T_used", "shape/U")  # the step's prompt length, padded response length, distinct prompts
DTYPES = ("float32", "bf16_mixed")
MATMUL_SHAPES = ((1024, 576, 1536), (2048, 576, 576))  # [tokens, hidden] x [hidden, mlp] / [hidden, hidden]


def worker(args) -> None:
    """One fresh Trainer in args.dtype; prints a RESULT line with the per-step stage times."""
    import torch
    from real_wedge import use_cpu_clock

    from noma_prorl_bench.config import make_config
    from noma_prorl_bench.io.metrics import MemorySink
    from noma_prorl_bench.training.trainer import Trainer

    torch.set_num_threads(1)
    use_cpu_clock()
    load0, t_start = os.getloadavg(), time.time()
    cfg = make_config(
        {
            "preset": "smollm2_demo",
            "outdir": "/dev/null",
            "quiet": True,
            "threads": 1,
            "seed": 0,
            "steps": args.steps,
            "n_val": 4,
            "eval_every": 10**6,
            "dtype": args.dtype,
            "batch_size": args.batch_size,
            "group_size": args.group_size,
            "max_new_tokens": args.max_new_tokens,
            "sample_draw": args.sample_draw,
            "shared_prompt": args.shared_prompt,
        }
    )
    events = MemorySink()
    trainer = Trainer.from_config(cfg, events_sink=events).start()
    # each step's batch shape (prompt length P, padded response length, distinct prompts U): with
    # --shared_prompt the token counters no longer determine P and the length (linearity.py)
    shapes: list[dict] = []
    collect = trainer.collector.collect

    def recording_collect():
        batch, metrics = collect()
        P = int(batch.prompt_len)
        distinct = len({tuple(r) for r in batch.tokens[:, :P].tolist()})
        shapes.append({"shape/P": P, "shape/T_used": int(batch.tokens.shape[1]) - P, "shape/U": distinct})
        return batch, metrics

    trainer.collector.collect = recording_collect
    if args.profile:  # torch.profiler around the last step; the table goes to stderr
        from torch.profiler import ProfilerActivity, profile

        steps = [{**trainer.train_step(), **shapes[-1]} for _ in range(args.steps - 1)]
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
            steps.append({**trainer.train_step(), **shapes[-1]})
        print(
            prof.key_averages(group_by_input_shape=True).table(
                sort_by="self_cpu_time_total", row_limit=30, max_name_column_width=40, max_shapes_column_width=60
            ),
            file=sys.stderr,
        )
    else:
        steps = [{**trainer.train_step(), **shapes[-1]} for _ in range(args.steps)]
    (prec,) = [e for e in events.records if e["event"] == "precision"]
    print_result(
        {
            "dtype": args.dtype,
            "precision_event": prec,
            "per_step": [
                {k: s[k] for k in (*STAGES, "time/eval", "response/len_mean", *TOKEN_COUNTS, *SHAPES) if k in s}
                for s in steps
            ],
            "peak_rss_mb": peak_rss_mb(),
            "loadavg_start": load0,
            "t_start": t_start,
            "t_end": time.time(),
        }
    )


def matmul_rates(repeats: int = 5) -> list[dict]:
    """One-thread GFLOP/s (process CPU time) of a float32 and a bf16 matmul at SmolLM2's shapes."""
    import torch

    torch.set_num_threads(1)
    out = []
    for m, k, n in MATMUL_SHAPES:
        a, b = torch.randn(m, k), torch.randn(k, n)
        row = {"shape": [m, k, n]}
        for dt in (torch.float32, torch.bfloat16):
            x, y = a.to(dt), b.to(dt)
            x @ y  # warm-up
            t0 = time.process_time()
            for _ in range(repeats):
                x @ y
            row[str(dt).replace("torch.", "")] = 2 * m * k * n * repeats / (time.process_time() - t0) / 1e9
        out.append(row)
    return out


def machine() -> dict:
    import torch

    from noma_prorl_bench.io.machine import machine_info
    from noma_prorl_bench.models.precision import bf16_support, cpu_flags

    ok, why = bf16_support("cpu")
    return {
        **machine_info(),
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "machine": platform.machine(),
        "torch": torch.__version__,
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "bf16_flags": sorted(f for f in cpu_flags() if "bf16" in f),
        "bf16_supported": ok,
        "bf16_reason": why,
    }


def spawn(args, dtype: str) -> dict:
    return run_worker(
        __file__,
        [
            "--worker",
            "--dtype",
            dtype,
            "--steps",
            str(args.steps),
            "--batch_size",
            str(args.batch_size),
            "--group_size",
            str(args.group_size),
            "--max_new_tokens",
            str(args.max_new_tokens),
            "--sample_draw",
            args.sample_draw,
        ]
        + (["--shared_prompt"] if args.shared_prompt else []),
        f"{dtype} run",
    )


def summarise(runs: list[dict]) -> dict:
    # the first step of a run is dropped (warm-up) unless the run was made with --drop_first 0
    timed = [s for r in runs for s in r["per_step"][r.get("drop_first", 1) :]]
    med = {k: statistics.median(s[k] for s in timed) for k in STAGES}
    # time/step also holds the validation at a run's last step (time/eval): the step compared is the
    # sum of the three stages (the rest of a step is advantages and metrics)
    med["stages_sum"] = statistics.median(sum(s[k] for k in STAGES[1:]) for s in timed)
    med["steps_timed"] = len(timed)
    med["first_step"] = {k: statistics.median(r["per_step"][0][k] for r in runs) for k in STAGES}
    med["peak_rss_mb"] = statistics.median(r["peak_rss_mb"] for r in runs)
    med["response_len_mean"] = statistics.mean(s["response/len_mean"] for s in timed)
    return med


def as_pair_run(run: dict, rows: int) -> dict:
    """One worker's result in `_pairs` form: the timed steps' CPU seconds (rollout + reference +
    train, as `stages_sum`) and generated response tokens (rows x mean response length)."""
    timed = run["per_step"][run.get("drop_first", 1) :]
    return {
        "step_cpu_s": [sum(s[k] for k in STAGES[1:]) for s in timed],
        "gen_tokens": [rows * s["response/len_mean"] for s in timed],
        "t_start": run.get("t_start"),
        "t_end": run.get("t_end"),
    }


def paired(args, runs: dict) -> dict:
    """ratio_bf16_over_float32: the median over pairs (float32 run i, bf16_mixed run i, made one
    after the other) of float32's CPU s per step over bf16_mixed's (> 1: bf16 is faster); also per
    generated token. Empty until both dtypes have a run."""
    n = min(len(runs.get("float32", [])), len(runs.get("bf16_mixed", [])))
    if n == 0:
        return {}
    rows = args.batch_size * args.group_size
    f32 = [as_pair_run(r, rows) for r in runs["float32"][:n]]
    bf = [as_pair_run(r, rows) for r in runs["bf16_mixed"][:n]]
    timed = all(r["t_start"] is not None for r in f32 + bf)  # runs from before t_start was recorded: unchecked
    pr = pair_ratios(bf, f32, check_order=timed)
    return {
        "ratio_bf16_over_float32": pr["ratio"],
        "pair_ratios": pr["pair_ratios"],
        "ratio_bf16_over_float32_per_token": pr["ratio_per_token"],
        "pair_ratios_per_token": pr["pair_ratios_per_token"],
        "cpu_s_per_step_bf16": pr["cpu_s_per_step_a"],
        "cpu_s_per_step_float32": pr["cpu_s_per_step_b"],
        "tokens_per_step_bf16": pr["tokens_per_step_a"],
        "tokens_per_step_float32": pr["tokens_per_step_b"],
        "ratio_definition": "per pair: float32 CPU s per step / bf16_mixed CPU s per step (step = rollout + "
        "reference + train, process CPU time, first step of each run dropped); the median over pairs, in run order",
    }


def write(args, info: dict, runs: dict, load0, t0: float) -> dict:
    """Write the results file from the runs so far; returns the per-dtype medians."""
    table = {d: summarise(r) for d, r in runs.items() if r}
    ratios = {}
    if "float32" in table and "bf16_mixed" in table:
        ratios = {k: table["float32"][k] / table["bf16_mixed"][k] for k in (*STAGES, "stages_sum")}
    out = {
        **paired(args, runs),
        "settings": {
            "preset": "smollm2_demo",
            "variant": "A1 (A, ref_compute cached)",
            "B": args.batch_size,
            "G": args.group_size,
            "max_new_tokens": args.max_new_tokens,
            "sample_draw": args.sample_draw,
            "shared_prompt": args.shared_prompt,
            "ppo_epochs": 1,
            "minibatches": 1,
            "steps_per_run": args.steps,
            "reps": args.reps,
            "dropped_first_steps": "per run: drop_first",
            "clock": "process CPU time",
            "threads": 1,
        },
        **info,
        "loadavg_start": load0,
        "loadavg_end": os.getloadavg(),
        "wall_s": time.time() - t0,
        "loadavg_after_each_run": [r["loadavg_end"] for rs in runs.values() for r in rs],
        "medians": table,
        "speedup_float32_over_bf16": ratios,
        "runs": runs,
    }
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
    return table


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=2, help="alternating float32 / bf16_mixed run pairs")
    ap.add_argument("--steps", type=int, default=3, help="RL steps per run (the first is not timed)")
    ap.add_argument("--batch_size", type=int, default=4)
    ap.add_argument("--group_size", type=int, default=4)
    ap.add_argument("--max_new_tokens", type=int, default=32)
    ap.add_argument("--dtypes", default=",".join(DTYPES))
    ap.add_argument(
        "--sample_draw",
        default="exponential",
        choices=sample_draws(),
        help="the runs' --sample_draw (how the sampler draws each token; the same distribution)",
    )
    ap.add_argument(
        "--shared_prompt",
        action="store_true",
        help="the runs' --shared_prompt (teacher-forced passes encode each distinct prompt once)",
    )
    ap.add_argument("--out", default="benchmarks/results/real_speed.json")
    ap.add_argument(
        "--drop_first",
        type=int,
        default=1,
        choices=(0, 1),
        help="drop each run's first step (warm-up) from the medians; 0 for one-step runs",
    )
    ap.add_argument(
        "--append",
        action="store_true",
        help="add these runs to those already in --out (e.g. fewer steps for the slower dtype)",
    )
    ap.add_argument(
        "--profile",
        action="store_true",
        help="with --worker: print torch.profiler's op table (by input shape) of the last step to stderr",
    )
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--dtype", default="float32", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        worker(args)
        return 0
    sys.path.insert(0, SRC)
    dtypes = args.dtypes.split(",")
    t0, load0 = time.time(), os.getloadavg()
    runs: dict[str, list[dict]] = {d: [] for d in DTYPES}
    prev = json.load(open(args.out)) if args.append and os.path.exists(args.out) else None
    if prev:  # keep the runs (and the matmul rates) in the file
        info = {"machine": prev["machine"], "commit": git_commit(), "matmul_gflops": prev["matmul_gflops"]}
        for d, rs in prev["runs"].items():
            runs.setdefault(d, []).extend(rs)
        info["earlier_parts"] = prev.get("earlier_parts", []) + [
            {k: prev[k] for k in ("commit", "loadavg_start", "loadavg_end", "wall_s", "settings") if k in prev}
        ]
    else:
        info = {"machine": machine(), "commit": git_commit(), "matmul_gflops": matmul_rates()}
    print(json.dumps(info, indent=1), flush=True)
    for rep in range(args.reps):
        for d in dtypes:
            runs[d].append(spawn(args, d) | {"steps_per_run": args.steps, "drop_first": args.drop_first})
            print(
                f"rep {rep + 1}/{args.reps} {d}: steps {[round(s['time/step'], 2) for s in runs[d][-1]['per_step']]} "
                f"CPU-s, load {runs[d][-1]['loadavg_end'][0]:.1f} ({time.time() - t0:.0f} s)",
                file=sys.stderr,
                flush=True,
            )
            write(args, info, runs, load0, t0)  # after every run: a stopped benchmark keeps its runs
    table = write(args, info, runs, load0, t0)  # (--append --reps 0: only re-summarise the file)
    print(
        "| dtype | step = rollout + reference + train (CPU s) | rollout | reference | train | peak RSS MB | steps timed |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for d, m in table.items():
        print(
            f"| {d} | {m['stages_sum']:.2f} | {m['time/rollout']:.2f} | {m['time/ref']:.2f} | {m['time/train']:.2f} "
            f"| {m['peak_rss_mb']:.0f} | {m['steps_timed']} |"
        )
    if len(table) == 2:
        print(
            "float32 / bf16_mixed (medians of all steps): "
            + ", ".join(f"{k} {table['float32'][k] / table['bf16_mixed'][k]:.2f}x" for k in (*STAGES, "stages_sum"))
        )
        pr = paired(args, json.load(open(args.out))["runs"])
        print(
            f"ratio_bf16_over_float32 (median of per-pair CPU ratios): {pr['ratio_bf16_over_float32']:.2f}x, "
            f"pairs {', '.join(f'{r:.2f}' for r in pr['pair_ratios'])}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
