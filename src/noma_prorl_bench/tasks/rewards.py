"""Verifiable reward functions on strings: `fn(response, target) -> dict` with key "reward".

r1_zero_reward_fn: the R1-Zero format (`... </think> <answer> ANSWER </answer>`) plus answer
correctness, as used by Dr. GRPO (Liu et al. 2025) and a course assignment on it.
keyword_inclusion_reward_fn: 1.0 iff every keyword occurs in the response (case-insensitive).

>>> r1_zero_reward_fn("2+2 is 4 </think> <answer> 4 </answer>", "4")["reward"]
1.0
>>> r1_zero_reward_fn("<answer>4</answer>", "4")["format_reward"]
0.0
>>> keyword_inclusion_reward_fn("The red apple fell from the tree.", "apple, red")["reward"]
1.0
"""

from __future__ import annotations

import math
import re

_FORMAT_OPEN = "</think> <answer>"
_FORMAT_CLOSE = "</answer>"


def _last_boxed(s: str) -> str | None:
    """Content of the last \\boxed{...} in s (braces balanced), or None."""
    start = s.rfind("\\boxed")
    if start < 0:
        return None
    i = s.find("{", start)
    if i < 0:
        return None
    depth = 0
    for j in range(i, len(s)):
        depth += {"{": 1, "}": -1}.get(s[j], 0)
        if depth == 0:
            return s[i + 1 : j]
    return None


def normalize_answer(s: str) -> str:
    """Canonical string form: boxed content, no $/spaces/\\text{}/\\left\\right, lower case, no final '.'."""
    boxed = _last_boxed(s)
    s = boxed if boxed is not None else s
    s = re.sub(r"\\text\{(.*?)\}", r"\1", s)
    for tok in ("$", "\\left", "\\right", "\\!", "\\,", "\\;", " "):
        s = s.replace(tok, "")
    s = s.strip().rstrip(".").lower()
    if re.fullmatch(r"-?\d{1,3}(,\d{3})+(\.\d+)?", s):  # 1,234,567 -> 1234567
        s = s.replace(",", "")
    return s


def _to_number(s: str) -> float | None:
    """Parse a normalized answer as a number: int, float, a/b, \\frac{a}{b}, trailing %."""
    s = re.sub(r"\\d?frac(\d)(\d)", r"\\frac{\1}{\2}", s)  # \frac12 -> \frac{1}{2}
    m = re.fullmatch(r"(-?)\\d?frac\{(-?[\d.]+)\}\{(-?[\d.]+)\}", s)
    if m:
        num, den = float(m.group(2)), float(m.group(3))
        return None if den == 0 else (-1 if m.group(1) else 1) * num / den
    m = re.fullmatch(r"(-?[\d.]+)/(-?[\d.]+)", s)
    if m:
        try:
            den = float(m.group(2))
            return None if den == 0 else float(m.group(1)) / den
        except ValueError:
            return None
    try:
        return float(s.rstrip("%"))
    except ValueError:
        return None


def answers_match(given: str, truth: str, rel_tol: float = 1e-6) -> bool:
    """True if the normalized strings are equal or both parse to numbers equal within rel_tol."""
    a, b = normalize_answer(given), normalize_answer(truth)
    if a == b and a != "":
        return True
    x, y = _to_number(a), _to_number(b)
    return x is not None and y is not None and math.isclose(x, y, rel_tol=rel_tol, abs_tol=1e-9)


def r1_zero_reward_fn(response: str, ground_truth: str | float | int | list) -> dict[str, float]:
    """R1-Zero reward: format (contains "</think> <answer>" and "</answer>") and correctness.

    The answer is the text after the last "<answer>" up to "</answer>" (a \\boxed{} inside it is
    unwrapped). Returns reward = answer_reward = 1.0 only when the format holds and the answer
    matches (any of them, if ground_truth is a list); format_reward = 1.0 when the format holds.
    """
    if _FORMAT_OPEN not in response or _FORMAT_CLOSE not in response:
        return {"reward": 0.0, "format_reward": 0.0, "answer_reward": 0.0}
    answer = response.split("<answer>")[-1].split(_FORMAT_CLOSE)[0]
    truths = ground_truth if isinstance(ground_truth, (list, tuple)) else [ground_truth]
    ok = any(answers_match(answer, str(t)) for t in truths)
    score = 1.0 if ok else 0.0
    return {"reward": score, "format_reward": 1.0, "answer_reward": score}


def keyword_inclusion_reward_fn(response: str, keywords: list[str] | str) -> dict[str, float]:
    """1.0 iff every keyword occurs in the response, case-insensitively (substring match).

    keywords: a list of strings or one comma-separated string ("apple, red"). Blank entries
    are ignored; with no keywords left the requirement holds vacuously (reward 1.0).
    Also returns keyword_frac, the fraction of keywords found.
    """
    items = keywords.split(",") if isinstance(keywords, str) else list(keywords)
    words = [w.strip().lower() for w in items if w and w.strip()]
    text = response.lower()
    found = sum(1 for w in words if w in text)
    frac = found / len(words) if words else 1.0
    return {"reward": 1.0 if found == len(words) else 0.0, "keyword_frac": frac}
