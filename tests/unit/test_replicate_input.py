"""`prorl-bench replicate DIR` reads a suite.json and summary.json from someone else (docs/reliability.md,
"Run directories are untrusted input"): every malformed shape below is one line naming the file, exit 2,
nothing run and nothing written, never a traceback, and never taken for "no suite.json" (which would
re-run the whole preset named in summary.json's provenance). `suite --seeds` is bounded, and so is what a
summary.json or suite.json claims."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from noma_prorl_bench.suite import main as suite_main
from noma_prorl_bench.suite import replicate as replicate_mod

pytestmark = pytest.mark.unit

SUMMARY = {"comparisons": [], "provenance": {"preset": "quick", "seeds": 2, "steps": 3}}
RUN = {"name": "A1_s0", "arm": "A1", "pair": 0, "flags": ["--seed", "0"]}


def _runs(*entries) -> str:
    return json.dumps({"preset": "quick", "runs": list(entries)})


def _fifo(p: Path) -> None:
    os.mkfifo(p)


def _link(p: Path) -> None:
    (p.parent / "elsewhere.json").write_text(_runs(RUN))
    os.symlink(p.parent / "elsewhere.json", p)


#: (case, suite.json: text or a maker, summary.json text (None: the valid one), what the line says)
CASES = [
    ("fifo", _fifo, None, "is a FIFO"),
    ("symlink", _link, None, "symbolic link"),
    ("not json", "{", None, "unreadable"),
    ("deep nesting", "[" * 100000, None, "unreadable"),
    ("a list", "[]", None, "does not list its runs"),
    ("runs an object", json.dumps({"runs": {}}), None, "does not list its runs"),
    ("no runs", _runs(), None, "does not list its runs"),
    ("a number entry", _runs(1), None, "runs[0] is not a run entry"),
    ("no flags", _runs({"name": "A1_s0", "arm": "A1", "pair": 0}), None, "runs[0] is not a run entry"),
    ("pair a string", _runs({**RUN, "pair": "0"}), None, "runs[0] is not a run entry"),
    ("pair a bool", _runs({**RUN, "pair": True}), None, "runs[0] is not a run entry"),
    ("pair negative", _runs({**RUN, "pair": -1}), None, "runs[0] is not a run entry"),
    ("pair huge", _runs({**RUN, "pair": 10**12}), None, "runs[0] is not a run entry"),
    ("flag a number", _runs({**RUN, "flags": [1]}), None, "runs[0] is not a run entry"),
    ("name a list", _runs({**RUN, "name": ["a"]}), None, "runs[0] is not a run entry"),
    ("arm a number", _runs({**RUN, "arm": 3}), None, "runs[0] is not a run entry"),
    ("name twice", _runs(RUN, {**RUN, "pair": 1}), None, "more than once"),
    ("name leaves the suite", _runs({**RUN, "name": "../x"}), None, "not a run directory name"),
    ("sets --outdir", _runs({**RUN, "flags": ["--outdir", "/tmp/x"]}), None, "only the runner sets"),
    ("no suite.json, summary a FIFO", None, _fifo, "is a FIFO"),
    ("no suite.json, summary a list", None, "[]", "lists no comparisons"),
    ("no suite.json, summary not json", None, "{", "unreadable"),
    ("no suite.json, seeds too many", None, json.dumps({**SUMMARY, "provenance": {"preset": "quick", "seeds": 10**6, "steps": 3}}), "seeds (1..1000)"),
    ("no suite.json, steps 0", None, json.dumps({**SUMMARY, "provenance": {"preset": "quick", "seeds": 2, "steps": 0}}), "steps (>= 1)"),
    ("no suite.json, preset a list", None, json.dumps({**SUMMARY, "provenance": {"preset": ["quick"], "seeds": 2, "steps": 3}}), "names no known preset"),
]  # fmt: skip


@pytest.fixture(autouse=True)
def _never_run_or_block(monkeypatch):
    def run(*_a, **_k):
        raise AssertionError("replicate started runs")

    monkeypatch.setattr(replicate_mod, "_run_suite", run)

    def fail(*_):
        raise TimeoutError("blocked reading a special file")

    old = signal.signal(signal.SIGALRM, fail)
    signal.alarm(20)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


def _put(path: Path, what) -> None:
    if what is None:
        return
    if callable(what):
        what(path)
    else:
        path.write_text(what)


@pytest.mark.parametrize("case,suite,summary,says", CASES, ids=[c[0] for c in CASES])
def test_a_malformed_committed_suite_is_one_line(tmp_path, capsys, case, suite, summary, says):
    src = tmp_path / "committed"
    src.mkdir()
    _put(src / "suite.json", suite)
    _put(src / "summary.json", json.dumps(SUMMARY) if summary is None else summary)
    with pytest.raises(SystemExit) as e:
        replicate_mod.replicate_main([str(src), "--outdir", str(tmp_path / "new"), "--quiet"])
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if "error:" in ln]
    assert e.value.code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert says in lines[0] and "argument DIR" in lines[0]
    assert not (tmp_path / "new").exists()


@pytest.mark.parametrize("seeds", ["1001", "100000000", "0", "-3", "x"])
def test_suite_seeds_is_bounded(tmp_path, capsys, seeds):
    with pytest.raises(SystemExit) as e:
        suite_main(["--outdir", str(tmp_path / "s"), "--seeds", seeds])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "argument --seeds" in err and "in 1..1000" in err
    assert not (tmp_path / "s").exists()
