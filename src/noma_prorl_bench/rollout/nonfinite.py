"""The errors a run stops on when numbers stop being finite: NaN/Inf in an update (raised by
training/guards.py under --on_nan stop) and NaN/Inf logits where tokens are sampled (raised by
rollout/sampling.py whatever --on_nan says). Both stop the run with exit 3 (run.py)."""

from __future__ import annotations

from typing import Optional


class NonFiniteError(RuntimeError):
    """NaN/Inf in an update under --on_nan stop."""

    def __init__(self, step: int, bad: list[str]):
        super().__init__(
            f"non-finite {', '.join(bad)} at step {step} (see the nan_guard event in events.jsonl; "
            "--on_nan skip drops such minibatches and goes on)"
        )
        self.step, self.bad = step, bad

    def __reduce__(self):
        """Pickled with its fields (and any attribute added since), so that it crosses from a Ray
        actor to the driver as itself."""
        return type(self), (self.step, self.bad), dict(self.__dict__)


class NonFiniteLogits(NonFiniteError):
    """The policy's logits are NaN/Inf where tokens are sampled: stops the run (exit 3) whatever
    --on_nan says. `step` is the step being sampled (set by the trainer)."""

    def __init__(self, step: int = -1, rows: int = 0):
        RuntimeError.__init__(self, step, rows)
        self.step, self.bad, self.rows = step, ["logits"], rows

    def __reduce__(self):
        return type(self), (self.step, self.rows), dict(self.__dict__)

    def __str__(self) -> str:
        return (
            f"non-finite logits while sampling step {self.step} ({self.rows} rows): the policy's weights no longer "
            "give a distribution (a --lr too large?); nothing of this step was saved"
        )


def logits_event(e: NonFiniteLogits, last_checkpoint: Optional[str]) -> dict:
    """The events.jsonl record of non-finite logits while sampling step `e.step` (both engines
    write it): a `nan_guard` event, action stop; `last_checkpoint` relative to the run directory."""
    return {
        "step": e.step,
        "event": "nan_guard",
        "reason": "non-finite logits before sampling",
        "action": "stop",
        "step_sampled": e.step,
        "rows": e.rows,
        "last_checkpoint": last_checkpoint,
    }
