"""Task protocol and the character-level tokenizer used by the toy tasks.

A task is a small pure object: it samples `Example(prompt, answer)` pairs from a numpy
Generator, holds a fixed held-out validation set, and scores a response string with a
reward in [0, 1]. Tokenizers turn prompt strings into left-padded id tensors and response
ids back into strings; the toy tasks use `CharTokenizer`, HF models their own tokenizer
(see `models/hf.py`), both with the same methods.

>>> tok = CharTokenizer()
>>> ids = tok.encode_prompts(["12", "345"], P=5)
>>> ids.tolist()
[[0, 1, 5, 6, 2], [1, 7, 8, 9, 2]]
>>> tok.decode([8, 7, 3, 0])
'43'
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

import numpy as np
import torch

PAD, BOS, SEP, EOS = 0, 1, 2, 3
SPECIALS = ["<pad>", "<bos>", "<sep>", "<eos>"]
CHARS = "0123456789abcdefghijklmnopqrstuvwxyz+-=*,.:;!? <>/"


@dataclass(frozen=True)
class Example:
    """One prompt and its reference answer (both plain strings)."""

    prompt: str
    answer: str


class Task(Protocol):
    """What the trainer needs from a task (the public interface for your own: docs/tasks.md).

    Optional members the trainer uses when present: ``demonstration(example) -> str`` (the
    response the supervised warm start teaches; default the answer), ``reward_parts(response,
    answer) -> dict`` (logged as reward/PART and reward/val_PART; a "correct" part decides
    pass@k), ``prompt_len: int`` (a fixed prompt length in tokens for the char models)."""

    name: str

    @property
    def max_new_tokens(self) -> int:
        """The default response cap T (answer length + EOS); a plain attribute does too."""
        ...

    def sample(self, rng: np.random.Generator, n: int) -> list[Example]:
        """n training examples drawn with the run's generator; never a validation prompt."""
        ...

    def validation_set(self) -> list[Example]:
        """The held-out examples: the same list on every call and for every seed."""
        ...

    def reward(self, response: str, answer: str) -> float:
        """The verifiable reward in [0, 1] of one decoded response (answer extraction goes here)."""
        ...


class CharTokenizer:
    """Character-level vocabulary: PAD/BOS/SEP/EOS then `CHARS`.

    Prompts are encoded as BOS + chars + SEP and left-padded with PAD to a fixed length P.
    """

    pad_id, bos_id, sep_id, eos_id = PAD, BOS, SEP, EOS

    def __init__(self, chars: str = CHARS):
        self.itos = SPECIALS + list(chars)
        self.stoi = {c: i for i, c in enumerate(self.itos)}
        self.vocab_size = len(self.itos)

    def prompt_ids(self, prompt: str) -> list[int]:
        return [BOS] + [self.stoi[c] for c in prompt] + [SEP]

    def encode_prompts(self, prompts: Sequence[str], P: int | None = None) -> torch.Tensor:
        """prompts -> LongTensor[N, P], left-padded with PAD."""
        rows = [self.prompt_ids(p) for p in prompts]
        P = P or max(len(r) for r in rows)
        if any(len(r) > P for r in rows):
            raise ValueError(f"prompt longer than P={P}")
        return torch.tensor([[PAD] * (P - len(r)) + r for r in rows], dtype=torch.long)

    def encode_answer(self, answer: str) -> list[int]:
        return [self.stoi[c] for c in answer] + [EOS]

    def decode(self, ids: Sequence[int]) -> str:
        """Response ids -> string, stopping at EOS and skipping specials."""
        out = []
        for i in ids:
            i = int(i)
            if i == EOS:
                break
            if i >= len(SPECIALS):
                out.append(self.itos[i])
        return "".join(out)
