"""The memory estimate of one run (local engine, one process): each term by name, the flag that
drives it, and the peak they add up to.

Legend: B prompts, G samples per prompt, N = B*G, P prompt length, T response length, L = P + T,
V vocabulary, C width, I MLP width, K key/value width per layer (kv heads x head size), n rows of a
pass, W elements of one copy of the policy.

The process's peak resident memory is modelled as

    peak = baseline + max(sum(held) + max(phases), warm_start)

`held` terms live from set-up to the end of the run: the policy's weights; gradients and Adam's two
moments of the trainable parameters (all of them, or only the LoRA adapters at the largest rank
the run can reach when --enable_growth freezes the base); the reference (Variant A: a copy of
the policy; Variant B has none); the critic of --adv gae (a copy of the policy with its own
gradients and Adam moments; other runs have no such term); the drift monitor's initial and previous snapshots (two
state-dict clones, kept by every run); the best checkpoint (--reset_to best). The copies share
a frozen base with the policy (models.base.frozen_parameters), so under --enable_growth each
costs its adapters and buffers only; the [N, T, V] logits of --kl_estimator full; the validation set (--n_val);
the sampler's packed copy of the Linear weights (hf:PATH on CPU unless --decode_weights plain).
`phases` happen one at a time: the rollout (KV cache of N rows and one position's logits), a
no-grad log-prob pass over the batch (reference forward, --tis_cap, policy/delta_logp), one
micro-batch's forward and backward (saved activations plus five [n, T, V] logits-sized tensors),
the optimizer step (foreach Adam's temporaries), the greedy evaluation (at most 32 prompts per
generate call, sampling.evaluate; pass@k 256 sequences) and the drift monitor (64 sequences,
logits in 64 MiB row chunks). The
warm start (toy models) trains every parameter with its own Adam before the reference and the
snapshots exist, so it is compared with the rest as a whole.

`baseline` is the measured resident memory of a run of a tiny model: Python, torch and this package
(plus transformers for hf:PATH). The constants below were fitted on this project's CPU machine;
tests/slow/test_memory_estimate.py checks estimate / measured peak on three sizes. The policy's
`Shape` and the run's (P, T), which the terms scale with, come from memory_shape.py.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field

from noma_prorl_bench.config.specs import RunSpecs
from noma_prorl_bench.io.memory_shape import Shape, model_shape, prompt_response_tokens

MiB = 2**20
BASELINE = {"toy": 330 * MiB, "hf": 400 * MiB}  # measured peaks: tiny GRU run; tiny HF run (transformers loaded)
EVAL_BATCH = 32  # prompts per greedy generate call of the evaluation (rollout/sampling.EVAL_BATCH)
EVAL_CHUNK = 256  # sequences per generate call of pass@k (rollout/pass_at_k.py, --eval_samples)
MONITOR_ROWS = 64  # drift-monitor sequences (training/reset_loop.MONITOR_PROMPTS)
MONITOR_CHUNK = 2**24  # logits elements per drift-monitor tensor (training/monitors.py)
WARMSTART_ROWS = 64  # demonstrations per warm-start step (training/warmstart.py)
PER_VAL_EXAMPLE = 1024  # bytes per validation prompt (measured ~690 on reverse_digits: Example, response, records)
LOGITS_COPIES_TRAIN = 5  # logits, /temperature, log_softmax (saved), its gradient, the logits' gradient
LOGITS_COPIES_NOGRAD = 3  # logits, /temperature, log_softmax
# resident bytes of the packed copies per byte of Linear weights (models/packed.py), measured on
# SmolLM2-135M at 16 rows: MKL's packed float32 layout +1,018 MiB for 513 MiB of weights, oneDNN's
# bf16 +238 MiB for 256 MiB
PACKED_PER_WEIGHT_BYTE = {4: 2.0, 2: 0.93}


@dataclass
class Estimate:
    """The estimate of one run: terms in bytes, each with its flag, and how they combine."""

    baseline: int
    held: dict[str, int]
    phases: dict[str, int]
    warm_start: int
    flags: dict[str, str]
    prompt_tokens: int
    response_tokens: int
    notes: dict[str, object] = field(default_factory=dict)

    @property
    def main(self) -> int:
        return sum(self.held.values()) + max(self.phases.values(), default=0)

    @property
    def total(self) -> int:
        return self.baseline + max(self.main, self.warm_start)

    @property
    def peak_phase(self) -> str:
        if self.warm_start > self.main:
            return "warm_start"
        return max(self.phases, key=lambda k: self.phases[k]) if self.phases else "none"

    def contributions(self) -> dict[str, int]:
        """The terms that make up `total` beyond the baseline: the held terms and the peak phase."""
        if self.peak_phase == "warm_start":
            return {"warm_start": self.warm_start}
        return {**self.held, self.peak_phase: self.phases.get(self.peak_phase, 0)}

    def largest_flag(self) -> str:
        """The flag whose terms add up to the largest part of `total`."""
        by_flag: dict[str, int] = {}
        for k, v in self.contributions().items():
            by_flag[self.flags[k]] = by_flag.get(self.flags[k], 0) + v
        return max(by_flag, key=lambda f: by_flag[f])

    def to_event(self) -> dict:
        """The `memory_estimate` event's values (MiB, one decimal)."""
        mib = lambda d: {k: round(v / MiB, 1) for k, v in d.items()}  # noqa: E731
        return {
            "total_mib": round(self.total / MiB, 1),
            "baseline_mib": round(self.baseline / MiB, 1),
            "held_mib": mib(self.held),
            "phases_mib": mib(self.phases),
            "warm_start_mib": round(self.warm_start / MiB, 1),
            "peak_phase": self.peak_phase,
            "flags": dict(self.flags),
            "prompt_tokens": self.prompt_tokens,
            "response_tokens": self.response_tokens,
            **self.notes,
        }


# ---------------------------------------------------------------------------- the terms
def _per_token(s: Shape) -> int:
    """Activation elements one layer saves per token for backward (fitted; see the module doc)."""
    if s.kind == "hf":
        return 9 * s.width + 3 * s.kv + 4 * s.ffn  # norms, q/k/v and rotary, attention, gate/up/act/product
    if s.kind == "transformer":
        return 10 * s.width + 2 * s.ffn  # norms, q/k/v, attention, up, GELU
    return 12 * s.width  # GRU gates


def _decode(s: Shape, rows: int, prompts: int, P: int, T: int) -> int:
    """Sampling `rows` sequences from `prompts` distinct prompts: the KV cache (or hidden state)
    while the prefill's cache is repeated to all rows, the prefill's one-layer activations and
    one position's logits (float32 logits, /temperature, log-softmax, probabilities)."""
    if s.kind == "gru":
        cache = rows * s.width * 4
    else:
        cache = s.layers * 2 * s.kv * (P + T) * s.act_bytes * (rows + (prompts if prompts < rows else 0))
    return cache + prompts * P * _per_token(s) * s.act_bytes + 4 * rows * s.vocab * 4 + rows * T * 24


def _logits_positions(s: Shape, P: int, T: int) -> int:
    """Positions whose logits a teacher-forced pass materialises: T + 1 for hf:PATH (keep_last), L for toys."""
    return T + 1 if s.kind == "hf" else P + T


def _logprob_pass(sp: RunSpecs, s: Shape, rows: int, P: int, T: int, copies: int, train: bool) -> int:
    """One log-prob pass over `rows` sequences: activations (all layers with grad, one layer
    without; block inputs only under --grad_checkpoint) and `copies` logits-sized tensors
    (`--logprob_chunk` positions at a time when set). With --shared_prompt (hf:PATH) the trunk runs
    each distinct prompt's P - 1 positions once (at most B of them) and rows x (T + 1) positions,
    and every layer holds the prompts' keys and values gathered to the rows."""
    L, a = P + T, _per_token(s) * s.act_bytes
    positions_run = rows * L  # token positions through the trunk
    gathered = 0  # --shared_prompt: the prompts' keys and values gathered to every row, per layer
    if sp.model.shared_prompt and s.kind == "hf" and P > 1:
        prompts = min(rows, sp.rollout.shape.batch_size)  # at most B distinct prompts among the rows
        positions_run = prompts * (P - 1) + rows * (T + 1)
        gathered = rows * (P - 1) * 2 * s.kv * s.act_bytes
    if train:
        saved = (
            positions_run * (s.width * s.layers * s.act_bytes + a)
            if sp.model.grad_checkpoint
            else (positions_run * a + gathered) * s.layers
        )
        act = saved + positions_run * a + gathered  # + one layer's gradients in backward
    else:
        act = positions_run * a + gathered
    chunk = sp.objective.logprob_chunk
    positions = min(chunk, rows * T) if chunk > 0 else rows * _logits_positions(s, P, T)
    return act + copies * positions * s.vocab * 4


def _monitor(sp: RunSpecs, s: Shape, P: int, T: int) -> int:
    """The drift monitor: MONITOR_ROWS greedy sequences, rows chunked so that one logits tensor
    holds at most MONITOR_CHUNK elements; about 7 such tensors live at once (kl_full of two)."""
    rows = min(MONITOR_ROWS, sp.task.n_val)
    chunk = min(rows, max(1, MONITOR_CHUNK // max(T * s.vocab, 1)))
    return 7 * chunk * _logits_positions(s, P, T) * s.vocab * 4 + chunk * (P + T) * _per_token(s) * s.act_bytes


def packed_bytes(sp: RunSpecs, s: Shape) -> int:
    """--decode_weights packed (auto with hf:PATH) on CPU: the sampler's packed copy of every Linear
    weight, kept while the weights are unchanged (models/packed.py); 0 for plain, toy models, CUDA."""
    if sp.model.decode_weights == "plain" or s.kind != "hf" or sp.model.device == "cuda":
        return 0
    return int(s.linear_bytes * PACKED_PER_WEIGHT_BYTE[s.act_bytes])


def term_flags(sp: RunSpecs, held: dict[str, int], own_beyond_shared: bool) -> dict[str, str]:
    """Each term's driving flag (term -> flag name); `own_beyond_shared`: a copy's own bytes
    exceed the shared frozen base (then the adapters' rank drives the weights)."""
    size_flag = "hidden" if sp.model.model == "gru" else "d_model" if sp.model.model == "transformer" else "model"
    batch_flag = "batch_size" if sp.rollout.shape.batch_size >= sp.rollout.shape.group_size else "group_size"
    rank_flag = "max_rank" if sp.growth.enable_growth else size_flag  # adapters at their largest rank drive these
    flags = {
        "weights": rank_flag if own_beyond_shared else size_flag,
        "grads_adam": rank_flag,
        "reference": rank_flag,
        "monitor_snapshots": rank_flag,
        "best_snapshot": "reset_to",
        "kl_full_logits": "kl_estimator",
        "val_set": "n_val",
        "packed_weights": "decode_weights",
        "rollout": batch_flag,
        "logprob_pass": batch_flag,
        "update": "micro_batch" if sp.optimizer.micro_batch > 0 else batch_flag,
        "optimizer_step": rank_flag,
        "evaluation": "n_val",
        "drift_monitor": "n_val",
        "warm_start": "warmstart_steps",
    }
    if "critic" in held:
        flags["critic"] = "adv"
    return flags


def build_estimate(sp: RunSpecs, shape: Shape, P: int, T: int) -> Estimate:
    """The estimate for the run of specs `sp` with the policy `shape`, prompt length P and response length T."""
    N = sp.rollout.shape.batch_size * sp.rollout.shape.group_size
    n_train = sp.optimizer.micro_batch if sp.optimizer.micro_batch > 0 else -(-N // sp.optimizer.minibatches)
    copy, s = shape.copy_bytes, shape
    own = copy - s.shared_bytes  # a copy beyond the shared frozen base
    held = {
        "weights": copy,
        "grads_adam": 3 * s.trainable * 4,  # gradient, exp_avg, exp_avg_sq (float32)
        "reference": own if sp.reference.variant == "A" else 0,  # ReferenceHolder's copy
        "monitor_snapshots": 2 * own,  # kl/to_init and kl/to_prev clones
        "best_snapshot": own if sp.resets.reset_to == "best" else 0,
        "kl_full_logits": N * T * s.vocab * 4 if sp.objective.kl.estimator == "full" else 0,
        "val_set": sp.task.n_val * PER_VAL_EXAMPLE,
        "packed_weights": packed_bytes(sp, s),
    }
    if sp.critic.enabled:  # --adv gae: the value model (a copy beyond the shared base), its grads and Adam
        held["critic"] = own + 3 * s.trainable * 4
    eval_rows = min(sp.task.n_val, EVAL_BATCH)
    if sp.evaluation.eval_samples:
        k = sp.evaluation.eval_samples
        eval_rows = max(eval_rows, min(sp.task.n_val, max(1, EVAL_CHUNK // k)) * k)
    phases = {
        "rollout": _decode(s, N, sp.rollout.shape.batch_size, P, T),
        "logprob_pass": _logprob_pass(sp, s, N, P, T, LOGITS_COPIES_NOGRAD, train=False),
        "update": _logprob_pass(sp, s, n_train, P, T, LOGITS_COPIES_TRAIN, train=True) + N * (P + T) * 8,
        "optimizer_step": s.trainable * 4,  # foreach Adam's sqrt(exp_avg_sq) temporary
        "evaluation": _decode(s, eval_rows, eval_rows, P, T),
        "drift_monitor": _monitor(sp, s, P, T),
    }
    warm = 0
    if s.kind != "hf" and sp.warm_start.warmstart_steps_resolved > 0:
        warm = (
            5 * s.full_params * 4
            + WARMSTART_ROWS * (P + T) * _per_token(s) * 4 * (s.layers + 1)
            + 3 * WARMSTART_ROWS * (P + T) * s.vocab * 4
        )
    flags = term_flags(sp, held, own > s.shared_bytes)
    notes: dict[str, object] = {
        "params_per_copy_mib": round(copy / MiB, 1),
        "shared_frozen_mib": round(s.shared_bytes / MiB, 1),
        "trainable_params": s.trainable,
        "update_rows": n_train,
        "eval_rows": eval_rows,
    }
    return Estimate(BASELINE["hf" if s.kind == "hf" else "toy"], held, phases, warm, flags, P, T, notes)


_CACHE: dict[str, Estimate] = {}


def estimate(sp: RunSpecs) -> Estimate:
    """The run's Estimate from its specs (computed once per configuration and process)."""
    key = json.dumps(dataclasses.asdict(sp), sort_keys=True, default=str)
    if key not in _CACHE:
        P, T = prompt_response_tokens(sp)
        _CACHE[key] = build_estimate(sp, model_shape(sp, P + T), P, T)
    return _CACHE[key]


def gib(n: float) -> str:
    return f"{n / 2**30:.1f} GiB"


def parts_text(est: Estimate) -> str:
    """'update --batch_size: 1.2 GiB, weights --d_model: 0.5 GiB, ..., baseline 0.3 GiB': the terms
    of `total` of at least 1/16 GiB, largest first, each with its flag."""
    parts = sorted(((k, v) for k, v in est.contributions().items() if v >= 2**26), key=lambda kv: -kv[1])
    return ", ".join([*(f"{k} --{est.flags[k]}: {gib(v)}" for k, v in parts), f"baseline {gib(est.baseline)}"])


def estimate_event(sp: RunSpecs) -> dict:
    """The `memory_estimate` record of events.jsonl (step 0); if the policy cannot be described
    up front (an architecture transformers cannot build from its config alone), a record that
    says so, and the run goes on."""
    record = {
        "step": 0,
        "event": "memory_estimate",
        "reason": "estimated peak resident memory by term (io/memory.py); measured: perf/peak_rss_mb",
    }
    try:
        return {**record, **estimate(sp).to_event()}
    except (ValueError, OSError, RuntimeError, ImportError, TypeError, AttributeError) as e:
        return {**record, "reason": f"no estimate: {type(e).__name__}: {str(e)[:200]}"}
