"""`prorl-bench suite`: run an ablation matrix in parallel and write report.md (the main job).

    prorl-bench suite --preset quick --outdir runs/suite_quick     # ~10 min on 2 cores
    prorl-bench suite --preset smoke --outdir /tmp/suite           # ~1 min (tests)
    prorl-bench suite --preset full --outdir runs/suite_full       # the real study

The matrix: variants A0 / A1 / A2 / B; reset semantics keep / hard / soft / asym at a fixed
cadence; growth migration modes (preserve / reset / naive) when growth is available; several
seeds each. Every run's exact command is printed before it starts; runs go in parallel up to
`--jobs` (default: the number of cores), one torch thread each, with a live progress bar.
A run whose `summary.json` says complete (with the same config) is skipped, so an interrupted
suite resumes. The report is regenerated from the saved logs only.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Optional

# ---------------------------------------------------------------------------- the matrix
PRESETS = {
    # name: (seeds, steps, base flags, reset cadence)
    "smoke": dict(seeds=[0], steps=12, reset_every=4,
                  base=["--batch_size", "4", "--group_size", "4", "--warmstart_steps", "20", "--n_val", "32",
                        "--eval_every", "4"]),
    "quick": dict(seeds=[0, 1, 2], steps=300, reset_every=100, base=["--eval_every", "10"]),
    "full": dict(seeds=[0, 1, 2, 3, 4], steps=800, reset_every=200, base=["--eval_every", "10"]),
}


@dataclass
class RunSpec:
    """One run of the matrix: its directory name and flags."""

    name: str
    flags: list = field(default_factory=list)

    def command(self, outdir: str) -> list[str]:
        return [sys.executable, "-m", "noma_prorl_bench.run", "--outdir", os.path.join(outdir, self.name),
                "--quiet", "--overwrite", "--threads", "1", *self.flags]


def growth_available() -> bool:
    from noma_prorl_bench.config import NOT_YET
    return "enable_growth" not in NOT_YET


def expand(preset: str) -> list[RunSpec]:
    """The runs of a suite preset."""
    p = PRESETS[preset]
    base = ["--steps", str(p["steps"]), *p["base"]]
    runs = []
    for s in p["seeds"]:
        seed = ["--seed", str(s)]
        for label, flags in (("A0", ["--variant", "A", "--ref_compute", "naive_epoch"]),
                             ("A1", ["--variant", "A", "--ref_compute", "cached"]),
                             ("A2", ["--variant", "A", "--ref_compute", "ring"]),
                             ("B", ["--variant", "B"])):
            runs.append(RunSpec(f"{label}_s{s}", [*base, *flags, *seed]))
        for mode in ("keep", "hard", "soft", "asym"):
            runs.append(RunSpec(f"reset-{mode}_s{s}", [*base, "--variant", "A", "--ref_compute", "cached",
                                                       "--reset_every", str(p["reset_every"]),
                                                       "--opt_reset", mode, *seed]))
        if growth_available():
            for mig in ("preserve", "reset", "naive"):
                runs.append(RunSpec(f"grow-{mig}_s{s}", [*base, "--variant", "A", "--ref_compute", "cached",
                                                         "--enable_growth", "1", "--grow_every",
                                                         str(p["reset_every"]), "--growth_migration", mig, *seed]))
    return runs


# ---------------------------------------------------------------------------- running
def is_complete(run_dir: str, spec: RunSpec) -> bool:
    """True if run_dir holds a complete run made with the same flags."""
    try:
        with open(os.path.join(run_dir, "summary.json")) as f:
            done = json.load(f).get("complete", False)
        with open(os.path.join(run_dir, "config.json")) as f:
            argv = json.load(f).get("argv", [])
    except (OSError, ValueError):
        return False
    return bool(done) and argv[2:] == spec.command("X")[5:]   # same flags after --outdir


def _steps_done(run_dir: str) -> int:
    try:
        with open(os.path.join(run_dir, "metrics.jsonl"), "rb") as f:
            return sum(1 for _ in f)
    except OSError:
        return 0


def run_all(specs: list[RunSpec], outdir: str, jobs: int, quiet: bool = False) -> list[str]:
    """Run the specs (skipping complete ones) with at most `jobs` in parallel; return failures."""
    env = dict(os.environ)
    src = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    pending = [s for s in specs if not is_complete(os.path.join(outdir, s.name), s)]
    skipped = len(specs) - len(pending)
    print(f"suite: {len(specs)} runs, {skipped} already complete (skipped), {len(pending)} to run, "
          f"{jobs} in parallel", file=sys.stderr)
    total_steps = sum(_spec_steps(s) for s in pending)
    bar = None
    if not quiet and total_steps:
        from tqdm import tqdm
        bar = tqdm(total=total_steps, desc="suite", unit="step", file=sys.stderr, dynamic_ncols=True)
    running: dict[str, tuple[subprocess.Popen, RunSpec]] = {}
    failures, queue, finished_steps = [], list(pending), 0
    while queue or running:
        while queue and len(running) < jobs:
            spec = queue.pop(0)
            cmd = spec.command(outdir)
            print("$ " + " ".join(_shell_quote(c) for c in cmd[1:]).replace("-m noma_prorl_bench.run",
                  "python -m noma_prorl_bench.run", 1), file=sys.stderr)
            log = open(os.path.join(outdir, f"{spec.name}.log"), "w")
            running[spec.name] = (subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT), spec)
        time.sleep(0.5)
        for name in list(running):
            proc, spec = running[name]
            if proc.poll() is not None:
                del running[name]
                finished_steps += _spec_steps(spec)
                if proc.returncode != 0:
                    failures.append(name)
                    print(f"suite: run {name} failed (exit {proc.returncode}); see {outdir}/{name}.log", file=sys.stderr)
        if bar is not None:
            live = sum(_steps_done(os.path.join(outdir, n)) for n in running)
            bar.n = min(finished_steps + live, total_steps)
            bar.set_postfix(running=len(running), queued=len(queue), refresh=False)
            bar.refresh()
    if bar is not None:
        bar.close()
    return failures


def _spec_steps(spec: RunSpec) -> int:
    return int(spec.flags[spec.flags.index("--steps") + 1])


def _shell_quote(s: str) -> str:
    return s if s and all(c.isalnum() or c in "-_./=:," for c in s) else repr(s)


# ---------------------------------------------------------------------------- entry point
def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="prorl-bench suite", description=__doc__.splitlines()[0])
    ap.add_argument("--preset", choices=sorted(PRESETS), default="quick", help="matrix size (default: quick)")
    ap.add_argument("--outdir", required=True, help="suite directory: one subdirectory per run, report.md")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="runs in parallel (default: cores)")
    ap.add_argument("--quiet", action="store_true", help="no progress bar")
    args = ap.parse_args(argv)
    if args.jobs < 1:
        ap.error(f"argument --jobs: must be >= 1, got {args.jobs}")
    if os.path.exists(args.outdir) and not os.path.isdir(args.outdir):
        ap.error(f"argument --outdir: {args.outdir!r} exists and is not a directory")
    specs = expand(args.preset)
    os.makedirs(args.outdir, exist_ok=True)
    with open(os.path.join(args.outdir, "suite.json"), "w") as f:
        json.dump({"preset": args.preset, "runs": [{"name": s.name, "flags": s.flags} for s in specs]}, f, indent=2)
    t0 = time.perf_counter()
    failures = run_all(specs, args.outdir, args.jobs, args.quiet)
    from noma_prorl_bench.analysis.report import write_report
    dirs = [os.path.join(args.outdir, s.name) for s in specs if s.name not in failures]
    settings = {"preset": args.preset, "runs": len(specs), "jobs": args.jobs,
                "wall_seconds_this_invocation": round(time.perf_counter() - t0, 1),
                "machine": f"{os.cpu_count()} cores, {sys.platform}"}
    with open(os.path.join(args.outdir, "settings.json"), "w") as f:
        json.dump(settings, f, indent=2)
    out = os.path.join(args.outdir, "report.md")
    write_report(dirs, out, os.path.join(args.outdir, "figures"), settings)
    print(f"suite: report written to {out}" + (f"; {len(failures)} runs failed: {failures}" if failures else ""),
          file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
