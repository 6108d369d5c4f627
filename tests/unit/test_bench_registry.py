"""`prorl-bench bench`: every benchmark script is a declared entry whose script and committed result
exist, every result file under benchmarks/results/ carries its commit and machine (not in its name),
and `list` / `run` behave as their help says."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from noma_prorl_bench.analysis import bench

ROOT = Path(__file__).resolve().parents[2]


def _scripts_with_main() -> set[str]:
    out = set()
    for p in (ROOT / "benchmarks").glob("*/*.py"):
        if 'if __name__ == "__main__"' in p.read_text():
            out.add(p.relative_to(ROOT).as_posix())
    return out


def test_every_script_is_an_entry_and_every_entry_exists():
    assert bench.repo_root() == ROOT
    declared = {b.script for b in bench.BENCHES.values()}
    assert declared == _scripts_with_main()
    for name, b in bench.BENCHES.items():
        assert Path(b.script).stem == name
        assert bench.kind(b) in ("studies", "speed", "micro"), name
        assert (ROOT / b.result).is_file(), (name, b.result)
        q = bench.question(ROOT, b)
        assert q and len(q) <= 110, (name, q)


def test_result_files_carry_commit_and_machine_not_in_their_names():
    files = sorted((ROOT / "benchmarks" / "results").glob("*.json"))
    assert len(files) > 60
    for p in files:
        assert not re.search(r"_[0-9a-f]{7}$", p.stem), p.name
        d = json.loads(p.read_text())
        assert re.fullmatch(r"[0-9a-f]{7,40}", str(d.get("commit", "")).split(" ")[0]), p.name
        assert d.get("machine"), p.name  # io/machine.py's record, or a description in older files
        for key in d.get("recovered", {}):
            assert key in ("commit", "machine") and d["recovered"][key].startswith("not recorded by the run"), p.name


def test_text_result_files_name_their_commit_and_machine_in_their_first_lines():
    """The .txt / .log / .md results (tables and logs a script printed) say in their first lines which
    commit made them and on what machine, or that the machine was not recorded."""
    files = sorted(p for p in (ROOT / "benchmarks" / "results").glob("*") if p.suffix in (".txt", ".log", ".md"))
    assert len(files) >= 8
    for p in files:
        head = "\n".join(p.read_text().splitlines()[:8])
        assert re.search(r"\b[0-9a-f]{7,40}\b", head), p.name
        assert re.search(r"Xeon|EPYC|AMD|Intel|not recorded|machine", head), p.name


def test_list_prints_every_entry(capsys):
    assert bench.main(["list"]) == 0
    out = capsys.readouterr().out
    for name, b in bench.BENCHES.items():
        assert re.search(rf"^{name} +{bench.kind(b)} ", out, re.M), name
        assert f"{b.script} -> {b.result}" in out


def test_run_passes_the_arguments_and_returns_the_status(capsys):
    assert bench.main(["run", "interval_coverage", "--", "--help"]) == 0
    assert bench.main(["run", "linearity", "--", "--dtype"]) == 2  # the script's own error, exit 2
    with pytest.raises(SystemExit) as e:
        bench.main(["run", "no_such_study"])
    assert e.value.code == 2
    assert "invalid choice: 'no_such_study'" in capsys.readouterr().err
