"""`prorl-bench suite`: run an ablation matrix in parallel and write report.md (the main job).

    prorl-bench suite --preset quick --outdir runs/suite_quick     # ~10 min on 2 idle cores: the headline
    prorl-bench suite --preset smoke --outdir /tmp/suite           # ~1 min: the pipeline (tests)
    prorl-bench suite --preset atlas --outdir runs/atlas           # the regime map (240 runs, ~1 h)
    prorl-bench suite --preset full --outdir runs/suite_full       # variants A0/A1/A2/B and resets, 10 seeds
    prorl-bench suite --preset growth --outdir runs/growth         # optimizer state at adapter growth
    prorl-bench suite --preset cost --outdir runs/cost --jobs 1    # step-time cost, arms interleaved
    prorl-bench suite --preset aa --outdir /tmp/aa                 # A/A test of the statistics
    prorl-bench suite --preset full --seeds 12 --steps 300 --arms A1,B,A1-beta0 --outdir DIR

Matrices: ARMS (variants A0 / A1 / A2 / B, A1 with beta = 0, A1 on seeds + 1000 as the A/A
control, reset semantics keep / hard / soft / asym at a fixed cadence; `full`, `smoke`);
ATLAS_ARMS (beta x reference treatment; `atlas`, and its headline subset `quick`); GROWTH_ARMS
(`growth`); COST_ARMS (`cost`). Every arm runs the same seeds (a paired design); `--seeds N` /
`--steps S` override the preset (the reset cadence scales with S), `--arms` picks a subset. The
report compares arms pairwise by seed (COMPARISONS, ATLAS_COMPARISONS, each in a Holm family:
FAMILIES) and verifies the pairs identical by construction (CHECKS) step by step instead of testing
them (analysis/compare.py, analysis/stats.py). Every run's exact command is printed before it
starts; runs go in parallel up to `--jobs` (default: the number of cores), one torch thread each,
with a live progress bar.
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

from noma_prorl_bench.io import safe_files
from noma_prorl_bench.io.run_procs import SuiteSignals, has_checkpoint, run_state

# ---------------------------------------------------------------------------- the matrix
#: name -> seeds, steps, base flags, reset/growth cadence, whether its report is evidence, K (a run's
#: score is its mean validation reward over its last K evaluations), and the arm matrix ("arms":
#: a named matrix; default ARMS, minus the prefixes in "drop"). Sizes and times: README, "The main job".
PRESETS = {
    "smoke": dict(seeds=1, steps=12, reset_every=4, evidence=False, k=5,
                  base=["--batch_size", "4", "--group_size", "4", "--warmstart_steps", "20",
                        "--n_val", "32", "--eval_every", "2"]),
    "aa": dict(seeds=3, steps=12, reset_every=4, evidence=False, k=5, arms="aa",
               base=["--batch_size", "4", "--group_size", "4", "--warmstart_steps", "20",
                     "--n_val", "32", "--eval_every", "2"]),
    # the headline question on a loose and a clamping beta (QUICK_ARMS: a subset of the atlas, the same
    # runs): 8 paired seeds x 6 arms x 300 steps
    "quick": dict(seeds=8, steps=300, reset_every=50, evidence=True, k=10, arms="quick",
                  base=["--batch_size", "8", "--group_size", "8", "--lr", "2e-3", "--eval_every", "10",
                        "--n_val", "128", "--kl_estimator", "k3"]),
    # variants A0/A1/A2/B and the KL term at beta 0.05; resets are mapped by `atlas` and growth has
    # its own preset (the GRU's head-only adapters do not learn)
    "full": dict(seeds=10, steps=150, reset_every=50, evidence=True, k=10, base=["--eval_every", "5"],
                 drop=("grow-", "reset-")),
    # the regime map: reference treatment x beta (ATLAS_ARMS), 10 paired seeds, long enough for the
    # beta = 1 fixed reference to clamp (docs/atlas/report.md)
    "atlas": dict(seeds=10, steps=300, reset_every=50, evidence=True, k=10, arms="atlas",
                  base=["--batch_size", "8", "--group_size", "8", "--lr", "2e-3", "--eval_every", "10",
                        "--n_val", "128", "--kl_estimator", "k3"]),
    # optimizer state at adapter growth, on a task where the adapter arms learn (GROWTH_ARMS)
    "growth": dict(seeds=10, steps=100, reset_every=25, evidence=True, k=5, arms="growth",
                   base=["--model", "transformer", "--eval_every", "10", "--n_val", "128",
                         "--warmstart_steps", "40", "--warmstart_lr", "1e-3"]),
    # step-time cost: A0 / A1 / A2 / B alternating seed by seed with one job, so their timings are
    # interleaved in time (the only timing comparisons a report makes)
    "cost": dict(seeds=5, steps=100, reset_every=50, evidence=True, k=5, arms="cost",
                 base=["--eval_every", "10", "--n_val", "64"]),
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
#: the regime map: beta (k3 in the loss) x reference treatment at one reset cadence. `none` never
#: resets; the others reset every {reset_every} steps and differ only in what happens to Adam there:
#: keep (moments and step kept), hard (moments, step and schedule cleared), soft (m, v *= 0.2),
#: asym (m *= 0.2, v kept), step (moments kept, Adam's step count t <- 0: Adam-Rel, arXiv 2412.17113)
ATLAS_BETAS = ("0.01", "0.05", "0.2", "1")
ATLAS_TREATMENTS = {
    "none": [],
    "keep": ["--reset_every", "{reset_every}", "--opt_reset", "keep"],
    "hard": ["--reset_every", "{reset_every}", "--opt_reset", "hard"],
    "soft": ["--reset_every", "{reset_every}", "--opt_reset", "soft"],
    "asym": ["--reset_every", "{reset_every}", "--opt_reset", "asym"],
    "step": ["--reset_every", "{reset_every}", "--opt_reset", "keep", "--reset_opt_step", "1"],
}
ATLAS_ARMS = {f"b{b}-{t}": [*_A1, "--beta", b, *flags] for b in ATLAS_BETAS for t, flags in ATLAS_TREATMENTS.items()}
QUICK_ARMS = {a: ATLAS_ARMS[a] for a in ("b0.05-none", "b0.05-keep", "b0.05-hard", "b1-none", "b1-keep", "b1-hard")}
COST_ARMS = {a: ARMS[a] for a in ("A0", "A1", "A2", "B")}
#: growth on the transformer policy with LoRA adapters on every attention and MLP projection (the
#: trunk, not only the output head), frozen base, rank 2 -> 8 in steps of 2; settings from a pilot
#: (adapters lr 3e-3, full fine-tune the default 1e-3; a 40-step warm start at lr 1e-3 leaves val
#: ~0.1-0.6, where the default 100 steps solved the task on 8 of 10 seeds before RL began).
#: full-rank trains every weight (no adapters); fixed-r2 keeps rank 2 (is the rank the bottleneck?)
_ADAPT = [*_A1, "--enable_growth", "1", "--adapter_targets", "*proj,up,down", "--initial_rank", "2", "--lr", "3e-3"]
GROWTH_ARMS = {"full-rank": _A1, "fixed-r2": [*_ADAPT, "--max_rank", "2", "--grow_every", "{reset_every}"],
               **{f"grow-{m}": [*_ADAPT, "--rank_step", "2", "--max_rank", "8", "--grow_every", "{reset_every}",
                                "--growth_migration", m] for m in ("preserve", "reset", "naive", "noma_flat")}}
#: comparisons the report makes (name, arm, baseline arm): arm - baseline, paired by seed
COMPARISONS = [
    ("B vs A1", "B", "A1"), ("A1-beta0 vs A1", "A1-beta0", "A1"), ("B vs A1-beta0", "B", "A1-beta0"),
    ("A/A: A1-aa vs A1", "A1-aa", "A1"), ("reset-keep vs A1", "reset-keep", "A1"),
    ("reset-hard vs reset-keep", "reset-hard", "reset-keep"),
    ("reset-soft vs reset-keep", "reset-soft", "reset-keep"),
    ("reset-asym vs reset-keep", "reset-asym", "reset-keep"),
    ("grow-preserve vs grow-reset", "grow-preserve", "grow-reset"),
    ("AA-2 vs AA-1", "AA-2", "AA-1"),
    ("grow-noma_flat vs grow-preserve", "grow-noma_flat", "grow-preserve"),
    ("grow-preserve vs fixed-r2", "grow-preserve", "fixed-r2"),
]
#: per beta: does a reset (moments kept) beat no reset, and does each optimizer treatment beat keep
ATLAS_COMPARISONS = [c for b in ATLAS_BETAS for c in
                     [(f"beta {b}: reset-keep vs no reset", f"b{b}-keep", f"b{b}-none")]
                     + [(f"beta {b}: reset-{t} vs reset-keep", f"b{b}-{t}", f"b{b}-keep")
                        for t in ATLAS_TREATMENTS if t not in ("none", "keep")]]
#: comparison name -> Holm family. A family is the set of questions one reader asks together: the
#: suite's outcome questions form one family; the atlas has one family per beta (a user trains at
#: one beta and asks "should I reset, and what should Adam do?" there)
FAMILIES = {**{c[0]: "outcome" for c in COMPARISONS},
            **{c[0]: c[0].split(":")[0] for c in ATLAS_COMPARISONS}}
#: pairs identical by construction (same rewards per step, not a question): the report verifies that
#: their non-timing metrics agree step by step instead of testing them. A0 and A2 compute the same
#: logp_ref as A1 (only the cost differs); naive and reset growth differ only in the optimizer
#: object, which holds no state in either (identical under a constant learning rate)
CHECKS = [("A0 = A1", "A0", "A1"), ("A2 = A1", "A2", "A1"), ("grow-naive = grow-reset", "grow-naive", "grow-reset")]


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
    named = {"atlas": ATLAS_ARMS, "quick": QUICK_ARMS, "cost": COST_ARMS, "growth": GROWTH_ARMS}
    if PRESETS[preset].get("arms") in named:
        return dict(named[PRESETS[preset]["arms"]])
    drop = PRESETS[preset].get("drop", ())
    return {a: f for a, f in ARMS.items() if (not a.startswith("grow-") or growth_available())
            and not a.startswith(tuple(drop))}


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
    """The COMPARISONS (and ATLAS_COMPARISONS) whose two arms are both in `arms`."""
    return [c for c in COMPARISONS + ATLAS_COMPARISONS if c[1] in arms and c[2] in arms]


def checks_for(arms: list[str]) -> list[tuple[str, str, str]]:
    """The CHECKS (identical-by-construction pairs) whose two arms are both in `arms`."""
    return [c for c in CHECKS if c[1] in arms and c[2] in arms]


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
    runs are skipped, interrupted ones (a checkpoint, same flags) continued with `--resume`; a
    run still held by a live process (an earlier suite's child that outlived it) is waited for,
    its log left alone, then counted as complete or continued.
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
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if state == "resumable" else os.O_TRUNC)
    with os.fdopen(safe_files.open_nofollow(os.path.join(outdir, f"{spec.name}.log"), flags), "w") as log:
        return subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def _run_pending(pending, states, outdir, jobs, quiet, stop: SuiteSignals, env) -> list[str]:
    total_steps = sum(_spec_steps(s) for s in pending)
    bar = None
    if not quiet and total_steps:
        from tqdm import tqdm
        bar = tqdm(total=total_steps, desc="suite", unit="step", file=sys.stderr, dynamic_ncols=True)
    running: dict[str, tuple[subprocess.Popen, RunSpec]] = {}
    adopted: dict[str, RunSpec] = {}        # runs still going from an earlier suite process (they hold their lock)
    failures, queue, finished_steps = [], list(pending), 0
    while running or ((queue or adopted) and stop.signum is None):
        while queue and len(running) + len(adopted) < jobs and stop.signum is None:
            spec = queue.pop(0)
            holder = _live_holder(os.path.join(outdir, spec.name))
            if holder is not None:          # e.g. the earlier suite was killed with -9: wait, never truncate its log
                print(f"suite: run {spec.name} is still going (pid {holder.get('pid')}, started earlier); "
                      "waiting for it to finish", file=sys.stderr)
                adopted[spec.name] = spec
                continue
            running[spec.name] = (_start(spec, states[spec.name], outdir, env), spec)
            stop.children[spec.name] = running[spec.name][0]
        time.sleep(0.5)
        for name in list(adopted):
            run_dir = os.path.join(outdir, name)
            if _live_holder(run_dir) is None:                # it ended: complete, resumable or to start over
                spec = adopted.pop(name)
                states[name] = run_state(run_dir, spec.command("X")[3:])
                if states[name] == "complete":
                    finished_steps += _spec_steps(spec)
                    print(f"suite: run {name} (started earlier) finished", file=sys.stderr)
                else:
                    queue.insert(0, spec)
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


def _live_holder(run_dir: str) -> Optional[dict]:
    """The lock record of a live process that holds run_dir (a run an earlier suite started and
    that outlived it), else None. io/lock.py: an flock, so a dead holder never counts."""
    from noma_prorl_bench.io.lock import LOCK_FILE, lock_error, read_lock  # noqa: PLC0415 (standard library only)
    if not os.path.isdir(run_dir) or safe_files.is_link(os.path.join(run_dir, LOCK_FILE)):
        return None
    return (read_lock(run_dir) or {}) if lock_error(run_dir) else None


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
    try:
        safe_files.makedirs(args.outdir)
    except OSError as e:
        ap.error(f"argument --outdir: cannot create {args.outdir!r}: {e.strerror or e}")
    except safe_files.RunDirRefused as e:
        ap.error(str(e))
    names_checked = ["suite.json", "settings.json", "report.md", "report.json", "summary.json", "figures",
                     *(f"{s.name}.log" for s in specs)]
    err = safe_files.link_error(args.outdir, names_checked)
    if err:
        ap.error(err)
    suite_json = os.path.join(args.outdir, "suite.json")
    try:
        listed = _merge_suite_json(suite_json, args.preset, specs)
    except ValueError as e:
        ap.error(f"argument --outdir: {e}")
    t0 = time.perf_counter()
    stop = SuiteSignals().install()            # SIGINT/SIGTERM: forwarded to the runs (io/run_procs.py)
    failures = run_all(specs, args.outdir, args.jobs, args.quiet, stop)
    unfinished = [] if stop.signum is None else [s.name for s in specs
                                                 if not is_complete(os.path.join(args.outdir, s.name), s)]
    from noma_prorl_bench.analysis.report import failed_checks, write_report
    names = {s.name for s in specs}
    dirs = [os.path.join(args.outdir, r["name"]) for r in listed["runs"]
            if r["name"] not in failures + unfinished and (r["name"] in names or os.path.isfile(
                os.path.join(args.outdir, r["name"], "metrics.jsonl")))]
    settings = {"preset": args.preset, "evidence": PRESETS[args.preset]["evidence"], "runs": len(dirs),
                "score_evals": PRESETS[args.preset]["k"],
                "seeds": args.seeds or PRESETS[args.preset]["seeds"],
                "steps": args.steps or PRESETS[args.preset]["steps"], "jobs": args.jobs, "interleaved": args.preset == "cost",
                "wall_seconds_this_invocation": round(time.perf_counter() - t0, 1),
                "command": "prorl-bench suite " + " ".join(_shell_quote(a) for a in (argv if argv is not None
                                                                                      else sys.argv[1:])),
                "commit": _git_commit(), "machine": _machine()}
    safe_files.write_json(os.path.join(args.outdir, "settings.json"), settings)
    out = os.path.join(args.outdir, "report.md")
    bad_checks = failed_checks(write_report(dirs, out, os.path.join(args.outdir, "figures"), settings, listed)) if dirs else []
    print((f"suite: report written to {out}" if dirs else "suite: no finished run, no report written")
          + (f"; {len(failures)} runs failed: {failures}" if failures else "") + (
              f"; ERROR: identical-by-construction check(s) failed: {bad_checks}" if bad_checks else ""), file=sys.stderr)
    stop.restore()
    if stop.signum is not None:
        print(f"suite: stopped by {stop.name}; the report covers the {len(dirs)} finished runs; {len(unfinished)} "
              f"unfinished ({', '.join(unfinished)}); the same command resumes them from their checkpoints",
              file=sys.stderr)
        return stop.exit_code
    return 1 if failures or bad_checks else 0


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
        old = json.loads(safe_files.read_bytes(path))
    except FileNotFoundError:
        old = {}
    except (OSError, ValueError, RecursionError, UnicodeDecodeError) as e:
        raise ValueError(f"{path} is unreadable ({str(e)[:100]}); move it away or choose another --outdir") from e
    runs_old = old.get("runs", []) if isinstance(old, dict) else None
    if not isinstance(runs_old, list) or not all(isinstance(r, dict) and isinstance(r.get("name"), str)
                                                 for r in runs_old):
        raise ValueError(f"{path} is not a suite.json written by this tool; move it away or choose another --outdir")
    runs = {r["name"]: r for r in runs_old if old.get("preset") == preset and "arm" in r}
    runs.update({s.name: {"name": s.name, "arm": s.arm, "pair": s.pair, "flags": s.flags} for s in specs})
    arms = list(dict.fromkeys(r["arm"] for r in runs.values()))
    listed = {"preset": preset, "aa_offset": AA_OFFSET, "runs": list(runs.values()),
              "comparisons": [list(c) for c in comparisons_for(arms)],
              "families": {c[0]: FAMILIES[c[0]] for c in comparisons_for(arms)},
              "checks": [list(c) for c in checks_for(arms)]}
    safe_files.write_json(path, listed)
    return listed


if __name__ == "__main__":
    sys.exit(main())
