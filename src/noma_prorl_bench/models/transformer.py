"""A tiny causal transformer policy with a preallocated KV cache (``--model transformer``).

GPT-style: token + learned absolute position embeddings, ``n_layers`` pre-norm blocks
(LayerNorm -> attention -> residual, LayerNorm -> GELU MLP -> residual), a final LayerNorm and
an untied output Linear ``head``. No dropout anywhere, so training and sampling compute the same
function. Attention uses ``F.scaled_dot_product_attention``.

Module names are part of the contract (the LoRA adapter targets them):
``blocks.{i}.attn.q_proj / k_proj / v_proj / o_proj`` and ``blocks.{i}.mlp.up / down``.

Policy protocol (docs/ARCHITECTURE.md). PAD is an ordinary input token here: a left-padded
prompt is embedded with absolute positions ``0..L-1`` in ``forward`` and in
``prefill``/``decode`` alike, which keeps the two paths identical.

KV cache: ``prefill`` allocates, per layer, K and V buffers ``[N, H, capacity, D]`` once
(``capacity`` defaults to ``max_len``) and each ``decode`` writes one column in place, so a
rollout of T tokens costs O(T * L) attention work instead of the O(T * L^2) of recomputing the
whole prefix every step. ``prefill``/``decode`` are for sampling under ``torch.no_grad()``
(the in-place writes would invalidate saved tensors for autograd); training uses ``forward``.

Memory and precision switches (set by ``models.build.build_policy``): ``grad_checkpoint`` recomputes
each block during backward (``torch.utils.checkpoint``, non-reentrant) instead of keeping its
activations; ``compute_dtype = torch.bfloat16`` runs every forward under autocast while the
parameters (and hence Adam's state) stay float32 (``--dtype bf16_mixed``).

Shapes: N sequences, S tokens in this call, L full length, P prompt length, C d_model,
H heads, D = C // H head size, V vocab.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from noma_prorl_bench.models.base import autocast
from noma_prorl_bench.models.static_decode import CompiledStep


@dataclass
class KVCache:
    """Decoding state: per-layer K/V buffers ``[N, H, capacity, D]`` and the filled length."""

    k: list[torch.Tensor]
    v: list[torch.Tensor]
    pos: int  # number of positions already written (= position id of the next token)
    pos_t: torch.Tensor | None = None  # the same as a [1] long tensor (--compile_decode; static_decode.py)

    @property
    def capacity(self) -> int:
        return self.k[0].shape[2]


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention with separate q/k/v/o projections (no bias)."""

    def __init__(self, d_model: int, n_heads: int):
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model ({d_model}) must be divisible by n_heads ({n_heads})")
        self.n_heads, self.d_head = n_heads, d_model // n_heads
        self.q_proj = nn.Linear(d_model, d_model, bias=False)
        self.k_proj = nn.Linear(d_model, d_model, bias=False)
        self.v_proj = nn.Linear(d_model, d_model, bias=False)
        self.o_proj = nn.Linear(d_model, d_model, bias=False)

    def _heads(self, t: torch.Tensor) -> torch.Tensor:
        N, S, _ = t.shape
        return t.view(N, S, self.n_heads, self.d_head).transpose(1, 2)  # [N, H, S, D]

    def forward(self, x: torch.Tensor, cache: KVCache | None = None, layer: int = 0) -> torch.Tensor:
        """x[N, S, C] -> y[N, S, C]. With ``cache``, x holds positions ``cache.pos .. +S-1``."""
        N, S, C = x.shape
        q, k, v = self._heads(self.q_proj(x)), self._heads(self.k_proj(x)), self._heads(self.v_proj(x))
        if cache is None or cache.pos == 0:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # [N, H, S, D]
        if cache is not None:
            start, end = cache.pos, cache.pos + S
            cache.k[layer][:, :, start:end] = k  # write in place, no reallocation
            cache.v[layer][:, :, start:end] = v
            if start > 0:
                keys = cache.k[layer][:, :, :end]  # [N, H, end, D]
                vals = cache.v[layer][:, :, :end]
                mask = None
                if S > 1:  # chunk after a prefix: query i sees keys 0 .. start+i
                    mask = torch.ones(S, end, dtype=torch.bool, device=x.device).tril(diagonal=start)
                y = F.scaled_dot_product_attention(q, keys, vals, attn_mask=mask)  # [N, H, S, D]
        y = y.transpose(1, 2).reshape(N, S, C)  # [N, S, C]
        return self.o_proj(y)


class MLP(nn.Module):
    """Position-wise GELU MLP: C -> 4C -> C."""

    def __init__(self, d_model: int):
        super().__init__()
        self.up = nn.Linear(d_model, 4 * d_model, bias=False)
        self.down = nn.Linear(4 * d_model, d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.gelu(self.up(x)))  # [N, S, 4C] -> [N, S, C]


class Block(nn.Module):
    """Pre-norm transformer block."""

    def __init__(self, d_model: int, n_heads: int):
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, n_heads)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = MLP(d_model)

    def forward(self, x: torch.Tensor, cache: KVCache | None = None, layer: int = 0) -> torch.Tensor:
        x = x + self.attn(self.ln1(x), cache, layer)
        return x + self.mlp(self.ln2(x))


class TransformerPolicy(nn.Module):
    """Causal transformer LM implementing the Policy protocol (forward / prefill / decode)."""

    def __init__(self, vocab_size: int, d_model: int = 64, n_layers: int = 2, n_heads: int = 4, max_len: int = 512):
        super().__init__()
        self.vocab_size, self.max_len = vocab_size, max_len
        self.grad_checkpoint = False  # --grad_checkpoint: recompute each block in backward
        self.compute_dtype = None  # --dtype bf16_mixed: torch.bfloat16 autocast over fp32 weights
        self.reuse_kv_on = {"cuda"}  # device types whose KV buffers are reused across rollouts
        self.static_decode: CompiledStep | None = None  # --compile_decode (compile_decode())
        self._kv_pool: dict = {}
        self.d_model, self.n_layers, self.n_heads = d_model, n_layers, n_heads
        self.tok_emb = nn.Embedding(vocab_size, d_model)
        self.pos_emb = nn.Embedding(max_len, d_model)
        self.blocks = nn.ModuleList(Block(d_model, n_heads) for _ in range(n_layers))
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size, bias=False)
        self.apply(self._init_weights)
        for name, p in self.named_parameters():  # GPT-2: scale residual projections by depth
            if name.endswith(("attn.o_proj.weight", "mlp.down.weight")):
                nn.init.normal_(p, mean=0.0, std=0.02 / (2 * n_layers) ** 0.5)

    @staticmethod
    def _init_weights(m: nn.Module) -> None:
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)

    def _run(
        self, tokens: torch.Tensor, start: int, cache: KVCache | None, keep_last: int = 0, head: bool = True
    ) -> torch.Tensor:
        """tokens[N, S] at positions start..start+S-1 -> logits[N, S, V] (last ``keep_last`` if > 0;
        ``head=False``: the final hidden states [N, S, C] after ``ln_f``)."""
        S = tokens.shape[1]
        if start + S > self.max_len:
            raise ValueError(f"sequence length {start + S} exceeds max_len={self.max_len}")
        with autocast(self):
            pos = torch.arange(start, start + S, device=tokens.device)
            x = self.tok_emb(tokens) + self.pos_emb(pos)  # [N, S, C]
            ckpt = self.grad_checkpoint and cache is None and torch.is_grad_enabled()
            for i, block in enumerate(self.blocks):
                x = checkpoint(block, x, use_reentrant=False) if ckpt else block(x, cache, i)
            if keep_last > 0:
                x = x[:, -keep_last:]  # [N, k, C]
            x = self.ln_f(x)
            return self.head(x) if head else x  # [N, S or k, V] | [N, S or k, C]

    def forward(self, tokens: torch.Tensor, keep_last: int = 0) -> torch.Tensor:
        """Teacher forcing: tokens[N, L] -> logits[N, L, V] (position t predicts token t+1).

        ``keep_last=k > 0`` returns only the last k positions [N, k, V].
        """
        return self._run(tokens, 0, None, keep_last)

    def hidden_states(self, tokens: torch.Tensor, keep_last: int = 0) -> torch.Tensor:
        """tokens[N, L] -> final hidden states [N, L or k, C]; ``logits_from_hidden`` finishes the
        forward (``--logprob_chunk`` applies the head a chunk at a time)."""
        return self._run(tokens, 0, None, keep_last, head=False)

    def logits_from_hidden(self, h: torch.Tensor) -> torch.Tensor:
        """h[..., C] -> logits[..., V] (the output head, under ``compute_dtype`` autocast)."""
        with autocast(self):
            return self.head(h)

    def prefill(self, tokens: torch.Tensor, capacity: int | None = None) -> tuple[torch.Tensor, KVCache]:
        """tokens[N, P] -> (logits of the last position [N, V], cache with P positions filled).

        ``capacity`` (default ``max_len``) sizes the preallocated K/V buffers; pass ``P + T`` to
        use less memory when the response length is known.
        """
        N, P = tokens.shape
        cap = self.max_len if capacity is None else capacity
        if not P <= cap <= self.max_len:
            raise ValueError(f"capacity {cap} must lie in [P={P}, max_len={self.max_len}]")
        cache = KVCache(k=self._kv_buffers("k", N, cap), v=self._kv_buffers("v", N, cap), pos=0)
        logits = self._run(tokens, 0, cache, keep_last=1)  # [N, 1, V]
        cache.pos = P
        return logits[:, -1], cache

    def repeat_state(self, state: KVCache, G: int) -> KVCache:
        """A prefill cache of B rows -> N = B*G rows (row i -> rows G*i .. G*i+G-1)."""
        B, H, cap, D = state.k[0].shape
        out = KVCache(k=self._kv_buffers("k", B * G, cap), v=self._kv_buffers("v", B * G, cap), pos=state.pos)
        for dst, src in zip(out.k + out.v, state.k + state.v):
            dst.view(B, G, H, cap, D).copy_(src[:, None].expand(B, G, H, cap, D))
        return out

    def _kv_buffers(self, name: str, N: int, cap: int) -> list[torch.Tensor]:
        """Per-layer K or V buffers [N, H, cap, D]: fresh on CPU; on devices in ``reuse_kv_on``
        (CUDA) kept across rollouts and reused for the same (N, cap), so sampling allocates no
        new cache memory step after step (a sampler caller never keeps the state)."""
        like = self.tok_emb.weight
        H, D = self.n_heads, self.d_model // self.n_heads
        new = like.new_empty if self.static_decode is None else like.new_zeros  # compiled: finite everywhere
        if like.device.type not in self.reuse_kv_on:
            return [new(N, H, cap, D) for _ in range(self.n_layers)]
        key = (name, N, cap, like.dtype, str(like.device))
        if key not in self._kv_pool:
            self._kv_pool[key] = [new(N, H, cap, D) for _ in range(self.n_layers)]
        return self._kv_pool[key]

    def compile_decode(self, mode: str = "default", backend: str = "inductor") -> None:
        """``--compile_decode``: from now on ``decode`` runs ``static_decode.static_step`` (fixed shapes:
        position as a tensor, attention over the whole cache under a mask) through ``torch.compile``,
        compiled once per rollout shape; ``mode="reduce-overhead"`` uses CUDA graphs on CUDA."""
        self.static_decode = CompiledStep(mode, backend)

    def decode(self, tok: torch.Tensor, state: KVCache) -> tuple[torch.Tensor, KVCache]:
        """One step: tok[N] at position ``state.pos`` -> (logits[N, V], state advanced by one)."""
        if state.pos >= state.capacity:
            raise ValueError(f"KV cache full ({state.capacity} positions); prefill with a larger capacity")
        if self.static_decode is not None:  # --compile_decode
            return self.static_decode.decode(self, tok, state), state
        logits = self._run(tok[:, None], state.pos, state)  # [N, 1, V]
        state.pos += 1
        return logits[:, 0], state


class NoCachePolicy(nn.Module):
    """Wraps any policy so that prefill/decode recompute ``forward`` over the whole prefix.

    The slow reference for KV-cache tests and for ``benchmarks/micro/rollout_kv.py``: step t costs a
    full forward over ``P + t`` tokens (only the last position goes through the output head).
    The state is simply the token prefix [N, S].
    """

    def __init__(self, policy: nn.Module):
        super().__init__()
        self.policy = policy
        self.vocab_size = policy.vocab_size

    def forward(self, tokens: torch.Tensor, keep_last: int = 0) -> torch.Tensor:
        return self.policy(tokens, keep_last=keep_last)

    def prefill(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.policy(tokens, keep_last=1)[:, -1], tokens  # [N, V], [N, P]

    def decode(self, tok: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        tokens = torch.cat([state, tok[:, None]], dim=1)  # [N, S+1]
        return self.policy(tokens, keep_last=1)[:, -1], tokens
