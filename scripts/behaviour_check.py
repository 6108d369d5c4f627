"""Behaviour check for refactors: run 8 short flag sets, or compare two such directories.

`python scripts/behaviour_check.py run DIR` trains each flag set into DIR/<name>;
`python scripts/behaviour_check.py compare DIR_A DIR_B` prints identical/different per file,
ignoring timing keys (time/*, perf/*, wall-clock fields). Exit 1 when anything differs.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

COMMON = ["--steps", "12", "--eval_every", "4", "--warmstart_steps", "10", "--quiet"]
FLAG_SETS: dict[str, list[str]] = {
    "gru_default": [],
    "transformer": ["--model", "transformer"],
    "A0": ["--variant", "A", "--ref_compute", "naive_epoch"],
    "B": ["--variant", "B"],
    "reset_soft5": ["--reset_every", "5", "--opt_reset", "soft"],
    "growth_preserve": ["--enable_growth", "1", "--grow_every", "5", "--growth_migration", "preserve"],
    "pass_at_k": ["--eval_samples", "2"],
    "ray_colocated": ["--engine", "ray_colocated", "--actor_timeout", "900"],  # a busy machine starts actors slowly
}
FILES = ("metrics.jsonl", "events.jsonl")
TIMING_PREFIXES = ("time/", "perf/")
WALL_CLOCK = {
    "time",
    "wall",
    "wall_s",
    "elapsed",
    "elapsed_s",
    "seconds",
    "timestamp",
    "ts",
    "t",
    "started",
    "finished",
    "start_time",
    "end_time",
    "pid",
    "host",
    "hostname",
    "run_id",
}  # run_id: a run's random identity (its ownership marker), not behaviour


def is_timing(key: str) -> bool:
    k = key.lower()
    return (
        k.startswith(TIMING_PREFIXES)
        or k in WALL_CLOCK
        or k.endswith(("_s", "_sec", "_seconds"))
        or "time" in k.split("/")[-1]
        or "rss" in k
        or "tok_per_s" in k
        or "per_sec" in k
    )


def strip(obj):
    if isinstance(obj, dict):
        return {k: strip(v) for k, v in obj.items() if not is_timing(k)}
    if isinstance(obj, list):
        return [strip(v) for v in obj]
    return obj


def load(path: Path) -> list:
    if not path.exists():
        return ["<missing>"]
    return [strip(json.loads(line)) for line in path.read_text().splitlines() if line.strip()]


def run_all(outdir: Path, only: list[str]) -> int:
    # Ray renices its workers to 19 by default: on a busy machine they would hardly run
    env = dict(os.environ, PYTHONHASHSEED="0", OMP_NUM_THREADS="1", RAY_AUTH_MODE="disabled", RAY_worker_niceness="0")
    rc_all = 0
    for name, flags in FLAG_SETS.items():
        if only and name not in only:
            continue
        target = outdir / name
        cmd = [sys.executable, "-m", "noma_prorl_bench.run", "--outdir", str(target), *COMMON, *flags]
        rc = subprocess.call(cmd, env=env)
        print(f"{name}: rc={rc}", flush=True)
        rc_all = rc_all or rc
    return rc_all


def first_diff(a: list, b: list) -> str:
    if len(a) != len(b):
        return f"{len(a)} vs {len(b)} lines"
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            if isinstance(x, dict) and isinstance(y, dict):
                keys = sorted(k for k in set(x) | set(y) if x.get(k, "<absent>") != y.get(k, "<absent>"))
                return f"line {i}: keys {keys[:6]}"
            return f"line {i}"
    return ""


def compare(a: Path, b: Path) -> int:
    differ = 0
    for name in FLAG_SETS:
        for f in FILES:
            da, db = load(a / name / f), load(b / name / f)
            same = da == db and da != ["<missing>"]
            print(f"{name}/{f}: {'identical' if same else 'different (' + (first_diff(da, db) or 'missing') + ')'}")
            differ |= not same
    return 1 if differ else 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("outdir", type=Path)
    r.add_argument("--only", nargs="*", default=[], choices=list(FLAG_SETS))
    c = sub.add_parser("compare")
    c.add_argument("a", type=Path)
    c.add_argument("b", type=Path)
    args = p.parse_args()
    if args.cmd == "run":
        return run_all(args.outdir, args.only)
    return compare(args.a, args.b)


if __name__ == "__main__":
    sys.exit(main())
