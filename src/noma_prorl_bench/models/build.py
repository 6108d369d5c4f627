"""Build the policy of a run: GRU (default), transformer with KV cache, or a Hugging Face causal LM.

`build_policy(spec, max_len)` returns `(policy, tokenizer)` for a `ModelSpec`, on `--device` in
`--dtype` (bf16_mixed: float32 parameters, `policy.compute_dtype = torch.bfloat16` autocast; auto:
resolved by `models.precision.resolve_dtype_choice`, the choice and its reason kept as
`policy.dtype_choice = (dtype, reason)`),
with `--grad_checkpoint` and `--shared_prompt` switched on and `--compile_decode` set. Errors a user can fix (a bad
`hf:PATH`, `--device cuda` without CUDA) are `config.ConfigError`s naming the flag, which the CLI
reports with exit code 2.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from noma_prorl_bench.config.specs import ModelSpec

TOY_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "bf16_mixed": torch.float32}
# The transformer's position table holds max(P + T, MIN_MAX_LEN) rows. Its init draws come
# before the blocks', so its size shapes the whole initialisation; the floor keeps every run
# whose P + T fits in 64 (all toy-task defaults) initialised exactly as before max_len was derived.
MIN_MAX_LEN = 64


def resolve_device(name: str) -> torch.device:
    """cpu | cuda | auto -> torch.device (auto picks cuda when available)."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda requested but no CUDA device is available")
    return torch.device(name)


def build_policy(spec: ModelSpec, max_len: int | None = None):
    """(policy, tokenizer) for spec.model in gru | transformer | hf:PATH, on spec.device in spec.dtype
    (`spec`: the run's config/specs.ModelSpec; tests also hand a RunConfig, which has its fields).

    `max_len`: the longest sequence the transformer must handle, P + T of the task (its
    position table gets max(max_len, MIN_MAX_LEN) rows; 512 when not given)."""
    from noma_prorl_bench.config import ConfigError  # noqa: PLC0415
    from noma_prorl_bench.tasks.base import CharTokenizer  # noqa: PLC0415

    policy: Any
    tok: Any
    try:
        device = resolve_device(spec.device)
    except ValueError as e:
        raise ConfigError("device", f"{e} (choose from cpu, cuda, auto)") from e
    from noma_prorl_bench.models.precision import resolve_dtype_choice  # noqa: PLC0415

    dtype, why = resolve_dtype_choice(spec.dtype, spec.model, device)
    if spec.model.startswith("hf:"):
        from noma_prorl_bench.models.hf import load_hf_policy  # noqa: PLC0415  (needs transformers)

        try:
            # rg: tasks are chat prompts: the tokenizer's chat template wraps each as a user turn
            policy, tok = load_hf_policy(spec.model[3:], device=device, dtype=dtype, chat=spec.task.startswith("rg:"))
        except ValueError as e:
            raise ConfigError("model", str(e)) from e
        if getattr(spec, "grad_checkpoint", False):
            policy.set_grad_checkpoint(True)
        if getattr(spec, "shared_prompt", False):
            try:
                policy.set_shared_prompt(True)
            except ValueError as e:
                raise ConfigError("shared_prompt", str(e)) from e
        policy.decode_weights = "plain" if getattr(spec, "decode_weights", "auto") == "plain" else "packed"
        policy.dtype_choice = (dtype, why)
        return policy, tok
    tok = CharTokenizer()
    if spec.model == "gru":
        from noma_prorl_bench.models.gru import GRUPolicy  # noqa: PLC0415

        policy = GRUPolicy(tok.vocab_size, hidden=spec.hidden)
        policy.shared_prompt = bool(getattr(spec, "shared_prompt", False))
    else:
        from noma_prorl_bench.models.transformer import TransformerPolicy  # noqa: PLC0415

        policy = TransformerPolicy(
            tok.vocab_size,
            d_model=spec.d_model,
            n_layers=spec.n_layers,
            n_heads=spec.n_heads,
            max_len=max(max_len or 512, MIN_MAX_LEN),
        )
    policy = policy.to(device=device, dtype=TOY_DTYPES[dtype])
    policy.dtype_choice = (dtype, why)
    if spec.model == "transformer":
        policy.grad_checkpoint = bool(getattr(spec, "grad_checkpoint", False))
        policy.compute_dtype = torch.bfloat16 if dtype == "bf16_mixed" else None
        if getattr(spec, "compile_decode", "off") != "off":
            policy.compile_decode(spec.compile_decode)  # static_decode.py: torch.compile on first decode
    return policy, tok
