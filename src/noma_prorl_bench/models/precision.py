"""bf16 support detection, `--dtype auto`, and the bf16 frozen base of `--dtype bf16_mixed`.

`bf16_support(device)` -> (supported, reason). "Supported" means the hardware has bf16 matmul
units, so bf16 is *faster* than float32; every CPU can compute in bf16, but without such units
PyTorch emulates it (measured on an AVX2-only AMD EPYC: a one-thread 1024x576x1536 bf16 matmul at
1.8 GFLOP/s against 70-77 GFLOP/s in float32, ~40x slower; docs/performance.md). Detection:

* CUDA: ``torch.cuda.is_bf16_supported()``.
* x86 CPU: an ``avx512_bf16`` or ``amx_bf16`` flag in /proc/cpuinfo, or oneDNN's own check
  (``torch.ops.mkldnn._is_mkldnn_bf16_supported()``), or torch's CPU capability naming AMX.
* aarch64 CPU: the ``bf16`` feature in /proc/cpuinfo.

`resolve_dtype_choice(dtype, model, device)` -> (dtype used, reason): ``auto`` is ``bf16_mixed``
for ``hf:PATH`` models where bf16 is supported, float32 everywhere else (toy models, or no bf16
units: a fallback, and the reason says so). An explicit dtype is used as given; the reason warns
when it is a bf16 dtype on hardware without bf16 units (correct, but slow).

`hold_frozen_in_bf16(policy)`: under ``bf16_mixed`` autocast casts every float32 weight to bf16 on
every call, including frozen ones (autocast caches casts only for leaf tensors that require a
gradient). The frozen weights of ``nn.Linear`` layers (the LoRA base of q/k/v/o, the MLP, ...) are
therefore stored in bf16 once; trainable parameters (LoRA adapters, or every weight in a full
fine-tune) stay float32 with float32 Adam state; embeddings and norms stay float32. A frozen head
tied to the input embedding (SmolLM2's [49152, 576] head) gets its own bf16 copy and the embedding
keeps the float32 tensor: autocast had re-cast that 28M-element weight on every call (34 times, 0.7
CPU-s, in one demo step), and ``.to(bfloat16)`` rounds as autocast's cast does, so the logits are the
same bits (tests/unit/test_bf16_hf.py). Every forward of an HF policy runs under autocast, so a bf16
weight only ever meets bf16 activations.

`float32_teacher_attention(policy)`: under ``bf16_mixed`` an HF policy on SDPA computes attention
in float32 in every pass outside ``torch.inference_mode`` (the learner's forward and backward, the
reference's and the critic's teacher-forced forwards), and in bf16 in the sampler's (which runs
under inference mode). On CPU bf16 SDPA's backward is slow: one SmolLM2 layer at 16 x 9 heads x 85
positions took 41.5 ms forward + backward in bf16 and 24.9 ms with the bf16 inputs computed in
float32, while the forward alone is faster in bf16 (4.5 vs 8.9 ms; docs/performance.md). The
attention function is registered with transformers (``AttentionInterface``, with SDPA's mask) under
`TEACHER_ATTENTION`; in float32 runs, and under inference mode, it is SDPA itself (same bits).
"""

from __future__ import annotations

import platform
from pathlib import Path

import torch
import torch.nn as nn

CPUINFO = Path("/proc/cpuinfo")
X86_BF16_FLAGS = ("avx512_bf16", "amx_bf16")


def cpu_flags(cpuinfo: Path = CPUINFO) -> set[str]:
    """The CPU feature flags of the first processor in /proc/cpuinfo (x86 `flags`, arm `Features`);
    empty when the file is unreadable."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return set(value.split())
    return set()


def _mkldnn_bf16() -> bool:
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def bf16_support(device: str | torch.device = "cpu") -> tuple[bool, str]:
    """(True, why) when ``device`` has bf16 matmul units, else (False, why not)."""
    dev = torch.device(device)
    if dev.type == "cuda":
        ok = torch.cuda.is_available() and torch.cuda.is_bf16_supported()
        return ok, f"CUDA bf16 {'supported' if ok else 'not supported'} on this GPU"
    if dev.type != "cpu":
        return False, f"bf16 detection covers cpu and cuda, not {dev.type}"
    cap = torch.backends.cpu.get_cpu_capability()
    flags = cpu_flags()
    machine = platform.machine().lower()
    if machine in ("x86_64", "amd64", "i686"):
        found = [f for f in X86_BF16_FLAGS if f in flags]
        if found:
            return True, f"CPU flags {', '.join(found)} (torch CPU capability {cap})"
        if _mkldnn_bf16() or "AMX" in cap.upper():
            return True, f"oneDNN reports bf16 support (torch CPU capability {cap})"
        return False, (
            f"this CPU has no avx512_bf16 or amx_bf16 (torch CPU capability {cap}): bf16 matmuls "
            "would be emulated, slower than float32"
        )
    if machine in ("aarch64", "arm64"):
        if "bf16" in flags:
            return True, f"CPU feature bf16 (torch CPU capability {cap})"
        return False, f"this CPU has no bf16 feature (torch CPU capability {cap})"
    return False, f"no bf16 detection for machine {machine!r}"


def resolve_dtype_choice(dtype: str, model: str, device: str | torch.device = "cpu") -> tuple[str, str]:
    """--dtype as given (float32 | bfloat16 | bf16_mixed | auto), the model and the resolved device
    -> (the dtype used, one line saying why)."""
    if dtype != "auto":
        if dtype in ("bfloat16", "bf16_mixed"):
            ok, why = bf16_support(device)
            if not ok:
                return dtype, f"--dtype {dtype} as requested, but {why}"
        return dtype, f"--dtype {dtype} as requested"
    if not model.startswith("hf:"):
        return "float32", "--dtype auto: float32 for the toy models (bf16 only for hf:PATH)"
    ok, why = bf16_support(device)
    if ok:
        return "bf16_mixed", f"--dtype auto: bf16_mixed ({why})"
    return "float32", f"--dtype auto: fell back to float32 ({why})"


def hold_frozen_in_bf16(policy: nn.Module) -> int:
    """Store the frozen ``nn.Linear`` weights (and biases) of a ``bf16_mixed`` policy in bf16 (see
    the module docstring); returns how many tensors were cast. A no-op (0) unless the policy has
    ``compute_dtype == torch.bfloat16``. A frozen weight shared with the input embedding (a tied
    head) is untied: the head gets a bf16 copy, the embedding keeps the float32 tensor (the model
    config then says ``tie_word_embeddings=False``, so nothing ties them again)."""
    if getattr(policy, "compute_dtype", None) != torch.bfloat16:
        return 0
    tied = {id(m.weight) for m in policy.modules() if isinstance(m, nn.Embedding)}
    n = untied = 0
    for mod in policy.modules():
        if not isinstance(mod, nn.Linear):
            continue
        for name in ("weight", "bias"):
            p = getattr(mod, name)
            if p is None or p.requires_grad or p.dtype != torch.float32:
                continue
            if id(p) in tied:  # a new tensor for the head; the embedding's stays float32
                setattr(mod, name, nn.Parameter(p.detach().to(torch.bfloat16), requires_grad=False))
                untied += 1
            else:
                p.data = p.data.to(torch.bfloat16)
            n += 1
    if untied:
        _untie_config(policy)
    return n


TEACHER_ATTENTION = "sdpa_float32_teacher"


def _teacher_attention(module, query, key, value, attention_mask, **kwargs):
    """transformers' SDPA attention, in float32 when bf16 autocast is on outside inference mode
    (q, k, v [N, heads, L, d] upcast, the output returned in the autocast dtype as SDPA's is)."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward  # noqa: PLC0415

    device = query.device.type
    if torch.is_inference_mode_enabled() or not torch.is_autocast_enabled(device):
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
    with torch.autocast(device, enabled=False):
        out, weights = sdpa_attention_forward(
            module, query.float(), key.float(), value.float(), attention_mask, **kwargs
        )
    return out.to(torch.get_autocast_dtype(device)), weights


def register_teacher_attention() -> None:
    """Register `TEACHER_ATTENTION` (and SDPA's mask under that name) with transformers in this
    process. models/hf.py calls it on import, so a process that unpickles an HF policy (a Ray
    actor) knows the name before the model's first forward; without it transformers would build
    no mask for an unknown name and fall back to eager attention."""
    from transformers import AttentionInterface, AttentionMaskInterface  # noqa: PLC0415
    from transformers.masking_utils import sdpa_mask  # noqa: PLC0415

    AttentionInterface.register(TEACHER_ATTENTION, _teacher_attention)
    AttentionMaskInterface.register(TEACHER_ATTENTION, sdpa_mask)


def float32_teacher_attention(policy: nn.Module) -> bool:
    """Switch a ``bf16_mixed`` HF policy on SDPA to `TEACHER_ATTENTION` (see the module docstring);
    True if switched. A no-op (False) for other dtypes, toy policies and non-SDPA attention."""
    config = getattr(getattr(policy, "model", None), "config", None)
    if getattr(policy, "compute_dtype", None) != torch.bfloat16 or config is None:
        return False
    if getattr(config, "_attn_implementation", None) != "sdpa":
        return config._attn_implementation == TEACHER_ATTENTION
    register_teacher_attention()
    config._attn_implementation = TEACHER_ATTENTION
    return True


# The pre-attention and pre-MLP norms of a decoder layer (Llama, Qwen2, Mistral, SmolLM2 naming).
CAST_ONCE_NORMS = ("input_layernorm", "post_attention_layernorm")


def _to_autocast_dtype(module, args, out):
    """Forward hook: a norm's float32 output cast once to the autocast dtype (bf16) when autocast is on."""
    device = out.device.type
    return out.to(torch.get_autocast_dtype(device)) if torch.is_autocast_enabled(device) else None


def cast_norm_outputs_once(policy: nn.Module) -> int:
    """Under ``bf16_mixed``: each decoder layer's `CAST_ONCE_NORMS` output is cast to bf16 once, where
    autocast cast it again for every Linear that reads it (q, k, v and their adapters' A, gate and
    up: 8 casts of the same [N, L, C] tensor per layer); returns how many norms were hooked (0 for other
    dtypes). The input gradients of those Linears then add up in bf16 before the cast's backward
    returns them to float32 (before: in float32), a change of bf16 numerics."""
    if getattr(policy, "compute_dtype", None) != torch.bfloat16:
        return 0
    n = 0
    for name, mod in policy.named_modules():
        if name.rsplit(".", 1)[-1] in CAST_ONCE_NORMS:
            mod.register_forward_hook(_to_autocast_dtype)
            n += 1
    return n


def _untie_config(policy: nn.Module) -> None:
    """Record on the HF config (and its text sub-config) that the head no longer shares the
    embedding, so a later ``tie_weights()`` keeps them apart."""
    config = getattr(getattr(policy, "model", None), "config", None)
    for c in (config, getattr(config, "text_config", None)):
        if c is not None and getattr(c, "tie_word_embeddings", False):
            c.tie_word_embeddings = False


def params_by_dtype(policy: nn.Module) -> dict[str, int]:
    """{dtype name: parameter count} over the parameters (for the `precision` event and tests)."""
    out: dict[str, int] = {}
    for p in policy.parameters():
        k = str(p.dtype).replace("torch.", "")
        out[k] = out.get(k, 0) + p.numel()
    return out
