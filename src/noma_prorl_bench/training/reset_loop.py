"""Reset and monitoring bookkeeping that the Trainer holds (the loop stays readable).

Legend: B prompts, G samples per prompt, N = B*G, n monitor sequences, P prompt length,
T response length, L = P + T, V vocabulary.

`ResetManager` (trainer attribute `resets`) runs once per step after the update *and* the
evaluation of that step, on the step's metrics dict:
  1. on eval steps, `BestTracker.update` (only under `--reset_to best`) with `reward/val`;
  2. `RecoveryTracker.observe` with `reward/mean`; writes a `recovery` event when the train
     reward is back to its pre-reset level;
  3. `ResetTrigger.check(step, kl, val)` with the loss estimator's per-step mean KL
     (`kl/k1` for simple, `kl/k2`, `kl/k3`, `kl/full`) and `reward/val` on eval steps;
  4. on a decision, `reset(decision)`: restore the policy to the best checkpoint
     (`--reset_to best`, bit for bit), update pi_ref (`--ref_update hard|polyak`), then the
     optimizer side (`optim_state.apply_reset_semantics`), writing a `ref_reset` and an
     `opt_reset` event;
  5. sets `reset/steps_since` (0 on a reset step).

`EvalMonitors` (trainer attribute `monitors`) measures on eval steps: `kl/to_init`,
`kl/to_prev` (monitors.DriftMonitor on a fixed batch: greedy responses of the warm-started
policy to the first `MONITOR_PROMPTS` validation prompts, made once) and `policy/delta_logp`
(masked mean |logp after the update - logp_old| over the step's rollout batch). All these
forwards go to `count/monitor_fwd` / `count/tokens_monitor`, never `count/ref_fwd`:
4 forwards per eval step (current, init and previous policy on the fixed batch; current
policy on the rollout batch).

Both have `state_dict()` / `load_state_dict()` for checkpoints; docs/resets.md has the semantics.
"""
from __future__ import annotations

from typing import Any

import torch

from noma_prorl_bench.algorithms import losses as loss_lib
from noma_prorl_bench.models.base import policy_device, response_logprobs
from noma_prorl_bench.rollout.sampling import RolloutBatch, generate
from noma_prorl_bench.training.monitors import DriftMonitor
from noma_prorl_bench.training.optim_state import apply_reset_semantics
from noma_prorl_bench.training.resets import (
    BestTracker,
    Decision,
    RecoveryTracker,
    trigger_from_config,
)

RECOVERY_WINDOW = 10   # pre-reset level = mean train reward over the last 10 steps
MONITOR_PROMPTS = 64   # fixed drift-monitor batch: this many validation prompts (or n_val)


def _jsonable(d: dict) -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, (int, float, str, bool)) or v is None:
            out[k] = v
        elif isinstance(v, dict):
            out[k] = _jsonable(v)
        else:
            out[k] = str(v)
    return out


class ResetManager:
    """Triggers, reset target, reference rule, optimizer semantics, recovery (see module doc)."""

    def __init__(self, cfg, trainer):
        self.cfg, self.trainer = cfg, trainer
        self.enabled = trainer.ref.enabled            # Variant B: no reference, no resets
        self.trigger = trigger_from_config(cfg)
        self.best = BestTracker()
        self.recovery = RecoveryTracker(RECOVERY_WINDOW)
        self.kl_key = f"kl/{trainer.loss_kl_key}"

    def after_step(self, step: int, m: dict) -> dict:
        """Feed step `step`'s metrics (with `reward/val` on eval steps); reset if a trigger fires.

        Returns {"reset/steps_since": ...} to merge into the step's metrics.
        """
        val = m.get("reward/val")
        if val is not None and self.cfg.reset_to == "best":
            self.best.update(step, val, self.trainer.policy)
        rec = self.recovery.observe(step, m["reward/mean"])
        if rec is not None:
            self.trainer.event("recovery", "train reward back to its pre-reset level", **rec)
        if self.enabled:
            decision = self.trigger.check(step, m.get(self.kl_key), val)
            if decision is not None:
                self.trainer.reference_reset(decision)
        return {"reset/steps_since": self.trigger.steps_since_reset(step)}

    def reset(self, decision: Decision) -> dict:
        """Do one reset: target -> pi_ref -> optimizer side; write `ref_reset` and `opt_reset`."""
        cfg, tr = self.cfg, self.trainer
        target: dict[str, Any] = {"reset_to": cfg.reset_to}
        if cfg.reset_to == "best":
            if self.best.params is None:          # no validation yet: the current policy is the best we have
                target.update(restored_step=None, best_val=None)
            else:
                target.update(restored_step=self.best.restore(tr.policy), best_val=self.best.best)
        ref_rec = tr.ref.reset_to(tr.policy, cfg.ref_update, cfg.ref_mix_alpha)
        ev = decision.to_event()
        record = {"step": ev.pop("step"), "event": "ref_reset", "reason": ev.pop("reason"), **ev,
                  **ref_rec, **target, "n_resets": self.trigger.n_resets}
        tr.events_sink.write(record)
        changed = apply_reset_semantics(
            tr.optimizer, tr.scheduler, tr.kl_ctrl, opt_reset=cfg.opt_reset, soft_factor=cfg.soft_factor,
            reset_opt_step=bool(cfg.reset_opt_step), reset_lr_schedule=bool(cfg.reset_lr_schedule),
            reset_kl_coef=bool(cfg.reset_kl_coef), grad_scaler=getattr(tr, "grad_scaler", None))
        tr.events_sink.write({"step": decision.step, "event": "opt_reset", "reason": decision.reason,
                              "mode": cfg.opt_reset, **_jsonable(changed)})
        pending = self.recovery.on_reset(decision.step)
        if pending is not None:
            tr.event("recovery", "a new reset came before recovery", **pending)
        return record

    def state_dict(self) -> dict[str, Any]:
        return {"trigger": self.trigger.state_dict(), "best": self.best.state_dict(),
                "recovery": self.recovery.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.trigger.load_state_dict(state["trigger"])
        self.best.load_state_dict(state["best"])
        self.recovery.load_state_dict(state["recovery"])


class EvalMonitors:
    """kl/to_init, kl/to_prev and policy/delta_logp on eval steps, in count/monitor_fwd."""

    def __init__(self, cfg, trainer):
        self.cfg, self.trainer = cfg, trainer
        tokens, mask, fwd, n_tok = self.fixed_batch()
        P = tokens.shape[1] - mask.shape[1]                                             # L - T
        self.drift = DriftMonitor(trainer.policy, tokens, P, mask, cfg.temperature)
        trainer.event("monitor_setup", "fixed drift-monitor batch: greedy responses of the warm-started policy",
                      sequences=int(tokens.shape[0]), response_len=int(mask.shape[1]), fwd_calls=fwd, tokens=n_tok)

    @torch.no_grad()
    def fixed_batch(self) -> tuple[torch.Tensor, torch.Tensor, int, int]:
        """Greedy responses of the current policy to the first validation prompts, made once."""
        tr = self.trainer
        ex = tr.val_set[:MONITOR_PROMPTS]
        prompts = tr.tok.encode_prompts([e.prompt for e in ex], tr.P).to(policy_device(tr.policy))  # [n, P]
        resp, _, mask, _, gs = generate(tr.policy, prompts, tr.T_max, 1.0, tr.tok.eos_id, tr.tok.pad_id,
                                        greedy=True)                                   # [n, T]
        return torch.cat([prompts, resp], 1), mask, gs.fwd_calls, gs.tokens             # [n, L], [n, T]

    def before_step(self) -> None:
        """At the start of an eval step: snapshot the policy as 'previous' for kl/to_prev."""
        self.drift.remember(self.trainer.policy, self.trainer.step_idx)

    @torch.no_grad()
    def measure(self, batch: RolloutBatch) -> dict:
        """After the update: {"kl/to_init", "kl/to_prev", "policy/delta_logp"}; counts its forwards."""
        tr = self.trainer
        out = self.drift.measure(tr.policy)
        was_training = tr.policy.training
        tr.policy.eval()
        logp, _, _ = response_logprobs(tr.policy, batch.tokens, batch.prompt_len, self.cfg.temperature)  # [N, T]
        tr.policy.train(was_training)
        out["policy/delta_logp"] = float(loss_lib.masked_mean((logp - batch.logp_old).abs(), batch.mask))
        counts = self.drift.pop_counts()
        tr.counters.add("monitor_fwd", counts["count/monitor_fwd"] + 1)
        tr.counters.add("tokens_monitor", counts["count/tokens_monitor"] + batch.tokens.numel())
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"drift": self.drift.state_dict(), "tokens": self.drift.tokens, "mask": self.drift.mask,
                "P": self.drift.P}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.drift.tokens, self.drift.mask, self.drift.P = state["tokens"], state["mask"], int(state["P"])
        self.drift.load_state_dict(state["drift"])

