"""Regenerate the generated parts of README.md: the flag reference and the file tree.

Run from the repo root:  PYTHONPATH=src python scripts/update_readme.py
The flag table comes from the RunConfig field docstrings (the same text as `--help`); the file
tree lists tracked files with the first line of each file's docstring or heading. Both live
between `<!-- NAME:start -->` and `<!-- NAME:end -->` markers; a test checks they are current.
"""
from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import typing
from dataclasses import MISSING, fields

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "src"))

from noma_prorl_bench.config import NOT_YET, RunConfig, field_docs
from noma_prorl_bench.config.parser import _choices  # noqa: E402

SKIP_TREE = ("docs/figures/", "docs/suite_quick/figures/")


def flags_table() -> str:
    docs, hints = field_docs(), typing.get_type_hints(RunConfig)
    rows = ["| flag | default | values | meaning |", "|---|---|---|---|"]
    for f in fields(RunConfig):
        choices = _choices(hints[f.name])
        values = ", ".join(map(str, choices)) if choices else hints[f.name].__name__
        default = "" if f.default is MISSING else repr(f.default)
        note = f" *(not supported yet: {NOT_YET[f.name]})*" if f.name in NOT_YET else ""
        rows.append(f"| `--{f.name}` | `{default}` | {values} | {docs.get(f.name, '').replace('|', '/')}{note} |")
    return "\n".join(rows)


def describe(path: str) -> str:
    """First line of a Python docstring, a Markdown heading, or a shell comment."""
    full = os.path.join(ROOT, path)
    try:
        text = open(full, encoding="utf-8").read()
    except (OSError, UnicodeDecodeError):
        return ""
    if path.endswith(".py"):
        try:
            doc = ast.get_docstring(ast.parse(text)) or ""
        except SyntaxError:
            doc = ""
        return doc.strip().splitlines()[0] if doc.strip() else ""
    if path.endswith(".md"):
        m = re.search(r"^#+\s*(.+)$", text, re.M)
        return m.group(1).strip() if m else ""
    for line in text.splitlines()[1:6]:
        if line.startswith("#") and not line.startswith("#!"):
            return line.lstrip("# ").strip()
    return ""


def file_tree() -> str:
    files = subprocess.run(["git", "-C", ROOT, "ls-files"], capture_output=True, text=True).stdout.split()
    files = [f for f in files if not f.startswith(SKIP_TREE) and not f.endswith((".png", ".jsonl"))]
    width = max(len(f) for f in files) + 2
    lines = [f"{f:<{width}}{describe(f)}".rstrip() for f in sorted(files)]
    return "```\n" + "\n".join(lines) + "\n```"


def replace_block(text: str, name: str, body: str) -> str:
    pat = re.compile(rf"(<!-- {name}:start -->\n)(.*?)(\n<!-- {name}:end -->)", re.S)
    if not pat.search(text):
        raise SystemExit(f"README.md has no <!-- {name}:start/end --> markers")
    return pat.sub(lambda m: m.group(1) + body + m.group(3), text)


def render(text: str) -> str:
    return replace_block(replace_block(text, "flags", flags_table()), "tree", file_tree())


def main() -> int:
    path = os.path.join(ROOT, "README.md")
    text = open(path, encoding="utf-8").read()
    new = render(text)
    if "--check" in sys.argv:
        if new != text:
            print("README.md is out of date: run PYTHONPATH=src python scripts/update_readme.py", file=sys.stderr)
            return 1
        return 0
    open(path, "w", encoding="utf-8").write(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
