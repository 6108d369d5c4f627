"""``--task jsonl:PATH``: a task from a file of one JSON object per line, ``{"prompt", "answer"}``.

Fields. ``--prompt_field`` and ``--answer_field`` name the two keys read from every line
(default ``prompt`` and ``answer``; values are turned into strings, other keys are ignored).

Split (deterministic, independent of line order and of ``--seed``). The distinct prompts are
ordered by the SHA-256 digest of their UTF-8 bytes; the first ``--n_val`` of them are the
validation set (the first line of each, in that order) and every line whose prompt is not one
of them is a training line. A prompt never lands in both. Training examples are drawn
uniformly from the training lines with the run's generator (repeats allowed).

Reward (``--reward_fn``), a pure function of (response, answer) in [0, 1]:
* ``exact``: 1 iff the response, stripped of surrounding whitespace, equals the answer (stripped);
* ``numeric``: the last number in the response (thousands commas removed) is within
  ``--reward_tol`` (absolute) of the answer read as a number; no number: 0;
* ``regex``: the answer is a regular expression; 1 iff it matches the whole stripped response;
* ``MODULE:FUNCTION``: an importable ``FUNCTION(response, answer)`` returning a number, or a
  dict with a ``"reward"`` number (the shape of ``tasks/rewards.py``'s functions).

The response cap defaults to the longest answer in characters plus one (an end token); give
``--max_new_tokens`` when responses are longer than answers (``regex``, a verifier, reasoning).

>>> reward_by_name("numeric", tol=0.01)("it is 3.141", "3.14")
1.0
>>> reward_by_name("regex")(" 12 apples", "[0-9]+ apples?")
1.0
>>> reward_by_name("exact")("ab", "ab "), reward_by_name("exact")("a", "b")
(1.0, 0.0)
"""
from __future__ import annotations

import hashlib
import json
import re
from typing import Callable

import numpy as np

from noma_prorl_bench.tasks.base import Example

REWARDS = ("exact", "numeric", "regex")
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")


def _last_number(text: str) -> float | None:
    nums = _NUMBER.findall(text.replace(",", ""))
    return float(nums[-1]) if nums else None


def _exact(response: str, answer: str) -> float:
    return float(response.strip() == answer.strip())


def _regex(response: str, answer: str) -> float:
    return float(re.fullmatch(answer, response.strip()) is not None)


def _numeric(tol: float) -> Callable[[str, str], float]:
    def reward(response: str, answer: str) -> float:
        x, y = _last_number(response), _last_number(answer)
        return float(x is not None and y is not None and abs(x - y) <= tol)
    return reward


def _verifier(spec: str) -> Callable[[str, str], float]:
    """The callable ``spec`` names, checked before training: callable, and its signature takes
    ``(response, answer)`` (ConfigError naming --reward_fn otherwise)."""
    import inspect  # noqa: PLC0415

    from noma_prorl_bench.config.validate import ConfigError  # noqa: PLC0415
    from noma_prorl_bench.tasks.custom import import_attr  # noqa: PLC0415
    fn = import_attr(spec, "--reward_fn")
    if not callable(fn):
        raise ConfigError("reward_fn", f"{spec} is a {type(fn).__name__}, not a function of (response, answer)")
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        sig = None                                  # a builtin without a signature: called as it is
    if sig is not None:
        try:
            sig.bind("response", "answer")
        except TypeError as e:
            raise ConfigError("reward_fn", f"{spec}{sig} cannot be called as {spec.split(':')[1]}(response, answer) "
                                           f"({e}); a verifier takes the response and the answer") from None

    def reward(response: str, answer: str) -> float:
        out = fn(response, answer)
        return float(out["reward"] if isinstance(out, dict) else out)
    return reward


def reward_by_name(name: str, tol: float = 1e-6) -> Callable[[str, str], float]:
    """The reward function ``--reward_fn NAME`` names (see the module docstring)."""
    if name == "exact":
        return _exact
    if name == "regex":
        return _regex
    if name == "numeric":
        return _numeric(tol)
    if ":" in name:
        return _verifier(name)
    raise ValueError(f"--reward_fn must be one of {', '.join(REWARDS)} or MODULE:FUNCTION, got {name!r}")


def read_lines(path: str, prompt_field: str, answer_field: str) -> list[Example]:
    """Every line of the file as an Example; ValueError naming the line on a bad one."""
    out = []
    with open(path, encoding="utf-8") as f:
        for i, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except ValueError as e:
                raise ValueError(f"{path}:{i} is not a JSON object ({e})") from None
            if not isinstance(rec, dict) or prompt_field not in rec or answer_field not in rec:
                raise ValueError(f"{path}:{i} lacks the field {prompt_field!r} or {answer_field!r} "
                                 f"(set them with --prompt_field, --answer_field)")
            out.append(Example(str(rec[prompt_field]), str(rec[answer_field])))
    if not out:
        raise ValueError(f"{path} holds no example")
    return out


def split(examples: list[Example], n_val: int) -> tuple[list[Example], list[Example]]:
    """(training lines, validation examples) by the SHA-256 rule of the module docstring."""
    first: dict[str, Example] = {}
    for e in examples:
        first.setdefault(e.prompt, e)
    order = sorted(first, key=lambda p: hashlib.sha256(p.encode("utf-8")).hexdigest())
    if n_val >= len(order):
        raise ValueError(f"{n_val} leaves no training prompt: the file has {len(order)} distinct prompts "
                         f"(use --n_val at most {len(order) - 1}, e.g. {max(1, len(order) // 5)})")
    val_prompts = set(order[:n_val])
    return [e for e in examples if e.prompt not in val_prompts], [first[p] for p in order[:n_val]]


class JsonlTask:
    """A task read from a JSONL file (the Task protocol of tasks/base.py)."""

    def __init__(self, path: str, n_val: int = 256, prompt_field: str = "prompt", answer_field: str = "answer",
                 reward_fn: str = "exact", reward_tol: float = 1e-6):
        self.name, self.path = f"jsonl:{path}", path
        self._reward = reward_by_name(reward_fn, reward_tol)
        examples = read_lines(path, prompt_field, answer_field)
        if reward_fn == "regex":
            for e in examples:
                try:
                    re.compile(e.answer)
                except re.error as err:
                    raise ValueError(f"--reward_fn regex: the answer {e.answer!r} is not a regular expression "
                                     f"({err})") from None
        self._train, self._val = split(examples, n_val)
        self.max_new_tokens = max(len(e.answer) for e in examples) + 1

    def sample(self, rng: np.random.Generator, n: int) -> list[Example]:
        """n training lines, drawn uniformly with replacement (never a validation prompt)."""
        return [self._train[int(i)] for i in rng.integers(0, len(self._train), size=n)]

    def validation_set(self) -> list[Example]:
        return list(self._val)

    def all_examples(self) -> list[Example]:
        """Every line (for the character-vocabulary check of char models)."""
        return self._train + self._val

    def reward(self, response: str, answer: str) -> float:
        return self._reward(response, answer)
