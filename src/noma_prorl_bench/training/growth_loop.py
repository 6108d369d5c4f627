"""Topology growth inside a run: LoRA adapters on the policy, grown at chosen moments.

The Trainer holds one `GrowthManager` as `trainer.growth` (a no-op unless `--enable_growth 1`).
It never sees the Trainer: it gets the policy, the reference holder, the shared
`optim_state.OptimSide`, the holders of parameter snapshots (reset and drift managers) and an
`emit(record)` callback for events.jsonl.

Set-up (`attach_adapters(spec, policy, emit)`, called after the warm start and *before* the reference
copy and the optimizer are built): wrap the `nn.Linear`s named by `--adapter_targets` in
`models.lora.LoRALinear` at `--initial_rank` with scale `--lora_alpha / --initial_rank` (fixed
for the run). The base model is frozen; only the adapters train (PEFT's convention), so the
adapter rank is the policy's whole RL capacity and growing it matters. Variant A's reference
is a copy of this adapted policy sharing its frozen base, so reference resets copy adapters.

Each step, after the update, the evaluation and the reset bookkeeping, `after_step(step, sig)`
(`sig`: the step's `io.metrics.StepSignals`):
  1. returns `adapter/rank` (the rank the step's update used, i.e. before any growth below);
  2. decides whether to grow (`--grow_on`):
       schedule  step % grow_every == 0
       reset     a reference reset happened at this step (any trigger; the reset runs first,
                 so the reference copies the policy at the old rank, then both are grown)
       stall     `--grow_patience` validations in a row without beating the best
                 validation reward by more than `--stall_min_delta` (then re-armed)
     never past `--max_rank`, and never on the last step (`--steps`): a growth due there is kept
     as `pending` (checkpointed) and done by a resume that extends `--steps` (`grow_pending`),
     so the extended run equals an uninterrupted longer one;
  3. grows by `--rank_step` (capped at `--max_rank`), in this order:
       policy     `growth.grow_adapters(policy, optimizer, new_rank, --growth_migration)`; the
                  optimizer it returns replaces `optim.optimizer` (a new object under `naive`,
                  in which case `optim.scheduler` is rebuilt for it with the same step count)
       reference  grown with `preserve` semantics and no optimizer: same new A rows as the
                  policy (same seeds), zero B columns, so pi_ref is unchanged as a function
       snapshots  the best checkpoint (`--reset_to best`), the initial and previous policies
                  of the drift monitors: lora_A gets the policy's new rows, lora_B zero columns
                  (`migrate_snapshot`), so each is the same function as before and restoring
                  the best checkpoint leaves the new capacity trainable
     and writes a `growth` event {step, event, reason, old_rank, new_rank, migration,
     stale_state_problems} (`growth.check_no_stale_state` of the policy and the optimizer;
     `[]` when clean).

Checkpoints: `state_dict()` / `load_state_dict()`. On resume call `load_state_dict` *first*: it
grows the policy and the reference to the saved rank (and re-arms the growth seeds), after
which the policy, reference and optimizer state dicts fit; then rebuild or load the
optimizer and scheduler as usual. This is the only place that resizes adapters on resume
(the Trainer lists `growth` first among its checkpoint components).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence, cast

import torch
from torch import nn
from torch.optim import Optimizer

from noma_prorl_bench.config.specs import GrowthSpec, OptimizerSpec
from noma_prorl_bench.io.metrics import StepSignals
from noma_prorl_bench.models.lora import (  # parse_targets re-exported
    adapter_parameters,
    adapter_rank,
    adapters,
    attach_lora,
    parse_targets,
)
from noma_prorl_bench.rollout.reference_source import ReferenceSource
from noma_prorl_bench.training.growth import (
    MODES,
    check_no_stale_state,
    grow_adapters,
    grow_block,
)
from noma_prorl_bench.training.optim_state import OptimSide, run_scheduler
from noma_prorl_bench.training.resets import ResetTrigger


@torch.no_grad()
def migrate_snapshot(params: dict[str, torch.Tensor] | None, model: torch.nn.Module) -> int:
    """Grow a state-dict snapshot of `model` (in place) to the model's current adapter shapes.

    Entries whose shape differs from the model's: the old block is kept; outside it `lora_A`
    takes the model's current values (the freshly drawn rows) and everything else (`lora_B`)
    zeros. With zero new B columns the snapshot computes the same function as before.
    Returns how many entries were grown.
    """
    if params is None:
        return 0
    current = model.state_dict()
    n = 0
    for name, old in list(params.items()):
        new = current.get(name)
        if new is None or new.shape == old.shape:
            continue
        fill = (
            new.detach().to(old.device, old.dtype, copy=True)
            if name.endswith("lora_A")
            else torch.zeros(new.shape, dtype=old.dtype, device=old.device)
        )
        params[name] = grow_block(old, new.shape, fill)
        n += 1
    return n


def rebuild_scheduler(old, optimizer: torch.optim.Optimizer, spec: OptimizerSpec):
    """A scheduler like `old` (the run's `optim_state.run_scheduler`) driving `optimizer`, at the same
    step: `last_epoch`, base LRs and the current LRs carried over, so the LR trajectory is
    the one the old scheduler would have produced."""
    lrs = [g["lr"] for g in optimizer.param_groups]
    new = run_scheduler(optimizer, spec)
    new.load_state_dict(old.state_dict())
    for g, lr in zip(optimizer.param_groups, lrs):
        g["lr"] = lr
    return new


def attach_adapters(spec: GrowthSpec, policy: nn.Module, emit: Callable[[dict], None]) -> list[str]:
    """--enable_growth 1: wrap the --adapter_targets in LoRA adapters at --initial_rank, freeze
    the base, write the `adapters` event; returns the wrapped module names ([] without growth)."""
    if not spec.enable_growth:
        return []
    if spec.growth_migration not in MODES:
        raise ValueError(f"growth_migration must be one of {MODES}")
    targets = attach_lora(
        policy,
        parse_targets(spec.adapter_targets),
        spec.initial_rank,
        alpha=spec.lora_alpha,
        freeze_base=True,
        seed=spec.seed,
    )
    n_train = sum(p.numel() for p in adapter_parameters(policy))
    n_total = sum(p.numel() for p in policy.parameters())
    emit(
        {
            "step": 0,
            "event": "adapters",
            "reason": "LoRA adapters attached after the warm start; base frozen",
            "targets": targets,
            "rank": spec.initial_rank,
            "lora_alpha": spec.lora_alpha,
            "scale": spec.lora_alpha / spec.initial_rank,
            "trainable_params": n_train,
            "total_params": n_total,
        }
    )
    return targets


class GrowthManager:
    """Growth triggers and the growth itself (see the module docstring); adapters are attached
    before it is built (`attach_adapters`)."""

    def __init__(
        self,
        spec: GrowthSpec,
        opt_spec: OptimizerSpec,
        policy: nn.Module,
        ref: ReferenceSource,
        optim: OptimSide,
        emit: Callable[[dict], None],
        resets,
        snapshot_holders: Sequence = (),
    ):
        """`spec`: the growth flags; `opt_spec`: the LR schedule a rebuilt scheduler follows; `ref`: the
        reference holder; `resets`: anything with `n_resets` (`--grow_on reset`); `snapshot_holders`:
        objects whose `snapshots()` lists parameter dicts to migrate."""
        self.spec = spec
        self.opt_spec, self.policy, self.ref, self.optim, self.emit = opt_spec, policy, ref, optim, emit
        self.resets, self.snapshot_holders = resets, tuple(snapshot_holders)
        self.enabled = bool(spec.enable_growth)
        self.n_growths = 0
        self.resets_seen = 0
        self.pending: str | None = None  # growth due on the last step (skipped), see grow_pending
        self.stall = (
            ResetTrigger(stall_patience=spec.grow_patience, stall_min_delta=spec.stall_min_delta)
            if self.enabled and spec.grow_on == "stall"
            else None
        )

    @property
    def rank(self) -> int:
        """The policy's adapter rank (0 without adapters)."""
        return adapter_rank(self.policy) if self.enabled else 0

    # ------------------------------------------------------------ per step
    def after_step(self, step: int, sig: StepSignals) -> dict:
        """Call once per step after the reset bookkeeping; grows if due. Returns
        {"adapter/rank": rank used by this step's update} ({} without growth)."""
        if not self.enabled:
            return {}
        out = {"adapter/rank": self.rank}
        reason = self.due(step, sig)
        if reason is not None and self.rank < self.spec.max_rank:
            if step < self.spec.steps:
                self.grow(step, reason)
            else:  # the last step: remembered for a resume that extends --steps
                self.pending = reason
        return out

    def grow_pending(self, step: int) -> None:
        """On a resume from the last step of a shorter run (--steps extended): the growth that was
        due there, skipped because it was the last step, happens now, as in the longer run."""
        pending, self.pending = self.pending, None
        if pending is not None and step < self.spec.steps and self.rank < self.spec.max_rank:
            self.grow(step, pending)

    def due(self, step: int, sig: StepSignals) -> str | None:
        """The --grow_on reason if growth is due after step `step`, else None (updates the
        reset counter and the stall detector every step, so they stay in sync)."""
        spec = self.spec
        if spec.grow_on == "schedule":
            return "schedule" if step % spec.grow_every == 0 else None
        if spec.grow_on == "reset":
            n = self.resets.n_resets
            fired, self.resets_seen = n > self.resets_seen, n
            return "reset" if fired else None
        stall = cast(ResetTrigger, self.stall)  # built when --grow_on stall
        return "stall" if stall.check(step, None, sig.reward_val) is not None else None

    # ------------------------------------------------------------ the growth
    def grow(self, step: int, reason: str, new_rank: int | None = None) -> dict[str, Any]:
        """Grow policy, optimizer, scheduler, reference and snapshots; write the `growth` event."""
        spec, opt = self.spec, self.optim
        old_rank = self.rank
        new_rank = min(old_rank + spec.rank_step, spec.max_rank) if new_rank is None else new_rank
        old_opt = opt.optimizer
        opt.optimizer = cast(Optimizer, grow_adapters(self.policy, old_opt, new_rank, spec.growth_migration))
        scheduler_rebuilt = opt.optimizer is not old_opt
        if scheduler_rebuilt:
            opt.scheduler = rebuild_scheduler(opt.scheduler, opt.optimizer, self.opt_spec)
        if self.ref.model is not None:  # pi_ref here (not Variant B)
            grow_adapters(self.ref.model, None, new_rank, "preserve")
        migrated = self.migrate_snapshots()
        self.n_growths += 1
        record = {
            "step": step,
            "event": "growth",
            "reason": reason,
            "old_rank": old_rank,
            "new_rank": new_rank,
            "migration": spec.growth_migration,
            "stale_state_problems": check_no_stale_state(self.policy, opt.optimizer),
            "scheduler_rebuilt": scheduler_rebuilt,
            "snapshots_migrated": migrated,
            "n_growths": self.n_growths,
        }
        self.emit(record)
        return record

    def migrate_snapshots(self) -> int:
        """Grow every parameter snapshot the holders keep (see `migrate_snapshot`)."""
        return sum(
            migrate_snapshot(params, self.policy) for holder in self.snapshot_holders for params in holder.snapshots()
        )

    # ------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "n_growths": self.n_growths,
            "resets_seen": self.resets_seen,
            "grow_counts": [m.grow_count for _, m in adapters(self.policy)],
            "stall": None if self.stall is None else self.stall.state_dict(),
            "pending": self.pending,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Grow policy (and its optimizer's state, preserve) and reference to the saved rank,
        then restore counters and growth seeds. Call before loading the model state dicts."""
        if self.enabled and state["rank"] > self.rank:
            self.optim.optimizer = cast(
                Optimizer, grow_adapters(self.policy, self.optim.optimizer, state["rank"], "preserve")
            )
            if self.ref.model is not None:
                grow_adapters(self.ref.model, None, state["rank"], "preserve")
            self.migrate_snapshots()
        for model in [self.policy] + ([self.ref.model] if self.ref.model is not None else []):
            for (_, m), count in zip(adapters(model), state["grow_counts"]):
                m.grow_count = int(count)
        self.n_growths, self.resets_seen = int(state["n_growths"]), int(state["resets_seen"])
        self.pending = state.get("pending")
        if self.stall is not None and state["stall"] is not None:
            self.stall.load_state_dict(state["stall"])
