"""The `prorl-bench plot` and `prorl-bench report` entry points, light on purpose: their argument
parsers live here, and numpy, scipy and matplotlib (analysis/plots.py, analysis/report.py) are
imported only after the command line has parsed, so `--help` and argument errors answer at once
(tests/smoke/test_cli_speed.py asserts that none of them is imported).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Sequence


def plot_parser(prog: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=(
        "Plot saved runs: writes OUT (summary: reward, validation reward, KL, throughput) "
        "and ref_cost.png in the same folder (reference forwards/time, stage times)."))
    parser.add_argument("--runs", nargs="+", required=True, metavar="DIR", help="run directories")
    parser.add_argument("--out", required=True, metavar="PATH.png", help="summary figure path")
    parser.add_argument("--by-config", action="store_true",
                        help="one line per configuration (mean over seeds, min-max band)")
    parser.add_argument("--dpi", type=int, default=110)
    return parser


def plot_main(argv: Sequence[str] | None = None, prog: str | None = None) -> int:
    """`--runs DIR... --out PATH.png`: write PATH.png and ref_cost.png beside it. Exit 2 on a
    missing directory or one that is not a run."""
    parser = plot_parser(prog)
    args = parser.parse_args(argv)
    from noma_prorl_bench.analysis.plots import save_summary  # noqa: PLC0415 (after parsing)
    from noma_prorl_bench.analysis.runlog import load_runs  # noqa: PLC0415
    try:
        runs = load_runs(args.runs)
    except (OSError, ValueError) as err:
        parser.error(f"--runs: {err}")
    summary, ref_cost = save_summary(runs, args.out, dpi=args.dpi, by_config=args.by_config)
    print(f"wrote {summary}\nwrote {ref_cost}", file=sys.stdout)
    return 0


def report_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="prorl-bench report", description=(
        "Write report.md (and report.json, figures/) from saved run directories."))
    parser.add_argument("dirs", nargs="+", metavar="DIR",
                        help="a suite folder (searched for run directories) or run directories")
    parser.add_argument("--out", help="report path (default: DIR/report.md for a single DIR)")
    parser.add_argument("--figures", help="figure folder (default: figures/ beside the report)")
    parser.add_argument("--settings", help="JSON settings to print (default: DIR/settings.json "
                                           "when it exists)")
    parser.add_argument("--threshold", type=float, help="reward threshold (default: 0.8 x best "
                                                        "mean final val reward)")
    return parser


def _read_json(parser: argparse.ArgumentParser, path: Path, flag: str):
    try:
        return json.loads(path.read_text()) if path.is_file() else None
    except json.JSONDecodeError as err:
        parser.error(f"{flag}: {path}: {err}")


def report_main(argv: Sequence[str] | None = None) -> int:
    """`prorl-bench report DIR...`: regenerate report.md from saved logs only."""
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
    out = Path(args.out or Path(args.dirs[0]) / "report.md")
    settings_file = Path(args.settings) if args.settings else Path(args.dirs[0]) / "settings.json"
    settings = _read_json(parser, settings_file, "--settings") or {}
    if args.threshold is not None:
        settings["reward_threshold"] = args.threshold
    suite = _read_json(parser, Path(args.dirs[0]) / "suite.json", "DIR")
    from noma_prorl_bench.analysis.report import write_report  # noqa: PLC0415 (after parsing)
    try:
        path = write_report(run_dirs, out, args.figures or out.parent / "figures", settings, suite)
    except (OSError, ValueError) as err:
        parser.error(str(err))
    print(f"wrote {path}")
    return 0
