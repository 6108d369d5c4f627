"""`prorl-bench suite`: run an ablation matrix in parallel and write report.md (the main job).

    prorl-bench suite --preset quick --outdir runs/suite_quick     # ~10 min on 2 cores
    prorl-bench suite --preset smoke --outdir /tmp/suite           # ~1 min (tests)
    prorl-bench suite --preset full --outdir runs/suite_full       # the evidence (10 paired seeds)
    prorl-bench suite --preset aa --outdir /tmp/aa                 # A/A test of the statistics
    prorl-bench suite --preset full --seeds 12 --steps 300 --arms A1,B,A1-beta0 --outdir DIR

The matrix (ARMS): variants A0 / A1 / A2 / B, A1 with beta = 0 (no KL, reference still computed),
A1 on seeds + 1000 (the A/A control), reset semantics keep / hard / soft / asym at a fixed
cadence, growth migration modes (preserve / reset / naive) when growth is available, last. Every
arm runs the same seeds (a paired design); `--seeds N` / `--steps S` override the preset (the
reset cadence scales with S), `--arms` picks a subset. The report compares arms pairwise by seed
(COMPARISONS; analysis/compare.py, analysis/stats.py). Every run's exact command is printed before it starts; runs go in parallel up to
`--jobs` (default: the number of cores), one torch thread each, with a live progress bar.
A run whose `summary.json` says complete (with the same config) is skipped, and one that was
interrupted after a checkpoint is continued with `--resume`, so re-running the same command
resumes an interrupted suite. SIGINT / SIGTERM (Ctrl-C) are forwarded to the running runs, which
finish their step, write a checkpoint and exit; the suite then writes a partial report of the
finished runs and exits 130 / 143 (io/run_procs.py). The report is regenerated from the saved
logs only.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Optional

from noma_prorl_bench.io.run_procs import SuiteSignals, has_checkpoint, run_state

# ---------------------------------------------------------------------------- the matrix
#: name -> seeds, steps, base flags, reset/growth cadence, whether its report is evidence, K (a run's
#: score is its mean validation reward over its last K evaluations).
#: `full` is the evidence (>= 10 paired seeds; 120 runs x 150 steps: about an hour with 2 jobs on a
#: 2-core VM shared with other work, where a step took 0.4-1 s instead of the idle ~0.07 s);
#: `quick` and `smoke` are smoke runs; `aa` is the A/A test of the statistics (two identical arms
#: that differ only in their seeds), small enough to run as a test.
PRESETS = {
    "smoke": dict(seeds=1, steps=12, reset_every=4, evidence=False, k=5,
                  base=["--batch_size", "4", "--group_size", "4", "--warmstart_steps", "20",
                        "--n_val", "32", "--eval_every", "2"]),
    "aa": dict(seeds=3, steps=12, reset_every=4, evidence=False, k=5, arms="aa",
               base=["--batch_size", "4", "--group_size", "4", "--warmstart_steps", "20",
                     "--n_val", "32", "--eval_every", "2"]),
    "quick": dict(seeds=3, steps=300, reset_every=100, evidence=False, k=10, base=["--eval_every", "10"]),
    "full": dict(seeds=10, steps=150, reset_every=50, evidence=True, k=10, base=["--eval_every", "5"]),
}
#: seed offset of the second A/A arm: its seed s + AA_OFFSET is paired with the first arm's s
AA_OFFSET = 1000
_A1 = ["--variant", "A", "--ref_compute", "cached"]
#: arm name -> flags (all arms of a preset run the same seeds: a paired design). Growth arms last,
#: so an interrupted or late suite has every non-growth arm complete first.
ARMS = {
    "A0": ["--variant", "A", "--ref_compute", "naive_epoch"],
    "A1": _A1,
    "A2": ["--variant", "A", "--ref_compute", "ring"],
    "B": ["--variant", "B"],
    "A1-beta0": [*_A1, "--beta", "0"],
    "A1-aa": _A1,                     # A1 on seeds s + AA_OFFSET: the A/A control of every report
    **{f"reset-{m}": [*_A1, "--reset_every", "{reset_every}", "--opt_reset", m]
       for m in ("keep", "hard", "soft", "asym")},
    **{f"grow-{m}": [*_A1, "--enable_growth", "1", "--grow_every", "{reset_every}",
                     "--growth_migration", m] for m in ("preserve", "reset", "naive")},
}
AA_ARMS = {"AA-1": _A1, "AA-2": _A1}
#: comparisons the report makes (name, arm, baseline arm): arm - baseline, paired by seed
COMPARISONS = [
    ("A0 vs A1", "A0", "A1"), ("A2 vs A1", "A2", "A1"),
    ("B vs A1", "B", "A1"), ("A1-beta0 vs A1", "A1-beta0", "A1"), ("B vs A1-beta0", "B", "A1-beta0"),
    ("A/A: A1-aa vs A1", "A1-aa", "A1"), ("reset-keep vs A1", "reset-keep", "A1"),
    ("reset-hard vs reset-keep", "reset-hard", "reset-keep"),
    ("reset-soft vs reset-keep", "reset-soft", "reset-keep"),
    ("reset-asym vs reset-keep", "reset-asym", "reset-keep"),
    ("grow-preserve vs grow-reset", "grow-preserve", "grow-reset"),
    ("grow-naive vs grow-reset", "grow-naive", "grow-reset"),
    ("AA-2 vs AA-1", "AA-2", "AA-1"),
]


@dataclass
class RunSpec:
    """One run of the matrix: its directory name and flags; `arm` and `pair` (the paired seed
    index: runs of different arms with the same pair are compared with each other)."""

    name: str
    flags: list = field(default_factory=list)
    arm: str = ""
    pair: int = 0

    def command(self, outdir: str, mode: str = "--overwrite") -> list[str]:
        """The run's command line; `mode` "--resume" continues an interrupted run."""
        return [sys.executable, "-m", "noma_prorl_bench.run", "--outdir", os.path.join(outdir, self.name),
                "--quiet", mode, "--threads", "1", *self.flags]


def growth_available() -> bool:
    from noma_prorl_bench.config import NOT_YET
    return "enable_growth" not in NOT_YET


def preset_arms(preset: str) -> dict[str, list[str]]:
    """Arm name -> flags of a preset (growth arms only when growth is available)."""
    if PRESETS[preset].get("arms") == "aa":
        return dict(AA_ARMS)
    return {a: f for a, f in ARMS.items() if not a.startswith("grow-") or growth_available()}


def expand(preset: str, seeds: Optional[int] = None, steps: Optional[int] = None,
           arms: Optional[list[str]] = None) -> list[RunSpec]:
    """The runs of a suite preset: every arm on the same seeds 0..seeds-1 (`seeds`, `steps`
    override the preset; the reset/growth cadence scales with `steps` so the number of resets
    stays the same). Order: seed-major over non-growth arms, then the growth arms."""
    p = PRESETS[preset]
    n_seeds, n_steps = seeds or p["seeds"], steps or p["steps"]
    cadence = max(1, round(p["reset_every"] * n_steps / p["steps"]))
    base = ["--steps", str(n_steps), *p["base"]]
    chosen = {a: f for a, f in preset_arms(preset).items() if arms is None or a in arms}
    groups = [[a for a in chosen if not a.startswith("grow-")], [a for a in chosen if a.startswith("grow-")]]
    runs = []
    for group in groups:
        for s in range(n_seeds):
            for arm in group:
                seed = s + AA_OFFSET if arm in ("AA-2", "A1-aa") else s
                flags = [f.replace("{reset_every}", str(cadence)) for f in chosen[arm]]
                runs.append(RunSpec(f"{arm}_s{seed}", [*base, *flags, "--seed", str(seed)], arm, s))
    return runs


def comparisons_for(arms: list[str]) -> list[tuple[str, str, str]]:
    """The COMPARISONS whose two arms are both in `arms`."""
    return [c for c in COMPARISONS if c[1] in arms and c[2] in arms]


# ---------------------------------------------------------------------------- running
def is_complete(run_dir: str, spec: RunSpec) -> bool:
    """True if run_dir holds a complete run made with the same flags."""
    return run_state(run_dir, spec.command("X")[3:]) == "complete"


def _steps_done(run_dir: str) -> int:
    try:
        with open(os.path.join(run_dir, "metrics.jsonl"), "rb") as f:
            return sum(1 for _ in f)
    except OSError:
        return 0


def run_all(specs: list[RunSpec], outdir: str, jobs: int, quiet: bool = False,
            stop: Optional[SuiteSignals] = None) -> list[str]:
    """Run the specs with at most `jobs` in parallel; return the failed ones' names. Complete
    runs are skipped, interrupted ones (a checkpoint, same flags) continued with `--resume`.
    SIGINT/SIGTERM (`stop`, installed here if not given) are forwarded to the running runs,
    which checkpoint and exit 130/143; no new run starts and this returns once they exited
    (`stop.signum` is set; the interrupted runs are not counted as failures)."""
    env = dict(os.environ)
    src = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    states = {s.name: run_state(os.path.join(outdir, s.name), s.command("X")[3:]) for s in specs}
    pending = [s for s in specs if states[s.name] != "complete"]
    n_resume = sum(states[s.name] == "resumable" for s in pending)
    print(f"suite: {len(specs)} runs, {len(specs) - len(pending)} already complete (skipped), {len(pending)} to "
          f"run ({n_resume} resumed from their checkpoints), {jobs} in parallel", file=sys.stderr)
    own = stop is None
    stop = (stop or SuiteSignals()).install() if own else stop
    try:
        return _run_pending(pending, states, outdir, jobs, quiet, stop, env)
    finally:
        if own:
            stop.restore()


def _start(spec: RunSpec, state: str, outdir: str, env: dict) -> subprocess.Popen:
    """Print the run's command and start it in its own session (signals come from the suite)."""
    cmd = spec.command(outdir, "--resume" if state == "resumable" else "--overwrite")
    print("$ " + shlex.join(cmd), file=sys.stderr)                 # sys.executable: pastes in any shell
    with open(os.path.join(outdir, f"{spec.name}.log"), "a" if state == "resumable" else "w") as log:
        return subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def _run_pending(pending, states, outdir, jobs, quiet, stop: SuiteSignals, env) -> list[str]:
    total_steps = sum(_spec_steps(s) for s in pending)
    bar = None
    if not quiet and total_steps:
        from tqdm import tqdm
        bar = tqdm(total=total_steps, desc="suite", unit="step", file=sys.stderr, dynamic_ncols=True)
    running: dict[str, tuple[subprocess.Popen, RunSpec]] = {}
    failures, queue, finished_steps = [], list(pending), 0
    while running or (queue and stop.signum is None):
        while queue and len(running) < jobs and stop.signum is None:
            spec = queue.pop(0)
            running[spec.name] = (_start(spec, states[spec.name], outdir, env), spec)
            stop.children[spec.name] = running[spec.name][0]
        time.sleep(0.5)
        for name in list(running):
            proc, spec = running[name]
            if proc.poll() is not None:
                del running[name]
                stop.children.pop(name, None)
                finished_steps += _spec_steps(spec)
                if proc.returncode != 0 and stop.signum is not None:
                    where = ("at a checkpoint; the same command resumes it" if has_checkpoint(
                        os.path.join(outdir, name)) else "before its first checkpoint; the same command restarts it")
                    print(f"suite: run {name} stopped (exit {proc.returncode}) {where}", file=sys.stderr)
                elif proc.returncode != 0:
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
def _positive(name: str):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = 0
        if value < 1:
            raise argparse.ArgumentTypeError(f"{name} must be an integer >= 1, got {text!r}")
        return value
    return parse


def _git_commit() -> str:
    src = os.path.dirname(os.path.abspath(__file__))
    try:
        out = subprocess.run(["git", "-C", src, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "-C", src, "status", "--porcelain", "--", "."], capture_output=True,
                               text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    head = out.stdout.strip() if out.returncode == 0 else ""
    return (head + (" (+ uncommitted changes)" if dirty else "")) if head else os.environ.get(
        "PRORL_BENCH_COMMIT", "unknown")


def _machine() -> str:
    import platform
    return f"{os.cpu_count()} cores, {platform.machine()}, {platform.system()} {platform.release()}, " \
           f"{platform.node()}"


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="prorl-bench suite", description=__doc__.splitlines()[0])
    ap.add_argument("--preset", choices=sorted(PRESETS), default="quick", help="matrix size (default: quick)")
    ap.add_argument("--outdir", required=True, help="suite directory: one subdirectory per run, report.md")
    ap.add_argument("--seeds", type=_positive("--seeds"), help="number of paired seeds 0..N-1 for every arm "
                    "(default: the preset's)")
    ap.add_argument("--steps", type=_positive("--steps"), help="RL steps per run (default: the preset's; the "
                    "reset/growth cadence scales with it)")
    ap.add_argument("--arms", help="comma-separated subset of the preset's arms (default: all)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="runs in parallel (default: cores)")
    ap.add_argument("--quiet", action="store_true", help="no progress bar")
    task = ap.add_argument_group("task (passed to every run; default: the runs' own, reverse_digits)")
    for name in TASK_FLAGS:
        task.add_argument(f"--{name}", help=f"the run flag --{name} (docs/flags.md, docs/tasks.md)")
    return ap


#: run flags the suite passes to every run when given (your own task: docs/tasks.md)
TASK_FLAGS = ("task", "task_kwargs", "prompt_field", "answer_field", "reward_fn", "reward_tol")


def task_flags(args: argparse.Namespace) -> list[str]:
    """The given TASK_FLAGS as run flags."""
    return [x for n in TASK_FLAGS if getattr(args, n) is not None for x in (f"--{n}", getattr(args, n))]


def main(argv: Optional[list[str]] = None) -> int:
    ap = _parser()
    args = ap.parse_args(argv)
    if args.jobs < 1:
        ap.error(f"argument --jobs: must be >= 1, got {args.jobs}")
    if os.path.exists(args.outdir) and not os.path.isdir(args.outdir):
        ap.error(f"argument --outdir: {args.outdir!r} exists and is not a directory")
    known = list(preset_arms(args.preset))
    arms = known if args.arms is None else [a.strip() for a in args.arms.split(",") if a.strip()]
    bad = [a for a in arms if a not in known]
    if bad or not arms:
        ap.error(f"argument --arms: unknown arm(s) {bad} for preset {args.preset!r}; choose from {', '.join(known)}")
    specs = expand(args.preset, args.seeds, args.steps, arms)
    for spec in specs:
        spec.flags += task_flags(args)
    if task_flags(args):
        _check_task(ap, specs[0].flags)
    os.makedirs(args.outdir, exist_ok=True)
    suite_json = os.path.join(args.outdir, "suite.json")
    listed = _merge_suite_json(suite_json, args.preset, specs)
    t0 = time.perf_counter()
    stop = SuiteSignals().install()            # SIGINT/SIGTERM: forwarded to the runs (io/run_procs.py)
    failures = run_all(specs, args.outdir, args.jobs, args.quiet, stop)
    unfinished = [] if stop.signum is None else [s.name for s in specs
                                                 if not is_complete(os.path.join(args.outdir, s.name), s)]
    from noma_prorl_bench.analysis.report import write_report
    names = {s.name for s in specs}
    dirs = [os.path.join(args.outdir, r["name"]) for r in listed["runs"]
            if r["name"] not in failures + unfinished and (r["name"] in names or os.path.isfile(
                os.path.join(args.outdir, r["name"], "metrics.jsonl")))]
    settings = {"preset": args.preset, "evidence": PRESETS[args.preset]["evidence"], "runs": len(dirs),
                "score_evals": PRESETS[args.preset]["k"],
                "seeds": args.seeds or PRESETS[args.preset]["seeds"],
                "steps": args.steps or PRESETS[args.preset]["steps"], "jobs": args.jobs,
                "wall_seconds_this_invocation": round(time.perf_counter() - t0, 1),
                "command": "prorl-bench suite " + " ".join(_shell_quote(a) for a in (argv if argv is not None
                                                                                      else sys.argv[1:])),
                "commit": _git_commit(), "machine": _machine()}
    with open(os.path.join(args.outdir, "settings.json"), "w") as f:
        json.dump(settings, f, indent=2)
    out = os.path.join(args.outdir, "report.md")
    if dirs:
        write_report(dirs, out, os.path.join(args.outdir, "figures"), settings, suite=listed)
    print((f"suite: report written to {out}" if dirs else "suite: no finished run, no report written")
          + (f"; {len(failures)} runs failed: {failures}" if failures else ""), file=sys.stderr)
    stop.restore()
    if stop.signum is not None:
        print(f"suite: stopped by {stop.name}; the report covers the {len(dirs)} finished runs; {len(unfinished)} "
              f"unfinished ({', '.join(unfinished)}); the same command resumes them from their checkpoints",
              file=sys.stderr)
        return stop.exit_code
    return 1 if failures else 0


def _check_task(ap: argparse.ArgumentParser, flags: list[str]) -> None:
    """Exit 2 (nothing started) when the task flags make a bad run config or task."""
    from noma_prorl_bench.config import ConfigError, build_parser, make_config
    from noma_prorl_bench.tasks import make_task
    try:
        cfg = make_config(vars(build_parser().parse_args(["--outdir", "-", *flags])))
        make_task(cfg.task, n_val=cfg.n_val, cfg=cfg)
    except ConfigError as e:
        ap.error(str(e))


def _merge_suite_json(path: str, preset: str, specs: list[RunSpec]) -> dict:
    """Write suite.json: this invocation's runs merged with those an earlier invocation on the same
    outdir listed (e.g. `--arms` run in two parts); arm, pair and the comparisons among all arms."""
    try:
        with open(path) as f:
            old = json.load(f)
    except (OSError, ValueError):
        old = {}
    runs = {r["name"]: r for r in old.get("runs", []) if old.get("preset") == preset and "arm" in r}
    runs.update({s.name: {"name": s.name, "arm": s.arm, "pair": s.pair, "flags": s.flags} for s in specs})
    arms = list(dict.fromkeys(r["arm"] for r in runs.values()))
    listed = {"preset": preset, "aa_offset": AA_OFFSET, "runs": list(runs.values()),
              "comparisons": [list(c) for c in comparisons_for(arms)]}
    with open(path, "w") as f:
        json.dump(listed, f, indent=2)
    return listed


if __name__ == "__main__":
    sys.exit(main())
