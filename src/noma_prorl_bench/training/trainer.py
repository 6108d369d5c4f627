"""The training loop, reading top to bottom.

One step = sample (rollout) -> score (rewards) -> reference (logp_ref, Variant A) ->
advantages -> `ppo_epochs` x `minibatches` optimizer steps -> resets / evaluation / logging.

Legend: B prompts, G samples per prompt, N = B*G, P prompt length, T response length,
L = P + T, V vocabulary, E ppo_epochs, M minibatches.

Counters are exact per step: `count/ref_fwd` is E*M for naive_epoch (A0), 1 for cached (A1)
and ring (A2), 0 for Variant B (which never constructs a reference model).
"""
from __future__ import annotations

import time

import numpy as np
import torch

from noma_prorl_bench.algorithms import kl as kl_lib
from noma_prorl_bench.algorithms import losses as loss_lib
from noma_prorl_bench.algorithms import objective
from noma_prorl_bench.algorithms.kl_term import KLTerm
from noma_prorl_bench.config import RunConfig
from noma_prorl_bench.io import checkpoint
from noma_prorl_bench.io.metrics import Counters, NullSink, StageTimer, peak_rss_mb
from noma_prorl_bench.models.build import build_policy
from noma_prorl_bench.models.base import policy_device, policy_logprobs
from noma_prorl_bench.rollout.pass_at_k import sampled_pass_at_k
from noma_prorl_bench.models.precision import hold_frozen_in_bf16, params_by_dtype
from noma_prorl_bench.rollout.reference import ReferenceHolder
from noma_prorl_bench.rollout.sampling import RolloutBatch, collect, evaluate
from noma_prorl_bench.tasks import is_user_task, make_task, part_metrics
from noma_prorl_bench.tasks.custom import check_vocabulary
from noma_prorl_bench.training import guards, micro
from noma_prorl_bench.training.growth_loop import GrowthManager, attach_adapters
from noma_prorl_bench.training.optim_state import OptimSide, run_scheduler
from noma_prorl_bench.training.reset_loop import EvalMonitors, ResetManager, monitor_prompts
from noma_prorl_bench.training.result import eval_bar, per_prompt
from noma_prorl_bench.training.warmstart import supervised_warm_start

REF_OVER_OLD_CLAMP = kl_lib.REF_OVER_OLD_CLAMP  # |log pi_ref/pi_old| clamp of the blog's k2 diagnostic
COUNTER_KEYS = ("policy_fwd_rollout", "policy_fwd_train", "tokens_policy", "monitor_fwd", "tokens_monitor",
                "policy_fwd_eval")


def set_determinism(cfg: RunConfig) -> None:
    torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)


class Trainer:
    """Owns the policy, the optional reference, the optimizer and the RNG streams of one run."""

    def __init__(self, cfg: RunConfig, metrics_sink=None, events_sink=None, samples_sink=None):
        self.cfg = cfg
        self.metrics_sink = metrics_sink or NullSink()
        self.events_sink = events_sink or NullSink()
        self.samples_sink = samples_sink or NullSink()
        set_determinism(cfg)
        # ------------------------------------------------------------ task, model, RNG streams
        self.task = make_task(cfg.task, n_val=cfg.n_val, cfg=cfg)
        self.T_max = cfg.max_new_tokens or self.task.max_new_tokens
        self.P = getattr(self.task, "prompt_len", None)        # None: longest prompt of each batch (text tasks)
        L_max = self.P + max(self.T_max, self.task.max_new_tokens) if self.P else None   # rollout and warm start
        self.policy, self.tok = build_policy(cfg, max_len=L_max)
        if is_user_task(cfg.task):
            check_vocabulary(self.task, self.tok, cfg)        # char models spell only their vocabulary
        self.device = policy_device(self.policy)               # --device (auto resolved)
        self.data_rng = np.random.default_rng([cfg.seed, 1])
        # torch.multinomial needs its generator on the policy's device: CPU runs keep the CPU
        # stream; CUDA runs get a CUDA generator with the same seed (a different stream).
        self.sample_gen = torch.Generator(device=self.device).manual_seed(cfg.seed * 1000 + 2)
        self.order_gen = torch.Generator().manual_seed(cfg.seed * 1000 + 4)
        self.val_set = self.task.validation_set()
        self.counters = Counters(COUNTER_KEYS)
        self.timer = StageTimer()
        self.step_idx = 0
        self.updates_applied = 0        # optimizer steps taken (a run with none ends non-zero)
        self.warmstart_info = self.warm_start()
        attach_adapters(cfg, self.policy, self.write_event)   # --enable_growth: LoRA, base frozen (growth_loop.py)
        self.precision_info = self.hold_precision()           # --dtype used and why; bf16 frozen base
        # ------------------------------------------------------------ reference (Variant A only)
        self.kl = KLTerm.from_config(cfg)          # the KL choice: estimator, placement, needs (kl_term.py)
        N_max = cfg.batch_size * cfg.group_size
        mode = "none" if cfg.variant == "B" else cfg.ref_compute
        self.ref = ReferenceHolder(self.policy, mode, cfg.temperature, N_max, self.T_max,
                                   keep_logits=self.kl.needs_ref_logits, chunk=cfg.logprob_chunk)
        # ------------------------------------------------------------ optimizer, schedule, KL coef
        optimizer = self.make_optimizer()
        self.optim = OptimSide(optimizer, run_scheduler(optimizer, cfg))     # shared with the managers
        self.kl_ctrl = (kl_lib.AdaptiveKLController(cfg.beta, cfg.target_kl, cfg.kl_horizon)
                        if cfg.target_kl > 0 else None)
        # ------------------------------------------------------------ resets, drift monitors, growth
        # Each manager gets the narrow state it acts on, never the Trainer (reset_loop.py, growth_loop.py).
        self.resets = ResetManager(cfg, self.policy, self.ref, self.optim, self.write_event,
                                   kl_key=self.kl.metric_key)   # triggers, best checkpoint, recovery
        self.monitors = EvalMonitors(cfg, self.policy, self.counters, self.write_event,   # kl/to_init, ...
                                     monitor_prompts(self.val_set, self.tok, self.P), self.T_max, self.tok)
        self.growth = GrowthManager(cfg, self.policy, self.ref, self.optim, self.write_event,
                                    resets=self.resets, snapshot_holders=(self.resets, self.monitors))

    # The optimizer side lives in `self.optim` (one object the managers share: growth may replace
    # the optimizer and scheduler); these names read and write it.
    optimizer = property(lambda self: self.optim.optimizer, lambda self, v: setattr(self.optim, "optimizer", v))
    scheduler = property(lambda self: self.optim.scheduler, lambda self, v: setattr(self.optim, "scheduler", v))
    kl_ctrl = property(lambda self: self.optim.kl_ctrl, lambda self, v: setattr(self.optim, "kl_ctrl", v))

    def checkpoint_components(self) -> dict:
        """The objects whose state_dict() make up a checkpoint, in load order: `growth` first
        (it grows policy, reference and optimizer to the saved adapter rank), then the policy."""
        comps = {"growth": self.growth, "policy": self.policy, "ref": self.ref,
                 "optimizer": self.optimizer, "scheduler": self.scheduler, "kl_ctrl": self.kl_ctrl,
                 "resets": self.resets, "monitors": self.monitors}
        return {k: v for k, v in comps.items() if v is not None and hasattr(v, "state_dict")}

    def use_reference(self, ref) -> None:
        """Swap the reference holder (the Ray learner's RemoteReference); the managers follow."""
        self.ref = self.resets.ref = self.growth.ref = ref

    # ================================================================ set-up pieces
    def make_optimizer(self) -> torch.optim.Optimizer:
        cls = torch.optim.AdamW if self.cfg.optimizer == "adamw" else torch.optim.Adam
        params = [p for p in self.policy.parameters() if p.requires_grad]
        return cls(params, lr=self.cfg.lr, weight_decay=self.cfg.weight_decay)

    def hold_precision(self) -> dict:
        """The `precision` event: the dtype used (--dtype auto resolved) and why; under bf16_mixed an
        HF policy's frozen Linear weights are stored in bf16 from here on (models/precision.py),
        before the reference copy and the optimizer are made."""
        n = hold_frozen_in_bf16(self.policy) if getattr(self.policy, "frozen_bf16", False) else 0
        dtype, why = getattr(self.policy, "dtype_choice", (self.cfg.dtype, f"--dtype {self.cfg.dtype}"))
        info = {"requested": self.cfg.dtype, "dtype": dtype, "frozen_bf16_tensors": n,
                "params_by_dtype": params_by_dtype(self.policy)}
        self.event("precision", why, **info)
        return {**info, "reason": why}

    def warm_start(self) -> dict:
        """The supervised warm start (training/warmstart.py), then a greedy evaluation; its cost
        is reported separately (the `warmstart` event)."""
        t0 = time.perf_counter()
        n_steps = supervised_warm_start(self.policy, self.task, self.tok, self.cfg, self.P, self.device)
        bar = eval_bar(self.cfg, len(self.val_set), "evaluating before RL")
        val, texts, _ = evaluate(self.policy, self.task, self.tok, self.val_set, self.T_max, self.P, bar=bar)
        self.val_before = per_prompt(self.task, self.val_set, texts)     # training/result.py
        info = {"steps": n_steps, "seconds": time.perf_counter() - t0, "val_reward": val}
        self.event("warmstart", "supervised warm start", **info)
        return info

    def event(self, event: str, reason: str, **values) -> None:
        self.write_event({"step": self.step_idx, "event": event, "reason": reason, **values})

    def write_event(self, record: dict) -> None:
        """One events.jsonl record (the managers' `emit`; the sink is swapped when files open)."""
        self.events_sink.write(record)

    # ================================================================ one step
    def train_step(self) -> dict:
        cfg = self.cfg
        self.step_idx += 1
        t_step = time.perf_counter()
        if self.is_eval_step():
            self.monitors.before_step(self.step_idx)                    # snapshot for kl/to_prev
        # ------------------------------------------------------------ 1. rollout + rewards
        with self.timer("rollout"):
            batch = self.rollout()
        # ------------------------------------------------------------ 2. reference (A1/A2: once)
        if cfg.variant == "A":
            with self.timer("ref"):
                self.ref.prepare(batch.tokens, batch.prompt_len)
        # ------------------------------------------------------------ 3. advantages
        rewards, shape_metrics = self.shaped_rewards(batch)                         # [N]
        ref = (self.ref.minibatch(batch.tokens, batch.prompt_len, slice(None))      # [N, T] view (A1/A2)
               if self.kl.in_reward else None)                                      # --kl_in reward only
        batch.advantages, adv_metrics = self.kl.advantages(                         # [N], or [N, T] (token form)
            rewards, batch.mask, cfg.adv, cfg.batch_size, cfg.group_size, beta=self.beta,
            logp_old=batch.logp_old, logp_ref=ref)
        adv_metrics.update({**self._rollout_metrics, **shape_metrics})
        # ------------------------------------------------------------ 4. PPO epochs x minibatches
        with self.timer("train"):
            upd = self.update(batch)
        # ------------------------------------------------------------ 5. metrics
        m = {"step": self.step_idx, "reward/mean": float(batch.rewards.mean()),
             "reward/std": float(batch.rewards.std()), **adv_metrics, **upd}
        m.update(part_metrics(self.task, batch.responses, batch.answers))   # rg: reward/correct, reward/format
        m["response/len_mean"] = float(batch.mask.sum(1).mean())
        m["response/truncated_frac"] = float(batch.truncated.float().mean())
        m["kl/beta"] = self.beta
        m["optim/lr"] = self.optimizer.param_groups[0]["lr"]
        if self.kl_ctrl is not None:
            self.kl_ctrl.update(upd.get(self.kl.metric_key, 0.0), batch.n)       # n = N samples (kl.py)
        # ------------------------------------------------------------ 6. resets, evaluation
        if self.is_eval_step():
            with self.timer("eval"):
                m.update(self.run_eval(batch))
        m.update(self.resets.after_step(self.step_idx, m))              # sees this step's reward/val
        m.update(self.growth.after_step(self.step_idx, m))              # adapter/rank; grows if due
        m.update(self.pop_step_stats(time.perf_counter() - t_step))
        self.metrics_sink.write(m)
        return m

    def rollout(self) -> RolloutBatch:
        """B prompts x G samples, scored. --dynamic_sampling 1 (DAPO): while fewer than B groups
        have a nonzero reward spread, sample another round of B prompts (at most
        objective.DS_MAX_EXTRA_ROUNDS extra), then keep B groups (objective.assemble_groups)."""
        cfg = self.cfg
        rounds = [self.sample_round()]
        self._rollout_metrics = {}
        if not cfg.dynamic_sampling:
            return rounds[0]
        n_informative = int(objective.informative_groups(rounds[0], cfg.group_size).sum())
        while n_informative < cfg.batch_size and len(rounds) <= objective.DS_MAX_EXTRA_ROUNDS:
            rounds.append(self.sample_round())
            n_informative += int(objective.informative_groups(rounds[-1], cfg.group_size).sum())
        batch, self._rollout_metrics = objective.assemble_groups(rounds, cfg.batch_size, cfg.group_size,
                                                                 self.tok.pad_id)
        return batch

    def sample_round(self) -> RolloutBatch:
        """One round of B fresh prompts x G samples; every policy forward is counted."""
        cfg = self.cfg
        examples = self.task.sample(self.data_rng, cfg.batch_size)
        batch, gs = collect(self.policy, self.task, self.tok, examples, cfg.group_size, self.T_max,
                            cfg.temperature, self.sample_gen, self.P)
        self.counters.add("policy_fwd_rollout", gs.fwd_calls)
        self.counters.add("tokens_policy", gs.tokens)
        return batch

    def shaped_rewards(self, batch: RolloutBatch) -> tuple[torch.Tensor, dict]:
        """The task rewards[N] with --overlong shape applied (objective.py); a KL in the reward is
        added by `self.kl.advantages` in the form --kl_reward_form names."""
        return objective.shape_rewards(batch.rewards, batch.mask, overlong=self.cfg.overlong, T_max=self.T_max)

    @property
    def beta(self) -> float:
        return self.kl_ctrl.value if self.kl_ctrl is not None else self.cfg.beta

    @property
    def loss_kl_key(self) -> str:
        """Name of the KL estimate in the loss (k1, k2, k3, k3_ratio, full), from the KLTerm."""
        return self.kl.key

    # ================================================================ the update
    def update(self, batch: RolloutBatch) -> dict:
        cfg = self.cfg
        N, M = batch.n, cfg.minibatches
        bounds = np.linspace(0, N, M + 1).astype(int)
        slices = [slice(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:])]
        sums: dict[str, float] = {}
        n_pass = 0
        self._anchor = torch.zeros_like(batch.logp_old)                 # logp_ref seen by the loss
        self.policy.train()
        inp, out_once = self.update_inputs(batch)
        for epoch in range(cfg.ppo_epochs):
            for j in torch.randperm(M, generator=self.order_gen).tolist():
                mb = self.minibatch_step(batch, slices[j], inp, record_anchor=epoch == 0)
                for k, v in mb.items():
                    sums[k] = sums.get(k, 0.0) + v
                n_pass += 1
        out = {k: v / n_pass for k, v in sums.items()}
        out.update(out_once)
        if cfg.variant == "A":
            out["kl/ref_over_old_k2"] = self.ref_over_old_k2(batch)
        return out

    def update_inputs(self, batch: RolloutBatch) -> tuple[objective.UpdateInputs, dict]:
        """The loss mask (--overlong filter) and, for --tis_cap or Variant B's exact KL, one no_grad forward of
        the pre-update policy over the batch (count/policy_fwd_train; chunked with --logprob_chunk): the learner's
        own logp_old (the ratio's denominator; TIS weights it against the sampler's) and the old logits [N, T, V]."""
        cfg = self.cfg
        mask, metrics = objective.loss_mask(batch.mask, batch.truncated, cfg.overlong)
        inp = objective.UpdateInputs(mask=mask, logp_old=batch.logp_old)
        b_full = self.kl.needs_old_logits
        if cfg.tis_cap > 0 or b_full:
            with torch.no_grad():
                logp, _, logits = policy_logprobs(self.policy, batch.tokens, batch.prompt_len, cfg.temperature,
                                                  chunk=cfg.logprob_chunk)   # logits None when chunked
            self.counters.add("policy_fwd_train", 1)
            self.counters.add("tokens_policy", batch.tokens.numel())
            if cfg.tis_cap > 0:
                inp.tis_weight = loss_lib.tis_weights(logp, batch.logp_old, cfg.tis_cap)   # [N, T]
                inp.logp_old = logp
            inp.old_logits = logits if b_full else None                                  # [N, T, V]
        return inp, metrics

    def minibatch_step(self, batch: RolloutBatch, sl: slice, inp: objective.UpdateInputs,
                       record_anchor: bool = True) -> dict:
        cfg = self.cfg
        mask = inp.mask[sl]
        self.optimizer.zero_grad(set_to_none=True)                     # --micro_batch: grads accumulate
        parts = [self.micro_backward(batch, m, sl, inp, record_anchor) for m in micro.slices(sl, cfg.micro_batch)]
        loss, logp, ent, pg, kl, kl_tok, metrics = micro.join(parts)   # the minibatch's, detached
        gn = (torch.nn.utils.clip_grad_norm_(self.policy.parameters(), cfg.max_grad_norm)
              if cfg.max_grad_norm > 0 else _grad_norm(self.policy))
        skipped = guards.nan_guard(self.policy, self.optimizer, cfg.on_nan, self.event, self.step_idx, sl, loss=loss,
                                   grad_norm=gn, logp=logp, kl=kl_tok, mask=batch.mask[sl])   # --on_nan: skip/stop
        if not skipped:
            self.optimizer.step()
            self.scheduler.step()
            self.updates_applied += 1
        with torch.no_grad():
            resp = batch.mask[sl]                                       # KL/entropy over all responses
            out = {f"kl/{k}": float(loss_lib.masked_mean(v, resp)) for k, v in kl.items()}
            out.update({"loss/total": float(loss), "optim/grad_norm": float(gn),
                        "loss/pg": float(loss_lib.aggregate(pg, mask, cfg.loss_agg_resolved, norm_const=self.T_max)),
                        "loss/kl": float(loss_lib.aggregate(kl_tok, mask, cfg.loss_agg_resolved, norm_const=self.T_max)),
                        "policy/entropy": float(loss_lib.masked_mean(ent, resp)),
                        "guard/nan_skip_frac": float(skipped)})
        out.update(metrics)
        return out

    def micro_backward(self, batch: RolloutBatch, sl: slice, ctx: slice, inp: objective.UpdateInputs,
                       record_anchor: bool) -> micro.Part:
        """Forward, loss and backward of rows `sl` of minibatch `ctx` (its share of ctx's loss)."""
        cfg = self.cfg
        P, tokens, mask = batch.prompt_len, batch.tokens[sl], inp.mask[sl]
        logp, ent, logits = micro.logprobs(self.policy, tokens, P, cfg.temperature, cfg.logprob_chunk)
        self.counters.add("policy_fwd_train", 1)
        self.counters.add("tokens_policy", tokens.numel())
        logits_anchor = None                                            # [n, T, V]: --kl_estimator full
        if cfg.variant == "A":
            with self.timer("ref_in_train"):
                anchor = self.ref.minibatch(tokens, P, sl)             # A0 runs a forward here
                if self.kl.needs_ref_logits:
                    logits_anchor = self.ref.minibatch_logits(tokens, P, sl)   # A0: that same forward
            if record_anchor:                                           # once per row: the k2 diagnostic
                self._anchor[sl] = anchor.detach()
        else:
            anchor = inp.logp_old[sl]                                   # B: trust region to pi_old
            logits_anchor = None if inp.old_logits is None else inp.old_logits[sl]
        pg, metrics = loss_lib.LOSSES[cfg.loss](
            logp, inp.logp_old[sl], batch.advantages[sl], mask, eps_low=cfg.eps_lo, eps_high=cfg.eps_hi,
            dual_clip_c=cfg.dual_clip_c or None, tis_weight=None if inp.tis_weight is None else inp.tis_weight[sl])
        kl = self.kl.estimates(logp, anchor, inp.logp_old[sl], logits=logits, logits_anchor=logits_anchor,
                               temperature=cfg.temperature)           # {name: [n, T]}
        kl_tok = self.kl.loss_term(kl, batch.logp_old[sl], anchor)     # zeros when the KL is in the reward
        loss = micro.aggregate_in(pg + self.beta * kl_tok, inp.mask[ctx], sl, ctx, cfg.loss_agg_resolved, self.T_max)
        loss = guards.inject_nan(loss, self.step_idx)                  # test hook, see guards.py
        loss.backward()
        return micro.Part(loss.detach(), logp.detach(), ent, pg.detach(), {k: v.detach() for k, v in kl.items()},
                          kl_tok.detach(), metrics, float(mask.sum()))

    @torch.no_grad()
    def ref_over_old_k2(self, batch: RolloutBatch) -> float:
        """Diagnostic: the ProRL-v2 blog's k2 with x = exp(clamp(log pi_ref/pi_old)), batch mean."""
        k2 = kl_lib.kl_terms(batch.logp_old, self._anchor, clamp=REF_OVER_OLD_CLAMP)["k2"]
        return float(loss_lib.masked_mean(k2, batch.mask))

    # ================================================================ checkpoints (checkpoint.py)
    def state_dict(self) -> dict:
        """Every component's state, the RNG streams and step_idx (see checkpoint.trainer_state)."""
        return checkpoint.trainer_state(self)

    def load_state_dict(self, state: dict) -> None:
        """Overwrite this freshly built Trainer with a saved state (RNG states included)."""
        checkpoint.load_trainer_state(self, state)

    # ================================================================ evaluation and stats
    def is_eval_step(self) -> bool:
        return self.step_idx % self.cfg.eval_every == 0 or self.step_idx == self.cfg.steps

    def run_eval(self, batch: RolloutBatch) -> dict:
        """Greedy validation reward, then the drift monitors (kl/to_init, kl/to_prev,
        policy/delta_logp; their forwards are in count/monitor_fwd), then sample texts."""
        val, texts, gs = evaluate(self.policy, self.task, self.tok, self.val_set, self.T_max, self.P)
        self.counters.add("policy_fwd_eval", gs.fwd_calls)
        for e, s in list(zip(self.val_set, texts))[:4]:
            self.samples_sink.write({"step": self.step_idx, "split": "val", "prompt": e.prompt, "response": s,
                                     "answer": e.answer, "reward": self.task.reward(s, e.answer)})
        val_parts = part_metrics(self.task, texts, [e.answer for e in self.val_set], "reward/val_")
        if self.step_idx == self.cfg.steps:
            self.val_after = per_prompt(self.task, self.val_set, texts)
        if self.cfg.eval_samples:                  # its own seeded generator: training's streams are untouched
            gen = torch.Generator(device=self.device).manual_seed(self.cfg.seed * 1000 + 7 + self.step_idx)
            passk, gs = sampled_pass_at_k(self.policy, self.task, self.tok, self.val_set, self.cfg.eval_samples,
                                          self.T_max, self.cfg.temperature, gen, self.P)
            self.counters.add("policy_fwd_eval", gs.fwd_calls)
            val_parts.update(passk)
        return {"reward/val": val, **val_parts, **self.monitors.measure(batch)}

    def pop_step_stats(self, step_seconds: float) -> dict:
        out = {}
        out.update(self.counters.pop())
        ref_counts = self.ref.pop_counts()
        out.update(ref_counts)
        times = self.timer.pop()
        ref_in_train = times.get("time/ref_in_train", 0.0)
        out.update({"time/rollout": times.get("time/rollout", 0.0),
                    "time/ref": times.get("time/ref", 0.0) + ref_in_train,
                    "time/train": times.get("time/train", 0.0) - ref_in_train,
                    "time/eval": times.get("time/eval", 0.0), "time/step": step_seconds})
        tokens = out["count/tokens_policy"] + out["count/tokens_ref"]
        out["perf/tokens_per_s"] = tokens / max(step_seconds, 1e-9)
        out["perf/peak_rss_mb"] = peak_rss_mb()
        return out


def _grad_norm(model) -> torch.Tensor:
    norms = [p.grad.detach().norm() for p in model.parameters() if p.grad is not None]
    return torch.stack(norms).norm() if norms else torch.tensor(0.0)

