"""Tasks: toy verifiable sequence tasks (char vocabulary) and text tasks for HF models."""
from __future__ import annotations

from noma_prorl_bench.tasks.base import CharTokenizer, Example, Task
from noma_prorl_bench.tasks.toy import TOY_TASKS


def make_task(name: str, n_val: int = 256, cfg=None) -> Task:
    """Build a task by name (toy tasks here; text tasks from tasks/text.py; rg:NAME from
    tasks/reasoning_gym.py with cfg's task_kwargs, answer_extraction and format_reward)."""
    if name.startswith("rg:"):
        from noma_prorl_bench.tasks.reasoning_gym import make_rg_task  # noqa: PLC0415  (needs reasoning-gym)
        return make_rg_task(name, n_val=n_val, cfg=cfg)
    if name in TOY_TASKS:
        cls = TOY_TASKS[name]
        return cls(n_val=min(n_val, 128)) if name == "parity" else cls(n_val=n_val)
    from noma_prorl_bench.tasks import text  # noqa: PLC0415  (text tasks are only needed with HF models)
    return text.make_text_task(name, n_val=n_val)


def part_metrics(task, responses, answers, prefix: str = "reward/") -> dict[str, float]:
    """Means of the task's reward parts (rg: tasks: correct, format) as PREFIX+part; {} for
    tasks without ``reward_parts``."""
    parts_fn = getattr(task, "reward_parts", None)
    if parts_fn is None or not responses:
        return {}
    rows = [parts_fn(s, a) for s, a in zip(responses, answers)]
    return {f"{prefix}{k}": sum(r[k] for r in rows) / len(rows) for k in rows[0]}


__all__ = ["CharTokenizer", "Example", "Task", "TOY_TASKS", "make_task", "part_metrics"]
