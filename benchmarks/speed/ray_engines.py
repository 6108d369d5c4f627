"""Samples/s of the local engine, ray_colocated with K in {1, 2, 4, 8} and ray_async, side by side.

Run:  PYTHONPATH=src python benchmarks/speed/ray_engines.py [--outdir runs/bench_ray] [--steps 96] [--reps 2]
          [--batch_size 16] [--group_size 8] [--ppo_epochs 1] [--minibatches 1]

One local Ray cluster (2 CPUs here) serves every Ray run; each Ray run is a normal training
run (`run.run(cfg)`) into OUTDIR/<name>_rep<i>/ with its metrics, timeline.jsonl and
plots/timeline.png; the local engine runs its Trainer loop in this process. One torch thread
per process; runs alternate over `--reps` repetitions and medians are reported. Default settings are the course assignment's: one optimizer step per
step (--ppo_epochs 1 --minibatches 1), so K is the number of optimizer steps per rollout round.

Reported per run (from the saved files only):
  samples/s   trained sequences / train seconds (first step submitted -> last step done; Ray
              start, actor start and warm start excluded, reported as `setup s`)
  cpu-s       CPU seconds of all run processes during training (Ray: sum of `perf/cpu_s`,
              driver + actors, Ray's own daemons excluded; local: this process); cpu-s/1k per
              1000 trained samples
  gen, train, sync   mean per-step generation, learner step (ref + update + eval) and sync s
  staleness   histogram of learner version - sampling version

Async vs sync: speedup = samples/s(async) / samples/s(colocated K=1), for the same number of
samples; ideal = (t_gen + t_train) / max(t_gen, t_train) from colocated K=1's measured stage
times (perfect overlap, no sync or driver cost, enough cores).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "src"))
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

from noma_prorl_bench.analysis.tables import markdown_table  # noqa: E402
from noma_prorl_bench.config import make_config  # noqa: E402
from noma_prorl_bench.engines.local import run  # noqa: E402

RUNS = [
    ("local", {}),
    *[(f"colocated_K{k}", {"engine": "ray_colocated", "steps_per_rollout": k}) for k in (1, 2, 4, 8)],
    ("async_S1", {"engine": "ray_async", "max_staleness": 1}),
    ("async_S2_N2", {"engine": "ray_async", "max_staleness": 2, "num_generators": 2}),
]


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--outdir", default="runs/bench_ray")
    p.add_argument("--steps", type=int, default=96)
    p.add_argument("--batch_size", type=int, default=16)
    p.add_argument("--group_size", type=int, default=8)
    p.add_argument("--ppo_epochs", type=int, default=1)
    p.add_argument("--minibatches", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--reps", type=int, default=2, help="repetitions (runs alternate; medians reported)")
    p.add_argument("--only", default="", help="comma-separated run names (default: all)")
    return p.parse_args(argv)


def make_cfg(name: str, flags: dict, args, rep: int):
    return make_config(
        {
            "outdir": os.path.join(args.outdir, f"{name}_rep{rep}"),
            "overwrite": True,
            "quiet": True,
            "threads": 1,
            "seed": args.seed,
            "steps": args.steps,
            "batch_size": args.batch_size,
            "group_size": args.group_size,
            "ppo_epochs": args.ppo_epochs,
            "minibatches": args.minibatches,
            "eval_every": args.steps,
            "n_val": 64,
            **flags,
        }
    )


def run_local(cfg) -> tuple[list[dict], float, float]:
    """The local engine's loop in this process, CPU measured around the steps only."""
    from noma_prorl_bench.io.metrics import JsonlSink  # noqa: PLC0415
    from noma_prorl_bench.training.trainer import Trainer  # noqa: PLC0415

    os.makedirs(cfg.outdir, exist_ok=True)
    sink = JsonlSink(os.path.join(cfg.outdir, "metrics.jsonl"), "w")
    trainer = Trainer.from_config(cfg, sink).start()
    c0, t0 = time.process_time(), time.perf_counter()
    recs = [trainer.train_step() for _ in range(cfg.steps)]
    train_s, cpu = time.perf_counter() - t0, time.process_time() - c0
    sink.close()
    return recs, train_s, cpu


def one_run(name: str, flags: dict, args, rep: int) -> dict:
    """Train one run; returns what the table needs."""
    cfg = make_cfg(name, flags, args, rep)
    t0 = time.perf_counter()
    if cfg.engine == "local":
        recs, train_s, cpu = run_local(cfg)
        stale = {"0": len(recs)}
    else:
        summary = run(cfg)
        with open(os.path.join(cfg.outdir, "metrics.jsonl")) as f:
            recs = [json.loads(line) for line in f]
        train_s, stale = summary["train_seconds"], summary["staleness_hist"]
        cpu = sum(r["perf/cpu_s"] for r in recs)
    wall = time.perf_counter() - t0
    n = cfg.batch_size * cfg.group_size * len(recs)
    mean = lambda k: statistics.fmean(r.get(k, 0.0) for r in recs)  # noqa: E731
    learn = mean("time/learner_step") if cfg.engine != "local" else mean("time/step") - mean("time/rollout")
    return {
        "name": name,
        "samples": n,
        "train_s": train_s,
        "samples_per_s": n / train_s,
        "cpu_s": cpu,
        "cpu_s_per_1k": 1000 * cpu / n,
        "setup_s": wall - train_s,
        "t_gen": mean("time/rollout"),
        "t_train": learn,
        "t_sync": mean("time/sync"),
        "staleness": stale,
    }


def median_row(rows: list[dict]) -> dict:
    """Medians over repetitions (staleness of the first)."""
    out = dict(rows[0])
    for k, v in rows[0].items():
        if isinstance(v, float):
            out[k] = statistics.median(r[k] for r in rows)
    return out


def table(rows: list[dict]) -> str:
    header = "run,samples/s,train s,setup s,cpu-s,cpu-s/1k,gen s/step,train s/step,sync s/step,staleness".split(",")
    cells = [
        [
            r["name"],
            f"{r['samples_per_s']:.0f}",
            f"{r['train_s']:.2f}",
            f"{r['setup_s']:.1f}",
            f"{r['cpu_s']:.1f}",
            f"{r['cpu_s_per_1k']:.2f}",
            f"{r['t_gen'] * 1e3:.1f} ms",
            f"{r['t_train'] * 1e3:.1f} ms",
            f"{r['t_sync'] * 1e3:.2f} ms",
            r["staleness"],
        ]
        for r in rows
    ]
    return "\n".join(markdown_table(header, cells))


def speedups(rows: dict) -> str:
    sync = rows.get("colocated_K1")
    if sync is None:
        return ""
    ideal = (sync["t_gen"] + sync["t_train"]) / max(sync["t_gen"], sync["t_train"])
    out = [
        f"ideal async speedup from colocated_K1 stage times: (t_gen + t_train) / max(t_gen, t_train) = "
        f"({sync['t_gen'] * 1e3:.1f} + {sync['t_train'] * 1e3:.1f}) / "
        f"{max(sync['t_gen'], sync['t_train']) * 1e3:.1f} ms = {ideal:.2f}"
    ]
    for name, r in rows.items():
        if name != "colocated_K1":
            out.append(f"{name}: measured speedup vs colocated_K1 = {r['samples_per_s'] / sync['samples_per_s']:.2f}")
    return "\n".join(out)


def main(argv=None) -> int:
    args = parse(argv)
    load0 = os.getloadavg()[0]
    import ray  # noqa: PLC0415

    tmp = tempfile.mkdtemp(prefix="nrb_bench_", dir="/tmp")
    ray.init(
        num_cpus=os.cpu_count() or 1, include_dashboard=False, logging_level="ERROR", log_to_driver=False, _temp_dir=tmp
    )
    wanted = set(filter(None, args.only.split(",")))
    reps: dict[str, list] = {}
    try:
        for rep in range(args.reps):  # alternate runs so machine noise hits all alike
            for name, flags in RUNS:
                if wanted and name not in wanted:
                    continue
                r = one_run(name, flags, args, rep)
                reps.setdefault(name, []).append(r)
                print(f"rep {rep} {name}: {r['samples_per_s']:.0f} samples/s", file=sys.stderr, flush=True)
    finally:
        ray.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)
    rows = {name: median_row(rs) for name, rs in reps.items()}
    text = "\n".join(
        [
            f"command: PYTHONPATH=src python benchmarks/speed/ray_engines.py {' '.join(argv or sys.argv[1:])}",
            f"machine: {os.cpu_count()} CPUs, 1-min load average {load0:.1f} before, "
            f"{os.getloadavg()[0]:.1f} after (other users share them)",
            table(list(rows.values())),
            "",
            speedups(rows),
        ]
    )
    print(text)
    with open(os.path.join(args.outdir, "results.json"), "w") as f:
        json.dump({"args": vars(args), "rows": list(rows.values()), "reps": reps}, f, indent=2)
    with open(os.path.join(args.outdir, "results.md"), "w") as f:
        f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
