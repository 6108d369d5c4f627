"""Optimizer-side reset semantics (S3): moments, step count, LR schedule, KL coefficient.

What a *reset* does to the optimizer is a set of orthogonal switches (docs/resets.md has the
math). For Adam/AdamW with first moment m (`exp_avg`), second moment v (`exp_avg_sq`,
`max_exp_avg_sq` under amsgrad) and step count t (`step`):

  keep   m, v, t unchanged (ProRL v2 blog, TRL sync_ref_model)
  hard   the per-parameter state is cleared, so the next update is bit for bit the update of
         a freshly constructed optimizer (m = v = 0, t = 0); `apply_reset_semantics` also
         restarts the LR schedule, the adaptive KL coefficient and any grad scaler
         (ProRL v1 paper, arXiv 2505.24864: "reinitialize the optimizer states")
  soft   m <- f m, v <- f v (and max_exp_avg_sq <- f max_exp_avg_sq); t unchanged
  asym   m <- f m, v kept (forget the stale direction, keep the per-coordinate scale)

Independently, `reset_step_count` sets t <- 0 (Adam's bias correction 1 - beta^t restarts),
`restart_schedule` rewinds an LR scheduler to its first step (warmup restarts, base LR kept)
and `reset_kl_coef` puts an adaptive KL controller back to its initial coefficient.

Works on any torch optimizer whose per-parameter state is a dict of tensors (Adam, AdamW,
SGD with momentum: `momentum_buffer` counts as a first moment). Only the optimizer's own
tensors are touched, in place, so optimizer.state_dict() round-trips afterwards.
`state_census` / `verify_reset` read the state back after a reset and check it (used by the TRL
plug-in, integrations/trl.py, where the optimizer comes from someone else's code).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LambdaLR, LRScheduler

from noma_prorl_bench.config.choices import LR_SCHEDULES, OPT_RESETS
from noma_prorl_bench.config.specs import OptimizerSpec
from noma_prorl_bench.training import adam_cohorts

FIRST_MOMENT_KEYS = ("exp_avg", "momentum_buffer")
SECOND_MOMENT_KEYS = ("exp_avg_sq", "max_exp_avg_sq")


@dataclass(eq=False)
class OptimSide:
    """The optimizer side of a run (S3) as one object the learner and the managers share: the
    optimizer, its LR scheduler and the adaptive-KL controller (None: fixed --beta). A reset
    acts on all of them in place; a growth under
    `naive` replaces `optimizer` and `scheduler` here, so every holder sees the new ones."""

    optimizer: Optimizer
    scheduler: LRScheduler
    kl_ctrl: Any = None


# ---------------------------------------------------------------- moments and step count


def _scale_keys(optimizer: Optimizer, keys: tuple[str, ...], factor: float) -> int:
    """Multiply every state tensor named in `keys` by `factor` in place; return how many."""
    n = 0
    for state in optimizer.state.values():
        for key in keys:
            t = state.get(key)
            if isinstance(t, torch.Tensor):
                t.mul_(factor)
                n += 1
    return n


def apply_moment_reset(optimizer: Optimizer, mode: str, factor: float = 1.0) -> dict[str, Any]:
    """Apply one moment transform (`keep | hard | soft | asym`) in place; return what it did.

    hard clears each parameter's state dict, so the optimizer re-initialises it lazily on its
    next step exactly as a new optimizer would (step included). soft/asym need 0 <= factor <= 1.
    The returned dict (JSON-able) counts the tensors touched, for the reset event.
    """
    if mode not in OPT_RESETS:
        raise ValueError(f"opt_reset must be one of {OPT_RESETS}, got {mode!r}")
    if mode in ("soft", "asym") and not 0.0 <= factor <= 1.0:
        raise ValueError(f"soft_factor must be in [0, 1], got {factor}")
    out: dict[str, Any] = {"opt_reset": mode, "m_scaled": 0, "v_scaled": 0, "params_cleared": 0}
    if mode == "hard":
        out["params_cleared"] = sum(1 for s in optimizer.state.values() if s)
        for state in optimizer.state.values():
            state.clear()
    elif mode == "soft":
        out["m_scaled"] = _scale_keys(optimizer, FIRST_MOMENT_KEYS, factor)
        out["v_scaled"] = _scale_keys(optimizer, SECOND_MOMENT_KEYS, factor)
        out["soft_factor"] = factor
    elif mode == "asym":
        out["m_scaled"] = _scale_keys(optimizer, FIRST_MOMENT_KEYS, factor)
        out["soft_factor"] = factor
    return out


def reset_step_count(optimizer: Optimizer) -> int:
    """Set every parameter's `step` to 0 in place (tensor keeps dtype/device); return how many.

    Adam's update at step t divides m by (1 - beta1^t) and v by (1 - beta2^t); after this the
    next update uses t = 1 again. Parameters that have no state yet are left alone. Entries
    added by a growth (``adam_cohorts``) first get their raw moments back and join the tensor's
    count, so every entry restarts from its own moments.
    """
    adam_cohorts.to_raw_moments(optimizer)
    n = 0
    for state in optimizer.state.values():
        if "step" not in state:
            continue
        step = state["step"]
        if isinstance(step, torch.Tensor):
            step.zero_()
        else:
            state["step"] = type(step)(0)
        n += 1
    return n


def optimizer_step_count(optimizer: Optimizer) -> int | None:
    """The largest per-parameter `step` (None before the first update): for logs and events."""
    steps = [s["step"] for s in optimizer.state.values() if "step" in s]
    if not steps:
        return None
    return int(max(float(s) for s in steps))


def moment_norms(optimizer: Optimizer) -> dict[str, float]:
    """Global L2 norms of all first and second moments: `optim/m_norm`, `optim/v_norm`."""
    m2 = v2 = 0.0
    for state in optimizer.state.values():
        for key in FIRST_MOMENT_KEYS:
            if isinstance(state.get(key), torch.Tensor):
                m2 += float(state[key].double().pow(2).sum())
        if isinstance(state.get("exp_avg_sq"), torch.Tensor):
            v2 += float(state["exp_avg_sq"].double().pow(2).sum())
    return {"optim/m_norm": math.sqrt(m2), "optim/v_norm": math.sqrt(v2)}


# ---------------------------------------------------------------- learning-rate schedule


@dataclass
class WarmupSchedule:
    """LR multiplier at scheduler step s (0-based count of `scheduler.step()` calls).

    warmup: (s + 1) / warmup_steps for s < warmup_steps (the first update already moves);
    then constant 1, or cosine from 1 down to min_lr_ratio at s = total_steps (held after).
    A callable object rather than a closure so LambdaLR.state_dict() saves its fields.
    """

    kind: str
    warmup_steps: int
    total_steps: int
    min_lr_ratio: float = 0.0

    def __call__(self, s: int) -> float:
        if s < self.warmup_steps:
            return (s + 1) / self.warmup_steps
        if self.kind == "constant":
            return 1.0
        span = max(1, self.total_steps - self.warmup_steps)
        progress = min(1.0, (s - self.warmup_steps) / span)
        cos = 0.5 * (1.0 + math.cos(math.pi * progress))
        return self.min_lr_ratio + (1.0 - self.min_lr_ratio) * cos


def make_lr_scheduler(
    optimizer: Optimizer,
    kind: str,
    warmup_steps: int,
    total_steps: int,
    min_lr_ratio: float = 0.0,
) -> LambdaLR:
    """A LambdaLR with linear warmup then `constant` or `cosine` decay (see WarmupSchedule)."""
    if kind not in LR_SCHEDULES:
        raise ValueError(f"lr_schedule must be one of {LR_SCHEDULES}, got {kind!r}")
    if warmup_steps < 0 or total_steps < 0 or not 0.0 <= min_lr_ratio <= 1.0:
        raise ValueError("need warmup_steps >= 0, total_steps >= 0, 0 <= min_lr_ratio <= 1")
    return LambdaLR(optimizer, WarmupSchedule(kind, warmup_steps, total_steps, min_lr_ratio))


def run_scheduler(optimizer: Optimizer, spec: OptimizerSpec) -> LambdaLR:
    """The run's LR scheduler for `optimizer` (`--lr_schedule`, `--warmup_steps`, over the run's
    horizon of optimizer steps, `OptimizerSpec.horizon`: the cosine reaches its floor at the last
    update)."""
    return make_lr_scheduler(optimizer, spec.lr_schedule, spec.warmup_steps, spec.horizon)


def restart_schedule(scheduler: LRScheduler) -> float:
    """Rewind `scheduler` to its first step, as if just constructed; return the new first LR.

    Each group's lr goes back to its `initial_lr` (base LRs unchanged), last_epoch to -1, and
    the constructor's initial step is replayed, so warmup restarts from 0 and the scheduler's
    state equals a freshly built one's.
    """
    for group, base in zip(scheduler.optimizer.param_groups, scheduler.base_lrs):
        group["lr"] = base
    scheduler.last_epoch = -1
    # torch's LRScheduler.__init__ ends with `self._initial_step()`; replay exactly that.
    scheduler._initial_step()
    return float(scheduler.optimizer.param_groups[0]["lr"])


# ---------------------------------------------------------------- KL coefficient, grad scaler


def reset_kl_coef(ctrl: Any) -> dict[str, float] | None:
    """Put an adaptive KL controller (duck-typed: `.value`, `.init_beta`) back to init_beta.

    Returns {"kl_coef_before", "kl_coef_after"}, or None when `ctrl` is None (fixed KL
    coefficient: nothing to reset). A controller without `init_beta` is an error, not a
    silent no-op.
    """
    if ctrl is None:
        return None
    if not hasattr(ctrl, "init_beta"):
        raise AttributeError(f"{type(ctrl).__name__} has no `init_beta`: cannot reset its KL coefficient")
    before = float(ctrl.value)
    ctrl.value = ctrl.init_beta
    return {"kl_coef_before": before, "kl_coef_after": float(ctrl.value)}


_reset_kl = reset_kl_coef  # apply_reset_semantics has a flag of the same name


def reset_grad_scaler(scaler: Any) -> bool:
    """Make a torch.amp.GradScaler fresh: its scale and growth tracker re-initialise lazily.

    GradScaler keeps `_scale` / `_growth_tracker` as None until its first `scale()` call and
    then fills them from `_init_scale` / `_init_growth_tracker`; setting both back to None
    reproduces that first call exactly. Returns False (no-op) for None or a disabled scaler.
    """
    if scaler is None or not getattr(scaler, "_enabled", False):
        return False
    scaler._scale = None
    scaler._growth_tracker = None
    return True


# ---------------------------------------------------------------- single entry point


def apply_reset_semantics(
    optimizer: Optimizer,
    scheduler: LRScheduler | None,
    kl_ctrl: Any,
    *,
    opt_reset: str,
    soft_factor: float,
    reset_opt_step: bool,
    reset_lr_schedule: bool,
    reset_kl_coef: bool,
    grad_scaler: Any = None,
) -> dict[str, Any]:
    """Apply every optimizer-side switch of one reset; return a JSON-able record of changes.

    `opt_reset == "hard"` means everything optimizer-side is fresh: it implies
    reset_opt_step, reset_lr_schedule, reset_kl_coef and a fresh grad scaler, whatever
    those flags say (the record shows the effective values).
    """
    hard = opt_reset == "hard"
    rec: dict[str, Any] = {"optim_step_before": optimizer_step_count(optimizer)}
    rec.update(apply_moment_reset(optimizer, opt_reset, soft_factor))
    do_step = hard or bool(reset_opt_step)
    do_lr = (hard or bool(reset_lr_schedule)) and scheduler is not None
    do_kl = hard or bool(reset_kl_coef)
    rec["opt_step_reset"] = do_step
    if do_step and not hard:  # hard already cleared `step` with the rest of the state
        reset_step_count(optimizer)
    rec["lr_before"] = float(optimizer.param_groups[0]["lr"])
    rec["lr_schedule_reset"] = do_lr
    if do_lr and scheduler is not None:
        restart_schedule(scheduler)
    rec["lr_after"] = float(optimizer.param_groups[0]["lr"])
    kl = _reset_kl(kl_ctrl) if do_kl else None
    rec["kl_coef_reset"] = kl is not None
    if kl is not None:
        rec.update(kl)
    rec["grad_scaler_reset"] = reset_grad_scaler(grad_scaler) if hard else False
    return rec


# ---------------------------------------------------------------- read-back check of a reset


def state_census(optimizer: Optimizer) -> dict[str, Any]:
    """What the optimizer's state holds now, read back from it: parameters with state, tensor
    entries, moment norms (`moment_norms`), the largest `step` and the param groups holding a
    `step` of their own (fused/8-bit optimizers that keep t per group, out of this module's reach)."""
    params = {id(p) for g in optimizer.param_groups for p in g["params"]}
    n_params = n_entries = 0
    foreign = 0  # state keys that are not parameters of this optimizer
    for p, state in optimizer.state.items():
        if id(p) not in params:
            foreign += 1
        if state:
            n_params += 1
            n_entries += sum(1 for v in state.values() if isinstance(v, torch.Tensor))
    return {
        "params": n_params,
        "entries": n_entries,
        "foreign": foreign,
        "group_steps": sum(1 for g in optimizer.param_groups if "step" in g),
        "max_step": optimizer_step_count(optimizer),
        **moment_norms(optimizer),
    }


def require_reachable(census: dict[str, Any]) -> None:
    """Raise RuntimeError (one line) unless a `state_census` walked at least one parameter and one state
    entry, found no param group with its own `step` and no state key outside the param groups: the
    state a reset would transform is where the transforms look (not in a wrapper, offloaded, sharded)."""
    if census["params"] < 1 or census["entries"] < 1:
        raise RuntimeError(
            f"optimizer reset walked {census['params']} parameters and {census['entries']} state "
            "entries: the optimizer's state is not where the transforms look"
        )
    if census["group_steps"] or census["foreign"]:
        raise RuntimeError(
            f"optimizer keeps state the transforms cannot reach ({census['group_steps']} param groups "
            f"with a `step`, {census['foreign']} state keys that are not its parameters)"
        )


def verify_reset(
    optimizer: Optimizer,
    before: dict[str, Any],
    opt_reset: str,
    soft_factor: float,
    step_reset: bool,
    rtol: float = 1e-5,
) -> dict[str, Any]:
    """Read the state back after `apply_reset_semantics` and check it did what it says; return the
    census after. `before` is `state_census` taken just before the reset.

    Raises RuntimeError (one line) when `require_reachable(before)` does (no parameter or no state
    entry walked, a param group with its own `step`), or when the values read back are not the
    expected ones: hard, every state empty; keep, m and v norms unchanged exactly; soft, both scaled
    by f; asym, m scaled, v unchanged exactly; t = 0 wherever state remains when the step count was
    reset, else unchanged.
    """
    require_reachable(before)
    after = state_census(optimizer)

    def close(a: float, b: float) -> bool:
        return abs(a - b) <= rtol * max(abs(a), abs(b)) + 1e-30

    m0, v0, m1, v1 = before["optim/m_norm"], before["optim/v_norm"], after["optim/m_norm"], after["optim/v_norm"]
    f = float(soft_factor)
    if opt_reset == "hard":
        ok = after["params"] == 0 and after["entries"] == 0
    elif opt_reset == "keep":
        ok = m1 == m0 and v1 == v0
    elif opt_reset == "soft":
        ok = close(m1, f * m0) and close(v1, f * v0)
    else:  # asym
        ok = close(m1, f * m0) and v1 == v0
    if not ok:
        raise RuntimeError(
            f"optimizer reset {opt_reset!r} (f={f}) read back m_norm {m0:.6g} -> {m1:.6g}, "
            f"v_norm {v0:.6g} -> {v1:.6g}, {after['params']} parameters with state"
        )
    if opt_reset != "hard":
        want = 0 if step_reset else before["max_step"]
        if after["max_step"] != want:
            raise RuntimeError(f"optimizer reset read back step {after['max_step']}, expected {want}")
    return after
