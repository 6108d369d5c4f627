"""`prorl-bench replicate` (analysis/replicate.py): re-run a committed suite's runs here and
compare the verdicts; a suite.json from someone else is untrusted input (`foreign_run_error`)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any, Optional, Sequence

from noma_prorl_bench.analysis.untrusted import term_text
from noma_prorl_bench.io import safe_files
from noma_prorl_bench.io.run_procs import LocalExecutor
from noma_prorl_bench.matrix import PRESETS, RunSpec, expand
from noma_prorl_bench.suite.command import _run_suite, is_run_name
from noma_prorl_bench.suite.planning import MAX_SEEDS
from noma_prorl_bench.suite.scheduling import local_env

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
    ap.add_argument(
        "--runs",
        metavar="RUNS",
        help="compare only: a suite of DIR's runs already trained here (e.g. runs/suite_quick) against DIR; "
        "nothing is trained, and a missing or unfinished run is refused; replication.md goes into RUNS",
    )
    ap.add_argument(
        "--outdir",
        help="where the new runs and replication.md go (default: runs/NAME-replicate, NAME being DIR's folder name; "
        "never inside DIR)",
    )
    ap.add_argument("--jobs", type=int, help="parallel runs (default: the number of cores)")
    ap.add_argument("--quiet", action="store_true", help="no progress bar")
    return ap


def _read_json_file(path: Path) -> Any:
    return json.loads(safe_files.read_bytes(str(path)))


def _read_listed(ap: argparse.ArgumentParser, path: Path, what: str) -> Any:
    """The JSON in a committed suite's file, read as a run file (no link, FIFO or device; bounded by size);
    anything else is one line naming the file (exit 2)."""
    try:
        return _read_json_file(path)
    except (OSError, ValueError, RecursionError, safe_files.RunDirRefused) as e:
        why = " ".join(str(e).removeprefix("argument --outdir: ").split())[:200]
        ap.error(f"argument DIR: {term_text(str(path), 200)} ({what}) is unreadable: {term_text(why)}")


def _listed_specs(ap: argparse.ArgumentParser, path: Path, listed: Any) -> list[RunSpec]:
    """The run specs a suite.json lists, each entry checked for its shape ({"name": str, "arm": str,
    "pair": int 0..MAX_SEEDS-1, "flags": [str]}), names unique, at most MAX_SEEDS pairs; one line
    naming the file and the first bad entry otherwise."""
    where = term_text(str(path), 200)
    runs = listed.get("runs") if isinstance(listed, dict) else None
    if not isinstance(runs, list) or not runs:
        ap.error(f'argument DIR: {where} does not list its runs (a JSON object whose "runs" is a list)')
    specs: list[RunSpec] = []
    for i, r in enumerate(runs):
        ok = isinstance(r, dict) and isinstance(r.get("name"), str) and isinstance(r.get("arm"), str)
        ok = ok and isinstance(r.get("flags"), list) and all(isinstance(f, str) for f in r["flags"])
        ok = ok and type(r.get("pair")) is int and 0 <= r["pair"] < MAX_SEEDS
        if not ok:
            ap.error(
                f"argument DIR: {where}: runs[{i}] is not a run entry (name and arm strings, pair an integer in "
                f"0..{MAX_SEEDS - 1}, flags a list of strings): {term_text(json.dumps(r)[:120])}"
            )
        specs.append(RunSpec(name=r["name"], flags=list(r["flags"]), arm=r["arm"], pair=r["pair"]))
    names = [s.name for s in specs]
    twice = next((n for n in names if names.count(n) > 1), None)
    if twice is not None:
        ap.error(f"argument DIR: {where} lists run {term_text(twice, 80)!r} more than once")
    return specs


def committed_specs(ap: argparse.ArgumentParser, src: Path, summary: dict) -> tuple[str, list, dict]:
    """(preset, run specs, provenance) of the committed suite: from suite.json's flags when DIR holds
    one (whatever it is: a FIFO or a link there is refused, never taken for "no suite.json"), else
    rebuilt from summary.json's provenance (preset, seeds, steps)."""
    prov: dict = summary["provenance"] if isinstance(summary.get("provenance"), dict) else {}
    if os.path.lexists(src / "suite.json"):
        listed = _read_listed(ap, src / "suite.json", "suite.json")
        specs = _listed_specs(ap, src / "suite.json", listed)
        for spec in specs:  # suite.json is untrusted input: what it makes this run
            why = foreign_run_error(spec)
            if why:
                ap.error(f"argument DIR: {term_text(str(src / 'suite.json'), 200)}: {term_text(why)}")
        return term_text(str(listed.get("preset")), 40), specs, prov
    preset = prov.get("preset")
    if not isinstance(preset, str) or preset not in PRESETS:
        ap.error(
            f"argument DIR: {term_text(str(src), 200)} has no suite.json and its summary.json names no known "
            f"preset (got {term_text(str(preset), 40)}; choose from {', '.join(sorted(PRESETS))})"
        )
    seeds, steps = prov.get("seeds"), prov.get("steps")
    if not (type(seeds) is int and type(steps) is int and 1 <= seeds <= MAX_SEEDS and steps >= 1):
        ap.error(
            f"argument DIR: {term_text(str(src), 200)}'s summary.json does not record seeds (1..{MAX_SEEDS}) and "
            f"steps (>= 1): seeds {term_text(str(seeds), 40)}, steps {term_text(str(steps), 40)}"
        )
    return str(preset), expand(preset, seeds, steps), prov


def _chosen_specs(ap: argparse.ArgumentParser, args: argparse.Namespace, specs: list[RunSpec]) -> list[RunSpec]:
    """The committed runs that --seeds and --arms choose (all by default); exit 2 on a pair or arm DIR lacks."""
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
    return specs


def replicate_main(argv: Optional[Sequence[str]] = None) -> int:
    """`prorl-bench replicate` (analysis/replicate.py): re-run a committed suite here, compare the verdicts."""
    ap = replicate_parser()
    args = ap.parse_args(argv)
    src = Path(args.dir)
    if not os.path.lexists(src / "summary.json"):
        ap.error(f"argument DIR: {term_text(args.dir, 200)} has no summary.json (not a suite's report folder)")
    summary = _read_listed(ap, src / "summary.json", "summary.json")
    if not isinstance(summary, dict) or not isinstance(summary.get("comparisons"), list):
        ap.error(f"argument DIR: {term_text(args.dir, 200)}/summary.json lists no comparisons")
    preset, specs, prov = committed_specs(ap, src, summary)
    specs = _chosen_specs(ap, args, specs)
    if args.jobs is not None and args.jobs < 1:
        ap.error(f"argument --jobs: must be >= 1, got {args.jobs}")
    outdir = args.outdir or args.runs or os.path.join("runs", os.path.basename(os.path.abspath(src)) + "-replicate")
    if _inside(outdir, src):
        flag = "--outdir" if args.outdir or not args.runs else "--runs"
        ap.error(f"argument {flag}: must not be DIR or inside it (the committed runs stay as they are)")
    argv_used = list(argv if argv is not None else sys.argv[1:])
    if args.runs is not None:
        return _compare_only(ap, args.runs, specs, summary, src, outdir, argv_used)
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
    try:
        code = _run_suite(ap, ns, specs, executor, argv_used)
    finally:
        executor.close()
    new_path = Path(outdir) / "summary.json"
    if not new_path.is_file():
        print("replicate: no new report (no run finished); nothing compared", file=sys.stderr)
        return code or 1
    _compare(summary, _read_json_file(new_path), src, outdir, argv_used)
    return code


def _inside(path: str, folder: Path) -> bool:
    p, f = os.path.realpath(path), os.path.realpath(folder)
    return p == f or p.startswith(f.rstrip(os.sep) + os.sep)


def _compare(summary: dict, new: dict, src: Path, outdir: str, argv_used: list[str]) -> None:
    """Write replication.md and .json into `outdir` and print the table and the count."""
    from noma_prorl_bench.analysis.replicate import _table, compare_summaries, write_replication  # noqa: PLC0415

    rows = compare_summaries(summary, new)
    write_replication(Path(outdir), rows, summary, new, str(src), argv_used)
    for line in _table(rows, term=True):
        print(line)
    n_same = sum(r["replicates"] for r in rows)
    print(f"replicate: {n_same} of {len(rows)} verdicts replicated; {Path(outdir) / 'replication.md'}", file=sys.stderr)


def _compare_only(ap, runs: str, specs: list[RunSpec], summary: dict, src: Path, outdir: str, argv_used) -> int:
    """--runs: DIR's verdicts against those of the suite in `runs`, trained before; trains nothing.
    Exit 2 when a chosen run is missing or unfinished there or the suite's report is missing."""
    from noma_prorl_bench.suite.scheduling import is_complete  # noqa: PLC0415

    missing = [s.name for s in specs if not is_complete(os.path.join(runs, s.name), s)]
    if missing:
        ap.error(
            f"argument --runs: {term_text(runs, 200)} lacks {len(missing)} of DIR's {len(specs)} runs finished "
            f"(first: {term_text(missing[0], 80)}); finish them with the suite command that made them "
            "(it continues where it stopped), or drop --runs to train them here"
        )
    new_path = Path(runs) / "summary.json"
    if not new_path.is_file():
        ap.error(f"argument --runs: {term_text(runs, 200)} has no summary.json: run `prorl-bench report` on it first")
    try:
        new = _read_json_file(new_path)
    except (OSError, ValueError, RecursionError, UnicodeDecodeError) as e:
        ap.error(f"argument --runs: {term_text(runs, 200)}/summary.json is unreadable ({str(e)[:100]})")
    _compare(summary, new, src, outdir, argv_used)
    return 0
