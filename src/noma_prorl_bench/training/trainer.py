"""The training loop, reading top to bottom: one step composed of stage objects.

One step = collect (rollout/collector.py: sample, score, DAPO groups) -> reference
(rollout/reference.py: logp_ref for Variant A, pi_old for B) -> advantages and
`ppo_epochs` x `minibatches` optimizer steps (training/learner.py) -> evaluation, resets,
growth (the managers) -> metrics. Counters are exact per step: `count/ref_fwd` is E*M for
naive_epoch (A0), 1 for cached (A1) and ring (A2), 0 for Variant B (no reference model);
with --adv gae `count/critic_fwd` is 1 + E*M*(micro-batches per minibatch).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch

from noma_prorl_bench.algorithms.kl_term import KLTerm
from noma_prorl_bench.config import RunConfig
from noma_prorl_bench.config.specs import RunSpecs
from noma_prorl_bench.io import state_tree
from noma_prorl_bench.io.metrics import Counters, NullSink, StageTimer, StepSignals, peak_rss_mb
from noma_prorl_bench.rollout.collector import BatchSource
from noma_prorl_bench.rollout.pass_at_k import sampled_pass_at_k
from noma_prorl_bench.rollout.reference_source import ReferenceSource
from noma_prorl_bench.rollout.sampling import RolloutBatch, evaluate
from noma_prorl_bench.tasks import part_metrics
from noma_prorl_bench.training import setup
from noma_prorl_bench.training.critic import Critic
from noma_prorl_bench.training.growth_loop import GrowthManager
from noma_prorl_bench.training.learner import Learner
from noma_prorl_bench.training.reset_loop import EvalMonitors, ResetManager
from noma_prorl_bench.training.result import per_prompt

COUNTER_KEYS = (
    "policy_fwd_rollout",
    "policy_fwd_train",
    "tokens_policy",
    "monitor_fwd",
    "tokens_monitor",
    "policy_fwd_eval",
)


class Trainer:
    """Owns the stages of one run (collector, reference, learner, managers), its RNG streams
    and step counter; `train_step()` runs them in order. Built by `from_config`, the one reader of
    the `RunConfig`: each stage gets its own spec (config/specs.py)."""

    # The run's parts, built by `start` (the steps of training/setup.py) in this order after the
    # constructor wired the specs, sinks, counters and step counter.
    task: Any
    T_max: int
    P: int | None  # None: longest prompt of each batch (text tasks)
    policy: Any
    tok: Any
    device: torch.device
    data_rng: np.random.Generator
    sample_gen: torch.Generator
    order_gen: torch.Generator
    val_set: list
    warmstart_info: dict
    val_before: dict
    initial_metrics: dict  # metrics.jsonl's step-0 row
    precision_info: dict
    collector: BatchSource
    kl: KLTerm
    ref: ReferenceSource
    critic: Critic | None
    learner: Learner
    resets: ResetManager
    monitors: EvalMonitors
    growth: GrowthManager

    @classmethod
    def from_config(
        cls,
        cfg: RunConfig,
        metrics_sink=None,
        events_sink=None,
        samples_sink=None,
        *,
        counters: Counters | None = None,
    ) -> Trainer:
        """The Trainer of `cfg` (its specs: `RunSpecs.from_config`), wired and not yet set up:
        `start` does the work. The `counters` replace the local ones (the Ray learner counts in
        its collector's); `cfg` itself is kept only as the run's record (checkpoints)."""
        return cls(RunSpecs.from_config(cfg), cfg, metrics_sink, events_sink, samples_sink, counters=counters)

    def start(
        self,
        collector: BatchSource | None = None,
        reference: ReferenceSource | None = None,
        *,
        warm_start: bool = True,
    ) -> Trainer:
        """Set up the wired Trainer for its first step, as explicit steps (training/setup.py):
        `prepare` (seeds, task, policy, RNG streams); with `warm_start` (a new run) the supervised
        warm start and the evaluation before RL (the `warmstart` event, metrics.jsonl's step-0 row),
        which a resumed run skips (its checkpoint holds their results, its files their records);
        then `build_stages` (adapters, precision, stages, managers). `collector` and `reference` replace
        the local ones (the Ray learner: batches and logp_ref arrive from elsewhere). Returns self."""
        setup.prepare(self)
        if warm_start:
            setup.warm_start_step(self)
        setup.build_stages(self, collector, reference)
        return self

    def __init__(
        self,
        specs: RunSpecs,
        cfg: RunConfig,
        metrics_sink=None,
        events_sink=None,
        samples_sink=None,
        *,
        counters: Counters | None = None,
    ):
        """Wires the run's specs, sinks, counters, timer and step counter; does no work."""
        self.specs, self.cfg = specs, cfg  # cfg: written with each checkpoint, read by no stage
        self.metrics_sink = metrics_sink or NullSink()
        self.events_sink = events_sink or NullSink()
        self.samples_sink = samples_sink or NullSink()
        self.counters = counters if counters is not None else Counters(COUNTER_KEYS)
        self.timer = StageTimer()
        self.step_idx = 0
        self.val_after: dict | None = None  # per-prompt record of the last step's evaluation
        self.initial_metrics: dict = {}  # metrics.jsonl's step-0 row, once the warm start has run

    # The optimizer side lives in `learner.optim` (shared with the managers: growth may replace
    # the optimizer and scheduler); these names read and write it.
    optimizer = property(
        lambda self: self.learner.optim.optimizer, lambda self, v: setattr(self.learner.optim, "optimizer", v)
    )
    scheduler = property(
        lambda self: self.learner.optim.scheduler, lambda self, v: setattr(self.learner.optim, "scheduler", v)
    )
    kl_ctrl = property(
        lambda self: self.learner.optim.kl_ctrl, lambda self, v: setattr(self.learner.optim, "kl_ctrl", v)
    )
    updates_applied = property(lambda self: self.learner.updates_applied)  # optimizer steps taken

    def event(self, event: str, reason: str, **values) -> None:
        self.write_event({"step": self.step_idx, "event": event, "reason": reason, **values})

    def write_event(self, record: dict) -> None:
        """One events.jsonl record (the managers' `emit`; the sink is swapped when files open)."""
        self.events_sink.write(record)

    # ================================================================ one step
    def train_step(self) -> dict:
        self.step_idx += 1
        t_step = time.perf_counter()
        if self.is_eval_step():
            self.monitors.before_step(self.step_idx)  # snapshot for kl/to_prev
        # ------------------------------------------------------------ 1. rollout + rewards
        with self.timer("rollout"):
            batch, rollout_metrics = self.collector.collect()
        # ------------------------------------------------------------ 2. reference (A1/A2: once; B: none)
        with self.timer("ref"):
            self.ref.prepare(batch.tokens, batch.prompt_len)
        # ------------------------------------------------------------ 3. advantages
        adv_metrics, shape_metrics = self.learner.advantages(batch, self.ref)
        adv_metrics.update({**rollout_metrics, **shape_metrics})
        # ------------------------------------------------------------ 4. PPO epochs x minibatches
        with self.timer("train"):
            upd = self.learner.update(batch, self.ref, step=self.step_idx)
        # ------------------------------------------------------------ 5. metrics
        m = {
            "step": self.step_idx,
            "reward/mean": float(batch.rewards.mean()),
            "reward/std": float(batch.rewards.std()),
            **adv_metrics,
            **upd,
        }
        m.update(part_metrics(self.task, batch.responses, batch.answers))  # rg: reward/correct, reward/format
        m["response/len_mean"] = float(batch.mask.sum(1).mean())
        m["response/truncated_frac"] = float(batch.truncated.float().mean())
        m["kl/beta"] = self.learner.beta
        m["optim/lr"] = self.optimizer.param_groups[0]["lr"]
        if self.kl_ctrl is not None:
            self.kl_ctrl.update(upd.get(self.kl.metric_key, 0.0), batch.n)  # n = N samples (kl.py)
        # ------------------------------------------------------------ 6. resets, evaluation
        if self.is_eval_step():
            with self.timer("eval"):
                m.update(self.run_eval(batch))
        sig = StepSignals.of(m, self.kl.metric_key)  # what the triggers read (this step's reward/val)
        m.update(self.resets.after_step(self.step_idx, sig))
        m.update(self.growth.after_step(self.step_idx, sig))  # adapter/rank; grows if due
        m.update(self.pop_step_stats(time.perf_counter() - t_step))
        self.metrics_sink.write(m)
        return m

    # ================================================================ checkpoints (io/checkpoint.py)
    def state_dict(self) -> dict:
        """Every part of a resumable run, named: the stateful components in load order (growth
        first: it grows policy, reference and optimizer to the saved adapter rank), the RNG
        streams, the step, the optimizer-step count and the run's records (RECORDS)."""
        scalars = {
            "T_max": self.T_max,
            "P": self.P,
            "step_idx": self.step_idx,
            "updates_applied": self.learner.updates_applied,
            **{k: getattr(self, k) for k in self.RECORDS if getattr(self, k) is not None},
        }
        return state_tree.state_tree(self.step_idx, self._components(), self._generators, scalars)

    #: what the run has recorded about itself (warm start, precision, per-prompt evaluations before
    #: and after RL): saved with the checkpoint so a resumed run reports them
    RECORDS = ("warmstart_info", "precision_info", "val_before", "val_after")

    def load_state_dict(self, state: dict) -> None:
        """Overwrite this freshly built Trainer with a saved state (RNG states included); the LR
        schedule's horizon follows this run's --steps. Mismatches raise checkpoint.CheckpointError."""
        horizons = [getattr(f, "total_steps", None) for f in getattr(self.scheduler, "lr_lambdas", [])]
        scalars = state_tree.load_state_tree(state, self._components, self._generators)
        for f, total in zip(getattr(self.scheduler, "lr_lambdas", []), horizons):  # growth may have replaced it
            if total is not None:
                f.total_steps = total
        for k in self.RECORDS:
            setattr(self, k, scalars.get(k, getattr(self, k, None)))  # a resume skipped the warm start
        self.learner.updates_applied = int(scalars.get("updates_applied", 0))
        self.step_idx = int(state["step"])

    def _components(self) -> dict:
        parts = {
            "growth": self.growth,
            "policy": self.policy,
            "ref": self.ref,
            "optimizer": self.optimizer,
            "scheduler": self.scheduler,
            "kl_ctrl": self.kl_ctrl,
            "critic": self.critic,  # --adv gae only: old checkpoints and other arms have none
            "resets": self.resets,
            "monitors": self.monitors,
        }
        return {k: v for k, v in parts.items() if v is not None and hasattr(v, "state_dict")}

    #: the seeded generators a checkpoint restores
    _generators = property(
        lambda self: {"data_rng": self.data_rng, "sample_gen": self.sample_gen, "order_gen": self.order_gen}
    )

    # ================================================================ evaluation and stats
    def is_eval_step(self) -> bool:
        ev = self.specs.evaluation
        return self.step_idx % ev.eval_every == 0 or self.step_idx == ev.steps

    def run_eval(self, batch: RolloutBatch) -> dict:
        """Greedy validation reward, then the drift monitors (kl/to_init, kl/to_prev,
        policy/delta_logp; their forwards are in count/monitor_fwd), then sample texts."""
        val, texts, gs = evaluate(self.policy, self.task, self.tok, self.val_set, self.T_max, self.P)
        self.counters.add("policy_fwd_eval", gs.fwd_calls)
        for e, s in list(zip(self.val_set, texts))[:4]:
            self.samples_sink.write(
                {
                    "step": self.step_idx,
                    "split": "val",
                    "prompt": e.prompt,
                    "response": s,
                    "answer": e.answer,
                    "reward": self.task.reward(s, e.answer),
                }
            )
        val_parts = part_metrics(self.task, texts, [e.answer for e in self.val_set], "reward/val_")
        ev = self.specs.evaluation
        if self.step_idx == ev.steps:
            self.val_after = per_prompt(self.task, self.val_set, texts)
        if ev.eval_samples:  # its own seeded generator: training's streams are untouched
            gen = torch.Generator(device=self.device).manual_seed(ev.seed * 1000 + 7 + self.step_idx)
            passk, gs = sampled_pass_at_k(
                self.policy,
                self.task,
                self.tok,
                self.val_set,
                ev.eval_samples,
                self.T_max,
                ev.temperature,
                gen,
                self.P,
                draw=ev.sample_draw,
            )
            self.counters.add("policy_fwd_eval", gs.fwd_calls)
            val_parts.update(passk)
        return {"reward/val": val, **val_parts, **self.monitors.measure(batch)}

    def pop_step_stats(self, step_seconds: float) -> dict:
        out: dict[str, float] = {}
        out.update(self.counters.pop())
        out.update(self.ref.pop_counts())
        if self.critic is not None:
            out.update(self.critic.pop_counts())  # count/critic_fwd, count/tokens_critic
        times = self.timer.pop()
        ref_in_train = times.get("time/ref_in_train", 0.0)
        out.update(
            {
                "time/rollout": times.get("time/rollout", 0.0),
                "time/ref": times.get("time/ref", 0.0) + ref_in_train,
                "time/train": times.get("time/train", 0.0) - ref_in_train,
                "time/eval": times.get("time/eval", 0.0),
                "time/step": step_seconds,
            }
        )
        tokens = out["count/tokens_policy"] + out["count/tokens_ref"]
        out["perf/tokens_per_s"] = tokens / max(step_seconds, 1e-9)
        out["perf/peak_rss_mb"] = peak_rss_mb()
        return out
