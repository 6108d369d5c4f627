"""Verifiable toy sequence tasks: reverse_digits (default), parity, sort_digits.

Prompts are generated deterministically from a numpy Generator; the validation set is drawn
from a fixed seed (the same for every run, so runs with different seeds are comparable) and
its prompts are excluded from training. Rewards are in [0, 1].

>>> t = ReverseDigits()
>>> t.reward("4321", "4321"), t.reward("4311", "4321"), t.reward("43", "4321")
(1.0, 0.75, 0.5)
>>> Parity().reward("1", "1"), Parity().reward("0", "1")
(1.0, 0.0)
"""

from __future__ import annotations

import numpy as np

from noma_prorl_bench.tasks.base import Example

VAL_SEED = 20_251_122


def positional_match(response: str, answer: str) -> float:
    """Fraction of answer positions the response gets right; extra or missing characters
    count as wrong (denominator max(len)). 1.0 iff the response equals the answer."""
    if not answer and not response:
        return 1.0
    hits = sum(a == b for a, b in zip(response, answer))
    return hits / max(len(response), len(answer))


class _DigitTask:
    """Shared machinery: digit strings of length in [min_len, max_len]."""

    name = "digits"

    def __init__(self, min_len: int = 3, max_len: int = 6, n_val: int = 256):
        self.min_len, self.max_len, self.n_val = min_len, max_len, n_val
        self._val = self._draw(np.random.default_rng(VAL_SEED), n_val, exclude=frozenset())
        self._val_prompts = frozenset(e.prompt for e in self._val)

    @property
    def max_new_tokens(self) -> int:
        return self.max_len + 1  # answer + EOS

    @property
    def prompt_len(self) -> int:
        return self.max_len + 2  # BOS + digits + SEP

    def alphabet(self) -> str:
        return "0123456789"

    def solve(self, prompt: str) -> str:
        raise NotImplementedError

    def _draw(self, rng: np.random.Generator, n: int, exclude: frozenset) -> list[Example]:
        out: list[Example] = []
        alpha = self.alphabet()
        while len(out) < n:
            k = int(rng.integers(self.min_len, self.max_len + 1))
            prompt = "".join(alpha[i] for i in rng.integers(0, len(alpha), size=k))
            if prompt in exclude:
                continue
            out.append(Example(prompt, self.solve(prompt)))
        return out

    def sample(self, rng: np.random.Generator, n: int) -> list[Example]:
        """n training examples (never a validation prompt)."""
        return self._draw(rng, n, self._val_prompts)

    def validation_set(self) -> list[Example]:
        return list(self._val)

    def reward(self, response: str, answer: str) -> float:
        return positional_match(response, answer)


class ReverseDigits(_DigitTask):
    """Reverse a digit string: '1234' -> '4321'."""

    name = "reverse_digits"

    def solve(self, prompt: str) -> str:
        return prompt[::-1]


class SortDigits(_DigitTask):
    """Sort a digit string ascending: '3142' -> '1234'."""

    name = "sort_digits"

    def solve(self, prompt: str) -> str:
        return "".join(sorted(prompt))


class Parity(_DigitTask):
    """Parity of a bit string: '1101' -> '1' (odd number of ones). Reward is exact match."""

    name = "parity"

    def __init__(self, min_len: int = 4, max_len: int = 8, n_val: int = 128):
        super().__init__(min_len, max_len, n_val)

    @property
    def max_new_tokens(self) -> int:
        return 2  # one bit + EOS

    def alphabet(self) -> str:
        return "01"

    def solve(self, prompt: str) -> str:
        return str(prompt.count("1") % 2)

    def reward(self, response: str, answer: str) -> float:
        return float(response == answer)


TOY_TASKS = {"reverse_digits": ReverseDigits, "parity": Parity, "sort_digits": SortDigits}
