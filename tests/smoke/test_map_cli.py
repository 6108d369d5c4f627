"""`prorl-bench map` as a user runs it: two fabricated grid suites give map.md, map.json and
map.png, whose numbers are each suite's own report's (summary.json); bad input (a missing folder, a folder without grid arms, two suites of one task) is one
line naming the argument, exit 2, and nothing written."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from fakeruns import GRID_K as K  # noqa: E402
from fakeruns import write_grid as _write_grid  # noqa: E402

from noma_prorl_bench.analysis import report as rp  # noqa: E402

pytestmark = pytest.mark.smoke


def _map(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "noma_prorl_bench.cli", "map", *argv], capture_output=True, text=True, timeout=300
    )


@pytest.fixture(scope="module")
def suites(tmp_path_factory):
    root = tmp_path_factory.mktemp("grids")
    return [_write_grid(root / t, t) for t in ("reverse_digits", "sort_digits")]


def test_map_writes_its_three_files(suites, tmp_path):
    out = tmp_path / "grid"
    r = _map(*map(str, suites), "--outdir", str(out))
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [
        "wrote",
        str(out / "map.md"),
        "wrote",
        str(out / "map.json"),
        "wrote",
        str(out / "map.png"),
    ]
    md = (out / "map.md").read_text()
    assert md.splitlines()[2].startswith("**On both tasks (reverse_digits, sort_digits), reset + keep beats no reset")
    data = json.loads((out / "map.json").read_text())
    assert [s["task"] for s in data["suites"]] == ["reverse_digits", "sort_digits"]
    assert data["answer"] == md.splitlines()[2]
    assert (out / "map.png").stat().st_size > 20_000
    # every cell's numbers are the ones the suite's own report writes for that comparison
    for root, written in zip(suites, data["suites"]):
        suite = json.loads((root / "suite.json").read_text())
        dirs = [root / r["name"] for r in suite["runs"]]
        rep = rp.write_report(
            dirs, tmp_path / root.name / "report.md", tmp_path / root.name / "fig", {"score_evals": K}, suite
        )
        summary = {c["name"]: c for c in json.loads((rep.parent / "summary.json").read_text())["comparisons"]}
        assert len(summary) == len(written["cells"]) == 4
        for cell in written["cells"]:
            row = summary[cell["comparison"]]
            for key in ("diff", "ci95", "p_holm", "verdict", "n_pairs", "mde80"):
                assert cell[key] == row[key], (cell["comparison"], key)


@pytest.mark.parametrize("case", ["missing", "no_grid", "same_task", "out_is_link"])
def test_bad_input_is_one_line_exit_2_nothing_written(suites, tmp_path, case):
    out = tmp_path / "out"
    dirs = [str(d) for d in suites]
    flag = "argument DIR"
    if case == "missing":
        dirs.append(str(tmp_path / "nowhere"))
    elif case == "no_grid":
        other = tmp_path / "other"
        other.mkdir()
        (other / "suite.json").write_text(json.dumps({"runs": [{"name": "A1_s0", "arm": "A1", "pair": 0}]}))
        dirs.append(str(other))
    elif case == "same_task":
        dirs.append(dirs[0])
    else:
        out.mkdir()
        (tmp_path / "elsewhere.md").write_text("x")
        (out / "map.md").symlink_to(tmp_path / "elsewhere.md")
        flag = "argument --outdir"
    r = _map(*dirs, "--outdir", str(out))
    assert r.returncode == 2 and r.stdout == ""
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith(f"prorl-bench map: error: {flag}"), r.stderr
    assert "Traceback" not in r.stderr
    assert not out.exists() or sorted(p.name for p in out.iterdir()) == ["map.md"]
    assert (tmp_path / "elsewhere.md").read_text() == "x" if case == "out_is_link" else True
