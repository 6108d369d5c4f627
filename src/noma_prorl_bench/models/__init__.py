"""Policies: GRU (default), transformer with KV cache, Hugging Face causal LMs; LoRA adapters.

`build_policy(cfg)` returns `(policy, tokenizer)` for a RunConfig.
"""
from __future__ import annotations

import torch


def resolve_device(name: str) -> torch.device:
    """cpu | cuda | auto -> torch.device (auto picks cuda when available)."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda requested but no CUDA device is available")
    return torch.device(name)


def build_policy(cfg):
    """(policy, tokenizer) for cfg.model in gru | transformer | hf:PATH."""
    from ..tasks.base import CharTokenizer  # noqa: PLC0415
    if cfg.model.startswith("hf:"):
        from .hf import load_hf_policy  # noqa: PLC0415  (needs transformers)
        return load_hf_policy(cfg.model[3:], device=cfg.device, dtype=cfg.dtype)
    tok = CharTokenizer()
    if cfg.model == "gru":
        from .gru import GRUPolicy  # noqa: PLC0415
        return GRUPolicy(tok.vocab_size, hidden=cfg.hidden), tok
    from .transformer import TransformerPolicy  # noqa: PLC0415
    return TransformerPolicy(tok.vocab_size, d_model=cfg.d_model, n_layers=cfg.n_layers,
                             n_heads=cfg.n_heads, max_len=64), tok
