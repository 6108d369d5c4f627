"""Markdown tables, the one writer every report uses: a header line, a `|---|` separator, a line per row."""

from __future__ import annotations

from typing import Any, Sequence


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    """The lines of a markdown table, each cell written as `str(cell)` as given: a caller escapes
    untrusted text first (analysis/untrusted.py)."""
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return out + ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
