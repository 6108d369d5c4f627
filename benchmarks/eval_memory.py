"""Peak memory of the real-model demo's evaluation pieces, each in a fresh process (peak RSS =
ru_maxrss): the drift monitor (kl/to_init, kl/to_prev on 64 prompts) with and without its row
chunking, and the set-up (model load + greedy evaluation before RL) at --n_val and at 8 prompts.

    .venv/bin/python benchmarks/eval_memory.py [--model DIR] [--n_val 200]

Prints one line per piece: the process's peak RSS after the set-up and after the piece, in MiB,
and the chunked / unchunked ratio of the monitor's peak. Needs the converted SmolLM2 model
(`prorl-bench get-model smollm2-135m-instruct`) and reasoning-gym.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "src"))


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def piece(kind: str, model: str, n_val: int, chunked: bool) -> dict:
    import torch

    from noma_prorl_bench.config import make_config
    from noma_prorl_bench.training import monitors
    from noma_prorl_bench.training.trainer import Trainer
    torch.set_num_threads(1)
    if not chunked:
        monitors.MONITOR_CHUNK_ELEMENTS = 2 ** 62
    cfg = make_config({"outdir": "-", "preset": "smollm2_demo", "model": f"hf:{model}", "n_val": n_val, "quiet": True})
    t = Trainer(cfg)                                  # loads the model and evaluates n_val prompts before RL
    out = {"piece": kind, "after_setup_mb": rss_mb()}
    if kind == "monitor":
        t.monitors.before_step(1)
        t.monitors.drift.measure(t.policy)
    out["peak_mb"] = rss_mb()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=os.path.expanduser("~/.cache/noma_prorl_bench/models/smollm2-135m-instruct-q4_1-dequant"))
    ap.add_argument("--n_val", type=int, default=200)
    ap.add_argument("--piece", help=argparse.SUPPRESS)
    ap.add_argument("--unchunked", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.piece:
        print(json.dumps(piece(a.piece, a.model, a.n_val, not a.unchunked)))
        return
    res = {}
    for name, n_val, extra in (("monitor chunked", 64, ["--piece", "monitor"]),
                               ("monitor unchunked", 64, ["--piece", "monitor", "--unchunked"]),
                               (f"setup, {a.n_val} prompts", a.n_val, ["--piece", "setup"]),
                               ("setup, 8 prompts", 8, ["--piece", "setup"])):
        r = subprocess.run([sys.executable, __file__, "--model", a.model, "--n_val", str(n_val), *extra],
                           capture_output=True, text=True)
        if r.returncode:
            sys.exit(f"{name} failed:\n{r.stderr[-2000:]}")
        res[name] = json.loads(r.stdout.strip().splitlines()[-1])
        print(f"{name:18s} peak RSS after set-up {res[name]['after_setup_mb']:7.0f} MiB, after the piece "
              f"{res[name]['peak_mb']:7.0f} MiB", flush=True)
    print(f"monitor peak, chunked / unchunked: {res['monitor chunked']['peak_mb'] / res['monitor unchunked']['peak_mb']:.2f}")


if __name__ == "__main__":
    main()
