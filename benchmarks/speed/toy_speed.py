"""Is the toy quick-preset run cheaper in CPU time than at a base checkout (per-pair ratios)?

Runs the quick preset's training command (the GRU policy, B 8 x G 8, reverse_digits; the line
`prorl-bench suite --preset quick` prints) at a fixed small number of steps, alternately from a
base checkout and from this one (pair i: base then current for even i, current then base for odd
i, so a drift of the machine's load hits both sides alike), each run in its own session (setsid)
with one torch thread. A run's cost is its process CPU time (user + system, from
`resource.getrusage(RUSAGE_CHILDREN)` around it), start-up included. The result file holds every
run's CPU seconds, the per-pair ratios base / current (> 1: the current code is cheaper), their
median, the median CPU seconds of each side, the load averages, the machine, both commits and
whether the two sides' metrics.jsonl agree (timing keys left out, as scripts/behaviour_check.py).

    python benchmarks/speed/toy_speed.py --base /path/to/base/checkout --pairs 3 --steps 60
    TOY_SPEED_BASE=/path/to/base python benchmarks/speed/toy_speed.py --extra --shared_prompt

`--base` (or $TOY_SPEED_BASE) is a directory holding the base code's `src/` (an exported commit
or another checkout); `--extra` flags go to the current side only (a switch under test).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "src"))  # provenance() reads the machine through the package

from _common import WORKER_ENV, git_commit, provenance  # noqa: E402

QUICK = (
    "--quiet --overwrite --threads 1 --batch_size 8 --group_size 8 --lr 2e-3 --eval_every 10 --n_val 128 "
    "--kl_estimator k3 --variant A --ref_compute cached --beta 0.05 --reset_every 50 --opt_reset keep --seed 0"
).split()


def summarise(runs: list[dict]) -> dict:
    """runs: [{'pair', 'side' ('base' | 'current'), 'cpu_s'}], two per pair -> the per-pair ratios
    base / current in pair order, their median, min and max, and each side's median CPU seconds.
    ValueError unless every pair has exactly one run of each side."""
    by_pair: dict[int, dict[str, float]] = {}
    for r in runs:
        sides = by_pair.setdefault(int(r["pair"]), {})
        if r["side"] in sides or r["side"] not in ("base", "current"):
            raise ValueError(f"pair {r['pair']}: a second or unknown side {r['side']!r}")
        sides[r["side"]] = float(r["cpu_s"])
    if not by_pair or any(len(s) != 2 for s in by_pair.values()):
        raise ValueError("every pair needs one base and one current run")
    order = sorted(by_pair)
    base = [by_pair[i]["base"] for i in order]
    cur = [by_pair[i]["current"] for i in order]
    ratios = [b / c for b, c in zip(base, cur)]
    return {
        "pair_ratios": ratios,
        "ratio_median": statistics.median(ratios),
        "ratio_min": min(ratios),
        "ratio_max": max(ratios),
        "cpu_s_base": base,
        "cpu_s_current": cur,
        "cpu_s_base_median": statistics.median(base),
        "cpu_s_current_median": statistics.median(cur),
    }


def children_cpu_s() -> float:
    """User + system CPU seconds of every waited-for child process so far."""
    u = resource.getrusage(resource.RUSAGE_CHILDREN)
    return u.ru_utime + u.ru_stime


def one_run(src: Path, outdir: Path, steps: int, extra: list[str]) -> float:
    """One training run from `src` (a checkout's src/) in its own session -> its CPU seconds."""
    cmd = [sys.executable, "-m", "noma_prorl_bench.run", "--outdir", str(outdir), *QUICK, "--steps", str(steps)]
    env = {**os.environ, **WORKER_ENV, "PYTHONPATH": str(src), "PYTHONHASHSEED": "0", "RAY_AUTH_MODE": "disabled"}
    before = children_cpu_s()
    proc = subprocess.run([*cmd, *extra], env=env, start_new_session=True, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"run from {src} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return children_cpu_s() - before


def metrics_rows(run_dir: Path) -> list:
    """metrics.jsonl without its timing keys (scripts/behaviour_check.py's rule)."""
    from behaviour_check import load  # noqa: PLC0415

    return load(run_dir / "metrics.jsonl")


def base_commit(base: Path, given: str) -> str:
    if given:
        return given
    out = subprocess.run(["git", "-C", str(base), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return out.stdout.strip() or "?"


def measure(base: Path, pairs: int, steps: int, extra: list[str], work: Path) -> tuple[list[dict], bool]:
    """Alternate the two sides `pairs` times -> (runs, whether every pair's metrics agreed)."""
    runs, same = [], True
    for i in range(pairs):
        order = ("base", "current") if i % 2 == 0 else ("current", "base")
        dirs = {}
        for side in order:
            src = base / "src" if side == "base" else ROOT / "src"
            dirs[side] = work / f"{side}_{i}"
            load = os.getloadavg()
            cpu = one_run(src, dirs[side], steps, extra if side == "current" else [])
            runs.append({"pair": i, "side": side, "cpu_s": cpu, "loadavg_before": load, "t_end": time.time()})
            print(f"pair {i} {side:7s} {cpu:7.2f} CPU s  load {load[0]:.2f}", flush=True)
        same = same and metrics_rows(dirs["base"]) == metrics_rows(dirs["current"])
    return runs, same


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base", type=Path, default=os.environ.get("TOY_SPEED_BASE"), help="the base code's checkout")
    p.add_argument("--base_commit", default="", help="the base's commit (default: git rev-parse in --base)")
    p.add_argument("--pairs", type=int, default=3)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--extra", nargs=argparse.REMAINDER, default=[], help="flags for the current side only")
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "toy_speed.json")
    a = p.parse_args(argv)
    if a.base is None or not (a.base / "src" / "noma_prorl_bench").is_dir():
        p.error("--base (or TOY_SPEED_BASE) must name a checkout with src/noma_prorl_bench")
    if a.pairs < 1 or a.steps < 1:
        p.error("--pairs and --steps must be >= 1")
    load_start = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="toy_speed_") as tmp:
        runs, same = measure(a.base.resolve(), a.pairs, a.steps, a.extra, Path(tmp))
    result = {
        "what": "process CPU s of the quick preset's run, base / current per pair (> 1: current cheaper)",
        "command": ["python", "-m", "noma_prorl_bench.run", *QUICK, "--steps", str(a.steps)],
        "extra_current": a.extra,
        "pairs": a.pairs,
        **summarise(runs),
        "metrics_identical": same,
        "runs": runs,
        "loadavg_start": load_start,
        "loadavg_end": os.getloadavg(),
        **provenance(),
        "commit": git_commit(),
        "base_commit": base_commit(a.base, a.base_commit),
    }
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(result, indent=1) + "\n")
    print(
        f"base / current CPU: median {result['ratio_median']:.3f} over {a.pairs} pairs "
        f"({', '.join(f'{r:.3f}' for r in result['pair_ratios'])}); metrics identical: {same}; "
        f"load {load_start[0]:.2f} -> {result['loadavg_end'][0]:.2f}; -> {a.out}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
