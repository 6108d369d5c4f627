"""The suite's matrices: presets, arms, the comparisons the report makes (each in a Holm family)
and the pairs identical by construction that it verifies instead (used by `suite/`)."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from typing import Any, Optional

from noma_prorl_bench.config.choices import GROWTH_MIGRATIONS, OPT_RESETS

#: name -> seeds, steps, base flags, reset/growth cadence, whether its report is evidence, K (a run's
#: score is its mean validation reward over its last K evaluations), and the arm matrix ("arms":
#: a named matrix; default ARMS, minus the prefixes in "drop"). Sizes and times: README, "The main job".
#: the shapes of the regime-map presets (quick, atlas, grid): one setting, so their arms' runs are the same commands
_MAP_BASE = [
    "--batch_size",
    "8",
    "--group_size",
    "8",
    "--lr",
    "2e-3",
    "--eval_every",
    "10",
    "--n_val",
    "128",
    "--kl_estimator",
    "k3",
]
PRESETS: dict[str, dict[str, Any]] = {
    "smoke": dict(
        seeds=1,
        steps=12,
        reset_every=4,
        evidence=False,
        k=5,
        base=[
            "--batch_size",
            "4",
            "--group_size",
            "4",
            "--warmstart_steps",
            "20",
            "--n_val",
            "32",
            "--eval_every",
            "2",
        ],
    ),
    "aa": dict(
        seeds=3,
        steps=12,
        reset_every=4,
        evidence=False,
        k=5,
        arms="aa",
        base=[
            "--batch_size",
            "4",
            "--group_size",
            "4",
            "--warmstart_steps",
            "20",
            "--n_val",
            "32",
            "--eval_every",
            "2",
        ],
    ),
    # the headline question on a loose and a clamping beta (QUICK_ARMS: a subset of the atlas, the same
    # runs): 20 paired seeds x 6 arms x 300 steps; 20 pairs give 90% power at 0.05/4 for the pooled
    # effects of docs/suite_quick/pooled.md (13-14 pairs needed)
    "quick": dict(
        seeds=20,
        steps=300,
        reset_every=50,
        evidence=True,
        k=10,
        arms="quick",
        base=_MAP_BASE,
    ),
    # variants A0/A1/A2/B and the KL term at beta 0.05; resets are mapped by `atlas` and growth has
    # its own preset (the GRU's head-only adapters do not learn)
    "full": dict(
        seeds=10, steps=150, reset_every=50, evidence=True, k=10, base=["--eval_every", "5"], drop=("grow-", "reset-")
    ),
    # the regime map: reference treatment x beta (ATLAS_ARMS), 10 paired seeds, long enough for the
    # beta = 1 fixed reference to clamp (docs/atlas/report.md)
    "atlas": dict(
        seeds=10,
        steps=300,
        reset_every=50,
        evidence=True,
        k=10,
        arms="atlas",
        base=_MAP_BASE,
    ),
    # the reset question across tasks: the atlas's treatments on a finer beta grid (GRID_ARMS), run
    # once per task (`--task reverse_digits`, `--task sort_digits`): where resets stop hurting
    "grid": dict(
        seeds=10,
        steps=300,
        reset_every=50,
        evidence=True,
        k=10,
        arms="grid",
        base=_MAP_BASE,
    ),
    # optimizer state at adapter growth, on a task where the adapter arms learn (GROWTH_ARMS)
    "growth": dict(
        seeds=10,
        steps=100,
        reset_every=25,
        evidence=True,
        k=5,
        arms="growth",
        base=[
            "--model",
            "transformer",
            "--eval_every",
            "10",
            "--n_val",
            "128",
            "--warmstart_steps",
            "40",
            "--warmstart_lr",
            "1e-3",
        ],
    ),
    # step-time cost: A0 / A1 / A2 / B alternating seed by seed with one job, so their timings are
    # interleaved in time (the only timing comparisons a report makes)
    "cost": dict(
        seeds=5,
        steps=100,
        reset_every=50,
        evidence=True,
        k=5,
        arms="cost",
        base=["--eval_every", "10", "--n_val", "64"],
    ),
    # the atlas's reset question on the real model (REAL_RESET_ARMS): SmolLM2-135M-Instruct + LoRA r8,
    # rg:basic_arithmetic, a beta and lr at which the fixed reference clamps (pilot:
    # docs/real_model/resets/pilot/); greedy correctness on 200 held-out prompts before and after
    "real_resets": dict(
        seeds=8,
        steps=16,
        reset_every=4,
        evidence=True,
        k=1,
        arms="real_resets",
        base=["--preset", "smollm2_demo", "--lr", "1e-3", "--beta", "1", "--eval_every", "16", "--n_val", "200"],
    ),
    # moving KL anchors (ANCHOR_ARMS) at a loose and a clamping beta, 20 paired seeds: ten questions
    # in one family need 2/2^n < 0.05/10 (n >= 9) and ~20 pairs for 90% power at the quick suite's
    # effects (docs/suite_quick/pooled.md: 13-14 pairs at 0.05/4)
    "anchors": dict(seeds=20, steps=300, reset_every=50, evidence=True, k=10, arms="anchors", base=_MAP_BASE),
    # PPO with a critic (--adv gae) against GRPO at equal samples (CRITIC_ARMS): the same steps, B x G,
    # epochs and minibatches, the regime of benchmarks/studies/critic_study.py; interleaved (run it with
    # --jobs 1), so the report's timing rows give the critic's CPU cost as a second axis
    "critic": dict(
        seeds=10,
        steps=150,
        reset_every=50,
        evidence=True,
        k=5,
        arms="critic",
        interleaved=True,
        base=["--task", "reverse_digits", "--model", "gru", "--beta", "0.05", "--eval_every", "10"],
    ),
}
#: seed offset of the second A/A arm: its seed s + AA_OFFSET is paired with the first arm's s
AA_OFFSET = 1000
_A1 = ["--variant", "A", "--ref_compute", "cached"]
#: arm name -> flags (all arms of a preset run the same seeds: a paired design). Growth arms last,
#: so an interrupted or late suite has every non-growth arm complete first.
ARMS = {
    "A0": ["--variant", "A", "--ref_compute", "naive_epoch"],
    "A1": _A1,
    "A2": ["--variant", "A", "--ref_compute", "ring"],
    "B": ["--variant", "B"],
    "A1-beta0": [*_A1, "--beta", "0"],
    "A1-aa": _A1,  # A1 on seeds s + AA_OFFSET: the A/A control of every report
    **{f"reset-{m}": [*_A1, "--reset_every", "{reset_every}", "--opt_reset", m] for m in OPT_RESETS},
    **{
        f"grow-{m}": [*_A1, "--enable_growth", "1", "--grow_every", "{reset_every}", "--growth_migration", m]
        for m in ("preserve", "reset", "naive")
    },
}
AA_ARMS = {"AA-1": _A1, "AA-2": _A1}
#: the regime map: beta (k3 in the loss) x reference treatment at one reset cadence. `none` never
#: resets; the others reset every {reset_every} steps and differ only in what happens to Adam there:
#: keep (moments and step kept), hard (moments, step and schedule cleared), soft (m, v *= 0.2),
#: asym (m *= 0.2, v kept), step (moments kept, Adam's step count t <- 0: Adam-Rel, arXiv 2412.17113)
ATLAS_BETAS = ("0.01", "0.05", "0.2", "1")
ATLAS_TREATMENTS = {
    "none": [],
    "keep": ["--reset_every", "{reset_every}", "--opt_reset", "keep"],
    "hard": ["--reset_every", "{reset_every}", "--opt_reset", "hard"],
    "soft": ["--reset_every", "{reset_every}", "--opt_reset", "soft"],
    "asym": ["--reset_every", "{reset_every}", "--opt_reset", "asym"],
    "step": ["--reset_every", "{reset_every}", "--opt_reset", "keep", "--reset_opt_step", "1"],
}
ATLAS_ARMS = {f"b{b}-{t}": [*_A1, "--beta", b, *flags] for b in ATLAS_BETAS for t, flags in ATLAS_TREATMENTS.items()}
#: the cross-task grid: the same arms (an arm of both has the same name and flags) on betas that
#: bracket the atlas's change of sign between 0.2 and 1, and one above 1
GRID_BETAS = ("0.1", "0.2", "0.5", "1", "2")
GRID_ARMS = {f"b{b}-{t}": [*_A1, "--beta", b, *flags] for b in GRID_BETAS for t, flags in ATLAS_TREATMENTS.items()}
#: the real-model arms: the atlas's reference treatments, no reset vs reset every {reset_every} steps
#: with Adam's state kept or rebuilt (the other flags come from the preset's base)
REAL_RESET_ARMS = {f"real-{t}": [*_A1, *ATLAS_TREATMENTS[t]] for t in ("none", "keep", "hard")}
#: the moving anchors on a loose and a clamping beta: no reset (the fixed reference), a reset with
#: Adam's moments kept every {reset_every} steps (ProRL v2), the moving reference (EMA-PG's tau 0.95
#: every 10 steps, the flags' defaults) and Elastic Reset every {reset_every} steps. Elastic's decay is
#: scaled from the paper's (0.995 at reset_freq 260: the EMA holds 0.995^260 = 0.27 of the initial
#: weights at a reset) to this cadence: 0.975^50 = 0.28. `fixed` and `reset` have the atlas's
#: b{beta}-none / b{beta}-keep flags, so those runs can be copied in (the suite skips complete runs)
ANCHOR_BETAS = ("0.05", "1")
ANCHOR_TREATMENTS = {
    "fixed": ATLAS_TREATMENTS["none"],
    "reset": ATLAS_TREATMENTS["keep"],
    "ema": ["--ref_update", "ema"],
    "elastic": ["--reset_every", "{reset_every}", "--reset_to", "elastic", "--elastic_decay", "0.975"],
}
ANCHOR_ARMS = {
    f"anchor-b{b}-{t}": [*_A1, "--beta", b, *flags] for b in ANCHOR_BETAS for t, flags in ANCHOR_TREATMENTS.items()
}
#: the critic arms: GRPO's group baseline or a critic with GAE, nothing else differs
CRITIC_ARMS = {"critic-grpo": [*_A1, "--adv", "grpo"], "critic-gae": [*_A1, "--adv", "gae"]}
QUICK_ARMS = {a: ATLAS_ARMS[a] for a in ("b0.05-none", "b0.05-keep", "b0.05-hard", "b1-none", "b1-keep", "b1-hard")}
COST_ARMS = {a: ARMS[a] for a in ("A0", "A1", "A2", "B")}
#: growth on the transformer policy with LoRA adapters on every attention and MLP projection (the
#: trunk, not only the output head), frozen base, rank 2 -> 8 in steps of 2; settings from a pilot
#: (adapters lr 3e-3, full fine-tune the default 1e-3; a 40-step warm start at lr 1e-3 leaves val
#: ~0.1-0.6, where the default 100 steps solved the task on 8 of 10 seeds before RL began).
#: full-rank trains every weight (no adapters); fixed-r2 keeps rank 2 (is the rank the bottleneck?)
_ADAPT = [*_A1, "--enable_growth", "1", "--adapter_targets", "*proj,up,down", "--initial_rank", "2", "--lr", "3e-3"]
GROWTH_ARMS = {
    "full-rank": _A1,
    "fixed-r2": [*_ADAPT, "--max_rank", "2", "--grow_every", "{reset_every}"],
    **{
        f"grow-{m}": [
            *_ADAPT,
            "--rank_step",
            "2",
            "--max_rank",
            "8",
            "--grow_every",
            "{reset_every}",
            "--growth_migration",
            m,
        ]
        for m in GROWTH_MIGRATIONS
    },
}
#: comparisons the report makes (name, arm, baseline arm): arm - baseline, paired by seed
COMPARISONS = [
    ("B vs A1", "B", "A1"),
    ("A1-beta0 vs A1", "A1-beta0", "A1"),
    ("B vs A1-beta0", "B", "A1-beta0"),
    ("A/A: A1-aa vs A1", "A1-aa", "A1"),
    ("reset-keep vs A1", "reset-keep", "A1"),
    ("reset-hard vs reset-keep", "reset-hard", "reset-keep"),
    ("reset-soft vs reset-keep", "reset-soft", "reset-keep"),
    ("reset-asym vs reset-keep", "reset-asym", "reset-keep"),
    ("grow-preserve vs grow-reset", "grow-preserve", "grow-reset"),
    ("AA-2 vs AA-1", "AA-2", "AA-1"),
    ("grow-noma_flat vs grow-preserve", "grow-noma_flat", "grow-preserve"),
    ("grow-preserve vs fixed-r2", "grow-preserve", "fixed-r2"),
]
#: per beta: does a reset (moments kept) beat no reset, and does each optimizer treatment beat keep
ATLAS_COMPARISONS = [
    c
    for b in sorted(set(ATLAS_BETAS + GRID_BETAS), key=float)
    for c in [(f"beta {b}: reset-keep vs no reset", f"b{b}-keep", f"b{b}-none")]
    + [
        (f"beta {b}: reset-{t} vs reset-keep", f"b{b}-{t}", f"b{b}-keep")
        for t in ATLAS_TREATMENTS
        if t not in ("none", "keep")
    ]
]
REAL_RESET_COMPARISONS = [
    ("real: reset-keep vs no reset", "real-keep", "real-none"),
    ("real: reset-hard vs reset-keep", "real-hard", "real-keep"),
]
#: per beta, every anchor against the fixed reference and the two moving ones against the reset: ten
#: questions, one Holm family per task (the suite runs one task)
ANCHOR_COMPARISONS = [
    c
    for b in ANCHOR_BETAS
    for c in [
        *[
            (f"anchors: beta {b}: {a} vs fixed", f"anchor-b{b}-{a}", f"anchor-b{b}-fixed")
            for a in ("reset", "ema", "elastic")
        ],
        *[(f"anchors: beta {b}: {a} vs reset", f"anchor-b{b}-{a}", f"anchor-b{b}-reset") for a in ("ema", "elastic")],
    ]
]
CRITIC_COMPARISONS = [("critic: gae vs grpo", "critic-gae", "critic-grpo")]
#: comparison name -> Holm family. A family is the set of questions one reader asks together: the
#: suite's outcome questions form one family; the atlas has one family per beta (a user trains at
#: one beta and asks "should I reset, and what should Adam do?" there)
FAMILIES = {
    **{c[0]: "outcome" for c in COMPARISONS + REAL_RESET_COMPARISONS},
    **{c[0]: c[0].split(":")[0] for c in ATLAS_COMPARISONS + ANCHOR_COMPARISONS + CRITIC_COMPARISONS},
}
#: pairs identical by construction (same rewards per step, not a question): the report verifies that
#: their non-timing metrics agree step by step instead of testing them. A0 and A2 compute the same
#: logp_ref as A1 (only the cost differs); naive and reset growth differ only in the optimizer
#: object, which holds no state in either (identical under a constant learning rate)
CHECKS = [("A0 = A1", "A0", "A1"), ("A2 = A1", "A2", "A1"), ("grow-naive = grow-reset", "grow-naive", "grow-reset")]


@dataclass
class RunSpec:
    """One run of the matrix: its directory name and flags; `arm` and `pair` (the paired seed
    index: runs of different arms with the same pair are compared with each other)."""

    name: str
    flags: list = field(default_factory=list)
    arm: str = ""
    pair: int = 0

    def command(self, outdir: str, mode: str = "--overwrite") -> list[str]:
        """The run's command line; `mode` "--resume" continues an interrupted run."""
        return [
            sys.executable,
            "-m",
            "noma_prorl_bench.run",
            "--outdir",
            os.path.join(outdir, self.name),
            "--quiet",
            mode,
            "--threads",
            "1",
            *self.flags,
        ]


def preset_arms(preset: str) -> dict[str, list[str]]:
    """Arm name -> flags of a preset."""
    if PRESETS[preset].get("arms") == "aa":
        return dict(AA_ARMS)
    named = {
        "atlas": ATLAS_ARMS,
        "grid": GRID_ARMS,
        "quick": QUICK_ARMS,
        "cost": COST_ARMS,
        "growth": GROWTH_ARMS,
        "real_resets": REAL_RESET_ARMS,
        "anchors": ANCHOR_ARMS,
        "critic": CRITIC_ARMS,
    }
    if PRESETS[preset].get("arms") in named:
        return dict(named[PRESETS[preset]["arms"]])
    drop = PRESETS[preset].get("drop", ())
    return {a: f for a, f in ARMS.items() if not a.startswith(tuple(drop))}


def expand(
    preset: str, seeds: Optional[int] = None, steps: Optional[int] = None, arms: Optional[list[str]] = None
) -> list[RunSpec]:
    """The runs of a suite preset: every arm on the same seeds 0..seeds-1 (`seeds`, `steps`
    override the preset; the reset/growth cadence scales with `steps` so the number of resets
    stays the same). Order: seed-major over non-growth arms, then the growth arms."""
    p = PRESETS[preset]
    n_seeds, n_steps = seeds or p["seeds"], steps or p["steps"]
    cadence = max(1, round(p["reset_every"] * n_steps / p["steps"]))
    base = ["--steps", str(n_steps), *p["base"]]
    chosen = {a: f for a, f in preset_arms(preset).items() if arms is None or a in arms}
    groups = [[a for a in chosen if not a.startswith("grow-")], [a for a in chosen if a.startswith("grow-")]]
    runs = []
    for group in groups:
        for s in range(n_seeds):
            for arm in group:
                seed = s + AA_OFFSET if arm in ("AA-2", "A1-aa") else s
                flags = [f.replace("{reset_every}", str(cadence)) for f in chosen[arm]]
                runs.append(RunSpec(f"{arm}_s{seed}", [*base, *flags, "--seed", str(seed)], arm, s))
    return runs


def comparisons_for(arms: list[str]) -> list[tuple[str, str, str]]:
    """The COMPARISONS (ATLAS_, REAL_RESET_, ANCHOR_, CRITIC_COMPARISONS) whose two arms are both in `arms`."""
    every = COMPARISONS + ATLAS_COMPARISONS + REAL_RESET_COMPARISONS + ANCHOR_COMPARISONS + CRITIC_COMPARISONS
    return [c for c in every if c[1] in arms and c[2] in arms]


def checks_for(arms: list[str]) -> list[tuple[str, str, str]]:
    """The CHECKS (identical-by-construction pairs) whose two arms are both in `arms`."""
    return [c for c in CHECKS if c[1] in arms and c[2] in arms]
