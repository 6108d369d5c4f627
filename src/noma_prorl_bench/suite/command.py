"""`prorl-bench suite`: prepare the suite directory, merge suite.json, run the runs, write
settings.json and the report; the exit code (suite/__init__.py describes the suite)."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from typing import Optional

from noma_prorl_bench.io import safe_files
from noma_prorl_bench.io.run_procs import SuiteSignals
from noma_prorl_bench.matrix import AA_OFFSET, FAMILIES, PRESETS, RunSpec, checks_for, comparisons_for
from noma_prorl_bench.suite.planning import _checked_specs, _make_executor, _parser
from noma_prorl_bench.suite.scheduling import is_complete, run_all


def main(argv: Optional[list[str]] = None) -> int:
    ap = _parser()
    args = ap.parse_args(argv)
    specs = _checked_specs(ap, args)  # bad input: exit 2 here, nothing written
    executor = _make_executor(ap, args)  # joins Ray (if asked) before anything is written
    try:
        return _run_suite(ap, args, specs, executor, argv if argv is not None else sys.argv[1:])
    finally:
        executor.close()


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
    committed = os.path.join("docs", f"suite_{args.preset}")
    if dirs and not (failures or unfinished) and os.path.isfile(os.path.join(committed, "summary.json")):
        if getattr(args, "command_name", "") != "prorl-bench replicate":
            print(
                f"suite: compare with the committed answer, no retraining: "
                f"prorl-bench replicate {committed} --runs {args.outdir}",
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
        "interleaved": args.preset == "cost" or bool(PRESETS[args.preset].get("interleaved")),
        "wall_seconds_this_invocation": round(wall, 1),
        "command": getattr(args, "command_name", "prorl-bench suite") + " " + " ".join(_shell_quote(a) for a in argv),
        "commit": _git_commit(),
        **_machine_fields(),
    }


def _shell_quote(s: str) -> str:
    return s if s and all(c.isalnum() or c in "-_./=:," for c in s) else repr(s)


def _git_commit() -> str:
    from noma_prorl_bench.io.run_dir import git_commit

    return git_commit(mark_dirty=True) or os.environ.get("PRORL_BENCH_COMMIT", "unknown")


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
