"""`prorl-bench suite`: run an ablation matrix in parallel and write report.md (the main job).

    prorl-bench suite --preset quick --outdir runs/suite_quick     # ~30 min on 2 idle cores: the headline
    prorl-bench suite --preset smoke --outdir /tmp/suite           # ~1 min: the pipeline (tests)
    prorl-bench suite --preset atlas --outdir runs/atlas           # the regime map (240 runs, ~1 h)
    prorl-bench suite --preset grid --task sort_digits --outdir runs/grid_sort   # one task's beta grid (300 runs)
    prorl-bench suite --preset full --outdir runs/suite_full       # variants A0/A1/A2/B and resets, 10 seeds
    prorl-bench suite --preset growth --outdir runs/growth         # optimizer state at adapter growth
    prorl-bench suite --preset cost --outdir runs/cost --jobs 1    # step-time cost, arms interleaved
    prorl-bench suite --preset critic --outdir runs/critic --jobs 1   # GRPO vs a critic (gae), equal samples
    prorl-bench suite --preset aa --outdir /tmp/aa                 # A/A test of the statistics
    prorl-bench suite --preset full --seeds 12 --steps 300 --arms A1,B,A1-beta0 --outdir DIR
    prorl-bench suite --preset quick --executor ray --ray_address HEAD:6379 --outdir /shared/suite

Matrices: ARMS (variants A0 / A1 / A2 / B, A1 with beta = 0, A1 on seeds + 1000 as the A/A
control, reset semantics keep / hard / soft / asym at a fixed cadence; `full`, `smoke`);
ATLAS_ARMS (beta x reference treatment; `atlas`, and its headline subset `quick`); GROWTH_ARMS
(`growth`); COST_ARMS (`cost`); CRITIC_ARMS (`critic`: --adv grpo vs gae, interleaved, with timing
rows). Every arm runs the same seeds (a paired design); `--seeds N` /
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

# the suite's names, importable from `noma_prorl_bench.suite` as before it was split
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
from noma_prorl_bench.suite.command import main  # noqa: F401
from noma_prorl_bench.suite.planning import task_flags  # noqa: F401
from noma_prorl_bench.suite.replicate import replicate_main  # noqa: F401
from noma_prorl_bench.suite.scheduling import expected_duration, is_complete, local_env, run_all  # noqa: F401
