"""The `prorl-bench plot`, `prorl-bench report` and `prorl-bench plan` entry points, light on purpose: their argument
parsers live here, and numpy, scipy and matplotlib (analysis/plots.py, analysis/report.py) are
imported only after the command line has parsed, so `--help` and argument errors answer at once
(tests/smoke/test_cli_speed.py asserts that none of them is imported).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Sequence

from noma_prorl_bench.analysis.untrusted import term_text


def plot_parser(prog: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description=(
            "Plot saved runs: writes OUT (summary: reward, validation reward, KL, throughput) "
            "and ref_cost.png in the same folder (reference forwards/time, stage times)."
        ),
    )
    parser.add_argument("--runs", nargs="+", required=True, metavar="DIR", help="run directories")
    parser.add_argument("--out", required=True, metavar="PATH.png", help="summary figure path")
    parser.add_argument(
        "--by-config", action="store_true", help="one line per configuration (mean over seeds, min-max band)"
    )
    parser.add_argument("--dpi", type=int, default=110, help=f"figure resolution ({DPI_RANGE[0]}..{DPI_RANGE[1]})")
    return parser


DPI_RANGE = (10, 1000)
#: the figure formats `plot --out` may name (its extension)
PLOT_FORMATS = ("png", "pdf", "svg")
# what a report or plot may fail with on a directory from elsewhere, reported as one line (exit 2)
INPUT_ERRORS = (OSError, ValueError, RecursionError, OverflowError, TypeError, KeyError)


def plot_main(argv: Sequence[str] | None = None, prog: str | None = None) -> int:
    """`--runs DIR... --out PATH.png`: write PATH.png and ref_cost.png beside it. Exit 2 on a
    missing directory or one that is not a run."""
    parser = plot_parser(prog)
    args = parser.parse_args(argv)
    if not DPI_RANGE[0] <= args.dpi <= DPI_RANGE[1]:
        parser.error(f"argument --dpi: must be in {DPI_RANGE[0]}..{DPI_RANGE[1]}, got {args.dpi}")
    if Path(args.out).suffix.lower().lstrip(".") not in PLOT_FORMATS:
        parser.error(
            f"argument --out: {term_text(args.out, 200)!r} must end in one of "
            f"{', '.join('.' + f for f in PLOT_FORMATS)} (the figure's format)"
        )
    from noma_prorl_bench.analysis.plots import save_summary  # noqa: PLC0415 (after parsing)
    from noma_prorl_bench.analysis.runlog import load_runs  # noqa: PLC0415
    from noma_prorl_bench.io.safe_files import RunDirRefused  # noqa: PLC0415

    try:
        runs = load_runs(args.runs)
    except INPUT_ERRORS as err:
        parser.error(f"argument --runs: {_short(err)}")
    try:
        written = save_summary(runs, args.out, dpi=args.dpi, by_config=args.by_config)
    except (OSError, RunDirRefused) as err:
        why = _short(err).removeprefix("argument --outdir: ").removeprefix("argument --out: ")
        parser.error(f"argument --out: cannot write {args.out!r}: {why}")
    print("\n".join(f"wrote {p}" for p in written), file=sys.stdout)
    return 0


def report_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="prorl-bench report",
        description=("Write report.md (and report.json, figures/) from saved run directories."),
    )
    parser.add_argument(
        "dirs", nargs="+", metavar="DIR", help="a suite folder (searched for run directories) or run directories"
    )
    parser.add_argument(
        "--out",
        help="report path (default: DIR/report.md for a single suite DIR, "
        "DIR/report/report.md for a single run directory, whose own files "
        "such as summary.json are never overwritten)",
    )
    parser.add_argument("--figures", help="figure folder (default: figures/ beside the report)")
    parser.add_argument("--settings", help="JSON settings to print (default: DIR/settings.json when it exists)")
    parser.add_argument("--threshold", type=float, help="reward threshold (default: 0.8 x best mean final val reward)")
    return parser


def _read_json(parser: argparse.ArgumentParser, path: Path, flag: str):
    """The JSON in `path` (None when absent), read as a run file (io/safe_files.py: no link, FIFO or
    device, bounded by size); anything else is one line naming `flag` and the file (exit 2)."""
    from noma_prorl_bench.io.safe_files import RunDirRefused, read_bytes  # noqa: PLC0415

    try:
        return json.loads(read_bytes(str(path)))
    except FileNotFoundError:
        return None
    except (ValueError, RecursionError, OSError, RunDirRefused) as err:
        why = _short(err).removeprefix("argument --outdir: ")
        parser.error(f"argument {flag}: {term_text(str(path), 200)}: {why}")


def own_file_error(where: Path, run_dirs: Sequence[Path], flag: str, shown: str) -> str | None:
    """Why writing a report's files into directory `where` would replace a file of one of `run_dirs`
    (`where` is the run directory itself, whose summary.json and metrics.jsonl are its own, or one of
    its checkpoints/, plots/, tb/, wandb/), else None."""
    from noma_prorl_bench.io.safe_files import RUN_DIRS  # noqa: PLC0415

    at = os.path.realpath(where)
    for d in run_dirs:
        real = os.path.realpath(d)
        rel = os.path.relpath(at, real).split(os.sep)
        if rel == ["."] or rel[0] in RUN_DIRS:
            return (
                f"argument {flag}: {term_text(shown, 200)!r} would write into run directory {term_text(str(d), 200)} "
                "over its own files (a report writes report.md, report.json, summary.json and figures/; the run has "
                f"its own summary.json, metrics.jsonl, ...): write it elsewhere, e.g. "
                f"{term_text(str(Path(d) / 'report' / 'report.md'), 200)} (the default)"
            )
    return None


def _short(err: BaseException) -> str:
    """One line: an exception's message (which may quote a file or directory name from a run),
    flattened, control characters shown as escapes (`untrusted.term_text`) and cut."""
    return term_text(" ".join(str(err).split()) or type(err).__name__, 300)


def report_main(argv: Sequence[str] | None = None) -> int:
    """`prorl-bench report DIR...`: regenerate report.md from saved logs only. Exit 1 when an
    identical-by-construction check failed (the report says where)."""
    parser = report_parser()
    args = parser.parse_args(argv)
    from noma_prorl_bench.analysis.runlog import find_run_dirs  # noqa: PLC0415 (after parsing)

    run_dirs = []
    for d in map(Path, args.dirs):
        found = [d] if (d / "config.json").is_file() else find_run_dirs(d) if d.is_dir() else []
        if not found:
            parser.error(f"DIR: {d} is not a run directory and holds none")
        run_dirs += found
    if args.out is None and len(args.dirs) > 1:
        parser.error("--out is required with several DIR arguments")
    first = Path(args.dirs[0])
    # a run directory's own files (summary.json, ...) are only written with an explicit --out
    out = Path(args.out) if args.out else first / ("report" if (first / "config.json").is_file() else "") / "report.md"
    own = own_file_error(out.parent, run_dirs, "--out", str(out)) or (
        own_file_error(Path(args.figures), run_dirs, "--figures", args.figures) if args.figures else None
    )
    if own:
        parser.error(own)
    settings_file = Path(args.settings) if args.settings else Path(args.dirs[0]) / "settings.json"
    settings = _read_json(parser, settings_file, "--settings") or {}
    if not isinstance(settings, dict):
        parser.error(f"argument --settings: {settings_file}: must hold a JSON object")
    if args.threshold is not None:
        settings["reward_threshold"] = args.threshold
    suite = _read_json(parser, Path(args.dirs[0]) / "suite.json", "DIR")
    if not isinstance(suite, (dict, type(None))):
        parser.error(f"DIR: {Path(args.dirs[0]) / 'suite.json'}: must hold a JSON object")
    from noma_prorl_bench.analysis.report import write_report  # noqa: PLC0415 (after parsing)
    from noma_prorl_bench.io.safe_files import RunDirRefused  # noqa: PLC0415

    try:
        path = write_report(run_dirs, out, args.figures or out.parent / "figures", settings, suite)
    except RunDirRefused as err:
        parser.error(_short(err).replace("--outdir", "--out"))
    except INPUT_ERRORS as err:
        parser.error(f"DIR: cannot make a report from {', '.join(args.dirs)}: {_short(err)}")
    print(f"wrote {path}")
    from noma_prorl_bench.analysis.report import failed_checks  # noqa: PLC0415

    bad = failed_checks(path)
    if bad:
        print(
            f"prorl-bench report: ERROR: identical-by-construction check(s) failed: "
            f"{', '.join(term_text(b, 80) for b in bad)} (see the report's Checks section)",
            file=sys.stderr,
        )
    return 1 if bad else 0


def plan_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="prorl-bench plan",
        description=(
            "Read a pilot suite directory and print, per comparison, the paired seeds needed to "
            "detect an effect with the given power after its Holm family's correction (from the "
            "pilot's SD of the paired differences)."
        ),
    )
    parser.add_argument("dir", metavar="DIR", help="a finished suite folder (suite.json, runs)")
    parser.add_argument(
        "--effect",
        type=float,
        help="effect to detect on the score, in reward "
        "units (default: each comparison's observed |mean difference|; timing "
        "rows always use theirs)",
    )
    parser.add_argument("--power", type=float, default=0.8, help="power (default: 0.8)")
    return parser


def plan_main(argv: Sequence[str] | None = None) -> int:
    """`prorl-bench plan DIR [--effect E] [--power P]`: print the seeds table. Exit 2 on bad
    input (not a suite folder, --effect <= 0, --power outside (0, 1))."""
    parser = plan_parser()
    args = parser.parse_args(argv)
    if args.effect is not None and not args.effect > 0:
        parser.error(f"--effect: must be > 0, got {args.effect}")
    if not 0 < args.power < 1:
        parser.error(f"--power: must be in (0, 1), got {args.power}")
    from noma_prorl_bench.analysis.runlog import find_run_dirs  # noqa: PLC0415 (after parsing)

    root = Path(args.dir)
    dirs = find_run_dirs(root) if root.is_dir() else []
    if not dirs:
        parser.error(f"DIR: {root} holds no run directories")
    suite = _read_json(parser, root / "suite.json", "DIR")
    settings = _read_json(parser, root / "settings.json", "DIR") or {}
    from noma_prorl_bench.analysis.plan import plan_lines, plan_rows  # noqa: PLC0415

    try:
        rows = plan_rows(dirs, suite, settings, args.effect, args.power)
    except (OSError, ValueError) as err:
        parser.error(_short(err))
    if not rows:
        parser.error(f"DIR: {root}: no comparison between complete runs of two arms")
    print("\n".join(plan_lines(rows, args.power)))
    return 0


def map_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="prorl-bench map",
        description=(
            "Read several grid or atlas suites (one per task) and write OUT/map.md, OUT/map.json and "
            "OUT/map.png: per task and beta, reset + keep vs no reset and each optimizer treatment vs "
            "keep, with each suite report's own effect, interval, Holm p and verdict."
        ),
    )
    parser.add_argument(
        "dirs", nargs="+", metavar="DIR", help="suite folders (suite.json with arms b{beta}-{treatment}), one per task"
    )
    parser.add_argument("--outdir", required=True, metavar="OUT", help="folder for map.md, map.json and map.png")
    return parser


def map_main(argv: Sequence[str] | None = None) -> int:
    """`prorl-bench map DIR [DIR ...] --outdir OUT`: the cross-task map (analysis/gridmap.py).
    Exit 2, nothing written, on a missing folder, one without grid arms or without written runs,
    two suites of one task, or an output path that is a link or not a regular file."""
    parser = map_parser()
    args = parser.parse_args(argv)
    for d in map(Path, args.dirs):
        if not d.is_dir():
            parser.error(f"argument DIR: {term_text(str(d), 200)}: no such directory")
    from noma_prorl_bench.analysis.gridmap import write_map  # noqa: PLC0415 (after parsing)
    from noma_prorl_bench.analysis.gridmap_read import read_suites  # noqa: PLC0415
    from noma_prorl_bench.io.safe_files import RunDirRefused  # noqa: PLC0415

    try:
        maps = read_suites(args.dirs)
    except INPUT_ERRORS as err:
        parser.error(f"argument DIR: {_short(err)}")
    try:
        paths = write_map(maps, args.outdir)
    except RunDirRefused as err:
        parser.error(_short(err))
    except OSError as err:
        parser.error(f"argument --outdir: cannot write {term_text(args.outdir, 200)}: {_short(err)}")
    print("\n".join(f"wrote {p}" for p in paths))
    return 0
