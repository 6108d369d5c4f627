"""Text tasks for Hugging Face models: strings in, a verifiable reward in [0, 1] out.

``keyword_inclusion``: "write a sentence that includes the word: KW"; reward 1 iff
every keyword occurs in the response (case-insensitive), via
``rewards.keyword_inclusion_reward_fn``. Keywords come from a built-in list of common nouns
of children's stories; a fixed, seeded fifth of them is held out for validation, so
validation prompts never share a keyword with training prompts.

``arithmetic``: small additions and subtractions in the R1-Zero answer format; the prompt ends
with ``<think>`` and the response must close it and answer as ``</think> <answer>N</answer>``.
Graded by ``rewards.r1_zero_reward_fn``. Validation problems are excluded from training.

Both follow the Task protocol of ``tasks/base.py``; examples are deterministic in the rng.
``demonstration(example)`` gives one correct response (what a supervised warm start can
teach a random model); ``answer`` itself is what the reward checks against.

>>> t = KeywordInclusionTask()
>>> ex = t.sample(np.random.default_rng(0), 2)
>>> ex[0].prompt.endswith(ex[0].answer + ".\\n") and ex[0].answer in TRAIN_KEYWORDS
True
>>> t.reward("The red apple fell from the tree.", "apple, red")
1.0
>>> t.demonstration(Example("...", "apple, red"))
'I saw the apple and the red.'
>>> a = ArithmeticTask()
>>> a.demonstration(Example("Compute 3 + 4. ...", "7"))
'3 + 4 = 7 </think> <answer>7</answer>'
>>> a.reward("3 plus 4 is 7 </think> <answer>7</answer>", "7"), a.reward("<answer>7</answer>", "7")
(1.0, 0.0)
"""

from __future__ import annotations

import re

import numpy as np

from noma_prorl_bench.tasks.base import Example
from noma_prorl_bench.tasks.rewards import (
    keyword_inclusion_reward_fn,
    r1_zero_reward_fn,
)

VAL_SEED = 20_251_123
SPLIT_SEED = 4  # fixes which keywords are held out (never change: it defines the split)

KEYWORDS = (
    "apple",
    "ball",
    "balloon",
    "bear",
    "bed",
    "bee",
    "bike",
    "bird",
    "boat",
    "book",
    "box",
    "bread",
    "bridge",
    "brother",
    "bug",
    "bunny",
    "butterfly",
    "cake",
    "car",
    "castle",
    "cat",
    "chair",
    "cloud",
    "coat",
    "cookie",
    "cow",
    "crayon",
    "cup",
    "dinosaur",
    "dog",
    "doll",
    "door",
    "dragon",
    "dress",
    "duck",
    "egg",
    "elephant",
    "farm",
    "fish",
    "flower",
    "forest",
    "fox",
    "friend",
    "frog",
    "garden",
    "gift",
    "girl",
    "grass",
    "hat",
    "hill",
    "horse",
    "house",
    "jar",
    "key",
    "kite",
    "lamp",
    "leaf",
    "lion",
    "map",
    "milk",
    "monkey",
    "moon",
    "mountain",
    "mouse",
    "music",
    "nest",
    "ocean",
    "owl",
    "paint",
    "park",
    "pencil",
    "pie",
    "pig",
    "plane",
    "pond",
    "puppy",
    "puzzle",
    "queen",
    "rabbit",
    "rain",
    "river",
    "robot",
    "rock",
    "rocket",
    "rose",
    "school",
    "sea",
    "sheep",
    "shell",
    "ship",
    "shoe",
    "sister",
    "sky",
    "snow",
    "sock",
    "song",
    "star",
    "stick",
    "sun",
    "swing",
    "table",
    "teacher",
    "toy",
    "train",
    "tree",
    "truck",
    "turtle",
    "window",
    "wolf",
    "zoo",
)


def _split_keywords(keywords: tuple[str, ...], val_frac: float = 0.2) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Seeded permutation -> (train keywords, validation keywords), disjoint, each sorted."""
    order = np.random.default_rng(SPLIT_SEED).permutation(len(keywords))
    n_val = max(1, int(round(val_frac * len(keywords))))
    val = sorted(keywords[i] for i in order[:n_val])
    train = sorted(keywords[i] for i in order[n_val:])
    return tuple(train), tuple(val)


TRAIN_KEYWORDS, VAL_KEYWORDS = _split_keywords(KEYWORDS)

KEYWORD_TEMPLATES = (
    "Write a sentence that includes the {noun}: {kws}.\n",
    "Write a short story that includes the {noun}: {kws}.\n",
    "Tell me about a day at the park using the {noun}: {kws}.\n",
    "Write one line of a children's story with the {noun}: {kws}.\n",
)


def _draw_unique(make, rng: np.random.Generator, n: int, exclude: frozenset = frozenset()) -> list[Example]:
    """n examples from ``make(rng)``: never a prompt in ``exclude``; no repeats while the pool
    lasts (after 20 * n draws repeats are allowed, so a small pool still yields n)."""
    out: list[Example] = []
    seen: set[str] = set()
    draws = 0
    while len(out) < n:
        ex = make(rng)
        draws += 1
        if draws > 1000 * (n + 1):
            raise ValueError(f"cannot draw {n} examples: the problem pool is (nearly) all excluded")
        if ex.prompt in exclude or (ex.prompt in seen and draws <= 20 * n):
            continue
        seen.add(ex.prompt)
        out.append(ex)
    return out


class KeywordInclusionTask:
    """Keyword inclusion: reward 1 iff all ``n_keywords`` keywords appear in the response."""

    name = "keyword_inclusion"

    def __init__(self, n_keywords: int = 1, n_val: int = 64, max_new_tokens: int = 64):
        if not 1 <= n_keywords <= len(VAL_KEYWORDS):
            raise ValueError(f"n_keywords must be in [1, {len(VAL_KEYWORDS)}], got {n_keywords}")
        self.n_keywords, self.n_val, self.max_new_tokens = n_keywords, n_val, max_new_tokens
        self._val = _draw_unique(lambda r: self._make(r, VAL_KEYWORDS), np.random.default_rng(VAL_SEED), n_val)

    def _make(self, rng: np.random.Generator, pool: tuple[str, ...]) -> Example:
        kws = [pool[i] for i in rng.choice(len(pool), size=self.n_keywords, replace=False)]
        template = KEYWORD_TEMPLATES[int(rng.integers(len(KEYWORD_TEMPLATES)))]
        answer = ", ".join(kws)
        noun = "word" if self.n_keywords == 1 else "words"
        return Example(template.format(noun=noun, kws=answer), answer)

    def sample(self, rng: np.random.Generator, n: int) -> list[Example]:
        """n training examples (training keywords only; disjoint from validation keywords)."""
        return [self._make(rng, TRAIN_KEYWORDS) for _ in range(n)]

    def validation_set(self) -> list[Example]:
        return list(self._val)

    def demonstration(self, ex: Example) -> str:
        """A response that earns reward 1: every keyword in one short sentence."""
        return "I saw the " + " and the ".join(ex.answer.split(", ")) + "."

    def reward(self, response: str, answer: str) -> float:
        """answer: the comma-separated keywords, e.g. "apple, red"."""
        return keyword_inclusion_reward_fn(response, answer)["reward"]


ARITHMETIC_TEMPLATES = {
    "short": "Compute {a} {op} {b}. Reason briefly, then end with </think> <answer>N</answer>.\n<think>",
    "r1_zero": (
        "A conversation between User and Assistant. The User asks a question and the Assistant "
        "answers it. The Assistant first thinks the problem through, then gives the answer. "
        "The thinking goes inside <think> </think> and the answer inside <answer> </answer>, "
        "i.e. <think> thinking here </think> <answer> answer here </answer>.\n"
        "User: What is {a} {op} {b}?\nAssistant: <think>"
    ),
}


_EXPR = re.compile(r"(\d+) ([+-]) (\d+)")


class ArithmeticTask:
    """``a + b`` or ``a - b`` with operands in [0, max_operand]; R1-Zero answer format."""

    name = "arithmetic"

    def __init__(
        self,
        max_operand: int = 99,
        template: str = "short",
        n_val: int = 64,
        max_new_tokens: int = 48,
        allow_negative: bool = False,
    ):
        if template not in ARITHMETIC_TEMPLATES:
            raise ValueError(f"template must be one of {sorted(ARITHMETIC_TEMPLATES)}, got {template!r}")
        self.max_operand, self.template, self.allow_negative = max_operand, template, allow_negative
        self.n_val, self.max_new_tokens = n_val, max_new_tokens
        self._val = _draw_unique(self._make, np.random.default_rng(VAL_SEED), n_val)
        self._val_prompts = frozenset(e.prompt for e in self._val)

    def _make(self, rng: np.random.Generator) -> Example:
        a, b = (int(x) for x in rng.integers(0, self.max_operand + 1, size=2))
        op = "+" if rng.random() < 0.5 else "-"
        if op == "-" and not self.allow_negative and b > a:
            a, b = b, a
        value = a + b if op == "+" else a - b
        return Example(ARITHMETIC_TEMPLATES[self.template].format(a=a, op=op, b=b), str(value))

    def sample(self, rng: np.random.Generator, n: int) -> list[Example]:
        """n training examples (never a validation problem)."""
        return _draw_unique(self._make, rng, n, exclude=self._val_prompts)

    def validation_set(self) -> list[Example]:
        return list(self._val)

    def demonstration(self, ex: Example) -> str:
        """A response that earns reward 1: the sum written out, then the R1-Zero answer tags."""
        m = _EXPR.search(ex.prompt)
        work = f"{m.group(1)} {m.group(2)} {m.group(3)} = {ex.answer}" if m else ex.answer
        return f"{work} </think> <answer>{ex.answer}</answer>"

    def reward(self, response: str, answer: str) -> float:
        return r1_zero_reward_fn(response, answer)["reward"]


TEXT_TASKS = {"keyword_inclusion": KeywordInclusionTask, "arithmetic": ArithmeticTask}


def make_text_task(name: str, n_val: int = 64):
    """Build a text task by name (keyword_inclusion | arithmetic)."""
    if name not in TEXT_TASKS:
        raise ValueError(f"unknown text task {name!r} (choose from {', '.join(TEXT_TASKS)})")
    return TEXT_TASKS[name](n_val=n_val)
