"""The static (preallocated) KV cache of `HFPolicy` sampling: prefill into a transformers
`StaticCache`, decode in place, share one prefill among a prompt's G samples.

`prefill_static(policy, ...)` / `decode_static(policy, ...)` take the HFPolicy as `self` (they
are its `_prefill_static` / `_decode_static`, kept here so hf.py stays one screen per concern).
Shapes: N sequences, P prompt length, cap = capacity columns, V logits width.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import torch
import torch.nn.functional as F

from noma_prorl_bench.models.base import autocast


@dataclass
class StaticHFState:
    """Decoding state over a preallocated StaticCache: which of its columns are attendable,
    how many are written, and the next positions."""

    cache: Any  # transformers StaticCache, capacity columns
    valid: torch.Tensor  # [N, capacity] bool, updated in place
    filled: int  # columns written so far
    next_pos: torch.Tensor  # [N]
    prefix: bool = True  # attention reads the written columns only (prefix_layer_class)


def prefill_static(self, tokens, mask, pos, capacity: int):
    """Prefill into a StaticCache of ``capacity`` columns; ``valid[N, capacity]`` marks the
    columns a query may attend (real prompt tokens, then each decoded token as it is written)."""
    from transformers import StaticCache  # noqa: PLC0415  (transformers is imported lazily)

    N, P = tokens.shape
    cache = StaticCache(config=self.model.config, max_cache_len=capacity)
    prefix = not getattr(self, "_compiled", False)  # compiled steps need fixed shapes
    for layer in cache.layers:
        if type(layer).__name__ == "StaticLayer":
            layer.__class__ = prefix_layer_class() if prefix else cast_layer_class()
            # bf16_mixed: keys leave the rotary embedding in float32 (float32 cos/sin) but values
            # leave v_proj in bf16; the cache holds both in the compute dtype (what SDPA reads
            # under autocast anyway), else the lazily allocated buffers disagree with one of them.
            cast(Any, layer).cast_dtype = getattr(self, "compute_dtype", None)
    valid = torch.zeros(N, capacity, dtype=torch.bool, device=tokens.device)  # [N, cap]
    valid[:, :P] = mask.bool()
    attn = mask if prefix else valid.long()  # 2D over the columns attended: HF adds causality
    with autocast(self), self._no_ckpt():
        out = self.model(
            input_ids=tokens,
            attention_mask=attn,
            position_ids=pos,
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=1,
        )
    return out.logits[:, -1].float(), StaticHFState(cache, valid, P, pos[:, -1] + 1, prefix)


def decode_static(self, tok: torch.Tensor, state: StaticHFState):
    """One decode step: write column `filled` in place, attend through `valid` -> (logits[N, V], state)."""
    if state.filled >= state.valid.shape[1]:
        raise ValueError(f"KV cache full ({state.valid.shape[1]} positions); prefill with a larger capacity")
    state.valid[:, state.filled] = True  # the column written now
    cols = state.filled + 1 if state.prefix else state.valid.shape[1]
    attn = state.valid[:, None, None, :cols]  # [N, 1, 1, cols]
    with autocast(self), self._no_ckpt():
        if state.prefix and lean_decode_ok(self.model):
            logits = lean_step(self.model, tok[:, None], attn, state.next_pos[:, None], state.cache)
        else:
            logits = self._static_step(tok[:, None], attn, state.next_pos[:, None], state.cache)
    state.filled += 1
    state.next_pos = state.next_pos + 1
    return logits[:, -1].float(), state


def repeat_static(state: StaticHFState, G: int, compiled: bool = False) -> StaticHFState:
    """B rows -> N = B*G rows (row i -> rows G*i .. G*i+G-1) of every cache layer, mask and position."""
    for layer in state.cache.layers:
        if getattr(layer, "is_initialized", False):
            layer.keys = layer.keys.repeat_interleave(G, 0)
            layer.values = layer.values.repeat_interleave(G, 0)
            layer.batch_size = layer.keys.shape[0]
            if compiled:  # new tensors: tell dynamo they stay put
                torch._dynamo.mark_static_address(layer.keys)
                torch._dynamo.mark_static_address(layer.values)
    return StaticHFState(
        state.cache,
        state.valid.repeat_interleave(G, 0),
        state.filled,
        state.next_pos.repeat_interleave(G, 0),
        state.prefix,
    )


_PREFIX_LAYER: list = []
_CAST_LAYER: list = []


def cast_layer_class():
    """transformers' StaticLayer, except that `update` first casts keys and values to the layer's
    `cast_dtype` when one is set (the compute dtype of --dtype bf16_mixed)."""
    if not _CAST_LAYER:
        from transformers.cache_utils import StaticLayer  # noqa: PLC0415

        class CastStaticLayer(StaticLayer):
            cast_dtype = None

            def update(self, key_states, value_states, *args, **kwargs):
                if self.cast_dtype is not None:
                    key_states, value_states = key_states.to(self.cast_dtype), value_states.to(self.cast_dtype)
                return super().update(key_states, value_states, *args, **kwargs)

        _CAST_LAYER.append(CastStaticLayer)
    return _CAST_LAYER[0]


def prefix_layer_class():
    """`cast_layer_class()` (transformers' StaticLayer), except that `update` returns views of the columns written so
    far instead of the whole preallocated capacity: attention then reads P + t columns at decode
    step t, not P + T - 1 (the unwritten ones were masked anyway, so the same logits up to
    float rounding), and the mask sizes follow. The count is a host int: no synchronisation."""
    if not _PREFIX_LAYER:

        class PrefixStaticLayer(cast_layer_class()):  # type: ignore[misc]  # transformers' class, found at run time
            written = 0

            def update(self, key_states, value_states, *args, **kwargs):
                k, v = super().update(key_states, value_states, *args, **kwargs)
                self.written += key_states.shape[-2]
                return k[:, :, : self.written], v[:, :, : self.written]

            def get_mask_sizes(self, query_length: int, *args, **kwargs):
                return self.written + query_length, 0

        _PREFIX_LAYER.append(PrefixStaticLayer)
    return _PREFIX_LAYER[0]


#: architectures whose decoder layer `lean_step` restates (transformers' Llama family layout)
LEAN_MODEL_TYPES = ("llama",)
LEAN_DECODE = True  # tests switch it off to compare with the model's own forward


def lean_decode_ok(model) -> bool:
    """True when `lean_step` computes exactly what `model(...)` would: a Llama causal LM with SDPA
    attention (transformers' own, or the teacher variant that runs it under inference_mode), in
    eval mode or with attention dropout 0 (what `disable_dropout` leaves: the training-mode forward
    is then the same function), without output hooks. The architecture check is made once per
    model object (cached on it)."""
    ok = getattr(model, "_lean_decode_ok", None)
    if ok is None:
        from noma_prorl_bench.models.precision import TEACHER_ATTENTION  # noqa: PLC0415

        cfg = model.config
        inner = getattr(model, "model", None)
        ok = (
            getattr(cfg, "model_type", None) in LEAN_MODEL_TYPES
            and getattr(cfg, "_attn_implementation", None) in ("sdpa", TEACHER_ATTENTION)
            and type(model).__name__ == "LlamaForCausalLM"
            and inner is not None
            and type(inner).__name__ == "LlamaModel"
        )
        model._lean_decode_ok = ok
    return bool(ok) and LEAN_DECODE and (not model.training or float(model.config.attention_dropout) == 0.0)


def lean_step(model, ids: torch.Tensor, attn: torch.Tensor, pos: torch.Tensor, cache) -> torch.Tensor:
    """ids[N, 1] at positions pos[N, 1] over the prefix cache -> logits[N, 1, V]: the same modules and
    tensor ops, in the same order, as `LlamaForCausalLM.forward` on one token with a 4D boolean
    mask `attn` [N, 1, 1, cols] and transformers' SDPA attention (one query: the query heads packed
    by key/value group, as its `pack_gqa` does), minus the per-call plumbing around them (keyword
    dispatch, mask building, the attention registry, output records): ~4% of a SmolLM2 decode step.
    tests/unit/test_hf_model.py checks the logits equal the model's own, bit for bit."""
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb  # noqa: PLC0415

    inner = model.model
    N = ids.shape[0]
    x = inner.embed_tokens(ids)  # [N, 1, C]
    cos, sin = inner.rotary_emb(x, pos)
    for i, layer in enumerate(inner.layers):
        a = layer.self_attn
        D, groups = a.head_dim, a.num_key_value_groups
        h = layer.input_layernorm(x)
        q = a.q_proj(h).view(N, 1, -1, D).transpose(1, 2)  # [N, H, 1, D]
        k = a.k_proj(h).view(N, 1, -1, D).transpose(1, 2)  # [N, KV, 1, D]
        v = a.v_proj(h).view(N, 1, -1, D).transpose(1, 2)
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        k, v = cache.update(k, v, i)  # [N, KV, cols, D]
        if groups > 1:
            q = q.reshape(N, q.shape[1] // groups, groups, D)  # [N, KV, groups, D]
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=attn, dropout_p=0.0, scale=a.scaling, is_causal=False)
        y = y.reshape(N, -1, 1, D).transpose(1, 2).contiguous()  # [N, 1, H, D]
        x = x + a.o_proj(y.reshape(N, 1, -1).contiguous())
        x = x + layer.mlp(layer.post_attention_layernorm(x))
    return model.lm_head(inner.norm(x))
