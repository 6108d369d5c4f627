"""`prorl-bench pool DIR [DIR ...] --out OUT`: the answers of several run sets of the same commands
(one per machine) pooled with the machine as a stratum, written as OUT/pooled.json and
OUT/pooled.md (analysis/pool_report.py). Light on purpose: numpy and scipy load only after the
command line has parsed. Bad input (a missing folder, one that is no suite or report folder, sets
asking other questions): one line, exit 2, nothing written.
"""

from __future__ import annotations

import argparse
from typing import Sequence

from noma_prorl_bench.analysis.untrusted import term_text


def pool_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="prorl-bench pool",
        description=(
            "Pool the paired answers of several run sets of the same commands (one per machine): per "
            "question the per-machine effects, the pooled effect [95% CI], the stratified sign-flip p, "
            "Holm over every question of the study, the verdict and its margin in seeds, the between-"
            "machine heterogeneity p and the effect detectable with 90% power."
        ),
    )
    parser.add_argument(
        "dirs",
        nargs="+",
        metavar="DIR",
        help="suite folders (suite.json and runs) or report folders (summary.json and report.md)",
    )
    parser.add_argument("--out", required=True, metavar="OUT", help="folder for pooled.json and pooled.md")
    parser.add_argument(
        "--effect",
        type=float,
        metavar="E",
        help="effect (reward) the pairs for 90%% power are sized for (default: each question's |pooled diff|)",
    )
    return parser


def pool_main(argv: Sequence[str] | None = None) -> int:
    """Read, pool, write; exit 2 on bad input (module docstring)."""
    parser = pool_parser()
    args = parser.parse_args(argv)
    if args.effect is not None and not args.effect > 0:
        parser.error(f"argument --effect: must be > 0, got {args.effect}")
    from pathlib import Path  # noqa: PLC0415

    for d in args.dirs:
        if not Path(d).is_dir():
            parser.error(f"argument DIR: {term_text(d, 200)}: no such directory")
    from noma_prorl_bench.analysis.pool_report import analyse, write_pool  # noqa: PLC0415 (after parsing)
    from noma_prorl_bench.analysis.pool_sets import check_same_commands, read_set  # noqa: PLC0415
    from noma_prorl_bench.io.safe_files import RunDirRefused  # noqa: PLC0415

    try:
        sets = [read_set(d) for d in args.dirs]
        check_same_commands(sets)
        data = analyse(sets, args.effect)
    except (OSError, ValueError, KeyError, TypeError) as err:
        parser.error(f"argument DIR: {term_text(' '.join(str(err).split()), 300)}")
    command = "prorl-bench pool " + " ".join(args.dirs) + f" --out {args.out}"
    command += f" --effect {args.effect:g}" if args.effect is not None else ""
    try:
        paths = write_pool(args.out, data, command)
    except (OSError, RunDirRefused) as err:
        parser.error(f"argument --out: cannot write {term_text(args.out, 200)}: {term_text(str(err), 200)}")
    print("\n".join(f"wrote {p}" for p in paths))
    return 0
