"""Tasks: toy verifiable sequence tasks (char vocabulary) and text tasks for HF models."""
from __future__ import annotations

from noma_prorl_bench.tasks.base import CharTokenizer, Example, Task
from noma_prorl_bench.tasks.toy import TOY_TASKS


def make_task(name: str, n_val: int = 256) -> Task:
    """Build a task by name (toy tasks here; text tasks from tasks/text.py)."""
    if name in TOY_TASKS:
        cls = TOY_TASKS[name]
        return cls(n_val=min(n_val, 128)) if name == "parity" else cls(n_val=n_val)
    from noma_prorl_bench.tasks import text  # noqa: PLC0415  (text tasks are only needed with HF models)
    return text.make_text_task(name, n_val=n_val)


__all__ = ["CharTokenizer", "Example", "Task", "TOY_TASKS", "make_task"]
