"""Markdown tables, the one writer every report uses: a header line, a `|---|` separator, a line per row."""

from __future__ import annotations

from typing import Any, Sequence


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    """The lines of a markdown table, each cell written as `str(cell)` as given: a caller escapes
    untrusted text first (analysis/untrusted.py)."""
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return out + ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]


def whole_words(label: str, limit: int) -> str:
    """`label` whole if it fits in `limit` characters, else cut after its last whole word that does,
    with "…" (a configuration label's last words, such as its beta, are never cut mid-word)."""
    text = str(label)
    if len(text) <= limit:
        return text
    head = text[: limit - 1]
    cut = max(head.rfind(" "), head.rfind(","))
    return (head[:cut] if cut > 0 else head).rstrip(", ") + "…"
