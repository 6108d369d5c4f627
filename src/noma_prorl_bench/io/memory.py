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
tests/slow/test_memory_estimate.py checks estimate / measured peak on three sizes.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from typing import Any

from noma_prorl_bench.config.specs import RunSpecs

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
DEFAULT_PROMPT_TOKENS = 128  # hf:PATH when the task's prompts cannot be tokenised up front


@dataclass
class Shape:
    """What the estimate needs to know about the policy (counted on the meta device: no memory)."""

    kind: str  # gru | transformer | hf
    copy_bytes: int  # one copy of the policy: unique parameters and buffers, adapters at their largest rank
    full_params: int  # parameters before adapters (the warm start trains all of them)
    trainable: int  # parameters with gradients and Adam moments
    vocab: int
    width: int
    layers: int
    ffn: int  # MLP width I
    kv: int  # key/value width per layer K
    act_bytes: int = 4  # activations (2 under bf16 compute)
    shared_bytes: int = 0  # frozen parameters (a LoRA base): held once, aliased by every copy
    linear_bytes: int = 0  # the nn.Linear weights the sampler multiplies, in their compute dtype


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


# ---------------------------------------------------------------------------- the policy's shape
def _meta_policy(sp: RunSpecs, max_len: int):
    """The run's policy built on the meta device (no storage): toy models from their classes,
    hf:PATH from its config.json; adapters attached as the run attaches them."""
    import torch  # noqa: PLC0415

    from noma_prorl_bench.tasks.base import CharTokenizer  # noqa: PLC0415

    policy: Any
    with torch.device("meta"):
        if sp.model.model.startswith("hf:"):
            from transformers import AutoModelForCausalLM  # noqa: PLC0415

            from noma_prorl_bench.models.hf import HFPolicy, check_model_dir  # noqa: PLC0415

            _, config = check_model_dir(sp.model.model[3:])
            policy = HFPolicy(AutoModelForCausalLM.from_config(config), pad_id=0)
        elif sp.model.model == "gru":
            from noma_prorl_bench.models.gru import GRUPolicy  # noqa: PLC0415

            policy = GRUPolicy(CharTokenizer().vocab_size, hidden=sp.model.hidden)
        else:
            from noma_prorl_bench.models.build import MIN_MAX_LEN  # noqa: PLC0415
            from noma_prorl_bench.models.transformer import TransformerPolicy  # noqa: PLC0415

            policy = TransformerPolicy(
                CharTokenizer().vocab_size,
                d_model=sp.model.d_model,
                n_layers=sp.model.n_layers,
                n_heads=sp.model.n_heads,
                max_len=max(max_len, MIN_MAX_LEN),
            )
    return policy


def _copy_bytes(policy) -> int:
    """Bytes of one state-dict copy: unique parameters (tied weights once) and buffers."""
    return _copy_bytes_of([*policy.parameters(), *policy.buffers()])


def _copy_bytes_of(tensors) -> int:
    """Bytes of the distinct tensors among `tensors`."""
    seen, total = set(), 0
    for t in tensors:
        if id(t) not in seen:
            seen.add(id(t))
            total += t.numel() * t.element_size()
    return total


def model_shape(sp: RunSpecs, max_len: int) -> Shape:
    """The Shape of the run's policy: parameters, adapters at the largest reachable rank, dtype."""
    import torch  # noqa: PLC0415

    from noma_prorl_bench.models.lora import adapter_parameters, attach_lora, parse_targets  # noqa: PLC0415
    from noma_prorl_bench.models.precision import hold_frozen_in_bf16, resolve_dtype_choice  # noqa: PLC0415

    policy = _meta_policy(sp, max_len)
    full = sum(p.numel() for p in policy.parameters())
    dtype, _ = resolve_dtype_choice(sp.model.dtype, sp.model.model, "cuda" if sp.model.device == "cuda" else "cpu")
    scale = 1.0
    if sp.growth.enable_growth:
        attach_lora(policy, parse_targets(sp.growth.adapter_targets), sp.growth.initial_rank, freeze_base=True)
        g = sp.growth
        grows = g.grow_every > 0 or g.grow_on != "schedule"
        scale = (max(g.max_rank, g.initial_rank) if grows else g.initial_rank) / g.initial_rank
    if dtype == "bfloat16":
        policy = policy.to(torch.bfloat16)
    elif dtype == "bf16_mixed" and sp.model.model.startswith("hf:"):
        policy.compute_dtype = torch.bfloat16
        hold_frozen_in_bf16(policy)
    adapters = sum(p.numel() * p.element_size() for p in adapter_parameters(policy))
    trainable = sum(p.numel() for p in policy.parameters() if p.requires_grad)
    trainable = int(trainable * scale) if sp.growth.enable_growth else trainable
    c = getattr(getattr(policy, "model", None), "config", None)
    if c is not None:
        heads = c.num_attention_heads
        head_dim = getattr(c, "head_dim", None) or c.hidden_size // heads
        kv = getattr(c, "num_key_value_heads", None) or heads
        dims = (
            policy.vocab_size,
            c.hidden_size,
            c.num_hidden_layers,
            getattr(c, "intermediate_size", 4 * c.hidden_size),
            kv * head_dim,
        )
    elif sp.model.model == "gru":
        dims = (policy.vocab_size, sp.model.hidden, 1, 3 * sp.model.hidden, sp.model.hidden)
    else:
        dims = (policy.vocab_size, sp.model.d_model, sp.model.n_layers, 4 * sp.model.d_model, sp.model.d_model)
    low = dtype in ("bfloat16", "bf16_mixed")
    frozen = _copy_bytes_of([p for p in policy.parameters() if not p.requires_grad])
    linear_params = sum(m.weight.numel() for m in policy.modules() if isinstance(m, torch.nn.Linear))
    return Shape(
        "hf" if c is not None else sp.model.model,
        _copy_bytes(policy) + int(adapters * (scale - 1)),
        full,
        trainable,
        *dims,
        act_bytes=2 if low else 4,
        shared_bytes=frozen,
        linear_bytes=linear_params * (2 if low else 4),
    )


def prompt_response_tokens(sp: RunSpecs) -> tuple[int, int]:
    """(P, T): toy tasks know theirs; other tasks are measured on their prompts: every prompt of a
    task that lists them all (jsonl:PATH: the longest prompt of the file sizes every sequence),
    else up to 64 validation prompts and 64 training draws; for hf:PATH the 128 longest of those in
    characters are tokenised (the tokenizer, chat template included), else DEFAULT_PROMPT_TOKENS."""
    from noma_prorl_bench.tasks.toy import TOY_TASKS  # noqa: PLC0415

    task: Any
    if sp.task.task in TOY_TASKS:
        task = TOY_TASKS[sp.task.task](n_val=1)
        return task.prompt_len, max(sp.task.max_new_tokens or task.max_new_tokens, 1)
    try:
        import numpy as np  # noqa: PLC0415

        from noma_prorl_bench.tasks import make_task  # noqa: PLC0415

        task = make_task(sp.task.task, n_val=min(sp.task.n_val, 64), cfg=sp.task)
        T = max(sp.task.max_new_tokens or task.max_new_tokens, 1)
        every = getattr(task, "all_examples", None)
        ex = every() if every else task.validation_set()[:64] + task.sample(np.random.default_rng(0), 64)
        if not sp.model.model.startswith("hf:"):
            return 2 + max(len(e.prompt) for e in ex), T
        from transformers import AutoTokenizer  # noqa: PLC0415

        from noma_prorl_bench.models.hf import HFTokenizerAdapter  # noqa: PLC0415

        hf_tok = AutoTokenizer.from_pretrained(os.path.expanduser(sp.model.model[3:]), local_files_only=True)
        tok = HFTokenizerAdapter(hf_tok, chat=sp.task.task.startswith("rg:"))
        longest = sorted({e.prompt for e in ex}, key=len)[-128:]
        return max(len(tok.prompt_ids(p)) for p in longest), T
    except Exception:  # noqa: BLE001  (a task that cannot be built here fails with its own message later)
        return DEFAULT_PROMPT_TOKENS, max(sp.task.max_new_tokens or 64, 1)


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


def build_estimate(sp: RunSpecs, shape: Shape, P: int, T: int) -> Estimate:
    """The estimate for the run of specs `sp` with the policy `shape`, prompt length P and response length T."""
    N = sp.rollout.shape.batch_size * sp.rollout.shape.group_size
    n_train = sp.optimizer.micro_batch if sp.optimizer.micro_batch > 0 else -(-N // sp.optimizer.minibatches)
    size_flag = "hidden" if sp.model.model == "gru" else "d_model" if sp.model.model == "transformer" else "model"
    batch_flag = "batch_size" if sp.rollout.shape.batch_size >= sp.rollout.shape.group_size else "group_size"
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
    rank_flag = "max_rank" if sp.growth.enable_growth else size_flag  # adapters at their largest rank drive these
    flags = {
        "weights": rank_flag if own > s.shared_bytes else size_flag,
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
