"""The wedge on a real LM: A0 / A1 / A2 / B step time and the reference share of the
step on SmolLM2-135M-Instruct (dequantised Q4_1), plus one short reference-reset run and one
rank-growth run on it.

Every run is `--preset smollm2_demo` (LoRA rank 8 on q/k/v/o, base frozen; the reference is a
copy of the adapted policy) with the small settings below, a fresh Trainer per run, runs
alternating A0, A1, A2, B, A0, ... so machine noise hits them alike; the first step of each run
is dropped (warm-up); medians over the rest. Reference share = time/ref / (time/step - time/eval)
(time/ref includes A0's in-update forwards; docs/metrics.md).

Clock (`--clock`): `cpu` (default) makes every stage timer of the run read this process's CPU time
(time.process_time, patched in for time.perf_counter in the trainer, reference and metrics
modules), so that the numbers do not depend on how many other processes share the cores; with
one torch thread that is close to the wall time on an idle core. `wall` keeps the wall clock.
With `--clock cpu` the variants may run as parallel processes (`--variants A0` ... then `--merge`).

    PYTHONPATH=src OMP_NUM_THREADS=1 nice -n 5 python benchmarks/speed/real_wedge.py --reps 3 --steps 4 \
        --out benchmarks/results/real_wedge.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import types

import torch

from noma_prorl_bench.config import make_config
from noma_prorl_bench.io.metrics import MemorySink
from noma_prorl_bench.training.trainer import Trainer

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # benchmarks/: _common
from _common import provenance

VARIANTS = {
    "A0": {"variant": "A", "ref_compute": "naive_epoch"},
    "A1": {"variant": "A", "ref_compute": "cached"},
    "A2": {"variant": "A", "ref_compute": "ring"},
    "B": {"variant": "B", "beta": 0.0},
}
EXTRA_RUNS = {
    # reference reset after every step, Adam moments kept (ProRL-v2-like semantics, compressed in time)
    "reset": {"reset_every": 1, "reset_to": "current", "opt_reset": "keep"},
    # adapter rank 4 -> 8 -> 12 on a schedule, Adam state preserved across the growth
    "growth": {
        "initial_rank": 4,
        "max_rank": 12,
        "rank_step": 4,
        "grow_on": "schedule",
        "grow_every": 1,
        "growth_migration": "preserve",
    },
}


def settings(args) -> dict:
    return {
        "preset": "smollm2_demo",
        "outdir": "/dev/null",
        "quiet": True,
        "threads": 1,
        "seed": 0,
        "steps": args.steps,
        "batch_size": args.batch_size,
        "group_size": args.group_size,
        "max_new_tokens": args.max_new_tokens,
        "ppo_epochs": args.ppo_epochs,
        "minibatches": args.minibatches,
        "n_val": args.n_val,
        "eval_every": 10**6,
    }


def run_once(overrides: dict, args) -> tuple[list[dict], list[dict]]:
    cfg = make_config({**settings(args), **overrides})
    events = MemorySink()
    trainer = Trainer.from_config(cfg, events_sink=events).start()
    return [trainer.train_step() for _ in range(args.steps)], events.records


def use_cpu_clock() -> None:
    """Stage timers read process CPU time instead of wall time (see the module docstring)."""
    import noma_prorl_bench.io.metrics as metrics_mod
    import noma_prorl_bench.rollout.reference as reference_mod
    import noma_prorl_bench.training.trainer as trainer_mod

    shim = types.SimpleNamespace(**{k: getattr(time, k) for k in dir(time) if not k.startswith("_")})
    shim.perf_counter = time.process_time
    for mod in (metrics_mod, reference_mod, trainer_mod):
        mod.time = shim


def merge(files: list[str], out: str) -> None:
    parts = [json.load(open(f)) for f in files]
    merged = {"settings": parts[0]["settings"], "variants": {}, "extra_runs": {}}
    merged.update({k: parts[0][k] for k in ("commit", "machine") if k in parts[0]})
    for p in parts:
        merged["variants"].update(p["variants"])
        merged["extra_runs"].update(p["extra_runs"])
    json.dump(merged, open(out, "w"), indent=1, default=str)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--batch_size", type=int, default=2)
    ap.add_argument("--group_size", type=int, default=4)
    ap.add_argument("--max_new_tokens", type=int, default=16)
    ap.add_argument("--ppo_epochs", type=int, default=2)
    ap.add_argument("--minibatches", type=int, default=2)
    ap.add_argument("--n_val", type=int, default=4)
    ap.add_argument("--variants", default="A0,A1,A2,B", help="subset of A0,A1,A2,B to run")
    ap.add_argument("--extra", default="reset,growth", help="subset of reset,growth ('' for none)")
    ap.add_argument("--clock", choices=("cpu", "wall"), default="cpu")
    ap.add_argument("--merge", nargs="*", default=None, help="merge these result files into --out and exit")
    ap.add_argument("--out", default="benchmarks/results/real_wedge.json")
    args = ap.parse_args(argv)
    if args.merge is not None:
        merge(args.merge, args.out)
        return 0
    torch.set_num_threads(1)
    if args.clock == "cpu":
        use_cpu_clock()
    variants = {k: VARIANTS[k] for k in args.variants.split(",") if k}
    extras = {k: EXTRA_RUNS[k] for k in args.extra.split(",") if k}
    t0 = time.time()
    load0 = os.getloadavg()[0]
    samples: dict[str, list[dict]] = {k: [] for k in variants}
    for rep in range(args.reps):
        for name, ov in variants.items():
            samples[name].extend(run_once(ov, args)[0][1:])
            print(f"rep {rep + 1}/{args.reps} {name} done ({time.time() - t0:.0f} s)", file=sys.stderr, flush=True)
    table = {}
    for name, rs in samples.items():
        med = {k: statistics.median(r[k] for r in rs) for k in ("time/step", "time/rollout", "time/ref", "time/train")}
        med["ref_share"] = statistics.median(r["time/ref"] / max(r["time/step"] - r["time/eval"], 1e-9) for r in rs)
        med["ref_fwd_per_step"] = statistics.median(r.get("count/ref_fwd", 0) for r in rs)
        med["n_steps"] = len(rs)
        table[name] = med
    extra = {}
    for name, ov in extras.items():
        ms, ev = run_once(ov, args)
        extra[name] = {
            "overrides": ov,
            "events": [e for e in ev if e.get("event") in ("ref_reset", "opt_reset", "growth")],
            "reset_steps_since": [m.get("reset/steps_since") for m in ms],
            "adapter_rank": [m.get("adapter/rank") for m in ms],
            "kl_k3": [m.get("kl/k3") for m in ms],
            "finite": all(all(v == v for v in m.values() if isinstance(v, float)) for m in ms),
        }
        print(f"{name} run done ({time.time() - t0:.0f} s)", file=sys.stderr, flush=True)
    out = {
        **provenance(),
        "settings": {
            **settings(args),
            "reps": args.reps,
            "dropped_first_steps": 1,
            "torch": torch.__version__,
            "clock": args.clock,
            "loadavg_start": load0,
            "loadavg_end": os.getloadavg()[0],
        },
        "variants": table,
        "extra_runs": extra,
        "per_step": {
            name: [{k: r[k] for k in ("time/step", "time/rollout", "time/ref", "time/train", "time/eval")} for r in rs]
            for name, rs in samples.items()
        },
    }
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    json.dump(out, open(args.out, "w"), indent=1, default=str)
    for name, m in table.items():
        print(
            f"{name}: step {m['time/step']:.2f} s, ref {m['time/ref']:.2f} s, share {m['ref_share']:.3f}, "
            f"ref fwd/step {m['ref_fwd_per_step']:.0f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
