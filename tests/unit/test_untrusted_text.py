"""Text read from a run or suite directory is shown as data (analysis/untrusted.py): each payload
below, put into settings.json (caveats, machine, command, a key), suite.json (arm, comparison,
family, check and pair names), config.json (a varying field and a field name), metrics.jsonl (a
metric key), samples.jsonl (prompt, response, answer) and a run directory's name, reaches
report.md, the figures and the terminal without opening a heading, a table column, a link, an
image, a code fence, raw HTML, mathtext or an ANSI sequence. Also: `prorl-bench plot` and
`prorl-bench report` check every output path before writing any."""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from pathlib import Path

import pytest
from matplotlib import cbook
from matplotlib.text import Text

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from fakeruns import write_run  # noqa: E402

from noma_prorl_bench.analysis.commands import plan_main, plot_main, report_main  # noqa: E402
from noma_prorl_bench.analysis.plots import diagnostics_figure, ref_cost_figure, summary_figure  # noqa: E402
from noma_prorl_bench.analysis.runlog import load_runs  # noqa: E402
from noma_prorl_bench.analysis.untrusted import md_code, md_text, plot_text, term_text, visible  # noqa: E402

pytestmark = pytest.mark.unit

PAYLOADS = {
    "html": "</table><h1>FAKE RESULT</h1>",
    "table": "| x | y |",
    "link": "[click](http://evil)",
    "image": "![img](x)",
    "fence": "```",
    "heading": "\n# Heading",
    "math": "$\\frac{a}{b}$",
    "ansi": "\x1b[31mred",
    "emphasis": "**bold** _it_ ~~gone~~",
    "autolink": "<http://evil.example> www.evil.example a@evil.example",
    "entity": "&lt;h1&gt; &#36;",
    "list": "1. item\n- item\n> quote",
    "bidi": "\u202eevil\u2028line\x7f\x9b",
    "backslash_pipe": "a\\|b\\\\|c",
}
IDS = list(PAYLOADS)
ALL = " ".join(PAYLOADS.values())


def _markdown():
    markdown_it = pytest.importorskip("markdown_it")
    return markdown_it.MarkdownIt("commonmark").enable(["table", "strikethrough"])


def _controls(text: str) -> list[str]:
    """Characters a terminal or renderer acts on: C0 (but newline), DEL, C1, line/paragraph
    separators, bidirectional controls."""
    return [c for c in text if c != "\n" and not c.isprintable()]


# ------------------------------------------------------------------ the helpers, one payload at a time


@pytest.mark.parametrize("payload", PAYLOADS.values(), ids=IDS)
def test_md_text_renders_as_the_text_itself(payload):
    t = md_text(payload)
    assert "\n" not in t and "<" not in t and not _controls(t)
    html = _markdown().render(f"| a |\n|---|\n| {t} |\n\nbefore {t} after\n")
    assert "<a " not in html and "<img" not in html and "<h1" not in html and "<code" not in html
    assert "<em>" not in html and "<strong>" not in html and "<s>" not in html and "<li>" not in html
    assert html.count("<td>") == 1  # the row kept its single column
    shown = visible(payload).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
    assert f"<td>{shown}</td>" in html and f"<p>before {shown} after</p>" in html


@pytest.mark.parametrize("payload", PAYLOADS.values(), ids=IDS)
def test_md_code_is_one_code_span(payload):
    c = md_code(payload)
    assert "\n" not in c and not _controls(c)
    html = _markdown().render(f"| a |\n|---|\n| {c} |\n\nbefore {c} after\n")
    assert html.count("<code>") == 2 and html.count("<td>") == 1 and "<h1" not in html and "<a " not in html
    code = re.findall(r"<code>(.*?)</code>", html, re.S)
    shown = visible(payload).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
    if "|" not in payload:  # a `|` keeps one more backslash in the cell: still one cell
        assert code == [shown, shown]


@pytest.mark.parametrize("payload", PAYLOADS.values(), ids=IDS)
def test_plot_text_is_one_line_without_mathtext(payload):
    s = plot_text(payload)
    text = Text(0, 0, s)
    assert "\n" not in s and not _controls(s) and not cbook.is_math_text(s)
    assert text._preprocess_math(s) == (visible(payload, 80), False)  # shown as written, no mathtext


@pytest.mark.parametrize("payload", PAYLOADS.values(), ids=IDS)
def test_term_text_sends_no_control_character(payload):
    s = term_text(payload)
    assert "\n" not in s and "\x1b" not in s and not _controls(s)


def test_long_text_is_cut_with_an_ellipsis():
    assert md_text("x" * 500, 60) == "x" * 59 + "…" and len(term_text("y" * 1000)) == 300
    assert md_code("z" * 100, 10) == "`" + "z" * 9 + "…`" and plot_text("$" * 200).count("$") == 79


# ------------------------------------------------------------------ a suite directory full of payloads

ARMS = {
    "base": "base " + PAYLOADS["html"] + " " + PAYLOADS["math"],
    "b": "B " + PAYLOADS["table"] + " " + PAYLOADS["ansi"],
    "a0": "A0 " + PAYLOADS["link"] + " " + PAYLOADS["image"],
    "twin": "twin " + PAYLOADS["fence"] + PAYLOADS["heading"],
}
CFG = {"base": {}, "b": {"variant": "B"}, "a0": {"ref_compute": "naive_epoch"}, "twin": {}}
PAIRS = [f"{i} | `p`" for i in range(3)]


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile")
    runs = []
    for key, arm in ARMS.items():
        for i, pair in enumerate(PAIRS):
            name = f"{key}_s{i}" if key != "twin" else f"twin `$x$` <b>{i}"
            d = write_run(root / name, seed=i, steps=20, **CFG[key])
            cfg = json.loads((d / "config.json").read_text())
            cfg["note"] = PAYLOADS["emphasis"] if key == "a0" else PAYLOADS["list"] if key == "b" else "plain"
            cfg["<b>k</b> " + PAYLOADS["autolink"]] = key == "a0"  # a field name that differs
            (d / "config.json").write_text(json.dumps(cfg))
            rows = [json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines()]
            if key == "twin":  # the check's first difference is this metric key
                rows[0]["loss/" + PAYLOADS["entity"] + PAYLOADS["heading"]] = 1.0
            (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
            samples = [json.loads(x) for x in (d / "samples.jsonl").read_text().splitlines()]
            for s, p in zip(samples, PAYLOADS.values()):
                s.update(prompt=p, response=PAYLOADS["bidi"] + p, answer=PAYLOADS["backslash_pipe"], reward=p)
            (d / "samples.jsonl").write_text("".join(json.dumps(s) + "\n" for s in samples))
            runs.append({"name": name, "arm": arm, "pair": pair})
    comparisons = [
        ["cmp " + PAYLOADS["heading"] + PAYLOADS["emphasis"], ARMS["b"], ARMS["base"]],
        ["cmp2 " + PAYLOADS["autolink"], ARMS["a0"], ARMS["base"]],
    ]
    (root / "suite.json").write_text(
        json.dumps(
            {
                "preset": "unit",
                "runs": runs,
                "comparisons": comparisons,
                "families": {comparisons[0][0]: "fam " + PAYLOADS["table"] + "`" + PAYLOADS["ansi"]},
                "checks": [["check " + PAYLOADS["image"] + PAYLOADS["heading"], ARMS["twin"], ARMS["base"]]],
            }
        )
    )
    (root / "settings.json").write_text(
        json.dumps(
            {
                "caveats": list(PAYLOADS.values()),
                "machine": PAYLOADS["html"] + PAYLOADS["heading"],
                "command": "prorl-bench suite " + PAYLOADS["ansi"] + PAYLOADS["fence"],
                "commit": PAYLOADS["fence"] + "x",
                "score_evals": 2,
                "interleaved": True,
                PAYLOADS["html"]: PAYLOADS["table"],
            }
        )
    )
    return root


@pytest.fixture(scope="module")
def report(hostile):
    """(exit code, stderr, report.md text) of `prorl-bench report` on the hostile suite."""
    import contextlib
    import io

    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = report_main([str(hostile)])
    return code, err.getvalue(), (hostile / "report.md").read_text()


def _cells(row: str) -> int:
    """Columns of a GFM table row: `|` splits unless escaped (a backslash pair is one escape)."""
    return len(re.findall(r"(?:\\.|[^|\\])+|(?<=\|)(?=\|)", row.strip().strip("|"))) if row.strip() != "||" else 1


def _prose(line: str) -> str:
    """A report line without its code spans (whose text is literal) and its indented code block."""
    return "" if line.startswith("    ") else re.sub(r"(`+)(?!`).*?(?<!`)\1(?!`)", "", line)


def test_report_text_has_no_markup_from_the_directory(report):
    code, err, text = report
    assert code == 1  # the twin check fails (a metric key differs)
    assert "&lt;h1&gt;FAKE RESULT" in text  # shown, as text
    prose = "\n".join(_prose(x) for x in text.splitlines())
    assert prose.count("FAKE RESULT") >= 5 and not re.search(r"<[A-Za-z/!?]", prose)  # no HTML outside code
    assert not _controls(text) and "\x1b" not in text and "\\x1b" in text
    headings = [x for x in text.splitlines() if x.startswith("#")]
    assert not any("Heading" in h or "FAKE" in h for h in headings)
    assert not any(x.lstrip().startswith(("```", "# Heading", "- item", "> quote")) for x in text.splitlines())
    for line in prose.splitlines():  # every `$` outside code is escaped: no math
        assert not re.search(r"(?<!\\)\$", line), line
    assert len(re.findall(r"(?<!\\)\]\(", prose)) == 2  # links and images: the report's own two figures


def test_report_tables_keep_their_columns(report):
    lines = report[2].splitlines()
    tables, n_rows = 0, 0
    for i, line in enumerate(lines):
        if re.fullmatch(r"\|(---\|)+", line):
            tables += 1
            width = line.count("---")
            assert _cells(lines[i - 1]) == width
            j = i + 1
            while j < len(lines) and lines[j].startswith("|"):
                assert _cells(lines[j]) == width, lines[j]
                n_rows, j = n_rows + 1, j + 1
    assert tables >= 9 and n_rows >= 30


def test_report_renders_no_foreign_element(report):
    html = _markdown().render(report[2])
    assert "<h1>FAKE" not in html and "FAKE RESULT</h1>" not in html
    assert [h for h in re.findall(r"<h1>(.*?)</h1>", html)] == ["Result report", "Appendix"]
    assert "evil" not in " ".join(re.findall(r'(?:href|src)="([^"]*)"', html))
    assert not re.search(r"<(?:b|table|script|pre)\b[^>]*>[^<]*(?:FAKE|Heading)", html)
    for table in re.findall(r"<table>.*?</table>", html, re.S):  # rendered rows as wide as the header
        width = len(re.findall(r"<th[ >]", table))
        assert all(len(re.findall(r"<td[ >]", row)) == width for row in re.findall(r"<tr>(.*?)</tr>", table, re.S)[1:])


def test_report_terminal_line_has_no_control_characters(report):
    code, err, _ = report
    assert "check " in err and not _controls(err) and err.count("\n") == 1


def test_plan_prints_names_as_data(hostile, capsys):
    assert plan_main([str(hostile)]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and not _controls(out) and "\\n# Heading" in out
    rows = [x for x in out.splitlines() if x.startswith("cmp")]
    assert len(rows) == 6  # two comparisons x (score, s/step, s/token), each one line


def test_a_dropped_line_warning_names_the_directory_as_data(tmp_path):
    d = write_run(tmp_path / ("run\x1b[2J" + PAYLOADS["heading"]), seed=0, steps=5)
    text = (d / "metrics.jsonl").read_text().splitlines()
    (d / "metrics.jsonl").write_text("\n".join(text[:2] + ["not json"] + text[2:]) + "\n")
    with pytest.warns(UserWarning) as caught:
        load_runs([d])
    (msg,) = [str(w.message) for w in caught]
    assert "line 3" in msg and "\\x1b[2J\\n# Heading" in msg and not _controls(msg) and "\n" not in msg


def test_figure_labels_and_titles_are_plain_text(hostile):
    runs = load_runs(sorted(p for p in hostile.iterdir() if (p / "config.json").is_file()))
    for run in runs:
        run.arm = next(a for k, a in ARMS.items() if run.path.name.startswith(k))
    figs = [summary_figure(runs, by_config=True), ref_cost_figure(runs, by_config=True), diagnostics_figure(runs[-1])]
    texts = [t.get_text() for f in figs for t in f.findobj(Text) if t.get_text()]
    texts += [ln.get_label() for f in figs for ax in f.axes for ln in ax.get_lines()]
    assert any("frac" in t for t in texts) and any("x1b" in t for t in texts) and any("twin" in t for t in texts)
    for t in texts:
        assert "\n" not in t or "capped" in t or t.startswith("Score")  # only the figures' own two-line titles
        assert not cbook.is_math_text(t) and not _controls(t), t


# ------------------------------------------------------------------ every output path checked before writing


@pytest.fixture
def one_run(tmp_path):
    return write_run(tmp_path / "run", seed=0, steps=20)


@pytest.mark.parametrize("blocker", ["symlink", "directory", "fifo"])
def test_plot_refuses_before_writing_any_figure(tmp_path, one_run, capsys, blocker):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep\n")
    out = tmp_path / "figs"
    out.mkdir()
    second = out / "ref_cost.png"
    {"symlink": lambda: os.symlink(victim, second), "directory": second.mkdir, "fifo": lambda: os.mkfifo(second)}[
        blocker
    ]()
    with pytest.raises(SystemExit) as e:
        plot_main(["--runs", str(one_run), "--out", str(out / "fig.png")])
    err = capsys.readouterr().err
    assert e.value.code == 2 and len([x for x in err.splitlines() if "error:" in x]) == 1
    assert "argument --out" in err and "ref_cost.png" in err and "Traceback" not in err
    assert sorted(p.name for p in out.iterdir()) == ["ref_cost.png"] and victim.read_text() == "keep\n"


def test_plot_refuses_an_out_named_like_the_second_figure(tmp_path, one_run, capsys):
    with pytest.raises(SystemExit) as e:
        plot_main(["--runs", str(one_run), "--out", str(tmp_path / "ref_cost.png")])
    assert e.value.code == 2 and "also another file this command writes" in capsys.readouterr().err
    assert not (tmp_path / "ref_cost.png").exists()


def test_report_refuses_a_linked_figure_before_writing_anything(tmp_path, one_run, capsys):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep\n")
    out = tmp_path / "rep"
    (out / "figures").mkdir(parents=True)
    os.symlink(victim, out / "figures" / "summary.png")  # (one run: no ref_cost.png is made)
    with pytest.raises(SystemExit) as e:
        report_main([str(one_run), "--out", str(out / "report.md")])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "summary.png" in err and "symbolic link" in err
    assert sorted(p.name for p in out.rglob("*")) == ["figures", "summary.png"] and victim.read_text() == "keep\n"


def test_report_refuses_a_linked_report_before_any_figure(tmp_path, one_run, capsys):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep\n")
    out = tmp_path / "rep"
    out.mkdir()
    os.symlink(victim, out / "summary.json")
    with pytest.raises(SystemExit) as e:
        report_main([str(one_run), "--out", str(out / "report.md")])
    assert e.value.code == 2 and "summary.json" in capsys.readouterr().err
    assert sorted(p.name for p in out.rglob("*")) == ["summary.json"] and victim.read_text() == "keep\n"
    shutil.rmtree(out)


def test_report_refuses_an_out_whose_numbers_file_is_its_summary(tmp_path, one_run, capsys):
    out = tmp_path / "rep" / "summary.md"  # report.json beside it would be summary.json
    with pytest.raises(SystemExit) as e:
        report_main([str(one_run), "--out", str(out)])
    assert e.value.code == 2 and "also another file this command writes" in capsys.readouterr().err
    assert not (tmp_path / "rep").exists()
