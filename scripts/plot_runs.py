"""Plot saved runs into summary.png and ref_cost.png (reads only the runs' saved logs).

Run from the repository root (no install needed):

    python scripts/plot_runs.py --runs runs/A0 runs/A1 runs/keep runs/soft --out runs/summary.png

writes runs/summary.png (train reward, validation reward, KL, throughput against step, one line
per run, resets dotted and growth dashed) and runs/ref_cost.png next to it (reference forwards
and reference time per step, stacked mean stage times per run). A missing directory or one that
is not a run exits with status 2. Same as `prorl-bench plot`.
"""

from __future__ import annotations

import sys
from pathlib import Path

try:
    from noma_prorl_bench.analysis.commands import plot_main
except ImportError:  # not installed: use the checkout's src/
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from noma_prorl_bench.analysis.commands import plot_main

if __name__ == "__main__":
    sys.exit(plot_main(prog="plot_runs.py"))
