"""analysis/tables.markdown_table, the one markdown-table writer of the reports."""

from __future__ import annotations

from noma_prorl_bench.analysis.tables import markdown_table


def test_header_separator_and_rows_as_given():
    lines = markdown_table(["arm", "n", "diff"], [["keep", 10, "+0.012"], ["hard", 8, None]])
    assert lines == [
        "| arm | n | diff |",
        "|---|---|---|",
        "| keep | 10 | +0.012 |",
        "| hard | 8 | None |",
    ]


def test_no_rows_and_cells_unescaped():
    assert markdown_table(["a"], []) == ["| a |", "|---|"]
    assert markdown_table(["a", "b"], [["x | y", ""]])[2] == "| x | y |  |"  # the caller escapes
