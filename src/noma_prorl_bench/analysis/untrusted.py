"""Text read from a run or suite directory is data, never markup: settings.json (caveats, machine,
command, any key), suite.json (run, arm, comparison, family and check names), config.json keys
and values (labels, seeds), metric keys, samples.jsonl prompts and responses and directory names
may come from someone else. Every place the analysis shows such text passes it through one of:

    md_text(s)     markdown prose or a table cell: one line, HTML-escaped (`<`, `>`, `&`) and
                   markdown-neutral (no heading, list, emphasis, link, image, autolink, code
                   span, strikethrough, math or table column can start inside it)
    md_code(s)     an inline code span whose fence no backtick run inside can close (`|` escaped
                   so a table keeps its columns)
    plot_text(s)   a matplotlib title, label or legend entry: one line, every `$` escaped (no
                   mathtext)
    term_text(s)   a terminal line: control characters, ANSI escape sequences included, shown
                   as Python escapes (`\\x1b`, `\\n`), never sent

All of them first make unprintable characters visible (`visible`: newline -> `\\n`, ESC ->
`\\x1b`, U+2028 -> `\\u2028`, bidirectional overrides too) and cap the length, ending a cut
string with `…`:

    md_text("</table><h1>FAKE</h1>")   # '&lt;/table&gt;&lt;h1&gt;FAKE&lt;/h1&gt;'
    md_code("a`b")                     # '``a`b``'
"""

from __future__ import annotations

import re
from typing import Any

#: characters that start inline markdown anywhere in a line (emphasis, code, links and images,
#: strikethrough, math, table columns, escapes) or a heading; `_` between two letters or digits
#: is inert and left alone
_MD_ALWAYS = frozenset("\\`*[]!~$|#")
_HTML = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}
#: what GitHub turns into a link without brackets: URLs with a scheme, www. and e-mail addresses
_AUTOLINK = re.compile(r"://|(?i:www)\.|@")
#: a line that would start a list item, a block quote or a setext underline
_LINE_START = re.compile(r"^(?:[-+=]|\d+[.)])")


def visible(value: Any, limit: int = 300) -> str:
    """`str(value)` with every unprintable character (newlines, tabs, ESC, U+2028, format
    characters) written as its Python escape, cut to `limit` characters ('…' last when cut)."""
    s = "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in str(value))
    return s if len(s) <= limit else s[: max(limit - 1, 0)] + "…"


def md_text(value: Any, limit: int = 300) -> str:
    """`value` as markdown text that renders as itself (`visible`, then HTML-escaped and
    backslash-escaped), safe in a paragraph, a list item, a heading or a table cell."""
    s = visible(value, limit)
    out = []
    for i, c in enumerate(s):
        if c in _HTML:
            out.append(_HTML[c])
        elif c in _MD_ALWAYS or (c == "_" and not (0 < i < len(s) - 1 and s[i - 1].isalnum() and s[i + 1].isalnum())):
            out.append("\\" + c)
        else:
            out.append(c)
    text = "".join(out)
    text = _AUTOLINK.sub(lambda m: m.group(0).replace(":", "\\:").replace(".", "\\.").replace("@", "\\@"), text)
    return _LINE_START.sub(lambda m: m.group(0)[:-1] + "\\" + m.group(0)[-1], text)


def md_code(value: Any, limit: int = 300) -> str:
    """`value` as one inline code span (`visible`; `|` written `\\|` and the backslashes before it
    doubled, so a table row splits at no `|` inside): the fence is one backtick longer than the
    longest backtick run inside, padded with spaces when the text starts or ends with a backtick
    or a space."""
    s = re.sub(r"(\\*)\|", lambda m: m.group(1) * 2 + "\\|", visible(value, limit))
    fence = "`" * (max((len(r) for r in re.findall("`+", s)), default=0) + 1)
    pad = " " if not s or s[0] in "` " or s[-1] in "` " else ""
    return f"{fence}{pad}{s}{pad}{fence}"


def plot_text(value: Any, limit: int = 80) -> str:
    """`value` for a matplotlib title, label or legend: one line (`visible`), every `$` escaped
    so no mathtext is parsed (matplotlib shows `\\$` as `$`)."""
    return visible(value, limit).replace("$", r"\$")


def term_text(value: Any, limit: int = 300) -> str:
    """`value` for a terminal: `visible` (ESC and every other control character shown as an
    escape, so no ANSI sequence reaches the terminal), cut to `limit`."""
    return visible(value, limit)
