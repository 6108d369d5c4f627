"""The RL optimizer (`OptimizerSpec`): Adam/AdamW, its LR schedule over the run's optimizer steps,
the update loop's shape (epochs, minibatches, micro-batches) and its NaN guard."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from noma_prorl_bench.config.choices import LRSchedule
from noma_prorl_bench.config.errors import ConfigError
from noma_prorl_bench.config.specs.base import Spec, copy_of, flag
from noma_prorl_bench.config.specs.run import RunLevelSpec

#: the largest --lr: far beyond any useful step size (1e-6..1e-2), still one that the tests use to blow the
#: weights up on purpose (non-finite logits); a larger one only makes Adam's update overflow float32
LR_MAX = 1e6


@dataclass(frozen=True)
class OptimizerSpec(Spec):
    """The RL optimizer, its LR schedule (optim_state.run_scheduler reads lr_schedule, warmup_steps
    and the horizon steps x ppo_epochs x minibatches) and the update loop's shape and guards."""

    SECTION: ClassVar[str] = "optimisation"

    micro_batch: int = flag(0, section="task and model")
    """Rows (sequences) per forward/backward inside a minibatch; the gradients of the micro-batches are accumulated into one optimizer step equal to the whole minibatch's (gradient accumulation). 0: the whole minibatch at once."""
    lr: float = 1e-3
    """Learning rate of the RL optimizer."""
    optimizer: Literal["adam", "adamw"] = "adam"
    """torch.optim.Adam or AdamW."""
    weight_decay: float = 0.0
    """Weight decay (AdamW)."""
    max_grad_norm: float = 1.0
    """Gradient clipping by global norm (0 disables)."""
    lr_schedule: LRSchedule = "constant"
    """Learning-rate schedule (after warmup)."""
    warmup_steps: int = 0
    """Linear LR warmup, in optimizer steps."""
    ppo_epochs: int = 2
    """PPO epochs over each rollout batch (E)."""
    minibatches: int = 2
    """Minibatches per epoch (M); each is one optimizer step. Minibatches are contiguous slices of the batch, visited in a shuffled order each epoch."""
    on_nan: Literal["skip", "stop"] = flag("skip", section="reliability")
    """On NaN/Inf in loss, gradients, logprobs or KL the update is not applied; then skip: go on with the next minibatch, stop: end the run (exit code 3)."""
    steps: int = copy_of(RunLevelSpec, "steps")

    @property
    def horizon(self) -> int:
        """Optimizer steps in the run: steps x ppo_epochs x minibatches."""
        return self.steps * self.ppo_epochs * self.minibatches

    def check(self) -> None:
        self.positive("ppo_epochs", "minibatches")
        self.nonneg("micro_batch", "warmup_steps", "weight_decay", "max_grad_norm")
        if not 0 < self.lr <= LR_MAX:
            raise ConfigError("lr", f"must be in (0, {LR_MAX:g}], got {self.lr:g}")
        if self.warmup_steps > self.horizon:
            raise ConfigError(
                "warmup_steps",
                f"counts optimizer steps and must be <= the run's {self.horizon} (--steps x "
                f"--ppo_epochs x --minibatches; a longer warmup never reaches --lr), "
                f"got {self.warmup_steps}",
            )
