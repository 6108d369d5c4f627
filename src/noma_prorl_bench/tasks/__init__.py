"""Tasks: toy verifiable sequence tasks (char vocabulary), text tasks for HF models, and your own
(``--task module.path:factory`` or ``--task jsonl:PATH``; docs/tasks.md)."""

from __future__ import annotations

import re
from typing import Callable, Optional, TypeVar

from noma_prorl_bench.config.specs.task import TaskSpec
from noma_prorl_bench.tasks.base import CharTokenizer, Example, Task
from noma_prorl_bench.tasks.toy import TOY_TASKS

T = TypeVar("T")


def make_task(name: str, n_val: int = 256, spec: Optional[TaskSpec] = None) -> Task:
    """Build a task by name (toy tasks here; text tasks from tasks/text.py; rg:NAME from
    tasks/reasoning_gym.py with the spec's task_kwargs, answer_extraction and format_reward;
    jsonl:PATH from tasks/jsonl.py with its prompt_field, answer_field, reward_fn, reward_tol and
    bounds; module.path:factory from tasks/custom.py with its task_kwargs; no spec: their
    defaults). A user task that cannot be built raises config.ConfigError naming the flag."""
    if name.startswith("jsonl:"):
        return _jsonl_task(name, n_val, spec)
    from noma_prorl_bench.tasks.custom import is_factory_spec, load_factory_task  # noqa: PLC0415

    if is_factory_spec(name):
        return load_factory_task(name, n_val, spec.task_kwargs if spec is not None else "")
    if name.startswith("rg:"):
        from noma_prorl_bench.tasks.reasoning_gym import make_rg_task  # noqa: PLC0415  (needs reasoning-gym)

        return make_rg_task(name, n_val=n_val, spec=spec)
    if name in TOY_TASKS:
        cls = TOY_TASKS[name]
        return cls(n_val=min(n_val, 128)) if name == "parity" else cls(n_val=n_val)
    from noma_prorl_bench.tasks import text  # noqa: PLC0415  (text tasks are only needed with HF models)

    return text.make_text_task(name, n_val=n_val)


def _read_task_file(path: str, build: Callable[[], T]) -> T:
    """build(), its errors reading the jsonl:PATH task file as ConfigError naming the flag (--task,
    --n_val, or the bound's own flag, which tasks/jsonl.py raises as ConfigError already)."""
    from noma_prorl_bench.config.errors import ConfigError  # noqa: PLC0415

    try:
        return build()
    except ConfigError:
        raise
    except OSError as e:
        raise ConfigError("task", f"cannot read {path!r}: {e.strerror or e}") from e
    except (ValueError, re.error) as e:
        raise ConfigError("n_val" if "leaves no training prompt" in str(e) else "task", str(e)) from e


def _jsonl_task(name: str, n_val: int, spec: Optional[TaskSpec]) -> Task:
    from noma_prorl_bench.tasks.jsonl import LIMITS, JsonlTask  # noqa: PLC0415

    names = ("prompt_field", "answer_field", "reward_fn", "reward_tol", *LIMITS)
    opts = {} if spec is None else {k: getattr(spec, k) for k in names}
    path = name[len("jsonl:") :]
    return _read_task_file(path, lambda: JsonlTask(path, n_val=n_val, **opts))


def jsonl_n_val(spec: TaskSpec, cap: int) -> int:
    """The --n_val a jsonl:PATH run uses when none is given (tasks/jsonl.fitted_n_val); ConfigError
    naming the flag when the file cannot be read or exceeds a bound."""
    from noma_prorl_bench.tasks.jsonl import fitted_n_val  # noqa: PLC0415

    return _read_task_file(spec.task[len("jsonl:") :], lambda: fitted_n_val(spec, cap))


def is_user_task(name: str) -> bool:
    """True for jsonl:PATH and module.path:factory (tasks this package does not define)."""
    from noma_prorl_bench.tasks.custom import is_factory_spec  # noqa: PLC0415

    return name.startswith("jsonl:") or is_factory_spec(name)


def part_metrics(task, responses, answers, prefix: str = "reward/") -> dict[str, float]:
    """Means of the task's reward parts (rg: tasks: correct, format) as PREFIX+part; {} for
    tasks without ``reward_parts``."""
    parts_fn = getattr(task, "reward_parts", None)
    if parts_fn is None or not responses:
        return {}
    rows = [parts_fn(s, a) for s, a in zip(responses, answers)]
    return {f"{prefix}{k}": sum(r[k] for r in rows) / len(rows) for k in rows[0]}


__all__ = ["CharTokenizer", "Example", "Task", "TOY_TASKS", "is_user_task", "jsonl_n_val", "make_task", "part_metrics"]
