"""Growable low-rank adapters (LoRA-style ``W x + s * B A x``) for any ``nn.Module``.

Shapes: ``x[..., in] -> y[..., out]``; ``A: [r, in]``, ``B: [out, r]``; ``r`` is the rank.

Init: ``B`` starts at zero, so an attached adapter leaves the model's output unchanged; ``A`` uses
a declared init (``kaiming``: U(-1/sqrt(in), 1/sqrt(in)), nn.Linear's and PEFT's default;
``normal``: N(0, 1/in); ``zeros``: only for tests; with ``A = B = 0`` both gradients are zero
and the adapter never learns). Draws come from a CPU ``torch.Generator`` seeded from the adapter's
``seed`` and its growth count, so a run is reproducible and every migration mode of
``growth.grow_adapters`` gets the same new rows.

Scaling: ``s = alpha / initial_rank``, fixed for the life of the adapter. The usual LoRA scale
``alpha / r`` would shrink the existing contribution ``B_old A_old`` by ``r_old / r_new`` at
each growth, so the policy would change at the moment of growth (no longer a function-preserving
growth) and the old slice's effective learning rate would drop with every rank step. With a fixed
``s`` the output is unchanged at growth (new ``B`` columns are zero) and an Adam step on an old
entry moves the output exactly as it did before growth.

Sampling under ``--dtype bf16_mixed``: ``merged_adapters(model)`` folds each adapter into one
weight ``W + s B A`` (summed in float32, held in ``W``'s dtype) for the length of a ``with`` block;
the sampler (``rollout/sampling.generate``) decodes through it, one matmul per layer instead of three
and no float32 -> bf16 casts of the adapters. The learner never sees the merged weight.

Growth itself (``A`` gains rows, ``B`` gains zero columns, optimizer state migrated) lives in
``noma_prorl_bench.training.growth.grow_adapters``; this module only defines the adapter.
"""

from __future__ import annotations

import contextlib
import fnmatch
from typing import Iterator

import torch
import torch.nn.functional as F
from torch import nn

A_INITS = ("kaiming", "normal", "zeros")


def _draw(kind: str, shape: tuple[int, int], fan_in: int, generator: torch.Generator) -> torch.Tensor:
    """A tensor of ``shape`` from init ``kind`` (float32, CPU)."""
    if kind == "kaiming":
        return (torch.rand(shape, generator=generator) * 2 - 1) * fan_in**-0.5
    if kind == "normal":
        return torch.randn(shape, generator=generator) * fan_in**-0.5
    if kind == "zeros":
        return torch.zeros(shape)
    raise ValueError(f"unknown a_init {kind!r} (one of {A_INITS})")


class LoRALinear(nn.Module):
    """``base(x) + (alpha / initial_rank) * x @ A.T @ B.T`` around an existing ``nn.Linear``."""

    def __init__(self, base: nn.Linear, rank: int, alpha: float = 1.0, a_init: str = "kaiming", seed: int = 0):
        super().__init__()
        if rank < 1:
            raise ValueError(f"rank must be >= 1, got {rank}")
        if a_init not in A_INITS:
            raise ValueError(f"unknown a_init {a_init!r} (one of {A_INITS})")
        self.base = base
        self.in_features, self.out_features = base.in_features, base.out_features
        self.alpha, self.initial_rank, self.a_init, self.seed = float(alpha), rank, a_init, seed
        self.scale = self.alpha / rank  # fixed across growth (see module doc)
        self.grow_count = 0  # seeds the draws of each growth
        w = base.weight
        a = _draw(a_init, (rank, self.in_features), self.in_features, self._generator())
        self.lora_A = nn.Parameter(a.to(dtype=w.dtype, device=w.device))  # [r, in]
        self.lora_B = nn.Parameter(torch.zeros(self.out_features, rank, dtype=w.dtype, device=w.device))  # [out, r]
        self.merged: torch.Tensor | None = None  # W + s B A inside `merged_adapters` (a plain attribute, not state)

    @property
    def rank(self) -> int:
        return self.lora_A.shape[0]

    def _generator(self) -> torch.Generator:
        return torch.Generator().manual_seed(int(self.seed) * 1_000_003 + self.grow_count)

    def a_rows_init(self, new_rank: int, kind: str | None = None):
        """init_fn for ``growth.realloc_param``: rows ``[rank:new_rank]`` of ``A`` drawn with
        init ``kind`` (default ``a_init``) from this adapter's generator for the next growth."""
        kind = kind or self.a_init
        old_rank, gen = self.rank, torch.Generator().manual_seed(int(self.seed) * 1_000_003 + self.grow_count + 1)

        def init_fn(shape, dtype, device):
            out = torch.zeros(shape, dtype=dtype, device=device)
            rows = _draw(kind, (new_rank - old_rank, self.in_features), self.in_features, gen)
            out[old_rank:new_rank] = rows.to(dtype=dtype, device=device)
            return out

        return init_fn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        merged = self.__dict__.get("merged")
        if merged is not None:  # inside `merged_adapters`: x[..., in] @ (W + s B A).T
            return F.linear(x, merged, self.base.bias)
        # x[..., in] -> base[..., out] + s * ((x @ A.T)[..., r] @ B.T)[..., out]
        return self.base(x) + self.scale * F.linear(F.linear(x, self.lora_A), self.lora_B)

    def extra_repr(self) -> str:
        return (
            f"in={self.in_features}, out={self.out_features}, rank={self.rank}, "
            f"alpha={self.alpha}, scale={self.scale:g}, a_init={self.a_init}"
        )


@contextlib.contextmanager
def merged_adapters(model: nn.Module) -> Iterator[int]:
    """Inside the block every ``LoRALinear`` of ``model`` computes ``x @ (W + s B A).T + b`` with
    one merged weight, formed on entry from the adapters' current values (the product and the sum in
    float32, then rounded once to ``W``'s dtype) and dropped on exit; yields how many were merged.
    For forwards without gradients (the sampler): the merged weight is detached, so nothing inside
    reaches ``A`` or ``B``. Equal to the unmerged forward up to float rounding (tests/unit/test_lora.py)."""
    mods = [m for _, m in adapters(model)]
    with torch.no_grad():
        for m in mods:
            w = m.base.weight
            delta = m.lora_B.float() @ m.lora_A.float()  # [out, in]
            m.merged = (w.float() + m.scale * delta).to(w.dtype)
    try:
        yield len(mods)
    finally:
        for m in mods:
            m.merged = None


def parse_targets(text: str) -> list[str]:
    """`--adapter_targets` text -> patterns: `"head, *proj"` -> `["head", "*proj"]`."""
    return [t.strip() for t in text.split(",") if t.strip()]


def _matches(name: str, pattern: str) -> bool:
    """Exact dotted name, dotted suffix (``q_proj`` matches ``blocks.0.attn.q_proj``) or glob
    (``*proj``, ``blocks.*.mlp.up``) on the full name."""
    return name == pattern or name.endswith("." + pattern) or fnmatch.fnmatchcase(name, pattern)


def attach_lora(
    model: nn.Module,
    targets: list[str],
    rank: int,
    alpha: float = 1.0,
    freeze_base: bool = True,
    a_init: str = "kaiming",
    seed: int = 0,
) -> list[str]:
    """Wrap every ``nn.Linear`` of ``model`` whose dotted name matches one of ``targets`` in a
    ``LoRALinear`` (in place); returns the wrapped names. ``freeze_base`` sets
    ``requires_grad=False`` on every non-adapter parameter of ``model`` (PEFT's convention).
    Adapter ``i`` (in module order) gets seed ``seed * 1000 + i``. Raises if nothing matches."""
    found = [
        n
        for n, m in model.named_modules()
        if isinstance(m, nn.Linear) and n and any(_matches(n, t) for t in targets) and not n.endswith(".base")
    ]
    if not found:
        linear = [n for n, m in model.named_modules() if isinstance(m, nn.Linear) and n]
        raise ValueError(
            f"argument --adapter_targets: no nn.Linear in {type(model).__name__} matches {targets} "
            f"(its Linear layers: {', '.join(linear[:12]) or 'none'})"
        )
    for i, name in enumerate(found):
        *path, leaf = name.split(".")
        parent = model
        for part in path:
            parent = getattr(parent, part)
        setattr(parent, leaf, LoRALinear(getattr(parent, leaf), rank, alpha, a_init, seed * 1000 + i))
    if freeze_base:
        for n, p in model.named_parameters():
            if not (n.endswith("lora_A") or n.endswith("lora_B")):
                p.requires_grad_(False)
    return found


def adapters(model: nn.Module) -> list[tuple[str, LoRALinear]]:
    """``(name, module)`` for each ``LoRALinear`` in ``model``, in module order."""
    return [(n, m) for n, m in model.named_modules() if isinstance(m, LoRALinear)]


def adapter_rank(model: nn.Module) -> int:
    """The common rank of the adapters (0 when there are none); raises if they differ."""
    ranks = {m.rank for _, m in adapters(model)}
    if len(ranks) > 1:
        raise ValueError(f"adapters have different ranks: {sorted(ranks)}")
    return ranks.pop() if ranks else 0


def adapter_parameters(model: nn.Module) -> list[nn.Parameter]:
    """``[A_0, B_0, A_1, B_1, ...]``: the adapter parameters, in module order."""
    return [p for _, m in adapters(model) for p in (m.lora_A, m.lora_B)]
