"""What a run did, in one line: the validation score before RL and after, with 95% intervals over
the validation prompts, and the change paired by prompt.

The "before" evaluation is the greedy validation pass made after the supervised warm start (for
`hf:PATH` models, which get no warm start by default, that is the untouched pretrained model); the
"after" one is the run's last evaluation (every run evaluates its last step). Each prompt's
reward (and, for tasks with `reward_parts`, each part such as `correct` and `format`) is kept, so
the interval is over prompts: mean +- 1.96 * sd / sqrt(n) (normal approximation), and the
change's interval is the same on the per-prompt differences after - before.

>>> ci([1.0, 0.0, 1.0, 0.0])["ci95"]
[0.0, 1.0]
"""

from __future__ import annotations

import math
import sys


def per_prompt(task, examples, texts) -> dict[str, list[float]]:
    """{"reward": [...], and each reward part: [...]}, one value per validation prompt."""
    out = {"reward": [float(task.reward(t, e.answer)) for t, e in zip(texts, examples)]}
    parts = getattr(task, "reward_parts", None)
    if parts is not None:
        rows = [parts(t, e.answer) for t, e in zip(texts, examples)]
        for k in rows[0] if rows else ():
            out[k] = [float(r[k]) for r in rows]
    return out


def ci(xs: list[float]) -> dict:
    """{"mean", "ci95": [lo, hi], "n"}: normal approximation over the values."""
    n = len(xs)
    mean = sum(xs) / n if n else float("nan")
    sd = math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1)) if n > 1 else 0.0
    half = 1.96 * sd / math.sqrt(n) if n else float("nan")
    return {"mean": mean, "ci95": [mean - half, mean + half], "n": n}


def before_after(before: dict[str, list[float]], after: dict[str, list[float]]) -> dict:
    """summary.json's "validation": each key's before and after intervals and the paired change."""
    out = {}
    for key in before:
        if key in after and len(after[key]) == len(before[key]):
            diff = [a - b for a, b in zip(after[key], before[key])]
            out[key] = {"before": ci(before[key]), "after": ci(after[key]), "change": ci(diff)}
    return out


def _fmt(d: dict, sign: str = "") -> str:
    lo, hi = d["ci95"]
    return f"{d['mean']:{sign}.3f} [{lo:{sign}.3f}, {hi:{sign}.3f}]"


def result_line(validation: dict, greedy_key: str = "reward") -> str:
    """ "validation reward before RL 0.150 [0.101, 0.199] -> after 0.185 [...]: change +0.035 [...] ..."."""
    v = validation[greedy_key]
    name = "greedy correctness" if "correct" in validation else "greedy validation reward"
    main = validation.get("correct", v)
    line = (
        f"{name} on {main['before']['n']} held-out prompts (95% CI over prompts): before RL "
        f"{_fmt(main['before'])} -> after {_fmt(main['after'])}; change {_fmt(main['change'], '+')}"
    )
    if "format" in validation:
        f = validation["format"]
        line += f"; format {f['before']['mean']:.3f} -> {f['after']['mean']:.3f}"
    return line


def eval_bar(spec, total: int, desc: str):
    """A tqdm bar on stderr for an evaluation of `total` prompts, or None (--quiet; `spec`: anything
    with `quiet`, the WarmStartSpec here)."""
    if spec.quiet:
        return None
    from tqdm import tqdm  # noqa: PLC0415

    return tqdm(total=total, desc=desc, unit="prompt", file=sys.stderr, dynamic_ncols=True, leave=False)
