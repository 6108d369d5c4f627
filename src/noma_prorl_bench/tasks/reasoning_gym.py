"""``--task rg:NAME``: reasoning-gym (Open-Thought/reasoning-gym, pip ``reasoning-gym==0.1.25``)
procedural tasks as verifiable RL tasks for Hugging Face chat models.

Prompts. Item ``i`` of a reasoning-gym dataset is generated from ``random.Random(seed + i)``
(``ProceduralDataset.__getitem__``), so a (seed, index) pair fixes a problem.
* Validation: items ``0 .. n_val-1`` of the dataset with seed ``VAL_SEED`` (fixed across runs;
  repeated questions are skipped, so the n_val questions are distinct).
* Training: items of the dataset with seed ``TRAIN_SEED`` at indices drawn from the run's numpy
  Generator (so the sequence is a function of ``--seed``); a question equal to any validation
  question is redrawn, so training never sees a validation problem (disjoint by question text).
Each prompt is the task's question plus ``INSTRUCTION`` (answer inside ``<answer></answer>``);
the model's chat template wraps it as one user turn (the HF tokenizer adapter does this for every
``rg:`` task: ``models.build.build_policy``).

Reward. ``reward(response, answer)`` = ``correct + format_weight * format`` where
* ``correct`` = the dataset's own ``score_answer(extracted, entry)`` (in [0, 1]; many tasks give
  partial credit) on the extracted answer, 0 when nothing is extracted;
* ``format`` = 1 iff the response holds exactly one ``<answer>...</answer>`` pair with a non-empty
  inside, else 0 (reported as its own metric whatever its weight).
Answer extraction (``--answer_extraction``):
* ``tag``: the inside of the last ``<answer>...</answer>`` (reasoning_gym.utils.extract_answer);
  no tag -> nothing extracted (reward 0): the strict reading.
* ``lenient`` (default): the tag when there is one; otherwise, when the reference answer is a
  number, the last number in the response (thousands commas removed); otherwise the last
  non-empty line. Only the *type* of the reference answer is used, never its value.
Answer form (logged, never rewarded): ``answer_form`` = 1 iff the response has the shape the
extraction reads as a final answer: a tag (``tag`` and ``lenient``), or under ``lenient`` with a
numeric reference a number that ends the response (only spaces, punctuation or markup after it),
or with a text reference any non-empty line. ``correct_in_form`` = ``correct * answer_form``, so
correctness given the form is ``mean(correct_in_form) / mean(answer_form)`` and a change in
``correct`` splits into a change of form and a change of correctness within the form.
``Example.answer`` is a JSON string holding the entry's ``answer`` and ``metadata`` (what
``score_answer`` reads), so a reward is a pure function of (response, answer) with no state.
"""

from __future__ import annotations

import json
import re
from typing import Any, Optional

import numpy as np

from noma_prorl_bench.config.choices import EXTRACTIONS
from noma_prorl_bench.config.specs.task import TaskSpec
from noma_prorl_bench.tasks.base import Example

VAL_SEED = 20_251_123
TRAIN_SEED = 7_919  # base seed of the training dataset (indices come from the run's rng)
INDEX_RANGE = 2**30  # training indices are drawn from [0, INDEX_RANGE)
# No example answer in the instruction: with "e.g. <answer>42</answer>" the model answered "The answer
# is 42." on 125 of 200 basic_arithmetic validation prompts (measured; docs/real_model.md).
INSTRUCTION = "\nGive only the final answer inside <answer></answer> tags."
_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_ENDS_IN_NUMBER = re.compile(r"-?\d+(?:\.\d+)?[^\w]*\Z")  # a number, then only non-word characters


def require_reasoning_gym():
    """Import reasoning_gym or raise ValueError naming the pip command (the CLI exits 2)."""
    try:
        import reasoning_gym  # noqa: PLC0415
    except ImportError:
        from noma_prorl_bench.config.shell import pip_install  # noqa: PLC0415

        raise ValueError(
            "--task rg:NAME needs the package reasoning-gym; run: "
            f"{pip_install(repr('reasoning-gym==0.1.25'))} "
            f"(or {pip_install('-e', repr('.[real]'))})"
        ) from None
    return reasoning_gym


def _is_number(s: str) -> bool:
    return _NUMBER.fullmatch(s.strip().replace(",", "")) is not None


def extract_answer(response: str, reference: str, mode: str = "lenient") -> str | None:
    """The answer string read from ``response`` (see the module docstring), or None."""
    tags = _TAG.findall(response)
    if tags:
        return tags[-1].strip()
    if mode == "tag":
        return None
    if _is_number(reference):
        nums = _NUMBER.findall(response.replace(",", ""))
        return nums[-1] if nums else None
    lines = [ln.strip() for ln in response.splitlines() if ln.strip()]
    return lines[-1] if lines else None


def format_ok(response: str) -> float:
    """1.0 iff exactly one <answer>...</answer> pair with a non-empty inside, else 0.0."""
    tags = _TAG.findall(response)
    opens = response.count("<answer>")
    return 1.0 if len(tags) == 1 and opens == 1 and tags[0].strip() else 0.0


def answer_form(response: str, reference: str, mode: str = "lenient") -> float:
    """1.0 iff ``response`` has the form ``extract_answer`` reads as a final answer (module docstring).

    >>> [answer_form(r, "57") for r in ("57", "The answer is 57.", "23 + 34 = 57 so the", "<answer>5</answer> ok")]
    [1.0, 1.0, 0.0, 1.0]
    """
    if _TAG.search(response):
        return 1.0
    if mode == "tag":
        return 0.0
    if _is_number(reference):
        return 1.0 if _ENDS_IN_NUMBER.search(response.replace(",", "").rstrip()) else 0.0
    return 1.0 if response.strip() else 0.0


class ReasoningGymTask:
    """One reasoning-gym dataset behind the Task protocol (tasks/base.py)."""

    def __init__(
        self,
        rg_name: str,
        n_val: int = 256,
        max_new_tokens: int = 64,
        task_kwargs: dict[str, Any] | None = None,
        extraction: str = "lenient",
        format_weight: float = 0.0,
    ):
        rg = require_reasoning_gym()
        if extraction not in EXTRACTIONS:
            raise ValueError(f"--answer_extraction must be one of {', '.join(EXTRACTIONS)}, got {extraction!r}")
        self.name, self.rg_name = f"rg:{rg_name}", rg_name
        self.n_val, self.max_new_tokens = n_val, max_new_tokens
        self.extraction, self.format_weight = extraction, float(format_weight)
        self.task_kwargs = dict(task_kwargs or {})
        try:
            self._train = rg.create_dataset(rg_name, seed=TRAIN_SEED, size=INDEX_RANGE, **self.task_kwargs)
            self._valds = rg.create_dataset(rg_name, seed=VAL_SEED, size=INDEX_RANGE, **self.task_kwargs)
        except (ValueError, TypeError, AssertionError) as e:
            raise ValueError(
                f"reasoning-gym cannot build {rg_name!r} with --task_kwargs {json.dumps(self.task_kwargs)}: {e}"
            ) from e
        self._val = self._build_val()
        self._val_q = frozenset(e.prompt for e in self._val)

    def _example(self, entry: dict) -> Example:
        answer = json.dumps(
            {"answer": entry["answer"], "metadata": entry.get("metadata", {})}, sort_keys=True, default=str
        )
        return Example(entry["question"] + INSTRUCTION, answer)

    def _build_val(self) -> list[Example]:
        out: list[Example] = []
        seen: set = set()
        i = 0
        while len(out) < self.n_val:
            if i > 50 * (self.n_val + 10):
                raise ValueError(
                    f"rg:{self.rg_name} has fewer than {self.n_val} distinct questions with "
                    f"--task_kwargs {json.dumps(self.task_kwargs)}; lower --n_val or widen the task"
                )
            ex = self._example(self._valds[i])
            i += 1
            if ex.prompt not in seen:
                seen.add(ex.prompt)
                out.append(ex)
        return out

    def sample(self, rng: np.random.Generator, n: int) -> list[Example]:
        """n training examples (never a validation question; repeats allowed)."""
        out: list[Example] = []
        draws = 0
        while len(out) < n:
            draws += 1
            if draws > 1000 * (n + 1):
                raise ValueError(f"rg:{self.rg_name}: validation holds (nearly) every question; lower --n_val")
            ex = self._example(self._train[int(rng.integers(INDEX_RANGE))])
            if ex.prompt not in self._val_q:
                out.append(ex)
        return out

    def validation_set(self) -> list[Example]:
        return list(self._val)

    def reward_parts(self, response: str, answer: str) -> dict[str, float]:
        """{'correct': score_answer on the extraction, 'format': the tag check, 'answer_form': the
        response ends in what the extraction reads, 'correct_in_form': correct * answer_form}."""
        entry = json.loads(answer)
        extracted = extract_answer(response, str(entry["answer"]), self.extraction)
        correct = float(self._train.score_answer(extracted, entry)) if extracted is not None else 0.0
        form = answer_form(response, str(entry["answer"]), self.extraction)
        return {
            "correct": correct,
            "format": format_ok(response),
            "answer_form": form,
            "correct_in_form": correct * form,
        }

    def reward(self, response: str, answer: str) -> float:
        parts = self.reward_parts(response, answer)
        return parts["correct"] + self.format_weight * parts["format"]


def make_rg_task(name: str, n_val: int, spec: Optional[TaskSpec] = None) -> ReasoningGymTask:
    """``rg:NAME`` plus the task spec's options (task_kwargs JSON, answer_extraction, format_reward;
    no spec: their defaults)."""
    kwargs_json = (spec.task_kwargs if spec is not None else "") or "{}"
    try:
        kwargs = json.loads(kwargs_json)
    except ValueError as e:
        raise ValueError(f"--task_kwargs is not valid JSON: {e}") from e
    if not isinstance(kwargs, dict):
        raise ValueError(f"--task_kwargs must be a JSON object, got {kwargs_json!r}")
    return ReasoningGymTask(
        name[3:],
        n_val=n_val,
        task_kwargs=kwargs,
        extraction=spec.answer_extraction if spec is not None else "lenient",
        format_weight=spec.format_reward if spec is not None else 0.0,
    )
