"""Build a tiny random Llama- or Qwen2-style causal LM and a character-level tokenizer, offline.

The result is an ordinary Hugging Face model directory (``config.json``, ``model.safetensors``,
``tokenizer.json``, ``tokenizer_config.json``, ...) that ``AutoModelForCausalLM.from_pretrained``
and ``AutoTokenizer.from_pretrained`` load with ``local_files_only=True``. Tests, benchmarks and
the docs use it as a stand-in for a real model such as Qwen2.5-0.5B: same code path, no hub.

The tokenizer has one token per byte (ids 4..259, byte ``b`` -> ``4 + b``) and four specials
(``<pad>`` ``<s>`` ``</s>`` ``<unk>`` = 0..3), so any ASCII prompt of the text tasks, and tags
such as ``<think>`` or ``</answer>``, are spelled character by character. The Llama flavour prepends
``<s>`` like Llama tokenizers do; the Qwen2 flavour adds nothing, like Qwen2 tokenizers.

Run:
    python -m noma_prorl_bench.models.tiny_hf OUT_DIR --arch llama [--hidden 64 --layers 2 --heads 4 --vocab_size V]
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import torch

SPECIALS = ["<pad>", "<s>", "</s>", "<unk>"]
PAD, BOS, EOS, UNK = SPECIALS
ARCHS = ("llama", "qwen2")


def byte_symbols() -> list[str]:
    """The 256 printable stand-ins for bytes 0..255 used by byte-level BPE (GPT-2's table).

    Printable Latin-1 bytes stand for themselves; the others (space, newline, controls, ...)
    are shifted to code points 256+ so that every byte has a visible, unique symbol.
    """
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    table, shift = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + shift)
            shift += 1
    return [table[b] for b in range(256)]


def char_vocab() -> dict[str, int]:
    """Token -> id: the four specials (ids 0-3), then byte ``b`` has id ``4 + b``.

    ASCII text (letters, digits, space, punctuation, newline) is one token per character.
    """
    tokens = SPECIALS + byte_symbols()
    return {t: i for i, t in enumerate(tokens)}


def build_char_tokenizer(add_bos: bool):
    """A ``PreTrainedTokenizerFast``: byte-level BPE with no merges, i.e. one token per byte.

    Byte-level (rather than a WordLevel char table) because transformers rebuilds Qwen2
    tokenizers as byte-level BPE from ``vocab``/``merges`` whatever ``tokenizer.json`` says;
    with an empty merge list that rebuild is exactly this tokenizer.
    """
    from tokenizers import (
        AddedToken,
        Tokenizer,
        decoders,
        models,
        pre_tokenizers,
        processors,
    )
    from transformers import PreTrainedTokenizerFast

    vocab = char_vocab()
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token=None, fuse_unk=False))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True) for t in SPECIALS])
    if add_bos:
        tok.post_processor = processors.TemplateProcessing(
            single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, vocab[BOS])]
        )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token=PAD,
        bos_token=BOS,
        eos_token=EOS,
        unk_token=UNK,
        padding_side="left",
        model_max_length=4096,
    )


def tiny_config(
    arch: str,
    vocab_size: int,
    hidden: int,
    layers: int,
    heads: int,
    init_std: float = 0.02,
    max_positions: int = 2048,
    tie: bool = False,
):
    """A Llama/Qwen2 config of the given size (grouped-query attention with heads/2 KV heads);
    ``tie``: the output head shares the input embedding (as in SmolLM2)."""
    from transformers import LlamaConfig, Qwen2Config

    if arch not in ARCHS:
        raise ValueError(f"arch must be one of {ARCHS}, got {arch!r}")
    if hidden % heads:
        raise ValueError(f"hidden ({hidden}) must be divisible by heads ({heads})")
    ids = char_vocab()
    kv_heads = heads // 2 if heads % 2 == 0 else heads
    common: dict[str, Any] = dict(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=4 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=max_positions,
        initializer_range=init_std,
        tie_word_embeddings=tie,
        attention_dropout=0.0,
        pad_token_id=ids[PAD],
        bos_token_id=ids[BOS],
        eos_token_id=ids[EOS],
    )
    if arch == "llama":
        return LlamaConfig(**common)
    return Qwen2Config(**common)


def build_tiny_hf_model(
    out_dir: str | Path,
    arch: str = "llama",
    hidden: int = 64,
    layers: int = 2,
    heads: int = 4,
    seed: int = 0,
    init_std: float = 0.02,
    vocab_size: int | None = None,
    tie: bool = False,
) -> Path:
    """Write a random ``arch`` model (safetensors) and the char tokenizer to ``out_dir``; return it.

    Deterministic in ``seed``: the same arguments give bit-identical weights. ``vocab_size``: the
    model's logits width (default: the tokenizer's 260); a wider one stands in for a real model's
    vocabulary in memory measurements (ids past the tokenizer decode to nothing). ``tie``: a head
    tied to the input embedding.
    """
    from transformers import AutoModelForCausalLM

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = build_char_tokenizer(add_bos=(arch == "llama"))
    config = tiny_config(arch, max(vocab_size or 0, len(tokenizer)), hidden, layers, heads, init_std, tie=tie)
    saved_rng = torch.random.get_rng_state()
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config)
    torch.random.set_rng_state(saved_rng)  # leave the caller's global RNG untouched
    model.generation_config.pad_token_id = config.pad_token_id
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    return out


def main(argv: list[str] | None = None) -> int:
    """CLI entry: build the model directory and print its path."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out_dir")
    p.add_argument("--arch", choices=ARCHS, default="llama")
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--init_std", type=float, default=0.02)
    p.add_argument("--vocab_size", type=int, default=None, help="logits width (default: the tokenizer's 260)")
    a = p.parse_args(argv)
    path = build_tiny_hf_model(a.out_dir, a.arch, a.hidden, a.layers, a.heads, a.seed, a.init_std, a.vocab_size)
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
