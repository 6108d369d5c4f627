"""What a run did, in one line: the validation score before RL and after, with 95% intervals over
the validation prompts, and the change paired by prompt.

The "before" evaluation is the greedy validation pass made after the supervised warm start (for
`hf:PATH` models, which get no warm start by default, that is the untouched pretrained model); the
"after" one is the run's last evaluation (every run evaluates its last step). Each prompt's
reward (and, for tasks with `reward_parts`, each part such as `correct` and `format`) is kept, so
the interval is over prompts. A reward is in [0, 1] (the task contract), so the intervals stay in
the score's range: for 0/1 rewards Wilson's score interval (the level) and Bonett and Price's
adjusted Wald interval for paired proportions (the change); for other rewards mean +- t * sd /
sqrt(n) (Student's t, n - 1 degrees of freedom) cut to [0, 1] (the change: to [-1, 1]), which
cannot lose coverage since the true mean lies in the range. Below 6 prompts no change can be
significant (the sign test's smallest p is 2 / 2**n >= 0.0625), and the result line says so.

>>> [round(x, 3) for x in ci([1.0, 0.0, 0.0])["ci95"]]
[0.061, 0.792]
>>> [round(x, 3) for x in ci([0.0, 0.1, 0.5, 0.1, 0.0])["ci95"]]
[0.0, 0.397]
"""

from __future__ import annotations

import math
import sys

Z = 1.959964  # two-sided 95%
MIN_PROMPTS = 6  # the fewest paired prompts whose sign test can reach p < 0.05 (2 / 2**6 = 0.031)


def _binary(xs: list[float]) -> bool:
    return all(x in (0.0, 1.0) for x in xs)


def wilson(k: float, n: int) -> tuple[float, float]:
    """Wilson's 95% score interval for k successes in n trials (inside [0, 1])."""
    p, z2 = k / n, Z * Z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = Z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def paired_change(before: list[float], after: list[float]) -> tuple[float, float]:
    """95% interval for after - before of paired 0/1 values: the adjusted Wald interval of Bonett and
    Price (2012), one added to each discordant count and two to n, cut to [-1, 1]; it keeps its width
    where no prompt changed (a plain Wald or score interval shrinks to [0, 0] there)."""
    n = len(before)
    lost = sum(x == 1 and y == 0 for x, y in zip(before, after))
    gained = sum(x == 0 and y == 1 for x, y in zip(before, after))
    p_lost, p_gained = (lost + 1) / (n + 2), (gained + 1) / (n + 2)
    d = p_gained - p_lost
    half = Z * math.sqrt(max(p_lost + p_gained - d * d, 0.0) / (n + 2))
    return max(-1.0, d - half), min(1.0, d + half)


def _t_interval(xs: list[float], lo: float, hi: float) -> tuple[float, float]:
    """mean +- t(0.975, n - 1) * sd / sqrt(n), cut to [lo, hi] (one value: the whole range)."""
    n = len(xs)
    if n < 2:
        return lo, hi
    from scipy import special  # noqa: PLC0415  (loads only for a non-0/1 reward; scipy.stats' t.ppf is stdtrit)

    mean = sum(xs) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1))
    half = float(special.stdtrit(n - 1, 0.975)) * sd / math.sqrt(n)
    return max(lo, mean - half), min(hi, mean + half)


def ci(xs: list[float]) -> dict:
    """{"mean", "ci95": [lo, hi], "n"} of rewards in [0, 1]: Wilson's interval for 0/1 values, else the
    t interval cut to [0, 1]."""
    n = len(xs)
    if not n:
        return {"mean": float("nan"), "ci95": [float("nan"), float("nan")], "n": 0}
    lo, hi = wilson(sum(xs), n) if _binary(xs) else _t_interval(xs, 0.0, 1.0)
    return {"mean": sum(xs) / n, "ci95": [lo, hi], "n": n}


def change_ci(before: list[float], after: list[float]) -> dict:
    """{"mean", "ci95", "n"} of the paired change after - before (in [-1, 1]): the adjusted Wald interval for
    0/1 values (Bonett-Price), else the t interval on the differences cut to [-1, 1]."""
    diff = [a - b for a, b in zip(after, before)]
    n = len(diff)
    if not n:
        return {"mean": float("nan"), "ci95": [float("nan"), float("nan")], "n": 0}
    binary = _binary(before) and _binary(after)
    lo, hi = paired_change(before, after) if binary else _t_interval(diff, -1.0, 1.0)
    return {"mean": sum(diff) / n, "ci95": [lo, hi], "n": n}


def per_prompt(task, examples, texts) -> dict[str, list[float]]:
    """{"reward": [...], and each reward part: [...]}, one value per validation prompt."""
    out = {"reward": [float(task.reward(t, e.answer)) for t, e in zip(texts, examples)]}
    parts = getattr(task, "reward_parts", None)
    if parts is not None:
        rows = [parts(t, e.answer) for t, e in zip(texts, examples)]
        for k in rows[0] if rows else ():
            out[k] = [float(r[k]) for r in rows]
    return out


def before_after(before: dict[str, list[float]], after: dict[str, list[float]]) -> dict:
    """summary.json's "validation": each key's before and after intervals and the paired change."""
    out = {}
    for key in before:
        if key in after and len(after[key]) == len(before[key]):
            out[key] = {
                "before": ci(before[key]),
                "after": ci(after[key]),
                "change": change_ci(before[key], after[key]),
            }
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
    n = main["change"]["n"]
    if n < MIN_PROMPTS:
        line += f"; {n} prompts cannot show a difference (at least {MIN_PROMPTS} are needed: use a larger --n_val)"
    return line


def eval_bar(spec, total: int, desc: str):
    """A tqdm bar on stderr for an evaluation of `total` prompts, or None (--quiet; `spec`: anything
    with `quiet`, the WarmStartSpec here)."""
    if spec.quiet:
        return None
    from tqdm import tqdm  # noqa: PLC0415

    return tqdm(total=total, desc=desc, unit="prompt", file=sys.stderr, dynamic_ncols=True, leave=False)
