"""Reference resets for TRL's `GRPOTrainer`: this project's reset semantics where people train.

`ResetGRPOTrainer(model, reward_funcs, args=GRPOConfig(...), reset_config=ResetConfig(...))` is a
`trl.GRPOTrainer` that resets its reference model the way `--preset` / the reset flags of this
project's CLI do (docs/resets.md, docs/presets.md); docs/trl.md has the user's view.

- `ResetConfig`: the CLI's reset switches under the CLI's names (config/presets.RESET_FIELDS) and the
  presets by name (`ResetConfig.from_preset("prorl_v2", reset_every=64)`). Steps are TRL's optimizer
  steps (`state.global_step`); "step-only" is opt_reset="keep" with reset_opt_step=1.
- When: `training.resets.ResetTrigger`, fed TRL's per-step `kl` (k3) and `eval_reward`; a decided reset
  is applied at the first optimizer-step end after which TRL generates a new batch, so no buffered
  reference log-probs of the old reference are used after it (the event records both steps).
- What: the target (current, best, or Elastic Reset's EMA: `training.elastic`), the reference (hard,
  Polyak or the moving EMA reference, through `models.averaging.mix_states_`; with PEFT the "ref"
  adapter's LoRA factors), then the optimizer side (`optim_state.apply_reset_semantics` under
  accelerate's wrapper and TRL's scheduler, read back by `optim_state.verify_reset`); docs/trl.md.
- Logs (`reset/*`, `ref/*`, `trainer.reset_events`) and checkpoint files (checked on resume): docs/trl.md.
- Refused at construction, one line: non-Adam optimizers, fp16, DeepSpeed/FSDP, sync_ref_model,
  beta=0, Liger's loss, triggers needing an evaluation the arguments do not schedule.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import os
import time
from typing import Any

import torch
from safetensors.torch import load_file

try:
    from transformers import TrainerCallback
    from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR
    from trl import GRPOTrainer
    from trl.trainer.utils import use_adapter
except ImportError as e:  # pragma: no cover - the extra is absent
    raise ImportError(f"noma_prorl_bench.integrations.trl needs the trl extra: pip install -e .[trl] ({e})") from e

from noma_prorl_bench.config.specs import ResetSpec
from noma_prorl_bench.integrations.trl_parts import (
    add_ref_adapter,
    agree_on_inputs,
    anchors_after_step,
    global_k3,
    load_elastic,
    log_reset,
    rank_checksums,
    read_reset_state,
    reference_checksum,
    refusal,
    save_elastic,
    save_tensors,
    torch_optimizer,
    unique_targets,
    update_reference,
)
from noma_prorl_bench.models.base import frozen_parameters
from noma_prorl_bench.training.elastic import ElasticReset
from noma_prorl_bench.training.optim_state import (
    apply_reset_semantics,
    optimizer_step_count,
    require_reachable,
    state_census,
    verify_reset,
)
from noma_prorl_bench.training.resets import BestTracker, Decision, trigger_from_spec

STATE_FILE = "reset_state.json"
REF_FILE = "reset_ref.safetensors"
BEST_FILE = "reset_best.safetensors"


#: The reset switches under the CLI's names, defaults, choices and checks: the harness's own
#: `ResetSpec` (config/specs/resets.py), not a copy of it. A bad value raises ConfigError (a
#: ValueError) naming the field; `ResetConfig.from_preset(name, **overrides)` as `--preset`.
ResetConfig = ResetSpec


class _ResetCallback(TrainerCallback):
    """Feeds the trainer's reset logic at each optimizer-step end and after each evaluation."""

    def __init__(self, trainer: ResetGRPOTrainer):
        self.trainer = trainer

    def on_step_end(self, args, state, control, **kwargs):
        self.trainer._after_optimizer_step(state.global_step, defer=bool(control.should_evaluate))
        return control

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        self.trainer._after_evaluation(state.global_step, metrics or {})
        return control


class ResetGRPOTrainer(GRPOTrainer):
    """`trl.GRPOTrainer` with this project's reference resets (module docstring); extra keyword
    argument `reset_config` (a ResetConfig; default: no trigger, only the reference-forward logs)."""

    def __init__(self, *args: Any, reset_config: ResetConfig | None = None, **kwargs: Any):
        cfg = reset_config if reset_config is not None else ResetConfig()
        bound = inspect.signature(GRPOTrainer.__init__).bind(self, *args, **kwargs).arguments
        targs = bound.get("args")
        if targs is None:
            raise ValueError("ResetGRPOTrainer: args: needs args=GRPOConfig(...) with beta > 0 (none given)")
        why = refusal(targs, cfg, bound.get("optimizers"), bound.get("eval_dataset"))
        if why is not None:
            raise ValueError(f"ResetGRPOTrainer: {why}")
        super().__init__(*args, **kwargs)
        missing = [a for a in ("_step", "num_iterations", "_metrics", "ref_model") if not hasattr(self, a)]
        if missing:
            raise ValueError(f"ResetGRPOTrainer: this TRL lacks GRPOTrainer.{missing[0]} (tested with trl 1.16)")
        self.reset_config = cfg
        self._trigger = trigger_from_spec(cfg)  # the harness's own trigger, from the same switches
        policy = self.accelerator.unwrap_model(self.model)
        self._peft = self.ref_model is None
        if self._peft:
            add_ref_adapter(policy)
        self._best = BestTracker(frozen=frozen_parameters(policy))
        self._elastic = ElasticReset(policy, cfg.elastic_decay) if cfg.elastic else None  # reset_to="elastic"
        self._ema_updates, self._ema_due = 0, False  # ref_update="ema": updates made, one due
        self._pending: Decision | None = None
        self._merged, self._n_resets = 0, 0  # decisions that fired while one was pending; resets applied
        self._pending_kl: float | None = None
        self._pending_step: int | None = None  # an optimizer step whose trigger check waits for its evaluation
        self.reset_events: list[dict[str, Any]] = []
        self._last_inputs: dict[str, Any] | None = None
        self._ref_bucket = "train"
        self._ref_count = {"train": [0, 0.0], "reset": [0, 0.0]}  # [sequences, seconds]
        self.add_callback(_ResetCallback(self))

    # ------------------------------------------------------------ reference

    def _ref_tensors(self) -> dict[str, torch.Tensor]:
        """The reference's tensors by name: the full reference model's state, or the "ref" adapter."""
        if not self._peft:
            return dict(self.accelerator.unwrap_model(self.ref_model).state_dict())
        policy = self.accelerator.unwrap_model(self.model)
        return {n: p for n, p in policy.named_parameters() if ".ref." in n}

    def _ref_pairs(self) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
        """(name, reference tensor, policy tensor) for every reference tensor, tied ones once."""
        policy = self.accelerator.unwrap_model(self.model)
        ref = self._ref_tensors()
        if self._peft:
            named = dict(policy.named_parameters())
            return unique_targets([(n, t, named[n.replace(".ref.", ".default.")]) for n, t in ref.items()])
        src = policy.state_dict()
        if set(src) != set(ref):
            odd = sorted(set(src) ^ set(ref))[:3]
            raise ValueError(f"ResetGRPOTrainer: ref_model: its state and the policy's (model) differ in {odd}")
        return unique_targets([(n, t, src[n]) for n, t in ref.items()])

    def _get_per_token_logps_and_entropies(self, model, input_ids, *args, **kwargs):
        """TRL's log-prob pass; reference passes are counted (sequences, seconds)."""
        is_ref = (
            model is self.ref_model
            if not self._peft
            else (self.accelerator.unwrap_model(model).active_adapter in ("ref", ["ref"]))
        )
        if not is_ref:
            return super()._get_per_token_logps_and_entropies(model, input_ids, *args, **kwargs)
        t0 = time.perf_counter()
        out = super()._get_per_token_logps_and_entropies(model, input_ids, *args, **kwargs)
        if self._ref_bucket == "train" and not getattr(self.model, "training", False):
            return out  # TRL's evaluation: not a training step's reference forward
        count = self._ref_count[self._ref_bucket]
        count[0] += int(input_ids.shape[0])
        count[1] += time.perf_counter() - t0
        return out

    def _prepare_inputs(self, generation_batch):
        inputs = super()._prepare_inputs(generation_batch)
        if getattr(self.model, "training", False):
            self._last_inputs = inputs
        return inputs

    @torch.no_grad()
    def _kl_to_reference(self, inputs: dict[str, Any] | None) -> float | None:
        """Token mean of k3 = exp(r - p) - (r - p) - 1 (TRL's estimator) between the policy (p) and the
        reference (r) on a micro-batch (all processes' pooled); its reference forward goes to the reset's count."""
        if inputs is None:
            return None
        ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
        att = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
        keep, mask = inputs["completion_ids"].size(1), inputs["completion_mask"].float()
        logp, _, _ = self._get_per_token_logps_and_entropies(self.model, ids, att, keep)
        self._ref_bucket = "reset"
        try:
            if self._peft:
                with use_adapter(self.accelerator.unwrap_model(self.model), adapter_name="ref"):
                    ref, _, _ = self._get_per_token_logps_and_entropies(self.model, ids, att, keep)
            else:
                ref, _, _ = self._get_per_token_logps_and_entropies(self.ref_model, ids, att, keep)
        finally:
            self._ref_bucket = "train"
        return global_k3(self.accelerator, ref, logp, mask)

    # ------------------------------------------------------------ triggers and the reset

    def _at_generation_boundary(self) -> bool:
        """True when TRL generates a fresh batch (and fresh reference log-probs) at its next micro-step."""
        per_generation = int(getattr(self.args, "steps_per_generation", 1))  # GRPOConfig's field
        return self._step % (per_generation * self.num_iterations) == 0

    def _step_kl(self) -> float | None:
        """Mean of TRL's `kl` metric over this optimizer step's micro-batches."""
        kl = self._metrics["train"].get("kl") or []
        n = max(1, int(getattr(self, "current_gradient_accumulation_steps", 1) or 1))
        vals = [v for v in kl[-n:] if v == v]
        return sum(vals) / len(vals) if vals else None

    def _after_optimizer_step(self, step: int, defer: bool) -> None:
        m = self._metrics["train"]
        seqs, secs = self._ref_count["train"]
        m["ref/forward_seqs"].append(float(seqs))
        m["ref/forward_s"].append(float(secs))
        self._ref_count["train"] = [0, 0.0]
        anchors_after_step(self, step)  # Elastic Reset's EMA, the moving reference
        kl = self._step_kl()
        if defer:  # an evaluation follows: decide with its reward
            self._pending_kl = kl
            self._pending_step = step
            return
        self._decide(step, kl, None)

    def _after_evaluation(self, step: int, metrics: dict[str, Any]) -> None:
        if getattr(self, "_pending_step", None) != step:
            return  # an evaluation outside the training loop
        self._pending_step = None
        val = metrics.get("eval_reward")
        val = None if val is None else float(val)
        if val is not None and self.reset_config.reset_to == "best":
            self._best.update(step, val, self.accelerator.unwrap_model(self.model))
        self._decide(step, self._pending_kl, val)

    def _decide(self, step: int, kl: float | None, val: float | None) -> None:
        decision = self._trigger.check(step, *agree_on_inputs(self.accelerator, kl, val))  # same on every rank
        if decision is not None:
            if self._pending is None:
                self._pending = decision
            else:
                self._merged += 1
        if self._pending is not None and self._at_generation_boundary():
            self._apply(self._pending, step)
            self._pending = None
        self._metrics["train"]["reset/count"] = [float(self._n_resets)]  # the latest value, not a window mean

    def _apply(self, decision: Decision, step: int) -> dict[str, Any]:
        """One reset after optimizer step `step`: target -> reference -> optimizer side, checked."""
        cfg, t0 = self.reset_config, time.perf_counter()
        seqs0 = self._ref_count["reset"][0]
        optimizer = torch_optimizer(self.optimizer)
        scheduler = getattr(self.lr_scheduler, "scheduler", self.lr_scheduler)
        policy = self.accelerator.unwrap_model(self.model)
        before = state_census(optimizer)
        require_reachable(before)  # before anything changes: the state must be where we look
        kl_before = self._kl_to_reference(self._last_inputs)
        target: dict[str, Any] = {"reset_to": cfg.reset_to}
        if cfg.reset_to == "best":
            restored = self._best.restore(policy) if self._best.params is not None else None
            target.update(restored_step=restored, best_val=self._best.best)
        if self._elastic is not None:  # policy <- EMA, EMA <- initial; the reference stays the initial policy
            target.update(self._elastic.reset(policy))
            ref_rec: dict[str, Any] = {"ref_update": None, "ref_mix_alpha": None, "ref_tensors": 0}
        else:
            ref_rec = update_reference(self._ref_pairs(), cfg, self._peft)
        rec = apply_reset_semantics(
            optimizer,
            scheduler,
            None,
            opt_reset=cfg.opt_reset,
            soft_factor=cfg.soft_factor,
            reset_opt_step=bool(cfg.reset_opt_step),
            reset_lr_schedule=bool(cfg.reset_lr_schedule),
            reset_kl_coef=bool(cfg.reset_kl_coef),
        )
        after = verify_reset(optimizer, before, cfg.opt_reset, cfg.soft_factor, step_reset=bool(rec["opt_step_reset"]))
        kl_after = self._kl_to_reference(self._last_inputs)
        self._n_resets += 1
        ev = decision.to_event()
        event = {
            "decided_step": ev.pop("step"),
            "step": step,
            "reason": ev.pop("reason"),
            **ev,
            **target,
            **ref_rec,
            **{k: v for k, v in rec.items() if isinstance(v, (int, float, str, bool)) or v is None},
            "kl_before": kl_before,
            "kl_after": kl_after,
            "m_norm_before": before["optim/m_norm"],
            "m_norm_after": after["optim/m_norm"],
            "v_norm_before": before["optim/v_norm"],
            "v_norm_after": after["optim/v_norm"],
            "params_walked": before["params"],
            "entries_walked": before["entries"],
            "merged_decisions": self._merged,
            "n_resets": self._n_resets,
            "ref_forward_seqs": self._ref_count["reset"][0] - seqs0,
            "seconds": time.perf_counter() - t0,
        }
        self._merged = 0
        self.reset_events.append(event)
        log_reset(self._metrics["train"], event)
        return event

    # ------------------------------------------------------------ checkpoints

    def _reset_state(self, ranks: list[str]) -> dict[str, Any]:
        return {
            "config": self.reset_config.to_dict(),
            "trigger": self._trigger.state_dict(),
            "n_resets": self._n_resets,
            "merged": self._merged,
            "events": self.reset_events,
            "pending": None if self._pending is None else dataclasses.asdict(self._pending),
            "best": {"best": self._best.best, "step": self._best.step},
            "global_step": self.state.global_step,
            # this plug-in's metrics not yet logged (a reset after an evaluation logs with the next step)
            "unlogged": {k: list(v) for k, v in self._metrics["train"].items() if k.startswith(("reset/", "ref/"))},
            "optimizer_step": optimizer_step_count(torch_optimizer(self.optimizer)),
            "ref_sha256": ranks[0],
            "ref_sha256_ranks": ranks,  # each process's reference when saved (all equal)
            "ema": [self._ema_updates, self._ema_due],
        }

    def _save_checkpoint(self, model, trial):
        super()._save_checkpoint(model, trial)
        ranks = rank_checksums(self.accelerator, reference_checksum(self._ref_tensors()))  # every rank's, equal
        if not self.args.should_save:
            return
        out = os.path.join(self._get_output_dir(trial=trial), f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}")
        save_tensors(self._ref_tensors(), os.path.join(out, REF_FILE))
        if self._best.params is not None:
            save_tensors(self._best.params, os.path.join(out, BEST_FILE))
        if self._elastic is not None:
            save_elastic(self._elastic, out)
        with open(os.path.join(out, STATE_FILE), "w") as f:
            json.dump(self._reset_state(ranks), f, indent=1)

    def _load_optimizer_and_scheduler(self, checkpoint):
        super()._load_optimizer_and_scheduler(checkpoint)
        if checkpoint is None:
            return
        if not os.path.lexists(os.path.join(checkpoint, STATE_FILE)):
            raise ValueError(f"ResetGRPOTrainer: {checkpoint} has no {STATE_FILE} (not saved by ResetGRPOTrainer)")
        state = read_reset_state(os.path.join(checkpoint, STATE_FILE))
        now = self.reset_config.to_dict()
        if state["config"] != now:
            diff = sorted(k for k in set(state["config"]) | set(now) if state["config"].get(k) != now.get(k))
            shown = "; ".join(f"{k}: saved {state['config'].get(k)!r}, now {now.get(k)!r}" for k in diff[:3])
            raise ValueError(
                f"ResetGRPOTrainer: reset_config: resumed with a different ResetConfig ({', '.join(diff)}): {shown}"
            )
        saved = load_file(os.path.join(checkpoint, REF_FILE))
        ref = self._ref_tensors()
        if set(saved) != set(ref):
            odd = sorted(set(saved) ^ set(ref))[:3]
            raise ValueError(f"ResetGRPOTrainer: {REF_FILE} does not match the reference's tensors (differ: {odd})")
        with torch.no_grad():
            for name, t in ref.items():
                t.copy_(saved[name].to(t.device))
        if reference_checksum(self._ref_tensors()) != state["ref_sha256"]:
            raise ValueError(f"ResetGRPOTrainer: the reference loaded from {checkpoint} fails its checksum")
        step = optimizer_step_count(torch_optimizer(self.optimizer))
        if step != state["optimizer_step"]:
            raise ValueError(
                f"ResetGRPOTrainer: {STATE_FILE}: optimizer_step {state['optimizer_step']!r} saved, the optimizer "
                f"loaded from {checkpoint} is at step {step}"
            )
        try:
            self._load_reset_state(state, checkpoint)
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as e:
            raise ValueError(
                f"ResetGRPOTrainer: resume_from_checkpoint: {checkpoint}/{STATE_FILE} does not fit this trainer "
                f"({type(e).__name__}: {' '.join(str(e).split())[:160]})"
            ) from e

    def _load_reset_state(self, state: dict[str, Any], checkpoint: str) -> None:
        """The trigger, counters, events, pending decision and best-so-far target of a saved reset state."""
        self._trigger.load_state_dict(state["trigger"])
        self._n_resets, self._merged = int(state["n_resets"]), int(state["merged"])
        self.reset_events = list(state["events"])
        self._ema_updates, due = (int(x) for x in state.get("ema", (0, 0)))
        self._ema_due = bool(due)
        if self._elastic is not None:
            load_elastic(self._elastic, checkpoint)
        for key, values in state["unlogged"].items():
            self._metrics["train"][key] = list(values)
        p = state["pending"]
        self._pending = (
            None
            if p is None
            else Decision(step=p["step"], reason=p["reason"], values=p["values"], reasons=tuple(p["reasons"]))
        )
        best_path = os.path.join(checkpoint, BEST_FILE)
        if state["best"]["step"] is not None and os.path.exists(best_path):
            self._best.load_state_dict({**state["best"], "params": load_file(best_path)})
