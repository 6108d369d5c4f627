"""The tokenizer of a Hugging Face model (``--model hf:PATH``) behind the interface of
``tasks.base.CharTokenizer``: left-padded prompts (the tokenizer's pad token, or EOS), chat
templates for instruct models, answers with EOS for the warm start, responses cut at EOS.
``models.hf.load_hf_policy`` returns one with its policy.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch


class HFTokenizerAdapter:
    """An HF tokenizer with the interface of ``tasks.base.CharTokenizer``.

    ``encode_prompts`` left-pads with ``pad_id`` (the tokenizer's pad token, or EOS when it has
    none, as for Llama); the tokenizer's own special tokens (e.g. Llama's BOS) are kept.
    With ``chat=True`` each prompt is wrapped as one user turn by the tokenizer's chat
    template (for instruct models) before encoding.
    """

    def __init__(self, tokenizer: Any, chat: bool = False):
        self.tokenizer = tokenizer
        self.chat = chat
        if tokenizer.eos_token_id is None:
            raise ValueError("tokenizer has no EOS token; cannot end responses")
        self.eos_id = int(tokenizer.eos_token_id)
        pad = tokenizer.pad_token_id
        self.pad_id = int(pad) if pad is not None else self.eos_id
        self.vocab_size = len(tokenizer)

    def prompt_ids(self, prompt: str) -> list[int]:
        """One prompt -> token ids (special tokens as the tokenizer adds them)."""
        if self.chat:
            text = self.tokenizer.apply_chat_template(
                [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True
            )
            return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
        return list(self.tokenizer(prompt, add_special_tokens=True)["input_ids"])

    def encode_prompts(self, prompts: Sequence[str], P: int | None = None) -> torch.Tensor:
        """prompts -> LongTensor[N, P], left-padded with ``pad_id`` (P: longest prompt if None)."""
        rows = [self.prompt_ids(p) for p in prompts]
        P = P or max(len(r) for r in rows)
        too_long = [len(r) for r in rows if len(r) > P]
        if too_long:
            raise ValueError(f"prompt of {max(too_long)} tokens is longer than P={P}")
        return torch.tensor([[self.pad_id] * (P - len(r)) + r for r in rows], dtype=torch.long)

    def encode_answer(self, answer: str) -> list[int]:
        """A target response -> ids + EOS (no BOS): the teacher-forcing target of a warm start."""
        return list(self.tokenizer(answer, add_special_tokens=False)["input_ids"]) + [self.eos_id]

    def decode(self, ids: Sequence[int]) -> str:
        """Response ids -> text: stops at the first EOS, skips special and out-of-vocabulary ids."""
        out = []
        for i in ids:
            i = int(i)
            if i == self.eos_id:
                break
            if 0 <= i < self.vocab_size:  # a model's logits may be wider than its tokenizer
                out.append(i)
        return self.tokenizer.decode(out, skip_special_tokens=True)
