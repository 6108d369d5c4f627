"""The task (`TaskSpec`): which task, its file or generator options, the reward, the response cap."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar

from noma_prorl_bench.config.choices import AnswerExtraction
from noma_prorl_bench.config.errors import ConfigError, suggest
from noma_prorl_bench.config.specs.base import Spec, default_of, flag

TASKS = ("reverse_digits", "parity", "sort_digits", "keyword_inclusion", "arithmetic")
TEXT_TASKS = ("keyword_inclusion", "arithmetic")
USER_TASK = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")  # module.path:factory
JSONL_LIMITS = ("max_task_bytes", "max_line_bytes", "max_prompt_chars", "max_answer_chars")  # bounds on the file
#: the flags that apply to --task jsonl:PATH only
JSONL_ONLY = ("prompt_field", "answer_field", "reward_fn", "reward_tol", *JSONL_LIMITS)
REWARD_FNS = ("exact", "numeric", "regex")


@dataclass(frozen=True)
class TaskSpec(Spec):
    """The task builder's flags (tasks.make_task; the jsonl:PATH and rg:NAME options)."""

    SECTION: ClassVar[str] = "task and model"

    n_val: int = flag(256, section="run and outputs")
    """Number of held-out validation prompts (fixed across seeds). With --task jsonl:PATH and no --n_val: a fifth of the file's distinct prompts, at most 256 (or the preset's value), at least 1 and leaving one for training; the value used is config.json's n_val."""
    task: str = "reverse_digits"
    """Verifiable task. Toy tasks: reverse_digits, parity, sort_digits (char vocabulary). Text tasks (HF models): keyword_inclusion, arithmetic, and rg:NAME, any reasoning-gym dataset (e.g. rg:basic_arithmetic, rg:chain_sum; needs pip install reasoning-gym==0.1.25): prompts from its generator (validation disjoint from training), wrapped in the model's chat template, reward = the dataset's score_answer on the extracted answer (docs/real_model.md). Your own: module.path:factory, an importable callable returning a Task (kwargs from --task_kwargs), or jsonl:PATH, one {"prompt", "answer"} object per line, reward by --reward_fn (docs/tasks.md)."""
    task_kwargs: str = ""
    """rg:NAME and module.path:factory only: a JSON object. rg:NAME: the reasoning-gym dataset's config fields (difficulty), passed to create_dataset, e.g. '{"min_terms": 2, "max_terms": 2, "max_digits": 2}'. module.path:factory: keyword arguments of the factory. Empty: the defaults."""
    prompt_field: str = "prompt"
    """jsonl:PATH only: the key of each line's prompt."""
    answer_field: str = "answer"
    """jsonl:PATH only: the key of each line's reference answer."""
    reward_fn: str = "exact"
    """jsonl:PATH only: the reward in [0, 1]. exact: stripped response == answer; numeric: the last number in the response within --reward_tol of the answer; regex: the answer is a regular expression matching the whole stripped response; MODULE:FUNCTION: an importable FUNCTION(response, answer) returning a number or a dict with "reward"."""
    reward_tol: float = 1e-6
    """jsonl:PATH with --reward_fn numeric only: the absolute tolerance."""
    max_task_bytes: int = 256 * 2**20
    """jsonl:PATH only: the largest task file read, in bytes (its size is checked before it is opened)."""
    max_line_bytes: int = 2**20
    """jsonl:PATH only: the longest line of the task file, in bytes (read at most this much per line). A line's JSON may nest at most 64 levels deep."""
    max_prompt_chars: int = 16384
    """jsonl:PATH only: the longest prompt, in characters (the memory estimate sizes sequences by the longest prompt)."""
    max_answer_chars: int = 4096
    """jsonl:PATH only: the longest answer, in characters (the response cap, --max_new_tokens when not given, is the longest answer plus one)."""
    answer_extraction: AnswerExtraction = "lenient"
    """rg:NAME only: how the answer is read from a response before score_answer. tag: the inside of the last <answer></answer> (none: reward 0). lenient: the tag if present, else the last number (numeric answers) or the last non-empty line."""
    format_reward: float = 0.0
    """rg:NAME only: weight w of the format reward; reward = correct + w * format, where format = 1 iff the response has exactly one non-empty <answer></answer>. Both parts are logged separately (reward/correct, reward/format) whatever w is."""
    max_new_tokens: int = flag(0, section="sampling")
    """Response length cap T (0: the task's default)."""

    @property
    def is_rg(self) -> bool:
        return self.task.startswith("rg:")

    @property
    def is_jsonl(self) -> bool:
        return self.task.startswith("jsonl:")

    @property
    def is_factory(self) -> bool:
        """--task module.path:factory (a user's own task builder)."""
        return bool(USER_TASK.match(self.task)) and not self.is_rg and not self.is_jsonl

    def check(self) -> None:
        self.positive("n_val")
        self.nonneg("max_new_tokens")
        self._check_task()
        self._check_user_task()

    def _check_task(self) -> None:
        """--task NAME, rg:NAME, jsonl:PATH or module.path:factory, and the flags that apply only
        to some of them."""
        rg, jsonl, factory = self.is_rg, self.is_jsonl, self.is_factory
        if not (self.task in TASKS or (rg and len(self.task) > 3) or (jsonl and len(self.task) > 6) or factory):
            raise ConfigError(
                "task",
                f"invalid choice: {self.task!r}{suggest(self.task, TASKS)} (choose from "
                f"{', '.join(TASKS)}, rg:NAME, jsonl:PATH, module.path:factory)",
            )
        if not rg:
            for n in ("answer_extraction", "format_reward"):
                if self.changed(n):
                    raise ConfigError(n, f"only applies to --task rg:NAME (got --task {self.task})")
        if not (rg or factory) and self.task_kwargs:
            raise ConfigError(
                "task_kwargs", f"only applies to --task rg:NAME or module.path:factory (got --task {self.task})"
            )
        if self.format_reward < 0:
            raise ConfigError("format_reward", f"must be >= 0, got {self.format_reward}")
        if self.task_kwargs:
            import json  # noqa: PLC0415

            try:
                kw = json.loads(self.task_kwargs)
            except ValueError as e:
                raise ConfigError("task_kwargs", f"is not valid JSON ({e}): {self.task_kwargs!r}") from None
            if not isinstance(kw, dict):
                raise ConfigError("task_kwargs", f"must be a JSON object, got {self.task_kwargs!r}")

    def _check_user_task(self) -> None:
        """The jsonl:PATH-only flags; --reward_fn's name."""
        for n in JSONL_ONLY:
            if not self.is_jsonl and self.changed(n):
                raise ConfigError(n, f"only applies to --task jsonl:PATH (got --task {self.task})")
        if self.reward_fn not in REWARD_FNS and not USER_TASK.match(self.reward_fn):
            raise ConfigError(
                "reward_fn",
                f"invalid choice: {self.reward_fn!r}{suggest(self.reward_fn, REWARD_FNS)} "
                f"(choose from {', '.join(REWARD_FNS)}, MODULE:FUNCTION)",
            )
        if self.reward_fn != "numeric" and self.reward_tol != default_of(TaskSpec, "reward_tol"):
            raise ConfigError("reward_tol", f"only applies to --reward_fn numeric (got --reward_fn {self.reward_fn})")
        if not self.reward_tol >= 0:
            raise ConfigError("reward_tol", f"must be >= 0, got {self.reward_tol}")
        self.positive(*JSONL_LIMITS)
