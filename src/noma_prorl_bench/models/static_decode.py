"""The transformer's single-token decode step with static shapes, compiled (`--compile_decode`).

Legend: N rows, H heads, D head size, cap KV-cache capacity (positions), C d_model, V vocab.

`TransformerPolicy.decode` (eager) takes the position as a Python int and attends over
`cache.k[:, :, :pos + 1]`, a slice that grows by one column per token: under `torch.compile`
every token would be a new shape and a new compilation. `static_step` computes the same function
with every shape fixed for the whole rollout:
  - the position is a 1-element long tensor `pos` (KVCache.pos_t, advanced in place);
  - the new K/V column is written with `index_copy_(2, pos, .)` into the preallocated
    [N, H, cap, D] buffers (zero-filled when compiled, so unwritten columns are finite);
  - attention reads the whole buffer under the boolean mask `arange(cap) <= pos` (the columns
    not written yet get probability exactly 0).
So one rollout compiles once per (N, cap, dtype) and every later token replays that graph.
`mode="reduce-overhead"` asks inductor for CUDA graphs (on CUDA; the KV buffers are then marked
static addresses and reused across rollouts, `TransformerPolicy.reuse_kv_on`); on a CPU device
the mode is "default" (CUDA graphs do not exist there). The numbers equal the eager step up to
float rounding (the attention reduction runs over cap columns, zeros included).

The compiled function is built lazily on the first decode and never copied: `deepcopy` (the
reference policy) and pickling (Ray) give a `CompiledStep` with the same mode that compiles its
own on first use.
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any

import torch
import torch.nn.functional as F

from noma_prorl_bench.config.choices import COMPILE_DECODES

COMPILE_MODES = COMPILE_DECODES  # --compile_decode (config/choices.py)


def _attention(
    attn, x: torch.Tensor, kbuf: torch.Tensor, vbuf: torch.Tensor, pos: torch.Tensor, seen: torch.Tensor
) -> torch.Tensor:
    """x[N, 1, C] at position pos -> y[N, 1, C]; writes this position's K/V into kbuf/vbuf [N, H, cap, D]."""
    N, _, C = x.shape
    q, k, v = attn._heads(attn.q_proj(x)), attn._heads(attn.k_proj(x)), attn._heads(attn.v_proj(x))  # [N, H, 1, D]
    kbuf.index_copy_(2, pos, k.to(kbuf.dtype))
    vbuf.index_copy_(2, pos, v.to(vbuf.dtype))
    y = F.scaled_dot_product_attention(q, kbuf, vbuf, attn_mask=seen)  # [N, H, 1, D]
    return attn.o_proj(y.transpose(1, 2).reshape(N, 1, C))


def static_step(policy, amp, tok: torch.Tensor, pos: torch.Tensor, ks: list, vs: list) -> torch.Tensor:
    """tok[N] at position pos[1] -> logits[N, V]; K/V written into ks[i], vs[i] [N, H, cap, D].
    `amp`: (device type, dtype) of the policy's autocast (--dtype bf16_mixed) or None."""
    with torch.autocast(amp[0], dtype=amp[1]) if amp else contextlib.nullcontext():
        x = policy.tok_emb(tok[:, None]) + policy.pos_emb(pos)  # [N, 1, C]
        seen = (torch.arange(ks[0].shape[2], device=tok.device) <= pos)[None]  # [1, cap] bool
        for i, block in enumerate(policy.blocks):
            x = x + _attention(block.attn, block.ln1(x), ks[i], vs[i], pos, seen)
            x = x + block.mlp(block.ln2(x))
        return policy.head(policy.ln_f(x))[:, 0]  # [N, V]


class CompiledStep:
    """`--compile_decode MODE` for one TransformerPolicy: `decode(policy, tok, state)` runs the
    compiled `static_step` and advances the cache's position (int and tensor)."""

    def __init__(self, mode: str = "default", backend: str = "inductor"):
        if mode not in COMPILE_MODES[1:]:
            raise ValueError(f"compile mode must be one of {COMPILE_MODES[1:]}, got {mode!r}")
        self.mode, self.backend = mode, backend
        self.fn: Any = None
        self.cuda_graphs = False

    def __deepcopy__(self, memo):
        return CompiledStep(self.mode, self.backend)

    def __getstate__(self):
        return {"mode": self.mode, "backend": self.backend, "fn": None, "cuda_graphs": False}

    def _build(self, policy, device: torch.device):
        dt = policy.compute_dtype
        amp = (device.type, dt) if dt is not None else None
        self.cuda_graphs = self.mode == "reduce-overhead" and device.type == "cuda"
        mode = self.mode if self.cuda_graphs else "default"
        kw: dict[str, Any] = {"mode": mode} if self.backend == "inductor" else {}
        self.fn = torch.compile(
            functools.partial(static_step, policy, amp), backend=self.backend, fullgraph=True, dynamic=False, **kw
        )

    def decode(self, policy, tok: torch.Tensor, state) -> torch.Tensor:
        """tok[N] -> logits[N, V]; `state` (models.transformer.KVCache) advanced by one position."""
        if self.fn is None:
            self._build(policy, tok.device)
        if state.pos_t is None:
            state.pos_t = torch.full((1,), state.pos, dtype=torch.long, device=tok.device)
            if self.cuda_graphs:
                for buf in state.k + state.v:
                    torch._dynamo.mark_static_address(buf)
        if self.cuda_graphs:
            torch.compiler.cudagraph_mark_step_begin()
        logits = self.fn(tok, state.pos_t, state.k, state.v)  # [N, V]
        state.pos += 1
        state.pos_t.add_(1)
        return logits.clone() if self.cuda_graphs else logits  # graph outputs are reused
