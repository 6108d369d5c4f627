"""`prorl-bench suite`: run an ablation matrix in parallel and write report.md (the main job).

    prorl-bench suite --preset quick --outdir runs/suite_quick     # ~10 min on 2 idle cores: the headline
    prorl-bench suite --preset smoke --outdir /tmp/suite           # ~1 min: the pipeline (tests)
    prorl-bench suite --preset atlas --outdir runs/atlas           # the regime map (240 runs, ~1 h)
    prorl-bench suite --preset grid --task sort_digits --outdir runs/grid_sort   # one task's beta grid (300 runs)
    prorl-bench suite --preset full --outdir runs/suite_full       # variants A0/A1/A2/B and resets, 10 seeds
    prorl-bench suite --preset growth --outdir runs/growth         # optimizer state at adapter growth
    prorl-bench suite --preset cost --outdir runs/cost --jobs 1    # step-time cost, arms interleaved
    prorl-bench suite --preset aa --outdir /tmp/aa                 # A/A test of the statistics
    prorl-bench suite --preset full --seeds 12 --steps 300 --arms A1,B,A1-beta0 --outdir DIR
    prorl-bench suite --preset quick --executor ray --ray_address HEAD:6379 --outdir /shared/suite

Matrices: ARMS (variants A0 / A1 / A2 / B, A1 with beta = 0, A1 on seeds + 1000 as the A/A
control, reset semantics keep / hard / soft / asym at a fixed cadence; `full`, `smoke`);
ATLAS_ARMS (beta x reference treatment; `atlas`, and its headline subset `quick`); GROWTH_ARMS
(`growth`); COST_ARMS (`cost`). Every arm runs the same seeds (a paired design); `--seeds N` /
`--steps S` override the preset (the reset cadence scales with S), `--arms` picks a subset. The
report compares arms pairwise by seed (COMPARISONS, ATLAS_COMPARISONS, each in a Holm family:
FAMILIES) and verifies the pairs identical by construction (CHECKS) step by step instead of testing
them (analysis/compare.py, analysis/stats.py). Every run's exact command is printed before it
starts; runs go in parallel up to `--jobs` (default: the number of cores), one torch thread each,
with a live progress bar. Before the first run starts the suite prints its expected duration
(`expected_duration`: measured CPU-seconds per step x steps, over the cores its jobs get at the
current load).
A run whose `summary.json` says complete (with the same config) is skipped, and one that was
interrupted after a checkpoint is continued with `--resume`, so re-running the same command
resumes an interrupted suite. SIGINT / SIGTERM (Ctrl-C) are forwarded to the running runs, which
finish their step, write a checkpoint and exit; the suite then writes a partial report of the
finished runs and exits 130 / 143 (io/run_procs.py). The report is regenerated from the saved
logs only.
`--executor ray [--ray_address ADDR]` runs each run as a Ray task on any node of a cluster (the
same command line, skip / resume and signals; --outdir on a filesystem every node sees):
io/ray_procs.py, docs/ray.md.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import sys
import time
from pathlib import Path
from typing import Any, Optional, Sequence

from noma_prorl_bench.analysis.untrusted import term_text
from noma_prorl_bench.io import safe_files
from noma_prorl_bench.io.run_procs import LocalExecutor, SuiteSignals, live_holder, report_end, run_state

# ---------------------------------------------------------------------------- the matrix (matrix.py)
from noma_prorl_bench.matrix import (  # noqa: F401  (re-exported: suite.PRESETS, suite.expand, ...)
    AA_ARMS,
    AA_OFFSET,
    ARMS,
    ATLAS_ARMS,
    ATLAS_BETAS,
    ATLAS_COMPARISONS,
    ATLAS_TREATMENTS,
    CHECKS,
    COMPARISONS,
    COST_ARMS,
    FAMILIES,
    GROWTH_ARMS,
    PRESETS,
    QUICK_ARMS,
    RunSpec,
    checks_for,
    comparisons_for,
    expand,
    preset_arms,
)


# ---------------------------------------------------------------------------- running
def is_complete(run_dir: str, spec: RunSpec) -> bool:
    """True if run_dir holds a complete run made with the same flags."""
    return run_state(run_dir, spec.command("X")[3:]) == "complete"


def _steps_done(run_dir: str) -> int:
    """RL steps in the run's metrics.jsonl so far (its lines, less the step-0 row)."""
    try:
        with open(os.path.join(run_dir, "metrics.jsonl"), "rb") as f:
            return sum(1 for line in f if not line.startswith(b'{"step": 0,'))
    except OSError:
        return 0


def run_all(
    specs: list[RunSpec],
    outdir: str,
    jobs: int,
    quiet: bool = False,
    stop: Optional[SuiteSignals] = None,
    executor=None,
) -> list[str]:
    """Run the specs with at most `jobs` in parallel; return the failed ones' names. Complete
    runs are skipped, interrupted ones (a checkpoint, same flags) continued with `--resume`; a
    run still held by a live process (an earlier suite's child that outlived it) is waited for,
    its log left alone, then counted as complete or continued.
    SIGINT/SIGTERM (`stop`, installed here if not given) are forwarded to the running runs,
    which checkpoint and exit 130/143; no new run starts and this returns once they exited
    (`stop.signum` is set; the interrupted runs are not counted as failures).
    `executor` starts the runs (default: io/run_procs.py LocalExecutor with `jobs`; RayExecutor:
    Ray tasks, as many at once as its `capacity()`); a run it lost (no exit code) is a failure."""
    if executor is None:
        executor = LocalExecutor(jobs, local_env())
    states = {s.name: run_state(os.path.join(outdir, s.name), s.command("X")[3:]) for s in specs}
    pending = [s for s in specs if states[s.name] != "complete"]
    n_resume = sum(states[s.name] == "resumable" for s in pending)
    print(
        f"suite: {len(specs)} runs, {len(specs) - len(pending)} already complete (skipped), {len(pending)} to "
        f"run ({n_resume} resumed from their checkpoints), {executor.describe()}",
        file=sys.stderr,
    )
    if pending:
        print("suite: " + expected_duration(pending, specs, outdir, executor.capacity()), file=sys.stderr)
    own = stop is None
    signals = SuiteSignals().install() if stop is None else stop
    try:
        return _run_pending(pending, states, outdir, executor, quiet, signals)
    finally:
        if own:
            signals.restore()


#: CPU-seconds of one run per RL step where no run of the suite has finished yet: (CPU-seconds, steps) of
#: a measured run (an atlas run of 300 steps, GRU defaults, one thread, `time`: 23.3 s user, 2-core Xeon VM)
MEASURED_CPU_S = {"quick": (23.3, 300), "atlas": (23.3, 300), "grid": (23.3, 300)}


def _measured_cpu_per_step(specs: list[RunSpec], outdir: str) -> tuple[float, str] | None:
    """Median CPU-seconds per step of the suite's complete, never-resumed runs (their summary.json's
    `cpu_seconds`), else MEASURED_CPU_S of the preset whose arms the specs are; None when neither exists."""
    rates = []
    for s in specs:
        try:
            summ = json.loads(safe_files.read_bytes(os.path.join(outdir, s.name, "summary.json")))
        except (OSError, ValueError, UnicodeDecodeError):
            continue
        cpu, steps = summ.get("cpu_seconds"), summ.get("steps")
        if (
            summ.get("complete") is True
            and "resumed_from_step" not in summ
            and isinstance(cpu, (int, float))
            and isinstance(steps, int)
            and steps > 0
            and cpu > 0
        ):
            rates.append(cpu / steps)
    if rates:
        return sorted(rates)[len(rates) // 2], f"median of this suite's {len(rates)} finished runs"
    preset = next((p for p in MEASURED_CPU_S if specs[0].arm in preset_arms(p)), None)
    if preset is None:
        return None
    cpu, steps = MEASURED_CPU_S[preset]
    return cpu / steps, f"a measured run of these arms: {cpu} CPU-s / {steps} steps"


def expected_duration(
    pending: list[RunSpec],
    specs: list[RunSpec],
    outdir: str,
    jobs: int,
    cores: int | None = None,
    load: float | None = None,
) -> str:
    """'expected duration ~M min: N runs x S steps at R CPU-s/step (source), J jobs, load L on C
    cores (each job gets min(1, C / (L + J)) of a core)'. The wall time is the CPU work of the pending
    runs divided by the cores the jobs can get: sum(R x steps) / (min(J, N) x min(1, C / (L + J)))."""
    cores = cores or os.cpu_count() or 1
    load = os.getloadavg()[0] if load is None and hasattr(os, "getloadavg") else (load or 0.0)
    rate = _measured_cpu_per_step(specs, outdir)
    if rate is None:
        return "expected duration: unknown until the first run finishes (no measured CPU-seconds for these runs)"
    per_step, source = rate
    work = sum(per_step * _spec_steps(s) for s in pending)
    running = min(jobs, len(pending))
    share = min(1.0, cores / (load + running))
    wall = work / (running * share)
    return (
        f"expected duration ~{wall / 60:.0f} min ({wall:.0f} s): {len(pending)} runs, {work:.0f} CPU-s at "
        f"{per_step:.3f} CPU-s/step ({source}), {running} jobs, load {load:.1f} on {cores} cores "
        f"(each job gets {share:.2f} of a core)"
    )


def local_env() -> dict:
    """The suite's environment with this package's source first on PYTHONPATH (for its runs)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = SRC + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


SRC = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _start(spec: RunSpec, state: str, outdir: str, executor):
    """Print the run's command and start it with `executor` (its own session: signals come from the suite)."""
    cmd = spec.command(outdir, "--resume" if state == "resumable" else "--overwrite")
    print("$ " + shlex.join(cmd), file=sys.stderr)  # sys.executable: pastes in any shell
    return executor.start(spec.name, cmd, os.path.join(outdir, f"{spec.name}.log"), state == "resumable")


def _run_pending(pending, states, outdir, executor, quiet, stop: SuiteSignals) -> list[str]:
    total_steps = sum(_spec_steps(s) for s in pending)
    bar = None
    if not quiet and total_steps:
        from tqdm import tqdm

        bar = tqdm(total=total_steps, desc="suite", unit="step", file=sys.stderr, dynamic_ncols=True)
    running: dict[str, tuple] = {}  # name -> (process or RayRun, RunSpec)
    adopted: dict[str, RunSpec] = {}  # runs still going from an earlier suite process (they hold their lock)
    failures: list = []
    queue, finished_steps = list(pending), 0
    while running or ((queue or adopted) and stop.signum is None):
        while queue and len(running) + len(adopted) < executor.capacity() and stop.signum is None:
            spec = queue.pop(0)
            holder = live_holder(os.path.join(outdir, spec.name))
            if holder is not None:  # e.g. the earlier suite was killed with -9: wait, never truncate its log
                print(
                    f"suite: run {spec.name} is still going (pid {holder.get('pid')}, started earlier); "
                    "waiting for it to finish",
                    file=sys.stderr,
                )
                adopted[spec.name] = spec
                continue
            running[spec.name] = (_start(spec, states[spec.name], outdir, executor), spec)
            stop.children[spec.name] = running[spec.name][0]
        executor.wait(0.5)
        finished_steps += _collect_adopted(adopted, queue, states, outdir)
        for name in list(running):
            proc, spec = running[name]
            if proc.poll() is not None:
                del running[name]
                stop.children.pop(name, None)
                finished_steps += _spec_steps(spec)
                report_end(name, proc, outdir, stop, failures)
        if bar is not None:
            live = sum(_steps_done(os.path.join(outdir, n)) for n in running)
            bar.n = min(finished_steps + live, total_steps)
            bar.set_postfix(running=len(running), queued=len(queue), refresh=False)
            bar.refresh()
    if bar is not None:
        bar.close()
    return failures


def _collect_adopted(adopted: dict, queue: list, states: dict, outdir: str) -> int:
    """Adopted runs that ended: complete ones are done (their steps returned), others queued first."""
    steps = 0
    for name in list(adopted):
        run_dir = os.path.join(outdir, name)
        if live_holder(run_dir) is None:  # it ended: complete, resumable or to start over
            spec = adopted.pop(name)
            states[name] = run_state(run_dir, spec.command("X")[3:])
            if states[name] == "complete":
                steps += _spec_steps(spec)
                print(f"suite: run {name} (started earlier) finished", file=sys.stderr)
            else:
                queue.insert(0, spec)
    return steps


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
    from noma_prorl_bench.io.run_dir import git_commit

    return git_commit(mark_dirty=True) or os.environ.get("PRORL_BENCH_COMMIT", "unknown")


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="prorl-bench suite",
        description="Run an ablation matrix (a preset's arms on paired seeds) in parallel and write report.md "
        "with its figures; running the same command again resumes it.",
    )
    ap.add_argument("--preset", choices=sorted(PRESETS), default="quick", help="matrix size (default: quick)")
    ap.add_argument("--outdir", required=True, help="suite directory: one subdirectory per run, report.md")
    ap.add_argument(
        "--seeds", type=_positive("--seeds"), help="number of paired seeds 0..N-1 for every arm (default: the preset's)"
    )
    ap.add_argument(
        "--steps",
        type=_positive("--steps"),
        help="RL steps per run (default: the preset's; the reset/growth cadence scales with it)",
    )
    ap.add_argument("--arms", help="comma-separated subset of the preset's arms (default: all)")
    ap.add_argument(
        "--jobs",
        type=int,
        help="runs in parallel (default: the cores; with --executor ray: the "
        "cluster's CPUs, read as nodes come and go)",
    )
    ap.add_argument(
        "--executor",
        choices=("local", "ray"),
        default="local",
        help="local: runs are child "
        "processes of the suite (default); ray: one Ray task per run, on any node (docs/ray.md)",
    )
    ap.add_argument(
        "--ray_address",
        help="with --executor ray: the cluster to join (e.g. HEAD_IP:6379 or auto; "
        "default: a private local cluster); --outdir must be a path every node sees",
    )
    ap.add_argument("--quiet", action="store_true", help="no progress bar")
    task = ap.add_argument_group("task (passed to every run; default: the runs' own, reverse_digits)")
    for name in TASK_FLAGS:
        task.add_argument(f"--{name}", help=f"the run flag --{name} (docs/flags.md, docs/tasks.md)")
    return ap


#: run flags the suite passes to every run when given (your own task: docs/tasks.md)
TASK_FLAGS = (
    "task",
    "task_kwargs",
    "prompt_field",
    "answer_field",
    "reward_fn",
    "reward_tol",
    "max_task_bytes",
    "max_line_bytes",
    "max_prompt_chars",
    "max_answer_chars",
)


def task_flags(args: argparse.Namespace) -> list[str]:
    """The given TASK_FLAGS as run flags."""
    return [x for n in TASK_FLAGS if getattr(args, n) is not None for x in (f"--{n}", getattr(args, n))]


def main(argv: Optional[list[str]] = None) -> int:
    ap = _parser()
    args = ap.parse_args(argv)
    specs = _checked_specs(ap, args)  # bad input: exit 2 here, nothing written
    executor = _make_executor(ap, args)  # joins Ray (if asked) before anything is written
    try:
        return _run_suite(ap, args, specs, executor, argv if argv is not None else sys.argv[1:])
    finally:
        executor.close()


def _checked_specs(ap: argparse.ArgumentParser, args: argparse.Namespace) -> list[RunSpec]:
    """The suite's runs; exit 2 (ap.error) on a bad flag."""
    if args.jobs is not None and args.jobs < 1:
        ap.error(f"argument --jobs: must be >= 1, got {args.jobs}")
    if args.ray_address is not None and args.executor != "ray":
        ap.error(f"argument --ray_address: only with --executor ray (got --executor {args.executor})")
    if os.path.exists(args.outdir) and not os.path.isdir(args.outdir):
        ap.error(f"argument --outdir: {args.outdir!r} exists and is not a directory")
    held = [n for n in ("config.json", "metrics.jsonl", "checkpoints") if os.path.lexists(os.path.join(args.outdir, n))]
    if os.path.isdir(args.outdir) and held:
        ap.error(
            f"argument --outdir: {args.outdir!r} holds a single run ({', '.join(held)}), not a suite: a suite "
            "writes one run directory per arm and seed inside --outdir; choose a new or empty directory (or a "
            "suite's own)"
        )
    known = list(preset_arms(args.preset))
    arms = known if args.arms is None else [a.strip() for a in args.arms.split(",") if a.strip()]
    bad = [a for a in arms if a not in known]
    if bad or not arms:
        ap.error(f"argument --arms: unknown arm(s) {bad} for preset {args.preset!r}; choose from {', '.join(known)}")
    specs = expand(args.preset, args.seeds, args.steps, arms)
    for spec in specs:
        spec.flags += task_flags(args)
    if task_flags(args):
        _check_task(ap, specs)
    return specs


def _make_executor(ap: argparse.ArgumentParser, args: argparse.Namespace):
    """LocalExecutor, or RayExecutor joined to --ray_address (exit 2 if Ray is missing or unreachable)."""
    if args.executor == "local":
        return LocalExecutor(args.jobs or os.cpu_count() or 1, local_env())
    try:
        import ray  # noqa: F401
    except ImportError:
        ap.error("argument --executor: ray needs the ray package (pip install -e '.[ray]')")
    from noma_prorl_bench.io.ray_procs import RayExecutor, address_error

    why = address_error(args.ray_address) if args.ray_address else None
    try:
        if why is None:
            return RayExecutor(args.ray_address, args.jobs, SRC)
    except (ConnectionError, RuntimeError, ValueError) as e:
        why = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
    ap.error(f"argument --ray_address: cannot join the Ray cluster at {args.ray_address!r}: {why}")


def _run_suite(
    ap: argparse.ArgumentParser, args: argparse.Namespace, specs: list[RunSpec], executor, argv: list[str]
) -> int:
    """Prepare the outdir, run the specs, write settings.json and the report; the exit code."""
    _prepare_outdir(ap, args.outdir, specs)
    try:
        listed = _merge_suite_json(os.path.join(args.outdir, "suite.json"), args.preset, specs)
    except ValueError as e:
        ap.error(f"argument --outdir: {e}")
    t0 = time.perf_counter()
    stop = SuiteSignals().install()  # SIGINT/SIGTERM: forwarded to the runs (io/run_procs.py)
    failures = run_all(specs, args.outdir, executor.capacity(), args.quiet, stop, executor)
    unfinished = (
        [] if stop.signum is None else [s.name for s in specs if not is_complete(os.path.join(args.outdir, s.name), s)]
    )
    from noma_prorl_bench.analysis.report import failed_checks, write_report

    names = {s.name for s in specs}
    dirs = [
        os.path.join(args.outdir, r["name"])
        for r in listed["runs"]
        if r["name"] not in failures + unfinished
        and (r["name"] in names or os.path.isfile(os.path.join(args.outdir, r["name"], "metrics.jsonl")))
    ]
    settings = _settings(args, argv, len(dirs), executor, time.perf_counter() - t0)
    safe_files.write_json(os.path.join(args.outdir, "settings.json"), settings)
    out = os.path.join(args.outdir, "report.md")
    bad_checks = (
        failed_checks(write_report(dirs, out, os.path.join(args.outdir, "figures"), settings, listed)) if dirs else []
    )
    print(
        (f"suite: report written to {out}" if dirs else "suite: no finished run, no report written")
        + (f"; {len(failures)} runs failed: {failures}" if failures else "")
        + (f"; ERROR: identical-by-construction check(s) failed: {bad_checks}" if bad_checks else ""),
        file=sys.stderr,
    )
    stop.restore()
    if stop.signum is not None:
        print(
            f"suite: stopped by {stop.name}; the report covers the {len(dirs)} finished runs; {len(unfinished)} "
            f"unfinished ({', '.join(unfinished)}); the same command resumes them from their checkpoints",
            file=sys.stderr,
        )
        return stop.exit_code
    return 1 if failures or bad_checks else 0


def _settings(args: argparse.Namespace, argv: list[str], n_runs: int, executor, wall: float) -> dict:
    """settings.json: what the report's provenance names."""
    return {
        "preset": args.preset,
        "evidence": PRESETS[args.preset]["evidence"],
        "runs": n_runs,
        "score_evals": PRESETS[args.preset]["k"],
        "seeds": args.seeds or PRESETS[args.preset]["seeds"],
        "steps": args.steps or PRESETS[args.preset]["steps"],
        "jobs": executor.capacity(),
        "executor": executor.describe(),
        "interleaved": args.preset == "cost",
        "wall_seconds_this_invocation": round(wall, 1),
        "command": getattr(args, "command_name", "prorl-bench suite") + " " + " ".join(_shell_quote(a) for a in argv),
        "commit": _git_commit(),
        **_machine_fields(),
    }


def _machine_fields() -> dict:
    """settings.json's `machine` (one line for the report) and `machine_info` (io/machine.py)."""
    from noma_prorl_bench.io.machine import describe, machine_info

    info = machine_info()
    return {"machine": describe(info), "machine_info": info}


def _prepare_outdir(ap: argparse.ArgumentParser, outdir: str, specs: list[RunSpec]) -> None:
    """Create the suite directory; exit 2 if it cannot be made or a suite file in it is a link."""
    try:
        safe_files.makedirs(outdir)
    except OSError as e:
        ap.error(f"argument --outdir: cannot create {outdir!r}: {e.strerror or e}")
    except safe_files.RunDirRefused as e:
        ap.error(str(e))
    names_checked = [
        "suite.json",
        "settings.json",
        "report.md",
        "report.json",
        "summary.json",
        "figures",
        *(f"{s.name}.log" for s in specs),
    ]
    from noma_prorl_bench.io.run_procs import suite_dir_error  # a FIFO, socket, hard link: refused too

    err = safe_files.link_error(outdir, names_checked) or suite_dir_error(outdir, [s.name for s in specs])
    if err:
        ap.error(err)


def _check_task(ap: argparse.ArgumentParser, specs: list[RunSpec]) -> None:
    """Exit 2 (nothing started) when the task flags make a bad run config or task. A jsonl:PATH
    task lowers every run's --n_val to what the file allows (tasks/jsonl.fitted_n_val, the preset's
    value at most), as a run given no --n_val does, and says so."""
    from noma_prorl_bench.config import ConfigError, build_parser, make_config
    from noma_prorl_bench.tasks import jsonl_n_val, make_task

    try:
        cfg = make_config(vars(build_parser().parse_args(["--outdir", "-", *specs[0].flags])))
        if cfg.task.startswith("jsonl:"):
            most = jsonl_n_val(cfg, sys.maxsize)  # a fifth of the distinct prompts, >= 1
            for spec in specs:
                spec.flags = [
                    str(min(int(f), most)) if prev == "--n_val" else f for prev, f in zip(["", *spec.flags], spec.flags)
                ]
            if cfg.n_val > most:
                print(
                    f"prorl-bench suite: --n_val {most} for every run: {cfg.task} allows at most {most} "
                    f"validation prompts (a fifth of its distinct prompts), fewer than the preset's {cfg.n_val}",
                    file=sys.stderr,
                )
                cfg.n_val = most
        make_task(cfg.task, n_val=cfg.n_val, cfg=cfg)
    except ConfigError as e:
        ap.error(str(e))


def is_run_name(name: object) -> bool:
    """True for a name a suite gives its runs: one directory level inside the suite (no separator,
    no '..', not absolute, not hidden)."""
    return (
        isinstance(name, str) and bool(re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.+=-]{0,199}", name)) and ".." not in name
    )


def _merge_suite_json(path: str, preset: str, specs: list[RunSpec]) -> dict:
    """Write suite.json: this invocation's runs merged with those an earlier invocation on the same
    outdir listed (e.g. `--arms` run in two parts); arm, pair and the comparisons among all arms."""
    try:
        old = json.loads(safe_files.read_bytes(path))
    except FileNotFoundError:
        old = {}
    except (OSError, ValueError, RecursionError, UnicodeDecodeError, safe_files.RunDirRefused) as e:
        raise ValueError(f"{path} is unreadable ({str(e)[:100]}); move it away or choose another --outdir") from e
    runs_old = old.get("runs", []) if isinstance(old, dict) else None
    if not isinstance(runs_old, list) or not all(
        isinstance(r, dict) and isinstance(r.get("name"), str) for r in runs_old
    ):
        raise ValueError(f"{path} is not a suite.json written by this tool; move it away or choose another --outdir")
    outside = [r["name"] for r in runs_old if not is_run_name(r["name"])]
    if outside:
        raise ValueError(
            f"{path} lists {outside[0]!r}, which is not a run directory name inside the suite (a suite "
            "reads only its own runs); move it away or choose another --outdir"
        )
    runs = {r["name"]: r for r in runs_old if old.get("preset") == preset and "arm" in r}
    runs.update({s.name: {"name": s.name, "arm": s.arm, "pair": s.pair, "flags": s.flags} for s in specs})
    arms = list(dict.fromkeys(r["arm"] for r in runs.values()))
    listed = {
        "preset": preset,
        "aa_offset": AA_OFFSET,
        "runs": list(runs.values()),
        "comparisons": [list(c) for c in comparisons_for(arms)],
        "families": {c[0]: FAMILIES[c[0]] for c in comparisons_for(arms)},
        "checks": [list(c) for c in checks_for(arms)],
    }
    safe_files.write_json(path, listed)
    return listed


# ---------------------------------------------------------------------------- replicate
#: run flags a suite.json may not set: where a run writes and how it starts are the runner's
RUNNER_FLAGS = ("outdir", "resume", "overwrite", "config")


def foreign_run_error(spec: RunSpec) -> Optional[str]:
    """Why a run listed in a suite.json from someone else may not be re-run as listed, else None: its
    name must be one directory level inside the suite, its flags must parse as run flags, may not
    set where it writes or how it starts (RUNNER_FLAGS), and may not name code (a ``module:function``
    task or reward function: config/code_specs.py; repeat such a suite with `suite --task`)."""
    from noma_prorl_bench.config import build_parser  # noqa: PLC0415
    from noma_prorl_bench.config.code_specs import names_code  # noqa: PLC0415

    if not is_run_name(spec.name):
        return f"run {spec.name!r} is not a run directory name inside the suite"
    try:
        given = vars(build_parser().parse_args(["--outdir", "-", *spec.flags]))
    except SystemExit:
        return f"run {spec.name!r} lists flags that are not run flags: {' '.join(spec.flags)[:200]!r}"
    bad = [f for f in RUNNER_FLAGS if f in given and f != "outdir"] + (["outdir"] if "--outdir" in spec.flags else [])
    if bad:
        return f"run {spec.name!r} sets --{bad[0]}, which only the runner sets"
    code = [f for f in ("task", "reward_fn") if names_code(f, given.get(f))]
    if code:
        return (
            f"run {spec.name!r} names code to import (--{code[0]} {given[code[0]]!r}); code named in a file is "
            "never imported: re-run that suite with `prorl-bench suite ... --"
            f"{code[0]} {given[code[0]]}` instead"
        )
    return None


def replicate_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="prorl-bench replicate",
        description="Re-run a committed suite's arms (all seeds or the chosen ones) on this machine and write "
        "replication.md and replication.json: per comparison, the committed and the new effect, interval and "
        "verdict, and whether the verdict replicates.",
    )
    ap.add_argument("dir", metavar="DIR", help="a suite directory or a committed report folder (summary.json)")
    ap.add_argument("--seeds", help="comma-separated pair indices to re-run (default: all of DIR's)")
    ap.add_argument(
        "--arms",
        help="comma-separated arms to re-run (default: all of DIR's); comparisons of arms not re-run are left out",
    )
    ap.add_argument("--outdir", help="where the new runs and replication.md go (default: DIR-replicate)")
    ap.add_argument("--jobs", type=int, help="parallel runs (default: the number of cores)")
    ap.add_argument("--quiet", action="store_true", help="no progress bar")
    return ap


def _read_json_file(path: Path) -> Any:
    return json.loads(safe_files.read_bytes(str(path)))


def committed_specs(ap: argparse.ArgumentParser, src: Path, summary: dict) -> tuple[str, list, dict]:
    """(preset, run specs, provenance) of the committed suite: from suite.json's flags when DIR is
    a suite directory, else rebuilt from summary.json's provenance (preset, seeds, steps)."""
    prov: dict = summary["provenance"] if isinstance(summary.get("provenance"), dict) else {}
    if (src / "suite.json").is_file():
        listed = _read_json_file(src / "suite.json")
        runs = listed.get("runs") if isinstance(listed, dict) else None
        if not isinstance(runs, list) or not all(
            isinstance(r, dict) and isinstance(r.get("flags"), list) for r in runs
        ):
            ap.error(f"argument DIR: {term_text(str(src / 'suite.json'), 200)} does not list its runs' flags")
        specs = [
            RunSpec(name=r["name"], flags=[str(f) for f in r["flags"]], arm=str(r["arm"]), pair=int(r["pair"]))
            for r in runs
        ]
        for spec in specs:  # suite.json is untrusted input: what it makes this run
            why = foreign_run_error(spec)
            if why:
                ap.error(f"argument DIR: {term_text(str(src / 'suite.json'), 200)}: {why}")
        return str(listed.get("preset")), specs, prov
    preset = prov.get("preset")
    if preset not in PRESETS:
        ap.error(
            f"argument DIR: {term_text(str(src), 200)} has no suite.json and its summary.json names no known "
            f"preset (got {term_text(str(preset), 40)}; choose from {', '.join(sorted(PRESETS))})"
        )
    seeds, steps = prov.get("seeds"), prov.get("steps")
    if not (isinstance(seeds, int) and isinstance(steps, int)):
        ap.error(f"argument DIR: {term_text(str(src), 200)}'s summary.json does not record seeds and steps")
    return str(preset), expand(preset, seeds, steps), prov


def replicate_main(argv: Optional[Sequence[str]] = None) -> int:
    """`prorl-bench replicate` (analysis/replicate.py): re-run a committed suite here, compare the verdicts."""
    from noma_prorl_bench.analysis.replicate import _table, compare_summaries, write_replication  # noqa: PLC0415

    ap = replicate_parser()
    args = ap.parse_args(argv)
    src = Path(args.dir)
    if not (src / "summary.json").is_file():
        ap.error(f"argument DIR: {term_text(args.dir, 200)} has no summary.json (not a suite's report folder)")
    try:
        summary = _read_json_file(src / "summary.json")
    except (OSError, ValueError, RecursionError, UnicodeDecodeError) as e:
        ap.error(f"argument DIR: {term_text(args.dir, 200)}/summary.json is unreadable ({str(e)[:100]})")
    if not isinstance(summary, dict) or not isinstance(summary.get("comparisons"), list):
        ap.error(f"argument DIR: {term_text(args.dir, 200)}/summary.json lists no comparisons")
    preset, specs, prov = committed_specs(ap, src, summary)
    pairs = sorted({s.pair for s in specs})
    if args.seeds is not None:
        try:
            chosen = sorted({int(v) for v in args.seeds.split(",") if v.strip()})
        except ValueError:
            chosen = []
        if not chosen or any(p not in pairs for p in chosen):
            ap.error(f"argument --seeds: comma-separated pair indices of DIR, from {pairs}; got {args.seeds!r}")
        specs = [s for s in specs if s.pair in chosen]
    if args.arms is not None:
        known = list(dict.fromkeys(s.arm for s in specs))
        arms = [a.strip() for a in args.arms.split(",") if a.strip()]
        if not arms or any(a not in known for a in arms):
            ap.error(
                f"argument --arms: comma-separated arms of DIR, from {', '.join(known)}; "
                f"got {term_text(args.arms, 200)!r}"
            )
        specs = [s for s in specs if s.arm in arms]
    if args.jobs is not None and args.jobs < 1:
        ap.error(f"argument --jobs: must be >= 1, got {args.jobs}")
    outdir = args.outdir or str(src).rstrip("/\\") + "-replicate"
    if os.path.abspath(outdir) == os.path.abspath(src):
        ap.error("argument --outdir: must differ from DIR (the committed runs stay as they are)")
    ns = argparse.Namespace(
        outdir=outdir,
        quiet=args.quiet,
        preset=preset,
        seeds=len({s.pair for s in specs}),
        steps=prov.get("steps"),
        jobs=args.jobs,
        executor="local",
        command_name="prorl-bench replicate",
    )
    executor = LocalExecutor(args.jobs or os.cpu_count() or 1, local_env())
    argv_used = list(argv if argv is not None else sys.argv[1:])
    try:
        code = _run_suite(ap, ns, specs, executor, argv_used)
    finally:
        executor.close()
    new_path = Path(outdir) / "summary.json"
    if not new_path.is_file():
        print("replicate: no new report (no run finished); nothing compared", file=sys.stderr)
        return code or 1
    new = _read_json_file(new_path)
    rows = compare_summaries(summary, new)
    write_replication(Path(outdir), rows, summary, new, str(src), argv_used)
    for line in _table(rows, term=True):
        print(line)
    n_same = sum(r["replicates"] for r in rows)
    print(f"replicate: {n_same} of {len(rows)} verdicts replicated; {Path(outdir) / 'replication.md'}", file=sys.stderr)
    return code


if __name__ == "__main__":
    from noma_prorl_bench.config.code_specs import drop_script_dir

    drop_script_dir()  # `python -m` put the current directory on the import path
    sys.exit(main())
