"""RL with adapter growth on the default task (experiment b): preserve / reset / naive /
noma_flat, plus `nogrow` (the same adapters kept at the initial rank) as the control.

Every arm is one CLI run (`python -m noma_prorl_bench.run`, GRU on reverse_digits, LoRA on the
output `head`, base frozen) with the same seed per seed index, so all arms are bit-identical up to
the first growth (checked and printed). Growth happens on a schedule (`--grow_every`).

Per growth at step g (after g's update): pre-growth level = mean train reward (`reward/mean`)
over steps g-9..g (the RecoveryTracker rule of resets); *steps to regain* = j - g for the first
j > g whose train reward >= that level (same rule as the `recovery` event of resets);
*delta20* = mean train reward over steps g+1..g+20 minus the level. nogrow gets the same
numbers at the same steps (the noise floor: nothing happens there). Final: mean train reward of
the last 20 steps, and the last greedy validation reward (`reward/val`).

Run (at most `--jobs` processes, 1 torch thread each; docs/growth/rl/report.md records a run's wall time):
    PYTHONPATH=src python benchmarks/studies/growth_rl.py
    PYTHONPATH=src python benchmarks/studies/growth_rl.py --from_json runs/growth_rl.json   # re-print, re-plot
Prints every command, writes run directories under `--runs`, `--json` (per-run curves and
metrics) and `--fig` (default docs/figures/growth_rl.png).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ARMS = ("preserve", "reset", "naive", "noma_flat", "nogrow")
PRE_WINDOW, POST_WINDOW, FINAL_WINDOW = 10, 20, 20
VOLATILE = ("time/", "perf/")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--arms", default=",".join(ARMS))
    p.add_argument("--steps", type=int, default=240)
    p.add_argument("--grow_every", type=int, default=60)
    p.add_argument("--initial_rank", type=int, default=2)
    p.add_argument("--rank_step", type=int, default=8)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--eval_every", type=int, default=20)
    p.add_argument("--extra", default="", help="more run flags, space separated")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--runs", default=os.path.join(ROOT, "runs", "growth_rl"))
    p.add_argument("--json", default=os.path.join(ROOT, "runs", "growth_rl.json"))
    p.add_argument("--fig", default=os.path.join(ROOT, "docs", "figures", "growth_rl.png"))
    p.add_argument("--from_json", default="")
    p.add_argument(
        "--step_sizes",
        type=int,
        default=0,
        help="1: only the step-size diagnostic (in process, seed 0, preserve vs reset)",
    )
    return p.parse_args(argv)


def command(args, arm: str, seed: int) -> list[str]:
    mode = "preserve" if arm == "nogrow" else arm
    max_rank = args.initial_rank if arm == "nogrow" else 64
    return [
        sys.executable,
        "-m",
        "noma_prorl_bench.run",
        "--outdir",
        os.path.join(args.runs, f"{arm}_s{seed}"),
        "--overwrite",
        "--quiet",
        "--threads",
        "1",
        "--seed",
        str(seed),
        "--steps",
        str(args.steps),
        "--lr",
        str(args.lr),
        "--eval_every",
        str(args.eval_every),
        "--enable_growth",
        "1",
        "--grow_every",
        str(args.grow_every),
        "--initial_rank",
        str(args.initial_rank),
        "--rank_step",
        str(args.rank_step),
        "--max_rank",
        str(max_rank),
        "--growth_migration",
        mode,
        *args.extra.split(),
    ]


def run_all(args) -> list[dict]:
    jobs = [(arm, seed) for seed in range(args.seeds) for arm in args.arms.split(",")]
    env = {**os.environ, "PYTHONPATH": os.path.join(ROOT, "src"), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    for arm, seed in jobs:
        print("$ PYTHONPATH=src python " + " ".join(command(args, arm, seed)[1:]).replace(ROOT + "/", ""), flush=True)

    def one(job):
        arm, seed = job
        t0 = time.perf_counter()
        subprocess.run(command(args, arm, seed), check=True, env=env, cwd=ROOT)
        return {
            "arm": arm,
            "seed": seed,
            "wall_s": time.perf_counter() - t0,
            **read_run(os.path.join(args.runs, f"{arm}_s{seed}")),
        }

    with ThreadPoolExecutor(max_workers=args.jobs) as ex:
        return list(ex.map(one, jobs))


def read_run(d: str) -> dict:
    with open(os.path.join(d, "metrics.jsonl")) as f:
        metrics = [json.loads(line) for line in f]
    with open(os.path.join(d, "events.jsonl")) as f:
        events = [json.loads(line) for line in f]
    return {
        "reward": [m["reward/mean"] for m in metrics],
        "rank": [m.get("adapter/rank") for m in metrics],
        "val": [(m["step"], m["reward/val"]) for m in metrics if "reward/val" in m],
        "growths": [e for e in events if e["event"] == "growth"],
        "stable": [{k: v for k, v in m.items() if not k.startswith(VOLATILE)} for m in metrics],
    }


# ---------------------------------------------------------------- metrics


def growth_steps(args) -> list[int]:
    return [g for g in range(args.grow_every, args.steps, args.grow_every)]


def per_growth(reward: list[float], g: int, horizon: int) -> dict:
    """reward[i] is step i+1. Level over steps g-9..g; regain and delta20 after g (up to horizon)."""
    level = statistics.fmean(reward[max(0, g - PRE_WINDOW) : g])
    regain = next((j - g for j in range(g + 1, horizon + 1) if reward[j - 1] >= level), None)
    post = reward[g : g + POST_WINDOW]
    return {"step": g, "level": level, "regain": regain, "delta20": statistics.fmean(post) - level}


def summarize(results: list[dict], args) -> dict:
    gs = growth_steps(args)
    table = {}
    for arm in args.arms.split(","):
        runs = [r for r in results if r["arm"] == arm]
        events = []
        for r in runs:
            for i, g in enumerate(gs):
                horizon = gs[i + 1] if i + 1 < len(gs) else args.steps
                events.append(per_growth(r["reward"], g, horizon))
        regains = [e["regain"] for e in events if e["regain"] is not None]
        table[arm] = {
            "n_runs": len(runs),
            "n_growths": len(events),
            "never": len(events) - len(regains),
            "regain": regains,
            "delta20": [e["delta20"] for e in events],
            "final_train": [statistics.fmean(r["reward"][-FINAL_WINDOW:]) for r in runs],
            "final_val": [r["val"][-1][1] for r in runs],
            "pre_first_growth_train": [statistics.fmean(r["reward"][gs[0] - PRE_WINDOW : gs[0]]) for r in runs],
            "final_rank": [r["rank"][-1] for r in runs],
            "wall_s": [r["wall_s"] for r in runs],
            "stale_problems": sum(len(e["stale_state_problems"]) for r in runs for e in r["growths"]),
        }
    return table


def _ms(xs: list[float], fmt: str = ".3f") -> str:
    if not xs:
        return "-"
    sd = statistics.stdev(xs) if len(xs) > 1 else 0.0
    return f"{statistics.fmean(xs):{fmt}} +- {sd:{fmt}}"


def identical_before_growth(results: list[dict], args) -> bool:
    g = growth_steps(args)[0]
    ok = True
    for seed in range(args.seeds):
        runs = [r for r in results if r["seed"] == seed]
        ref = [{k: v for k, v in m.items()} for m in runs[0]["stable"][:g]]
        ok &= all(r["stable"][:g] == ref for r in runs[1:])
    return ok


def print_table(table: dict, results: list[dict], args) -> None:
    print(
        f"\nGRU on reverse_digits, LoRA on head (base frozen), rank {args.initial_rank} + {args.rank_step} "
        f"every {args.grow_every} steps, {args.steps} steps, lr {args.lr}, seeds 0..{args.seeds - 1}; "
        f"arms identical before the first growth: {identical_before_growth(results, args)}"
    )
    arms = args.arms.split(",")
    if "naive" in arms and "reset" in arms:
        same = all(
            next(r for r in results if r["arm"] == "naive" and r["seed"] == s)["stable"]
            == next(r for r in results if r["arm"] == "reset" and r["seed"] == s)["stable"]
            for s in range(args.seeds)
        )
        print(f"naive and reset bit-identical (all metrics but time/perf, every step, every seed): {same}")
    print(
        "| arm | growths | steps to regain: mean +- std | median | never | delta20 (post - pre) "
        "| train reward before 1st growth | final train reward (last 20) | final val reward | final rank "
        "| stale-state problems |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for arm, t in table.items():
        med = statistics.median(t["regain"]) if t["regain"] else "-"
        print(
            f"| {arm} | {t['n_growths']} | {_ms(t['regain'], '.1f')} | {med} | {t['never']} | "
            f"{_ms(t['delta20'], '+.3f')} | {_ms(t['pre_first_growth_train'])} | {_ms(t['final_train'])} | "
            f"{_ms(t['final_val'])} | {t['final_rank'][0]} | {t['stale_problems']} |"
        )


# ---------------------------------------------------------------- plot


def plot(results: list[dict], args) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = {"preserve": "C0", "reset": "C1", "naive": "C2", "noma_flat": "C3", "nogrow": "0.4"}
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.2))
    w = 10
    for arm in args.arms.split(","):
        runs = [r["reward"] for r in results if r["arm"] == arm]
        mean = [statistics.fmean(xs) for xs in zip(*runs)]
        smooth = [statistics.fmean(mean[max(0, i - w + 1) : i + 1]) for i in range(len(mean))]
        ls = ":" if arm == "naive" else "-"  # naive == reset here: dotted on top
        ax1.plot(range(1, len(smooth) + 1), smooth, ls, color=colors.get(arm), label=arm, lw=1.4)
        # aligned at each growth, relative to the pre-growth level, mean over seeds and growths
        curves = []
        for r in runs:
            for g in growth_steps(args):
                level = statistics.fmean(r[g - PRE_WINDOW : g])
                curves.append([x - level for x in r[g - PRE_WINDOW : g + 40]])
        n = min(len(c) for c in curves)
        rel = [statistics.fmean(c[i] for c in curves) for i in range(n)]
        rel = [statistics.fmean(rel[max(PRE_WINDOW, i - 4) : i + 1]) if i >= PRE_WINDOW else rel[i] for i in range(n)]
        ax2.plot(range(-PRE_WINDOW + 1, -PRE_WINDOW + 1 + n), rel, ls, color=colors.get(arm), label=arm, lw=1.4)
    for g in growth_steps(args):
        ax1.axvline(g, color="0.8", lw=0.8, zorder=0)
    ax1.set(
        xlabel="step",
        ylabel=f"train reward (mean over seeds, {w}-step moving avg)",
        title="train reward; grey lines: growths",
    )
    ax2.axvline(0.5, color="0.6", lw=0.8)
    ax2.axhline(0, color="0.6", lw=0.8)
    ax2.set(
        xlabel="steps after growth (growth after step 0)",
        ylabel="train reward - pre-growth level",
        title="around each growth (mean over seeds x growths; 5-step avg after)",
    )
    ax1.legend(fontsize=8), ax2.legend(fontsize=8)
    fig.tight_layout()
    os.makedirs(os.path.dirname(args.fig), exist_ok=True)
    fig.savefig(args.fig, dpi=110)
    print(f"figure: {os.path.relpath(args.fig, ROOT)}")


def step_sizes(args, seed: int = 0, window: int = 20) -> None:
    """Diagnostic (in process, one seed, preserve vs reset): mean |change| per optimizer step of
    the head adapter's entries, in units of lr, over the `window` RL steps after each growth,
    for the old block (A[:r_old], B[:, :r_old]) and the new block; `before`: the old block over
    the `window` steps before the growth."""
    sys.path.insert(0, os.path.join(ROOT, "src"))
    import torch

    from noma_prorl_bench.config import build_parser, make_config
    from noma_prorl_bench.training.trainer import Trainer

    print("\n| mode | growth step | rank | old block, before | old block, after | new block, after |")
    print("|---|---|---|---|---|---|")
    for mode in ("preserve", "reset"):
        ns = vars(build_parser().parse_args(command(args, mode, seed)[3:]))
        cfg = make_config({**ns, "outdir": "/dev/null"})
        tr = Trainer.from_config(cfg).start()
        unit = cfg.ppo_epochs * cfg.minibatches * cfg.lr  # optimizer steps per RL step x lr
        deltas = []  # per RL step: (|dA| [r, in], |dB| [out, r])
        for _ in range(cfg.steps):
            A0, B0 = tr.policy.head.lora_A.detach().clone(), tr.policy.head.lora_B.detach().clone()
            tr.train_step()
            r = A0.shape[0]
            deltas.append(
                ((tr.policy.head.lora_A.detach()[:r] - A0).abs(), (tr.policy.head.lora_B.detach()[:, :r] - B0).abs())
            )

        def block(steps, lo, hi):
            vals = [torch.cat([dA[lo:hi].flatten(), dB[:, lo:hi].flatten()]) for dA, dB in steps]
            return float(torch.cat(vals).mean()) / unit

        for g in growth_steps(args):
            r_old, r_new = deltas[g - 1][0].shape[0], deltas[g][0].shape[0]
            after = deltas[g : g + window]
            print(
                f"| {mode} | {g} | {r_old} -> {r_new} | {block(deltas[g - window : g], 0, r_old):.2f} | "
                f"{block(after, 0, r_old):.2f} | {block(after, r_old, r_new):.2f} |"
            )


def main(argv=None) -> None:
    args = parse_args(argv)
    t0 = time.perf_counter()
    if args.step_sizes:
        step_sizes(args)
        print(f"total wall time {time.perf_counter() - t0:.0f} s")
        return
    if args.from_json:
        with open(args.from_json) as f:
            saved = json.load(f)
        args = argparse.Namespace(**{**vars(args), **saved["args"], "from_json": args.from_json})
        results = saved["results"]
    else:
        results = run_all(args)
        os.makedirs(os.path.dirname(args.json), exist_ok=True)
        keep = {k: v for k, v in vars(args).items() if k not in ("from_json", "json", "fig", "runs")}
        with open(args.json, "w") as f:
            json.dump({"args": keep, "results": results}, f)
    table = summarize(results, args)
    print_table(table, results, args)
    plot(results, args)
    print(f"total wall time {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
