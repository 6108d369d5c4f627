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

Bounds (checked before what they bound is read or built; ConfigError naming the flag): the file's
size (``--max_task_bytes``, from ``stat`` before it is opened), each line's length in bytes
(``--max_line_bytes``, read at most that far), its JSON nesting (MAX_DEPTH levels), each prompt and
answer in characters (``--max_prompt_chars``, ``--max_answer_chars``: the answers bound the response
cap, the prompts the sequence length the memory estimate sizes). Without ``--n_val`` a run holds
out a fifth of the distinct prompts, at most 256 (``fitted_n_val``).

>>> reward_by_name("numeric", tol=0.01)("it is 3.141", "3.14")
1.0
>>> reward_by_name("regex")(" 12 apples", "[0-9]+ apples?")
1.0
>>> reward_by_name("exact")("ab", "ab "), reward_by_name("exact")("a", "b")
(1.0, 0.0)
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
from typing import Callable

import numpy as np

from noma_prorl_bench.config.errors import ConfigError
from noma_prorl_bench.config.fields import field_default
from noma_prorl_bench.config.specs.task import JSONL_LIMITS, TaskSpec
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

    from noma_prorl_bench.config.errors import ConfigError  # noqa: PLC0415
    from noma_prorl_bench.tasks.custom import import_attr  # noqa: PLC0415

    fn = import_attr(spec, "--reward_fn")
    if not callable(fn):
        raise ConfigError("reward_fn", f"{spec} is a {type(fn).__name__}, not a function of (response, answer)")
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        sig = None  # a builtin without a signature: called as it is
    if sig is not None:
        try:
            sig.bind("response", "answer")
        except TypeError as e:
            raise ConfigError(
                "reward_fn",
                f"{spec}{sig} cannot be called as {spec.split(':')[1]}(response, answer) "
                f"({e}); a verifier takes the response and the answer",
            ) from None

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


#: Bounds on a task file by flag, with their defaults (config/fields.py; docs/tasks.md), each
#: checked before what it bounds is read or built.
LIMITS: dict[str, int] = {k: field_default(k) for k in JSONL_LIMITS}
MAX_DEPTH = 64  # JSON nesting of one line


def _depth(value) -> int:
    """Nesting depth of a parsed JSON value (1 for an object of scalars), counted without recursion;
    stops counting past MAX_DEPTH."""
    deepest, stack = 0, [(value, 1)]
    while stack and deepest <= MAX_DEPTH:
        v, d = stack.pop()
        if isinstance(v, (dict, list)):
            deepest = max(deepest, d)
            stack.extend((x, d + 1) for x in (v.values() if isinstance(v, dict) else v))
    return deepest


def _parse(line: bytes, where: str):
    """One line as JSON; ValueError naming `where` when it is not UTF-8, not JSON or nested deeper than
    MAX_DEPTH (the bracket count bounds the depth, so most lines are never walked)."""
    try:
        rec = json.loads(line.decode("utf-8"))
    except RecursionError:
        deep = True
    except ValueError as e:
        raise ValueError(f"{where} is not a JSON object ({str(e)[:200]})") from None
    else:
        deep = line.count(b"[") + line.count(b"{") > MAX_DEPTH and _depth(rec) > MAX_DEPTH
    if deep:
        raise ValueError(
            f"{where} nests JSON deeper than {MAX_DEPTH} levels (a line is one object of prompt and answer)"
        )
    return rec


def read_lines(path: str, prompt_field: str, answer_field: str, **limits: int) -> list[Example]:
    """Every line of the file as an Example; ValueError naming the line on a bad one, ConfigError
    naming the flag when the file, a line, a prompt or an answer exceeds its bound (LIMITS, or
    `limits`): the file's size is checked before it is read, a line before it is parsed."""
    from noma_prorl_bench.config.user_files import open_input  # noqa: PLC0415

    fd = open_input(path)  # a regular file (links followed): a FIFO or a device is refused, never read
    lim, size = {**LIMITS, **limits}, os.fstat(fd).st_size
    if size > lim["max_task_bytes"]:
        os.close(fd)
        raise ConfigError(
            "max_task_bytes",
            f"{path} is {size:,} bytes, more than --max_task_bytes "
            f"{lim['max_task_bytes']:,} (raise it to read a larger task file)",
        )
    out, total, cap = [], 0, lim["max_line_bytes"]
    with os.fdopen(fd, "rb") as f:
        for i in itertools.count(1):
            line = f.readline(cap + 2)
            if not line:
                break
            total += len(line)
            if total > lim["max_task_bytes"]:  # a file that grew, or is not a regular file
                raise ConfigError(
                    "max_task_bytes",
                    f"{path} holds more than --max_task_bytes {lim['max_task_bytes']:,} bytes (raise it to read it)",
                )
            if len(line.rstrip(b"\r\n")) > cap:
                raise ConfigError(
                    "max_line_bytes",
                    f"{path}:{i} is longer than --max_line_bytes {cap:,} bytes (raise it for longer lines)",
                )
            if not line.strip():
                continue
            rec = _parse(line, f"{path}:{i}")
            if not isinstance(rec, dict) or prompt_field not in rec or answer_field not in rec:
                raise ValueError(
                    f"{path}:{i} lacks the field {prompt_field!r} or {answer_field!r} "
                    f"(set them with --prompt_field, --answer_field)"
                )
            e = Example(str(rec[prompt_field]), str(rec[answer_field]))
            for what, text in (("prompt", e.prompt), ("answer", e.answer)):
                flag = f"max_{what}_chars"
                if len(text) > lim[flag]:
                    raise ConfigError(
                        flag,
                        f"{path}:{i}: the {what} is {len(text):,} characters long, more than "
                        f"--{flag} {lim[flag]:,} (raise it for longer {what}s)",
                    )
            out.append(e)
    if not out:
        raise ValueError(f"{path} holds no example")
    return out


def limits_of(spec: TaskSpec) -> dict[str, int]:
    """The LIMITS flags' values in the task spec."""
    return {k: getattr(spec, k) for k in LIMITS}


def fitted_n_val(spec: TaskSpec, cap: int) -> int:
    """--n_val for a jsonl:PATH task given without one: a fifth of the file's distinct prompts, at
    most `cap` (the default 256 or a preset's value), at least 1 and leaving one training prompt."""
    n = len(
        {
            e.prompt
            for e in read_lines(spec.task[len("jsonl:") :], spec.prompt_field, spec.answer_field, **limits_of(spec))
        }
    )
    _need_two(n)
    return max(1, min(cap, n // 5, n - 1))


def _need_two(n_prompts: int) -> None:
    if n_prompts < 2:
        raise ValueError(
            f"the task file has {n_prompts} distinct prompt: it needs at least 2 (one for validation, one for training)"
        )


def split(examples: list[Example], n_val: int) -> tuple[list[Example], list[Example]]:
    """(training lines, validation examples) by the SHA-256 rule of the module docstring."""
    first: dict[str, Example] = {}
    for e in examples:
        first.setdefault(e.prompt, e)
    order = sorted(first, key=lambda p: hashlib.sha256(p.encode("utf-8")).hexdigest())
    _need_two(len(order))
    if n_val >= len(order):
        raise ValueError(
            f"{n_val} leaves no training prompt: the file has {len(order)} distinct prompts "
            f"(use --n_val at most {len(order) - 1}, e.g. {max(1, len(order) // 5)})"
        )
    val_prompts = set(order[:n_val])
    return [e for e in examples if e.prompt not in val_prompts], [first[p] for p in order[:n_val]]


class JsonlTask:
    """A task read from a JSONL file (the Task protocol of tasks/base.py)."""

    def __init__(
        self,
        path: str,
        n_val: int = 256,
        prompt_field: str = "prompt",
        answer_field: str = "answer",
        reward_fn: str = "exact",
        reward_tol: float = 1e-6,
        **limits: int,
    ):
        self.name, self.path = f"jsonl:{path}", path
        self._reward = reward_by_name(reward_fn, reward_tol)
        examples = read_lines(path, prompt_field, answer_field, **limits)
        if reward_fn == "regex":
            for e in examples:
                try:
                    re.compile(e.answer)
                except re.error as err:
                    raise ValueError(
                        f"--reward_fn regex: the answer {e.answer!r} is not a regular expression ({err})"
                    ) from None
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
