"""A task of your own: copy a digit string (docs/tasks.md walks through it)."""

import numpy as np

from noma_prorl_bench.tasks import Example


class CopyDigits:
    name = "copy_digits"

    def __init__(self, length: int = 4, n_val: int = 64):
        self.length, self.max_new_tokens = length, length + 1  # the answer and an end token
        self._held_out = set()
        self._val = self.sample(np.random.default_rng(12345), n_val)  # fixed: the same for every run
        self._held_out = {e.prompt for e in self._val}

    def sample(self, rng: np.random.Generator, n: int) -> list[Example]:
        out = []
        while len(out) < n:
            digits = "".join(str(d) for d in rng.integers(0, 10, size=self.length))
            if digits not in self._held_out:  # never train on a validation prompt
                out.append(Example(prompt=digits, answer=digits))
        return out

    def validation_set(self) -> list[Example]:
        return list(self._val)

    def reward(self, response: str, answer: str) -> float:
        return sum(a == b for a, b in zip(response, answer)) / max(len(response), len(answer), 1)


def make(length: int = 4, n_val: int = 64) -> CopyDigits:
    return CopyDigits(length, n_val)
