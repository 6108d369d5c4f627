"""Reset and drift-monitor managers of a run: triggers, reset target, recovery, kl/to_init, kl/to_prev.

Legend: B prompts, G samples per prompt, N = B*G, n monitor sequences, P prompt length,
T response length, L = P + T, V vocabulary.

Neither class sees the Trainer: each gets the narrow state it acts on (the policy, the
reference holder, the shared `optim_state.OptimSide`, the step counters) and an `emit(record)`
callback that writes one events.jsonl record.

`ResetManager` (trainer attribute `resets`) runs once per step after the update *and* the
evaluation of that step, on the step's `io.metrics.StepSignals` (read from its metrics by the
Trainer; no metric key is spelled here):
  1. on eval steps, `BestTracker.update` (only under `--reset_to best`) with `reward/val`;
  2. `RecoveryTracker.observe` with `reward/mean`; writes a `recovery` event when the train
     reward is back to its pre-reset level;
  3. `--reset_to elastic`: the policy's EMA is updated (`elastic.ElasticReset.update`);
     `--ref_update ema`: on steps N, 2N, ... (N = --ref_ema_every) the moving reference
     ref <- tau ref + (1 - tau) pi (its seconds in `time/ref`; no reset, no event);
  4. `ResetTrigger.check(step, kl, val)` with the loss estimator's per-step mean KL
     (`kl/k1` for simple, `kl/k2`, `kl/k3`, `kl/full`) and `reward/val` on eval steps;
  5. on a decision, `reset(decision)`: restore the policy to the best checkpoint
     (`--reset_to best`, bit for bit) or to its EMA (`--reset_to elastic`, which then sets the
     EMA to the initial policy and leaves pi_ref alone), update pi_ref (`--ref_update
     hard|polyak`), then the optimizer side (`optim_state.apply_reset_semantics`), writing a
     `ref_reset` and an `opt_reset` event;
  6. sets `reset/steps_since` (0 on a reset step).

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

import contextlib
from typing import Any, Callable

import torch
from torch import nn

from noma_prorl_bench.algorithms import losses as loss_lib
from noma_prorl_bench.config.specs import EvalSpec, ResetSpec
from noma_prorl_bench.io.metrics import Counters, StageTimer, StepSignals
from noma_prorl_bench.models.base import fed_tokens, frozen_parameters, policy_device, policy_logprobs
from noma_prorl_bench.rollout.reference_source import ReferenceSource
from noma_prorl_bench.rollout.sampling import RolloutBatch, generate
from noma_prorl_bench.training.elastic import ElasticReset
from noma_prorl_bench.training.monitors import DriftMonitor
from noma_prorl_bench.training.optim_state import OptimSide, apply_reset_semantics
from noma_prorl_bench.training.resets import (
    BestTracker,
    Decision,
    RecoveryTracker,
    trigger_from_spec,
)

RECOVERY_WINDOW = 10  # pre-reset level = mean train reward over the last 10 steps
MONITOR_PROMPTS = 64  # fixed drift-monitor batch: this many validation prompts (or n_val)


def monitor_prompts(val_set: list, tok, P: int | None) -> torch.Tensor:
    """prompts[n, P]: the first `MONITOR_PROMPTS` validation prompts, encoded (P None: longest)."""
    ex = val_set[:MONITOR_PROMPTS]
    return tok.encode_prompts([e.prompt for e in ex], P)


@torch.no_grad()
def fixed_batch(
    policy: nn.Module, prompts: torch.Tensor, T_max: int, tok
) -> tuple[torch.Tensor, torch.Tensor, int, int]:
    """Greedy responses of `policy` to prompts[n, P], made once: (tokens[n, L], mask[n, T],
    forwards, tokens processed)."""
    prompts = prompts.to(policy_device(policy))
    resp, _, mask, _, gs = generate(policy, prompts, T_max, 1.0, tok.eos_id, tok.pad_id, greedy=True)  # [n, T]
    return torch.cat([prompts, resp], 1), mask, gs.fwd_calls, gs.tokens


def _jsonable(d: dict) -> dict:
    out: dict[str, Any] = {}
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

    def __init__(
        self,
        spec: ResetSpec,
        policy: nn.Module,
        ref: ReferenceSource,
        optim: OptimSide,
        emit: Callable[[dict], None],
        critic: Any = None,
        timer: StageTimer | None = None,
    ):
        """`ref`: the ReferenceHolder (or the Ray learner's RemoteReference); `critic`: the
        --adv gae critic (training/critic.Critic), whose `on_reset` each reset calls; `timer`: the
        step's stage timer (the moving reference's updates count in `time/ref`)."""
        self.spec, self.policy, self.ref, self.optim, self.emit = spec, policy, ref, optim, emit
        self.critic, self.timer = critic, timer
        self.enabled = ref.enabled  # Variant B: no reference, no resets
        self.trigger = trigger_from_spec(spec)
        self.best = BestTracker(frozen=frozen_parameters(policy))  # a frozen base is aliased, not cloned
        self.recovery = RecoveryTracker(RECOVERY_WINDOW)
        # --reset_to elastic: the policy's EMA and initial weights (training/elastic.py)
        self.elastic = ElasticReset(policy, spec.elastic_decay) if spec.elastic and self.enabled else None

    @property
    def n_resets(self) -> int:
        """Reference resets so far (the growth manager's `--grow_on reset` reads it)."""
        return self.trigger.n_resets

    def snapshots(self) -> list:
        """The parameter snapshots this manager keeps (the best checkpoint, None before one; Elastic
        Reset's initial policy and EMA)."""
        return [self.best.params, *(self.elastic.snapshots() if self.elastic is not None else [])]

    def after_step(self, step: int, sig: StepSignals) -> dict:
        """Feed step `step`'s signals (`reward_val` on eval steps); reset if a trigger fires.

        Returns {"reset/steps_since": ...} to merge into the step's metrics.
        """
        val = sig.reward_val
        if val is not None and self.spec.reset_to == "best":
            self.best.update(step, val, self.policy)
        rec = self.recovery.observe(step, sig.reward_mean)
        if rec is not None:
            self.emit({"step": step, "event": "recovery", "reason": "train reward back to its pre-reset level", **rec})
        if self.elastic is not None:
            self.elastic.update(self.policy)  # ema <- d ema + (1 - d) pi, before a reset reads it
        if self.enabled and self.spec.moving_reference and step % self.spec.ref_ema_every == 0:
            with self.timer("ref") if self.timer is not None else contextlib.nullcontext():
                self.ref.reset_to(self.policy, "ema", self.spec.ref_ema_tau)  # ref <- tau ref + (1 - tau) pi
        if self.enabled:
            decision = self.trigger.check(step, sig.kl, val)
            if decision is not None:
                self.reset(decision)
        return {"reset/steps_since": self.trigger.steps_since_reset(step)}

    def reset(self, decision: Decision) -> dict:
        """Do one reset: target -> pi_ref -> optimizer side; write `ref_reset` and `opt_reset`.
        Elastic Reset: policy <- its EMA, EMA <- the initial policy; pi_ref is not updated."""
        spec, opt = self.spec, self.optim
        target: dict[str, Any] = {"reset_to": spec.reset_to}
        if spec.reset_to == "best":
            if self.best.params is None:  # no validation yet: the current policy is the best we have
                target.update(restored_step=None, best_val=None)
            else:
                target.update(restored_step=self.best.restore(self.policy), best_val=self.best.best)
        if self.elastic is not None:
            target.update(self.elastic.reset(self.policy))
            ref_rec: dict[str, Any] = {"ref_update": None, "ref_mix_alpha": None}  # pi_ref stays the initial policy
        else:
            ref_rec = self.ref.reset_to(self.policy, spec.ref_update, spec.ref_mix_alpha)
        ev = decision.to_event()
        record = {
            "step": ev.pop("step"),
            "event": "ref_reset",
            "reason": ev.pop("reason"),
            **ev,
            **ref_rec,
            **target,
            "n_resets": self.trigger.n_resets,
        }
        self.emit(record)
        changed = apply_reset_semantics(
            opt.optimizer,
            opt.scheduler,
            opt.kl_ctrl,
            opt_reset=spec.opt_reset,
            soft_factor=spec.soft_factor,
            reset_opt_step=bool(spec.reset_opt_step),
            reset_lr_schedule=bool(spec.reset_lr_schedule),
            reset_kl_coef=bool(spec.reset_kl_coef),
        )
        self.emit(
            {
                "step": decision.step,
                "event": "opt_reset",
                "reason": decision.reason,
                "mode": spec.opt_reset,
                **_jsonable(changed),
            }
        )
        if self.critic is not None:  # --critic_reset
            rec = self.critic.on_reset(self.policy)
            self.emit({"step": decision.step, "event": "critic_reset", "reason": decision.reason, **_jsonable(rec)})
        pending = self.recovery.on_reset(decision.step)
        if pending is not None:
            self.emit(
                {"step": decision.step, "event": "recovery", "reason": "a new reset came before recovery", **pending}
            )
        return record

    def state_dict(self) -> dict[str, Any]:
        out = {
            "trigger": self.trigger.state_dict(),
            "best": self.best.state_dict(),
            "recovery": self.recovery.state_dict(),
        }
        if self.elastic is not None:
            out["elastic"] = self.elastic.state_dict()
        return out

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.trigger.load_state_dict(state["trigger"])
        self.best.load_state_dict(state["best"])
        self.recovery.load_state_dict(state["recovery"])
        if self.elastic is not None:
            if "elastic" not in state:
                raise KeyError("checkpoint has no Elastic Reset state (--reset_to elastic)")
            self.elastic.load_state_dict(state["elastic"])


class EvalMonitors:
    """kl/to_init, kl/to_prev and policy/delta_logp on eval steps, in count/monitor_fwd."""

    def __init__(
        self,
        spec: EvalSpec,
        policy: nn.Module,
        counters: Counters,
        emit: Callable[[dict], None],
        prompts: torch.Tensor,
        T_max: int,
        tok,
    ):
        """`prompts[n, P]`: the encoded validation prompts of the fixed batch (`monitor_prompts`);
        `counters`: the step's counters (count/monitor_fwd, count/tokens_monitor go there)."""
        self.spec, self.policy, self.counters = spec, policy, counters
        tokens, mask, fwd, n_tok = fixed_batch(policy, prompts, T_max, tok)
        P = tokens.shape[1] - mask.shape[1]  # L - T
        self.drift = DriftMonitor(policy, tokens, P, mask, spec.temperature)
        emit(
            {
                "step": 0,
                "event": "monitor_setup",
                "reason": "fixed drift-monitor batch: greedy responses of the warm-started policy",
                "sequences": int(tokens.shape[0]),
                "response_len": int(mask.shape[1]),
                "fwd_calls": fwd,
                "tokens": n_tok,
            }
        )

    def snapshots(self) -> list:
        """The parameter snapshots the drift monitor keeps (initial and previous policy)."""
        return [self.drift.init_params, self.drift.prev.params]

    def before_step(self, step: int | None = None) -> None:
        """At the start of an eval step: snapshot the policy as 'previous' for kl/to_prev."""
        self.drift.remember(self.policy, step)

    @torch.no_grad()
    def measure(self, batch: RolloutBatch) -> dict:
        """After the update: {"kl/to_init", "kl/to_prev", "policy/delta_logp"}; counts its forwards."""
        policy = self.policy
        out = self.drift.measure(policy)
        was_training = policy.training
        policy.eval()
        logp, _, _ = policy_logprobs(
            policy, batch.tokens, batch.prompt_len, self.spec.temperature, chunk=self.spec.logprob_chunk
        )  # [N, T]
        policy.train(was_training)
        out["policy/delta_logp"] = float(loss_lib.masked_mean_or_zero((logp - batch.logp_old).abs(), batch.mask))
        counts = self.drift.pop_counts()
        self.counters.add("monitor_fwd", counts["count/monitor_fwd"] + 1)
        fed = fed_tokens(policy, batch.tokens, batch.prompt_len)  # N x L, fewer with --shared_prompt
        self.counters.add("tokens_monitor", counts["count/tokens_monitor"] + fed)
        return out

    def state_dict(self) -> dict[str, Any]:
        return {
            "drift": self.drift.state_dict(),
            "tokens": self.drift.tokens,
            "mask": self.drift.mask,
            "P": self.drift.P,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.drift.tokens, self.drift.mask, self.drift.P = state["tokens"], state["mask"], int(state["P"])
        self.drift.load_state_dict(state["drift"])
