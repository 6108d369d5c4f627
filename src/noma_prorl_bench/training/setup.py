"""A run's set-up, step by step: the work the Trainer's constructor leaves to its caller.

`Trainer.start` runs these steps in this order (each reads what the one before it built):
`prepare` (seeds -> task, policy and RNG streams) -> `warm_start_step` (the supervised warm start
and the evaluation before RL: the `warmstart` event and metrics.jsonl's step-0 row; a new run
only: a resumed run's are in its files and its checkpoint) -> `build_stages` (LoRA adapters
(--enable_growth) -> precision (the `precision` event) -> the stages built on the warm-started
policy (collector, reference, critic, learner) -> the managers (resets, drift monitors, growth)).
Each stage gets its own spec (config/specs/) and the narrow state it acts on.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from noma_prorl_bench.algorithms.kl_term import KLTerm
from noma_prorl_bench.config.specs import ModelSpec, WarmStartSpec
from noma_prorl_bench.io.metrics import peak_rss_mb
from noma_prorl_bench.models.base import policy_device
from noma_prorl_bench.models.build import build_policy
from noma_prorl_bench.models.precision import (
    cast_norm_outputs_once,
    float32_teacher_attention,
    hold_frozen_in_bf16,
    params_by_dtype,
)
from noma_prorl_bench.rollout.collector import BatchSource, Collector
from noma_prorl_bench.rollout.reference import make_reference
from noma_prorl_bench.rollout.reference_source import ReferenceSource
from noma_prorl_bench.rollout.sampling import evaluate
from noma_prorl_bench.tasks import is_user_task, make_task, part_metrics
from noma_prorl_bench.tasks.custom import check_vocabulary
from noma_prorl_bench.training.critic import Critic
from noma_prorl_bench.training.growth_loop import GrowthManager, attach_adapters
from noma_prorl_bench.training.learner import Learner
from noma_prorl_bench.training.reset_loop import EvalMonitors, ResetManager, monitor_prompts
from noma_prorl_bench.training.result import eval_bar, per_prompt
from noma_prorl_bench.training.warmstart import supervised_warm_start


def set_determinism(threads: int, seed: int) -> None:
    torch.set_num_threads(threads)
    torch.manual_seed(seed)


def warm_start(
    spec: WarmStartSpec, policy, task, tok, val_set, T_max: int, P, device, event
) -> tuple[dict, dict, dict]:
    """The supervised warm start (training/warmstart.py), then a greedy evaluation; its cost
    is reported separately (the `warmstart` event). Returns the event's values, the per-prompt
    record of that evaluation (training/result.py) and metrics.jsonl's step-0 row: `reward/val`
    (= the event's val_reward), the `reward/val_*` parts and `perf/peak_rss_mb`."""
    t0 = time.perf_counter()
    n_steps = supervised_warm_start(policy, task, tok, spec, P, device)
    bar = eval_bar(spec, len(val_set), "evaluating before RL")
    val, texts, _ = evaluate(policy, task, tok, val_set, T_max, P, bar=bar)
    info = {"steps": n_steps, "seconds": time.perf_counter() - t0, "val_reward": val}
    event("warmstart", "supervised warm start", **info)
    row = {
        "step": 0,
        "reward/val": val,
        **part_metrics(task, texts, [e.answer for e in val_set], "reward/val_"),
        "perf/peak_rss_mb": peak_rss_mb(),
    }
    return info, per_prompt(task, val_set, texts), row


def hold_precision(spec: ModelSpec, policy, event) -> dict:
    """The `precision` event: the dtype used (--dtype auto resolved) and why; under bf16_mixed an
    HF policy's frozen Linear weights are stored in bf16 from here on and its teacher-forced
    attention computes in float32 (models/precision.py), before the reference copy and the
    optimizer are made."""
    hf = getattr(policy, "frozen_bf16", False)
    n = hold_frozen_in_bf16(policy) if hf else 0
    fast: dict = {}  # the bf16 fast path's parts (models/precision.py), recorded where they apply
    if hf and getattr(policy, "compute_dtype", None) == torch.bfloat16:
        fast = {
            "float32_teacher_attention": float32_teacher_attention(policy),
            "norms_cast_once": cast_norm_outputs_once(policy),
        }
    dtype, why = getattr(policy, "dtype_choice", (spec.dtype, f"--dtype {spec.dtype}"))
    info = {
        "requested": spec.dtype,
        "dtype": dtype,
        "frozen_bf16_tensors": n,
        **fast,
        "params_by_dtype": params_by_dtype(policy),
    }
    event("precision", why, **info)
    return {**info, "reason": why}


def prepare(tr) -> None:
    """The first set-up step: seeds, then the task, policy, tokenizer, device and RNG streams."""
    set_determinism(tr.specs.threads, tr.specs.seed)
    task_and_policy(tr)


def warm_start_step(tr) -> None:
    """The supervised warm start and the evaluation before RL (`warm_start`): the `warmstart`
    event, then metrics.jsonl's step-0 row (the curve starts before RL)."""
    tr.warmstart_info, tr.val_before, tr.initial_metrics = warm_start(
        tr.specs.warm_start, tr.policy, tr.task, tr.tok, tr.val_set, tr.T_max, tr.P, tr.device, tr.event
    )
    tr.metrics_sink.write(tr.initial_metrics)


def build_stages(tr, collector: BatchSource | None = None, reference: ReferenceSource | None = None) -> None:
    """The last set-up step, on the policy as the warm start left it: adapters, precision, the
    stages and the managers. `collector` and `reference` replace the local ones (the Ray learner:
    batches and logp_ref arrive from elsewhere)."""
    attach_adapters(tr.specs.growth, tr.policy, tr.write_event)  # --enable_growth: LoRA, base frozen
    tr.precision_info = hold_precision(tr.specs.model, tr.policy, tr.event)  # --dtype used and why; bf16 frozen base
    stages(tr, collector, reference)
    managers(tr)


def task_and_policy(tr) -> None:
    """The task, its lengths (T_max, P), the policy and tokenizer, the device and the RNG streams."""
    specs = tr.specs
    ts, ms = specs.task, specs.model
    tr.task = make_task(ts.task, n_val=ts.n_val, spec=ts)
    tr.T_max = ts.max_new_tokens or tr.task.max_new_tokens
    tr.P = getattr(tr.task, "prompt_len", None)  # None: longest prompt of each batch (text tasks)
    L_max = tr.P + max(tr.T_max, tr.task.max_new_tokens) if tr.P else None  # rollout and warm start
    every = getattr(tr.task, "all_examples", None)  # jsonl:PATH: its longest prompt (<bos> ... <sep>)
    if L_max is None and every is not None:
        L_max = max(512, 2 + max(len(e.prompt) for e in every()) + max(tr.T_max, tr.task.max_new_tokens))
    tr.policy, tr.tok = build_policy(ms, max_len=L_max)
    if is_user_task(ts.task):
        check_vocabulary(tr.task, tr.tok, ms.model)  # char models spell only their vocabulary
    tr.device = policy_device(tr.policy)  # --device (auto resolved)
    tr.data_rng = np.random.default_rng([specs.seed, 1])
    # torch.multinomial needs its generator on the policy's device: CPU runs keep the CPU
    # stream; CUDA runs get a CUDA generator with the same seed (a different stream).
    tr.sample_gen = torch.Generator(device=tr.device).manual_seed(specs.seed * 1000 + 2)
    tr.order_gen = torch.Generator().manual_seed(specs.seed * 1000 + 4)
    tr.val_set = tr.task.validation_set()


def stages(tr, collector: BatchSource | None, reference: ReferenceSource | None) -> None:
    """The collector, the KL term, the reference, the critic (--adv gae) and the learner, built on
    the policy as it is now (after warm start, adapters and precision)."""
    specs = tr.specs
    tr.collector = (
        collector
        if collector is not None
        else Collector.from_spec(
            specs.rollout, tr.task, tr.tok, tr.policy, tr.T_max, tr.P, tr.data_rng, tr.sample_gen, tr.counters
        )
    )
    tr.kl = KLTerm.from_spec(specs.objective.kl)  # the KL choice: estimator, placement, needs (kl_term.py)
    rs = specs.reference
    tr.ref = (
        reference
        if reference is not None
        else make_reference(
            tr.policy,
            rs.mode,
            rs.shape.temperature,
            rs.rows,
            tr.T_max,
            keep_logits=tr.kl.needs_ref_logits,
            chunk=rs.logprob_chunk,
        )
    )
    # --adv gae: the value model, copied from the policy as it is now (after warm start, adapters)
    tr.critic = Critic(specs.critic, tr.policy) if specs.critic.enabled else None
    tr.learner = Learner(
        specs.objective,
        specs.optimizer,
        tr.policy,
        tr.kl,
        tr.T_max,
        tr.counters,
        tr.timer,
        tr.order_gen,
        tr.event,
        critic=tr.critic,
    )  # optimizer, scheduler, adaptive KL


def managers(tr) -> None:
    """Resets, drift monitors and growth: each gets its spec and the narrow state it acts on, never
    the Trainer."""
    specs, optim = tr.specs, tr.learner.optim
    tr.resets = ResetManager(
        specs.resets, tr.policy, tr.ref, optim, tr.write_event, critic=tr.critic, timer=tr.timer
    )  # triggers, best checkpoint, recovery, the critic's --critic_reset
    tr.monitors = EvalMonitors(
        specs.evaluation,
        tr.policy,
        tr.counters,
        tr.write_event,  # kl/to_init
        monitor_prompts(tr.val_set, tr.tok, tr.P),
        tr.T_max,
        tr.tok,
    )
    tr.growth = GrowthManager(
        specs.growth,
        specs.optimizer,
        tr.policy,
        tr.ref,
        optim,
        tr.write_event,
        resets=tr.resets,
        snapshot_holders=(tr.resets, tr.monitors),
    )
