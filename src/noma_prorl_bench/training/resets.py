"""Reset triggers and reset-aware bookkeeping, fed one step's metrics at a time (no models).

- `ResetTrigger`: decides *when* a reference reset happens and *why*:
    periodic  fires after step k when every > 0 and k % every == 0 (steps count from 1)
    kl_spike  fires after step k when kl > kl_above and k - last_reset >= kl_min_gap
              (last_reset is the step of the last reset of any reason, 0 at the start)
    stall     counts validations whose reward does not beat the best so far by more than
              stall_min_delta; fires when the count reaches stall_patience, then re-arms
              (count back to 0, best kept)
  Several may fire at once: one reset happens, `reason` is the first of
  stall > kl_spike > periodic, `reasons` lists all, `values` merges their trigger values.
- `BestTracker`: best validation reward and a clone of the parameters at that time, for
  `--reset_to best`; `restore` is bit for bit.
- `RecoveryTracker`: after each reset, the number of steps until the train reward is back
  to the pre-reset level (mean train reward over the last `window` steps up to the reset).

Everything has `state_dict()` / `load_state_dict()` (JSON-able scalars, plus tensors for the
best parameters) so a resumed run continues the same trigger sequence.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from noma_prorl_bench.config.specs import ResetSpec
from noma_prorl_bench.models.base import frozen_parameters

REASONS = ("stall", "kl_spike", "periodic")  # priority order when several fire together


@dataclass(frozen=True)
class Decision:
    """A reset decided after step `step`: primary `reason`, all `reasons`, trigger `values`."""

    step: int
    reason: str
    values: dict[str, float | int | None] = field(default_factory=dict)
    reasons: tuple[str, ...] = ()

    def to_event(self) -> dict[str, Any]:
        """The fields of an `events.jsonl` record: {"step", "reason", "reasons", **values}."""
        return {"step": self.step, "reason": self.reason, "reasons": list(self.reasons), **self.values}


class ResetTrigger:
    """Stateful reset trigger; call `check` once per step, after that step's update."""

    def __init__(
        self,
        every: int = 0,
        kl_above: float | None = None,
        kl_min_gap: int = 0,
        stall_patience: int | None = None,
        stall_min_delta: float = 0.0,
    ):
        if every < 0 or kl_min_gap < 0 or (stall_patience is not None and stall_patience < 1):
            raise ValueError("need every >= 0, kl_min_gap >= 0, stall_patience >= 1 or None")
        self.every = int(every)
        self.kl_above = kl_above
        self.kl_min_gap = int(kl_min_gap)
        self.stall_patience = stall_patience
        self.stall_min_delta = float(stall_min_delta)
        self.last_reset = 0  # step of the last reset of any reason (0 = start)
        self.n_resets = 0
        self.best_val: float | None = None
        self.bad_vals = 0  # validations since the last improvement (or re-arm)

    def steps_since_reset(self, step: int) -> int:
        """Steps completed since the last reset (or since the start): the metric `reset/steps_since`."""
        return step - self.last_reset

    def note_reset(self, step: int) -> None:
        """Record a reset at `step` (done by `check`; call it for resets decided elsewhere)."""
        self.last_reset = int(step)
        self.n_resets += 1

    def _stall(self, val_reward: float | None) -> dict[str, float | int | None] | None:
        if val_reward is None or self.stall_patience is None:
            return None
        if self.best_val is None or val_reward > self.best_val + self.stall_min_delta:
            self.best_val, self.bad_vals = float(val_reward), 0
            return None
        self.bad_vals += 1
        if self.bad_vals < self.stall_patience:
            return None
        self.bad_vals = 0  # re-arm
        return {
            "val_reward": float(val_reward),
            "best": self.best_val,
            "patience": self.stall_patience,
            "min_delta": self.stall_min_delta,
        }

    def _kl_spike(self, step: int, kl_value: float | None) -> dict[str, float | int | None] | None:
        if kl_value is None or self.kl_above is None or not kl_value > self.kl_above:
            return None
        if step - self.last_reset < self.kl_min_gap:
            return None
        return {
            "kl": float(kl_value),
            "threshold": float(self.kl_above),
            "min_gap": self.kl_min_gap,
            "steps_since_reset": step - self.last_reset,
        }

    def check(self, step: int, kl_value: float | None = None, val_reward: float | None = None) -> Decision | None:
        """Feed step `step` (1-based) with its KL estimate and, on eval steps, the val reward.

        Returns a Decision when a reset should happen now (and records it), else None.
        """
        fired: dict[str, dict[str, float | int | None]] = {}
        stall = self._stall(val_reward)  # always updated: best/patience see every val
        if stall is not None:
            fired["stall"] = stall
        kl = self._kl_spike(step, kl_value)
        if kl is not None:
            fired["kl_spike"] = kl
        if self.every > 0 and step % self.every == 0:
            fired["periodic"] = {"every": self.every}
        if not fired:
            return None
        reasons = tuple(r for r in REASONS if r in fired)
        values: dict[str, float | int | None] = {}
        for r in reasons:
            values.update(fired[r])
        self.note_reset(step)
        return Decision(step=step, reason=reasons[0], values=values, reasons=reasons)

    def state_dict(self) -> dict[str, Any]:
        return {
            "last_reset": self.last_reset,
            "n_resets": self.n_resets,
            "best_val": self.best_val,
            "bad_vals": self.bad_vals,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.last_reset = int(state["last_reset"])
        self.n_resets = int(state["n_resets"])
        self.best_val = None if state["best_val"] is None else float(state["best_val"])
        self.bad_vals = int(state["bad_vals"])


def trigger_from_spec(spec: ResetSpec) -> ResetTrigger:
    """Build the trigger from a ResetSpec (0 means off for reset_kl_above / reset_on_stall)."""
    return ResetTrigger(
        every=spec.reset_every,
        kl_above=spec.reset_kl_above or None,
        kl_min_gap=spec.reset_kl_min_gap,
        stall_patience=spec.reset_on_stall or None,
        stall_min_delta=spec.stall_min_delta,
    )


# ---------------------------------------------------------------- parameter snapshots


def clone_state_dict(
    module: nn.Module, device: str | torch.device | None = None, share_frozen: bool = False
) -> dict[str, torch.Tensor]:
    """Detached clones of `module.state_dict()` (parameters and buffers), aliasing kept.

    Entries that share storage in the module (tied weights) share one clone, so the result
    can be fed to `torch.func.functional_call` as well as to `load_state_dict`. With
    `share_frozen` (snapshots of a training policy), frozen parameters
    (`models.base.frozen_parameters`: a LoRA policy's base) are not cloned when they stay on
    their device: the entry aliases the module's own tensor, so a snapshot of a LoRA policy
    costs its adapters, not a second base. Off by default: a module frozen as a whole (the
    reference) would otherwise come back as aliases, not a copy.
    """
    frozen = frozen_parameters(module) if share_frozen else {}
    out: dict[str, torch.Tensor] = {}
    seen: dict[tuple[int, int, tuple[int, ...], tuple[int, ...]], torch.Tensor] = {}
    for name, t in module.state_dict().items():
        if name in frozen and (device is None or torch.device(device) == t.device):
            out[name] = frozen[name]
            continue
        key = (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape), tuple(t.stride()))
        if key not in seen:
            seen[key] = t.detach().to(device=device, copy=True)
        out[name] = seen[key]
    return out


def adopt_frozen(params: dict[str, torch.Tensor], frozen: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """`params` (a loaded snapshot) with each entry equal to a frozen tensor of the live policy
    replaced by that tensor (an alias, no second copy held); other entries unchanged."""
    out = dict(params)
    for name, t in frozen.items():
        v = out.get(name)
        if v is not None and v.shape == t.shape and v.dtype == t.dtype and v.device == t.device and torch.equal(v, t):
            out[name] = t
    return out


class BestTracker:
    """Best validation reward so far and a clone of the parameters at that time."""

    def __init__(self, device: str | torch.device | None = None, frozen: dict[str, torch.Tensor] | None = None):
        self.device = device  # where the snapshot lives (e.g. "cpu" to spare GPU memory)
        self.frozen = frozen or {}  # the live policy's frozen parameters: a loaded snapshot aliases them
        self.best: float | None = None
        self.step: int | None = None
        self.params: dict[str, torch.Tensor] | None = None

    def update(self, step: int, val_reward: float, model: nn.Module) -> bool:
        """Snapshot `model` if `val_reward` is strictly the best so far; return whether it was."""
        if self.best is not None and not val_reward > self.best:
            return False
        self.best, self.step = float(val_reward), int(step)
        self.params = clone_state_dict(model, self.device, share_frozen=True)
        return True

    def restore(self, model: nn.Module) -> int:
        """Copy the best parameters into `model` (bit for bit); return the step they are from."""
        if self.params is None or self.step is None:
            raise RuntimeError("BestTracker.restore before any validation was recorded")
        with torch.no_grad():
            model.load_state_dict(self.params)
        return self.step

    def state_dict(self) -> dict[str, Any]:
        return {"best": self.best, "step": self.step, "params": self.params}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.best = None if state["best"] is None else float(state["best"])
        self.step = None if state["step"] is None else int(state["step"])
        params = state["params"]
        self.params = (
            None
            if params is None
            else adopt_frozen({k: v.detach().to(self.device, copy=True) for k, v in params.items()}, self.frozen)
        )


# ---------------------------------------------------------------- recovery after a reset


class RecoveryTracker:
    """Steps from a reset until the train reward is back to its pre-reset level.

    pre_level = mean train reward over the last `window` steps up to and including the reset
    step (fewer if fewer were observed). After the reset at step k, the first step j > k with
    reward >= pre_level reports `steps_to_recover = j - k` once. A new reset before recovery
    closes the pending one with `recovered: False`.
    """

    def __init__(self, window: int = 10):
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        self.window = int(window)
        self.history: deque[float] = deque(maxlen=self.window)
        self.reset_step: int | None = None
        self.pre_level: float | None = None

    def _record(self, recovered: bool, steps: int) -> dict[str, Any]:
        return {
            "reset_step": self.reset_step,
            "pre_level": self.pre_level,
            "recovered": recovered,
            "steps_to_recover": steps if recovered else None,
            "steps_observed": steps,
        }

    def observe(self, step: int, train_reward: float) -> dict[str, Any] | None:
        """Feed one step's mean train reward; returns the recovery record on the step it recovers."""
        self.history.append(float(train_reward))
        if self.reset_step is None or step <= self.reset_step or self.pre_level is None:
            return None
        if train_reward >= self.pre_level:
            rec = self._record(True, step - self.reset_step)
            self.reset_step = self.pre_level = None
            return rec
        return None

    def on_reset(self, step: int) -> dict[str, Any] | None:
        """Mark a reset after step `step` (call after that step's `observe`).

        Returns the record of a still-pending earlier reset (recovered: False), else None.
        """
        pending = None
        if self.reset_step is not None:
            pending = self._record(False, step - self.reset_step)
        if not self.history:
            self.reset_step = self.pre_level = None
            return pending
        self.reset_step = int(step)
        self.pre_level = sum(self.history) / len(self.history)
        return pending

    def state_dict(self) -> dict[str, Any]:
        return {
            "window": self.window,
            "history": list(self.history),
            "reset_step": self.reset_step,
            "pre_level": self.pre_level,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.window = int(state["window"])
        self.history = deque((float(x) for x in state["history"]), maxlen=self.window)
        self.reset_step = None if state["reset_step"] is None else int(state["reset_step"])
        self.pre_level = None if state["pre_level"] is None else float(state["pre_level"])
