"""The run as a whole (`RunLevelSpec`: outputs, seed, length, threads, reports) and its checkpoints
(`CheckpointSpec`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from noma_prorl_bench.config.choices import REPORT_TO
from noma_prorl_bench.config.errors import ConfigError, suggest
from noma_prorl_bench.config.specs.base import Spec, flag

# Fields that may differ between a run and its `--resume` (checkpoint.resume_config refuses any
# other change). None of them changes what the next step computes, except `steps` (a longer run:
# the cosine-schedule horizon follows it) and `threads` (float reductions may round differently).
RESUME_SAFE_FIELDS: tuple[str, ...] = (
    "outdir",
    "overwrite",
    "resume",
    "quiet",
    "report_to",
    "steps",
    "threads",
    "plots",
    "save_every",
    "keep_checkpoints",
    "on_nan",
)


@dataclass(frozen=True)
class RunLevelSpec(Spec):
    """Where the run writes, what it reports, its seed, length and threads, and its preset."""

    SECTION: ClassVar[str] = "run and outputs"

    outdir: str = ""
    """Output directory (config.json, metrics.jsonl, events.jsonl, plots/). Required."""
    overwrite: bool = False
    """Allow writing into a non-empty existing --outdir (its run files are replaced)."""
    quiet: bool = False
    """No progress bars on stderr (ours, and third-party ones such as transformers' weight loading)."""
    report_to: str = "none"
    """Also send every metrics.jsonl record, same keys, to: tensorboard (OUTDIR/tb/, view with `tensorboard --logdir OUTDIR/tb`; needs the tensorboard package, pip install -e '.[tensorboard]'), csv (OUTDIR/metrics.csv, one column per key), wandb (Weights & Biases, OUTDIR/wandb/, config = the run's config; offline unless WANDB_MODE says otherwise, project $WANDB_PROJECT or prorl-bench; needs pip install -e '.[wandb]'), a comma list of them (csv,wandb), or none. metrics.jsonl is always written; on --resume each is rebuilt from it."""
    seed: int = 0
    """Seed for model init, prompt sampling and rollout sampling (runs are bit-reproducible)."""
    steps: int = 400
    """Number of RL steps (one step = sample, score, reference, ppo_epochs x minibatches updates)."""
    threads: int = 1
    """torch intra-op threads for this process (1 is fastest for the toy models and is deterministic)."""
    plots: int = 0
    """1: write per-run plots under OUTDIR/plots/ at the end of the run."""
    preset: Literal["none", "prorl_v1", "prorl_v2", "trl_sync", "noma_soft", "smollm2_demo"] = flag(
        "none", section="resets"
    )
    """Preset, applied first; explicit flags override what it sets. Reset-semantics presets (docs/resets.md, "Presets") and smollm2_demo, the real-model demo (docs/real_model.md: SmolLM2-135M-Instruct, dequantised Q4_1, after prorl-bench get-model smollm2-135m-instruct; LoRA on q,k,v,o; rg:basic_arithmetic). Each sets:"""

    def check(self) -> None:
        self.positive("steps", "threads")
        self._check_report_to()
        self.binary("plots")
        self.nonneg("seed")

    def _check_report_to(self) -> None:
        """--report_to: none, or a comma list of tensorboard, csv, wandb (each once)."""
        items = [t.strip() for t in self.report_to.split(",")]
        for t in items:
            if t not in REPORT_TO:
                raise ConfigError(
                    "report_to",
                    f"invalid choice: {t!r}{suggest(t, REPORT_TO)} (choose from "
                    f"{', '.join(REPORT_TO)}, or a comma list such as csv,wandb)",
                )
        if len(items) > 1 and "none" in items or len(set(items)) < len(items):
            raise ConfigError("report_to", f"none stands alone and each name comes once, got {self.report_to!r}")


@dataclass(frozen=True)
class CheckpointSpec(Spec):
    """Checkpoints: how often, how many kept, and whether this command resumes one."""

    SECTION: ClassVar[str] = "reliability"

    save_every: int = 0
    """Checkpoint every N steps under OUTDIR/checkpoints/ (and at the end, and on SIGINT/SIGTERM/SIGHUP/SIGUSR1 with --engine local); 0: only at the end."""
    keep_checkpoints: int = 2
    """Keep the last N checkpoints."""
    resume: bool = False
    """Continue the run in --outdir from its last complete checkpoint (its config; flags given now may only change the fields in RESUME_SAFE_FIELDS, see docs/reliability.md)."""

    def check(self) -> None:
        self.nonneg("save_every")
        if self.keep_checkpoints < 1:
            raise ConfigError(
                "keep_checkpoints", f"must be >= 1 (the newest checkpoint is always kept), got {self.keep_checkpoints}"
            )
