"""What the memory estimate (memory.py) knows about a run before it starts: the policy's `Shape`,
counted on the meta device (no storage: parameters, the adapters at the largest rank the run can
reach, the compute dtype, the widths the terms scale with), and the prompt and response lengths
(P, T) of its task.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from noma_prorl_bench.config.specs import RunSpecs

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


def _meta_policy(sp: RunSpecs, max_len: int):
    """The run's policy built on the meta device (no storage): toy models from their classes,
    hf:PATH from its config.json; adapters attached as the run attaches them."""
    import torch  # noqa: PLC0415

    from noma_prorl_bench.models.startup import meta_modules  # noqa: PLC0415
    from noma_prorl_bench.tasks.base import CharTokenizer  # noqa: PLC0415

    policy: Any
    # toy models skip their init draws (no torch._dynamo import at start-up; models/startup.py)
    with torch.device("meta") if sp.model.model.startswith("hf:") else meta_modules():
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

        task = make_task(sp.task.task, n_val=min(sp.task.n_val, 64), spec=sp.task)
        T = max(sp.task.max_new_tokens or task.max_new_tokens, 1)
        every = getattr(task, "all_examples", None)
        ex = every() if every else task.validation_set()[:64] + task.sample(np.random.default_rng(0), 64)
        if not sp.model.model.startswith("hf:"):
            return 2 + max(len(e.prompt) for e in ex), T
        from transformers import AutoTokenizer  # noqa: PLC0415

        from noma_prorl_bench.models.hf_tokenizer import HFTokenizerAdapter  # noqa: PLC0415

        hf_tok = AutoTokenizer.from_pretrained(os.path.expanduser(sp.model.model[3:]), local_files_only=True)
        tok = HFTokenizerAdapter(hf_tok, chat=sp.task.task.startswith("rg:"))
        longest = sorted({e.prompt for e in ex}, key=len)[-128:]
        return max(len(tok.prompt_ids(p)) for p in longest), T
    except Exception:  # noqa: BLE001  (a task that cannot be built here fails with its own message later)
        return DEFAULT_PROMPT_TOKENS, max(sp.task.max_new_tokens or 64, 1)
