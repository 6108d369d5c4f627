"""The sampler's Linears on CPU with weights packed once for the matmul library (`--decode_weights`).

A decode step multiplies N rows (a batch of one token each) by every weight of the model. For
float32, PyTorch's CPU `F.linear` calls MKL's sgemm, which copies the weight into its blocked
layout inside every call; for bf16 it calls oneDNN's matmul, which does the same reordering per
call. At N = 16 rows that repacking is a large part of a decode step's matmul time. The libraries
can instead pack a weight once and multiply by the packed copy: MKL's packed GEMM
(`torch.ops.mkl._mkl_reorder_linear_weight` / `_mkl_linear`) and oneDNN's prepacked matmul
(`torch.ops.mkldnn._reorder_linear_weight` / `_linear_pointwise`), the ops that PyTorch's inductor
uses when it freezes a CPU model's weights.
SmolLM2-135M's 211 Linears at 16 rows, one thread, the 2-core Intel Xeon with AMX (avx512_bf16,
amx_bf16), idle: 109 -> 83 CPU ms per decode step in float32 (MKL packed), 52 -> 38 ms in bf16
(oneDNN packed; benchmarks/results/decode_floor_packed.json, `benchmarks/micro/decode_floor.py`).

Same bits, not approximately: a packed op is used for a (library, dtype, out, in, rows, bias)
shape only after it returned exactly the module's own forward's bits on a probe of that shape with
the real weight on this machine (checked once per shape and process: a library's summation order
depends on the shapes and the CPU's code path, not on the values); otherwise that Linear keeps its
own forward. Calls with another number of rows (the prefill's B x P positions) or a strided input
take the module's own forward too (not `F.linear` on a detached weight: on a strided input torch
multiplies a requires-grad Parameter through another path, with other bits). So the sampler's
tokens and logp_old are those of the plain Linears (tests/unit/test_packed_decode.py).

Packed copies are kept per weight tensor while its version counter is unchanged: a frozen base
(a LoRA run's) is packed once per row count (rollouts of N rows; an evaluation's 32 rows packs it
again, and the next rollout once more); a weight the optimizer changed
(full fine-tuning) or a new tensor (the bf16 sampler's merged adapters, formed per call) is packed
again. Memory, measured on SmolLM2-135M at 16 rows: +1,018 MiB resident for 513 MiB of float32
Linear weights (MKL), +238 MiB for 256 MiB of bf16 ones (oneDNN). Only CPU tensors; CUDA and
builds without MKL / oneDNN keep the modules' own forwards.
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any, Callable, Iterator

import torch
from torch import nn
from torch.utils.weak import WeakIdKeyDictionary

#: (library, dtype, out, in, rows, has_bias) -> did the packed op return the module's own bits on the probe?
SAME_BITS: dict[tuple, bool] = {}
#: weight tensor -> (version, rows, library, packed tensor)
_CACHE: Any = WeakIdKeyDictionary()


@functools.cache
def library_for(dtype: torch.dtype) -> str | None:
    """The library whose packed op computes what `F.linear` computes on this CPU for `dtype`, or None."""
    if dtype == torch.float32 and torch.backends.mkl.is_available() and hasattr(torch.ops.mkl, "_mkl_linear"):
        return "mkl"
    if (
        dtype == torch.bfloat16
        and torch.backends.mkldnn.is_available()
        and hasattr(torch.ops.mkldnn, "_linear_pointwise")
        and torch.ops.mkldnn._is_mkldnn_bf16_supported()
    ):
        return "mkldnn"
    return None


def _pack(lib: str, w: torch.Tensor, rows: int) -> torch.Tensor:
    if lib == "mkl":
        return torch.ops.mkl._mkl_reorder_linear_weight(w, rows)
    return torch.ops.mkldnn._reorder_linear_weight(w, rows)


def _apply(lib: str, x: torch.Tensor, packed: torch.Tensor, w: torch.Tensor, b, rows: int) -> torch.Tensor:
    if lib == "mkl":
        return torch.ops.mkl._mkl_linear(x, packed, w, b, rows)
    return torch.ops.mkldnn._linear_pointwise(x, packed, b, "none", [], "")


def _shape_key(lib: str, w: torch.Tensor, b, rows: int) -> tuple:
    return (lib, w.dtype, w.shape[0], w.shape[1], rows, b is not None)


def same_bits(lib: str, w: torch.Tensor, b, packed: torch.Tensor, rows: int, own: Callable) -> bool:
    """Whether the packed op gives the exact bits of the Linear's own forward `own` for this shape
    (probed once per shape and process, cached)."""
    key = _shape_key(lib, w, b, rows)
    ok = SAME_BITS.get(key)
    if ok is None:
        g = torch.Generator().manual_seed(0)
        x = torch.randn(rows, 1, w.shape[1], generator=g).to(w.dtype)  # [rows, 1, in]: a decode step's shape
        try:
            ok = torch.equal(_apply(lib, x, packed, w, b, rows), own(x))
        except RuntimeError:  # the op exists but refuses this shape or dtype
            ok = False
        SAME_BITS[key] = ok
    return ok


def packed_weight(lib: str, key: torch.Tensor, w: torch.Tensor, b, rows: int, own: Callable) -> torch.Tensor | None:
    """`w` (the detached `key`, the module's own weight tensor) packed for `rows` rows, cached under
    `key` while its version counter is unchanged; None where the bits would differ."""
    if SAME_BITS.get(_shape_key(lib, w, b, rows)) is False:  # this shape failed its probe already
        return None
    try:
        version = key._version
    except RuntimeError:  # an inference tensor has no version counter: pack for this call only
        version = None
    hit = _CACHE.get(key) if version is not None else None
    if hit is not None and hit[:3] == (version, rows, lib):
        return hit[3]
    packed = _pack(lib, w, rows)
    if not same_bits(lib, w, b, packed, rows, own):
        return None
    if version is not None:
        _CACHE[key] = (version, rows, lib, packed)
    return packed


class PackedForward:
    """A Linear's forward during `packed_linears`: the packed op on a contiguous `rows`-row input of
    the packed dtype (under CPU autocast after casting it to the autocast dtype, as autocast's
    `linear` does), else the module's own forward `own` on the input as given."""

    def __init__(self, lib: str, w: torch.Tensor, b, packed: torch.Tensor, rows: int, own: Callable):
        self.lib, self.w, self.b, self.packed, self.rows, self.own = lib, w, b, packed, rows, own

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        y = x
        if torch.is_autocast_enabled("cpu") and x.is_floating_point():
            y = x.to(torch.get_autocast_dtype("cpu"))
        if y.dtype == self.w.dtype and y.numel() == self.rows * self.w.shape[1] and y.is_contiguous():
            return _apply(self.lib, y, self.packed, self.w, self.b, self.rows)
        return self.own(x)


def _targets(model: nn.Module) -> Iterator[tuple[nn.Module, torch.Tensor, Any]]:
    """(module, weight, bias) of every Linear the model's forward multiplies by: a LoRA adapter inside
    `merged_adapters` as its merged weight (its base is then not called), else each plain nn.Linear."""
    skip: set[int] = set()
    for m in model.modules():
        if id(m) in skip:
            continue
        merged = m.__dict__.get("merged") if hasattr(m, "lora_A") else None
        if merged is not None:
            base: Any = m.base
            skip.add(id(base))
            yield m, merged, base.bias
        elif isinstance(m, nn.Linear):
            yield m, m.weight, m.bias


@contextlib.contextmanager
def packed_linears(model: nn.Module, rows: int) -> Iterator[int]:
    """Inside the block every CPU Linear of `model` whose packed op gives its own forward's bits at
    `rows` rows multiplies by its packed weight (other calls take the module's own forward); yields
    how many. Restores the modules' own forwards on exit. For forwards without gradients (the sampler)."""
    patched: list[nn.Module] = []
    try:
        with torch.no_grad():
            for m, w, b in _targets(model):
                lib = library_for(w.dtype) if w.device.type == "cpu" else None
                if lib is None or (b is not None and b.dtype != w.dtype):
                    continue
                own = m.forward  # the module's own (bound) forward
                wd, bd = w.detach(), None if b is None else b.detach()
                packed = packed_weight(lib, w, wd, bd, rows, own)
                if packed is None:
                    continue
                fwd: Callable = PackedForward(lib, wd, bd, packed, rows, own)
                m.forward = fwd  # an instance attribute: module.__call__ (and its hooks) reach it
                patched.append(m)
        yield len(patched)
    finally:
        for m in patched:
            del m.forward
