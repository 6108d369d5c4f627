"""The suite's command line and its runs: the parser, the checked run specs (a preset's arms on
paired seeds, the task flags passed to every run) and the executor (local processes or Ray)."""

from __future__ import annotations

import argparse
import os
import sys

from noma_prorl_bench.io.run_procs import LocalExecutor
from noma_prorl_bench.matrix import PRESETS, RunSpec, expand, preset_arms
from noma_prorl_bench.suite.scheduling import SRC, local_env

#: the most paired seeds a suite runs (and a committed suite.json or summary.json may claim): each seed is one
#: run per arm, and more than this is a typo, not a design
MAX_SEEDS = 1000


def _positive(name: str, most: int | None = None):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = 0
        if value < 1 or (most is not None and value > most):
            bound = f"in 1..{most}" if most is not None else ">= 1"
            raise argparse.ArgumentTypeError(f"{name} must be an integer {bound}, got {text[:40]!r}")
        return value

    return parse


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="prorl-bench suite",
        description="Run an ablation matrix (a preset's arms on paired seeds) in parallel and write report.md "
        "with its figures; running the same command again resumes it.",
    )
    ap.add_argument("--preset", choices=sorted(PRESETS), default="quick", help="matrix size (default: quick)")
    ap.add_argument("--outdir", required=True, help="suite directory: one subdirectory per run, report.md")
    ap.add_argument(
        "--seeds",
        type=_positive("--seeds", MAX_SEEDS),
        help=f"number of paired seeds 0..N-1 for every arm, at most {MAX_SEEDS} (default: the preset's)",
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


def _check_task(ap: argparse.ArgumentParser, specs: list[RunSpec]) -> None:
    """Exit 2 (nothing started) when the task flags make a bad run config or task. A jsonl:PATH
    task lowers every run's --n_val to what the file allows (tasks/jsonl.fitted_n_val, the preset's
    value at most), as a run given no --n_val does, and says so."""
    from noma_prorl_bench.config import ConfigError, build_parser, make_config
    from noma_prorl_bench.config.specs import RunSpecs
    from noma_prorl_bench.tasks import jsonl_n_val, make_task

    try:
        cfg = make_config(vars(build_parser().parse_args(["--outdir", "-", *specs[0].flags])))
        task_spec = RunSpecs.from_config(cfg).task
        if cfg.task.startswith("jsonl:"):
            most = jsonl_n_val(task_spec, sys.maxsize)  # a fifth of the distinct prompts, >= 1
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
        make_task(cfg.task, n_val=cfg.n_val, spec=task_spec)
    except ConfigError as e:
        ap.error(str(e))
