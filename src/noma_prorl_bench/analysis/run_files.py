"""A run's files read tolerantly (the readers behind runlog.load_run): a partial last JSONL line
(a run killed mid-write) is dropped; an unparseable line elsewhere is dropped with a warning;
both are recorded in the `dropped` list the caller passes. A run file that is a symlink, FIFO,
socket, device, directory or a file with several hard links, or that lies below a symlinked
directory of the run or suite, or that is larger than its bound, is not read: ValueError naming
it (io/safe_files.py); samples.jsonl is read only up to SAMPLES_LIMIT. Metric rows become numpy
columns aligned on their steps; the step-0 row (before RL) is kept apart.
"""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from noma_prorl_bench.analysis.untrusted import term_text
from noma_prorl_bench.io import safe_files

#: the most a report reads of samples.jsonl (its first lines; a longer file is read that far, not whole)
SAMPLES_LIMIT = 64 << 20


def read_text(path: Path, root: Path | None = None, head: int | None = None) -> str:
    """A run file's text (safe_files: no link followed, also no symlinked directory below `root`; never
    a FIFO, socket, device or a file with several hard links; its size bounded before it is read);
    with `head`, only its first `head` bytes (a partial last line is then dropped by `read_jsonl`).
    FileNotFoundError if absent, ValueError naming the file otherwise."""
    try:
        if head is None:
            raw = safe_files.read_bytes(str(path), root=None if root is None else str(root))
        else:
            raw, _ = safe_files.read_head(str(path), head, None if root is None else str(root))
    except safe_files.RunDirRefused as err:
        raise ValueError(str(err).removeprefix("argument --outdir: ")) from err
    return raw.decode("utf-8", errors="replace")


def read_jsonl(
    path: Path, dropped: list[str] | None = None, root: Path | None = None, head: int | None = None
) -> list[dict[str, Any]]:
    """Parse a JSONL file; drop a partial last line and (with a warning) bad middle lines."""
    try:
        lines = read_text(path, root, head).splitlines()
    except FileNotFoundError:
        return []
    rows: list[dict[str, Any]] = []
    last = max((i for i, ln in enumerate(lines) if ln.strip()), default=-1)
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except (json.JSONDecodeError, RecursionError):
            obj = None
        if not isinstance(obj, dict):
            if dropped is not None:
                dropped.append(f"{path.name}:{i + 1}")
            if i != last:
                warnings.warn(f"{term_text(path)}: line {i + 1} is not a JSON object; dropped", stacklevel=2)
            continue
        rows.append(obj)
    return rows


def _as_float(value: Any) -> float | None:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        return float(value)
    return None


def align_metrics(rows: Sequence[dict[str, Any]]) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Rows with a "step" -> (steps[S], key -> values[S]); a repeated step keeps its last row."""
    by_step: dict[int, dict[str, Any]] = {}
    for row in rows:
        step = row.get("step")
        if isinstance(step, (int, float)) and not isinstance(step, bool) and math.isfinite(step):
            by_step.setdefault(int(step), {}).update(row)
    steps = np.array(sorted(by_step), dtype=int)
    index = {s: i for i, s in enumerate(steps.tolist())}
    metrics: dict[str, np.ndarray] = {}
    for step, row in by_step.items():
        for key, value in row.items():
            num = _as_float(value)
            if key == "step" or num is None:
                continue
            if key not in metrics:
                metrics[key] = np.full(len(steps), np.nan)
            metrics[key][index[step]] = num
    return steps, metrics


def is_step0(row: dict[str, Any]) -> bool:
    """A metrics row of step 0 (the values before RL)."""
    return row.get("step") == 0 and not isinstance(row.get("step"), bool)


def initial_values(step0_rows: Sequence[dict[str, Any]], events: Sequence[dict[str, Any]]) -> dict[str, float]:
    """The values before RL: the last step-0 row's numbers, else the `warmstart` event's val_reward."""
    warm = next((e for e in events if e.get("event") == "warmstart"), {})
    row = step0_rows[-1] if step0_rows else {"reward/val": warm.get("val_reward")}
    nums = {k: _as_float(v) for k, v in row.items() if k != "step"}
    return {k: v for k, v in nums.items() if v is not None}
