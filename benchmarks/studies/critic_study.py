"""Learning check of PPO with a critic: --adv gae against GRPO at the same budget, paired seeds.

Each seed runs both arms with the same flags apart from the advantage estimator: the same steps,
prompts per step (B), samples per prompt (G), PPO epochs, minibatches, learning rate, beta and
warm start, so both see the same number of rollouts and optimizer steps (the critic's forwards and
its own optimizer are the extra cost of gae, reported as CPU-seconds per run). Every run is its own
process with `--threads 1`, `--jobs` at a time. The score of a run is its final greedy validation
reward (`reward/val` at the last step; secondary: the mean train reward of the last 10 steps).
The effect is the per-seed difference d = gae - grpo: its mean, the project's paired interval
(analysis.stats.paired_interval: t joined with bootstrap-t) and the exact sign-flip p-value
(analysis.stats.sign_flip_p).

    python benchmarks/studies/critic_study.py                       # 10 seeds x 2 arms, 150 steps
    python benchmarks/studies/critic_study.py --seeds 2 --steps 3 --tiny --out /tmp/cs   # the smoke check

Writes OUT.json (every number, the regime, the machine, load averages) and OUT.txt (the answer).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # benchmarks/
sys.path.insert(0, HERE)
from _common import SRC, WORKER_ENV, git_commit  # noqa: E402

sys.path.insert(0, SRC)
import numpy as np  # noqa: E402

from noma_prorl_bench.analysis.stats import holm, mde80, paired_interval, sign_flip_p  # noqa: E402

ARMS = {"grpo": ["--adv", "grpo"], "gae": ["--adv", "gae"]}
MACHINE = "2-core Intel Xeon with AMX (avx512_bf16, amx_bf16)"


def regime_flags(args) -> list[str]:
    flags = [
        "--task",
        args.task,
        "--model",
        "gru",
        "--steps",
        str(args.steps),
        "--eval_every",
        str(args.eval_every or args.steps),
        "--beta",
        str(args.beta),
        "--threads",
        "1",
        "--quiet",
    ]
    if args.tiny:  # the smoke check: seconds per run
        flags += ["--batch_size", "4", "--group_size", "4", "--warmstart_steps", "5", "--n_val", "16"]
    return flags


def run_one(arm: str, seed: int, args, tmp: str) -> dict:
    """One run in its own process -> its scores and CPU-seconds (os.wait4's rusage of that child)."""
    out = os.path.join(tmp, f"{arm}_{seed}")
    cmd = [sys.executable, "-m", "noma_prorl_bench.run", "--outdir", out, "--seed", str(seed)]
    cmd += regime_flags(args) + ARMS[arm]
    env = {**os.environ, "PYTHONPATH": SRC, **WORKER_ENV}
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"{arm} seed {seed} failed ({proc.returncode}): {err[-2000:]}")
    with open(os.path.join(out, "metrics.jsonl")) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    rl = [r for r in rows if r["step"] > 0]
    last = rl[-1]
    tail = rl[-10:]
    return {
        "arm": arm,
        "seed": seed,
        "val_final": float(last["reward/val"]),
        "val_before": float(rows[0]["reward/val"]),
        "train_last10": sum(float(r["reward/mean"]) for r in tail) / len(tail),
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "wall_s": time.perf_counter() - t0,
        "critic_fwd_per_step": last.get("count/critic_fwd"),
    }


def summarise(results: list[dict], key: str) -> dict:
    by = {(r["arm"], r["seed"]): r[key] for r in results}
    seeds = sorted({r["seed"] for r in results})
    d = [by[("gae", s)] - by[("grpo", s)] for s in seeds]
    lo, hi = paired_interval(d)
    return {
        "metric": key,
        "gae_mean": sum(by[("gae", s)] for s in seeds) / len(seeds),
        "grpo_mean": sum(by[("grpo", s)] for s in seeds) / len(seeds),
        "differences": d,
        "mean_diff": sum(d) / len(d),
        "ci95": [lo, hi],
        "sign_flip_p": sign_flip_p(d),
        # the effect the sign-flip test could detect with 80% power among the study's 2 questions (an estimate)
        "mde80": mde80(float(np.std(d, ddof=1)), len(d), m=2) if len(d) > 1 else math.inf,
        "gae_wins": sum(x > 0 for x in d),
        "ties": sum(x == 0 for x in d),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--eval_every", type=int, default=50)
    ap.add_argument("--beta", type=float, default=0.05)
    ap.add_argument("--task", default="reverse_digits")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--tiny", action="store_true", help="tiny batches and validation set (the smoke check)")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "critic_study"))
    args = ap.parse_args(argv)
    load_start = os.getloadavg()
    t0 = time.perf_counter()
    lock = threading.Lock()
    results: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="critic_study_") as tmp:
        jobs = [(arm, s) for s in range(args.seeds) for arm in ARMS]
        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            for r in pool.map(lambda job: run_one(job[0], job[1], args, tmp), jobs):
                with lock:
                    results.append(r)
                print(f"{r['arm']:5s} seed {r['seed']}: val {r['val_final']:.4f} cpu {r['cpu_s']:.1f}s", flush=True)
    cpu = {a: sum(r["cpu_s"] for r in results if r["arm"] == a) / args.seeds for a in ARMS}
    out = {
        "what": "PPO with a critic (--adv gae) vs GRPO (--adv grpo), paired seeds, same budget",
        "regime": {
            "task": args.task,
            "model": "gru (hidden 128)",
            "beta": args.beta,
            "steps": args.steps,
            "eval_every": args.eval_every or args.steps,
            "seeds": list(range(args.seeds)),
            "flags": regime_flags(args),
            "defaults": "batch_size 16, group_size 8, ppo_epochs 2, minibatches 2, lr 1e-3, warm start 50 steps, "
            "n_val 256; gae: gamma 1, lam 0.95, whiten_adv 1, vf_coef 0.1, cliprange_value 0.2, critic_lr = lr"
            if not args.tiny
            else "tiny: batch 4 x group 4, warm start 5, n_val 16",
        },
        "score": summarise(results, "val_final"),
        "secondary": summarise(results, "train_last10"),
        "val_before_rl_mean": sum(r["val_before"] for r in results) / len(results),
        "cpu_s_per_run": cpu,
        "runs": sorted(results, key=lambda r: (r["seed"], r["arm"])),
        "machine": MACHINE,
        "platform": platform.platform(),
        "loadavg_start": load_start,
        "loadavg_end": os.getloadavg(),
        "wall_s": time.perf_counter() - t0,
        "jobs": args.jobs,
        "commit": git_commit(),
    }
    write_result(out, args.out)
    return 0


def write_result(out: dict, path: str) -> str:
    """Holm over the study's two questions, then OUT.json and OUT.txt (the answer); returns the text."""
    s, s2 = out["score"], out["secondary"]
    s["p_holm"], s2["p_holm"] = holm([s["sign_flip_p"], s2["sign_flip_p"]])
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path + ".json", "w") as f:
        json.dump(out, f, indent=1)
    reg, cpu, load_start, n = out["regime"], out["cpu_s_per_run"], out["loadavg_start"], len(out["regime"]["seeds"])
    text = (
        f"PPO+GAE vs GRPO, {n} paired seeds; {reg['task']}, GRU, beta {reg['beta']}, {reg['steps']} steps "
        f"({reg['defaults']}).\n"
        f"final reward/val: gae {s['gae_mean']:.4f}, grpo {s['grpo_mean']:.4f}; d = gae - grpo "
        f"{s['mean_diff']:+.4f}, 95% CI [{s['ci95'][0]:+.4f}, {s['ci95'][1]:+.4f}], sign-flip p {s['sign_flip_p']:.3g} "
        f"(Holm over the 2 questions {s['p_holm']:.3g}), mde80 {s['mde80']:.3f} (an estimate), "
        f"gae ahead on {s['gae_wins']}/{n} seeds.\n"
        f"train reward, last 10 steps: gae {s2['gae_mean']:.4f}, grpo {s2['grpo_mean']:.4f}; d {s2['mean_diff']:+.4f}, "
        f"95% CI [{s2['ci95'][0]:+.4f}, {s2['ci95'][1]:+.4f}], p {s2['sign_flip_p']:.3g} (Holm {s2['p_holm']:.3g}), "
        f"mde80 {s2['mde80']:.3f}.\n"
        f"CPU-seconds per run: gae {cpu['gae']:.1f}, grpo {cpu['grpo']:.1f} (one thread each, {out['jobs']} at a time); "
        f"{out['machine']}, load average {load_start[0]:.1f} at the start, {out['loadavg_end'][0]:.1f} at the end; "
        f"wall {out['wall_s'] / 60:.1f} min.\n"
    )
    with open(path + ".txt", "w") as f:
        f.write(text)
    print(text, end="")
    return text


if __name__ == "__main__":
    sys.exit(main())
