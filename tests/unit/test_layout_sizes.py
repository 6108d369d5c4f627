"""Size limits of the package source: no file over 400 lines; no function over 60 lines unless the
line above its `def` (above its first decorator, if it has one) gives the reason in a comment
`# long: <reason>`. Read with `ast` (a function's length: end_lineno - lineno + 1)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "noma_prorl_bench"
MAX_FILE_LINES, MAX_FUNCTION_LINES = 400, 60
pytestmark = pytest.mark.unit


def long_functions(text: str) -> list[tuple[str, int]]:
    """(name, lines) of each function over MAX_FUNCTION_LINES without a `# long:` reason above it."""
    lines = text.splitlines()
    out = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            n = node.end_lineno - node.lineno + 1
            first = min([node.lineno] + [d.lineno for d in node.decorator_list])
            above = lines[first - 2].strip() if first >= 2 else ""
            reason = above.startswith("# long:") and above[len("# long:") :].strip()
            if n > MAX_FUNCTION_LINES and not reason:
                out.append((node.name, n))
    return out


def _function(name: str, body_lines: int, above: str = "", decorator: bool = False) -> str:
    head = ([above] if above else []) + (["@staticmethod"] if decorator else []) + [f"def {name}():"]
    return "\n".join(head + ["    x = 1"] * body_lines) + "\n"


def test_the_scan_finds_a_planted_long_function_and_accepts_a_reason():
    assert long_functions(_function("ok", 59)) == []  # 60 lines with its def
    assert long_functions(_function("big", 60)) == [("big", 61)]
    assert long_functions(_function("big", 60, "# long: one table of cases")) == []
    assert long_functions(_function("big", 60, "# long: why", decorator=True)) == []
    assert long_functions(_function("big", 60, "# long:")) == [("big", 61)]  # a reason is required
    assert long_functions(_function("big", 60, "# a comment")) == [("big", 61)]
    nested = "class A:\n    def m(self):\n" + "        x = 1\n" * 61
    assert long_functions(nested) == [("m", 62)]


def test_no_file_over_400_lines():
    files = list(SRC.rglob("*.py"))
    assert len(files) > 40  # the whole package was read
    long = {p.relative_to(SRC).as_posix(): n for p in files if (n := p.read_text().count("\n")) > MAX_FILE_LINES}
    assert long == {}


def test_no_function_over_60_lines_without_a_reason():
    long = {
        f"{p.relative_to(SRC).as_posix()}:{name}": n
        for p in SRC.rglob("*.py")
        for name, n in long_functions(p.read_text())
    }
    assert long == {}
