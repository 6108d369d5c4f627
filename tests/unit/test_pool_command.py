"""`prorl-bench pool` on small report folders: what it reads (pool_sets), what it writes
(pooled.json, pooled.md) and what it refuses (exit 2, nothing written)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from noma_prorl_bench.analysis import pool_sets, power
from noma_prorl_bench.cli import main

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from fakeruns import write_grid  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
QUESTION = {"name": "t vs c", "family": "outcome", "metric": "score", "arm": "t", "baseline": "c"}


def _report_folder(path: Path, diffs: dict[int, float], machine: str | None, question: dict = QUESTION) -> Path:
    """A committed-report folder: summary.json naming one question, report.md's per-seed table."""
    path.mkdir(parents=True)
    prov = {"commit": "abc1234", "preset": "toy"} | ({"machine": machine} if machine else {})
    summary = {"comparisons": [question], "provenance": prov, "score": {"k": 10}}
    (path / "summary.json").write_text(json.dumps(summary))
    rows = [
        f"| {arm} | {p} | {p} | {0.5 + (d if arm == 't' else 0.0):.3f} | 0.5 | 0.4 | 0.1 s | 1.0 µs |"
        for arm in ("c", "t")
        for p, d in diffs.items()
    ]
    head = "| arm | pair | seed | score (last 10 evals) | final val reward | warm-start score | step time | time |"
    text = "# Result report\n\n# Appendix\n\n## Per-seed numbers\n\n" + "\n".join([head, "|---|" * 8, *rows]) + "\n\n"
    (path / "report.md").write_text(text)
    return path


def test_the_committed_quick_report_table_gives_its_arm_means() -> None:
    s = pool_sets.read_set(ROOT / "docs" / "suite_quick")
    summary = json.loads((ROOT / "docs" / "suite_quick" / "summary.json").read_text())
    assert s.source == "report table" and s.k == 10 and len(s.questions) == 4 and s.runs == 120
    for arm, info in summary["arms"].items():
        assert len(s.scores[arm]) == 20
        assert sum(s.scores[arm].values()) / 20 == pytest.approx(info["score"], abs=5e-4)  # printed to 0.001
    assert s.machine == summary["provenance"]["machine"]  # the machine the suite records


def test_pool_writes_the_hand_worked_toy(tmp_path: Path) -> None:
    a = _report_folder(tmp_path / "a", {0: 0.001, 1: 0.002, 2: 0.003}, "machine A")
    b = _report_folder(tmp_path / "b", {3: 0.004, 4: 0.005, 5: -0.001}, None)
    out = tmp_path / "out"
    assert main(["pool", str(a), str(b), "--out", str(out)]) == 0
    data = json.loads((out / "pooled.json").read_text())
    assert [m["machine"] for m in data["machines"]] == ["machine A", "unrecorded"]
    (q,) = data["questions"]
    assert q["p"] == pytest.approx(6 / 64) and q["p_exact"] and q["p_holm"] == pytest.approx(6 / 64)
    assert q["n_pairs"] == 6 and q["diff"] == pytest.approx(14e-3 / 6)
    assert q["verdict"] == "no detectable difference" and q["family_size"] == 1
    assert {k: v["n"] for k, v in q["machines"].items()} == {"M1": 3, "M2": 3}
    assert q["mde90"] > abs(q["diff"])  # six seeds detect 0.002 with 90% power only at a larger effect
    md = (out / "pooled.md").read_text()
    assert "no detectable difference" in md and "unrecorded" in md and "machine A" in md
    assert main(["pool", str(a), str(b), "--out", str(out), "--effect", "0.01"]) == 0
    sized = json.loads((out / "pooled.json").read_text())
    assert sized["effect"] == 0.01 and sized["command"].endswith("--effect 0.01")
    (q,) = sized["questions"]
    assert q["pairs_for_90"] == power.pairs_needed(q["sd_within"], 0.01, 1)


def test_pool_refuses_sets_of_other_commands_and_writes_nothing(tmp_path: Path, capsys) -> None:
    a = _report_folder(tmp_path / "a", {0: 0.001, 1: 0.002}, "m")
    b = _report_folder(tmp_path / "b", {0: 0.001, 1: 0.002}, "n", dict(QUESTION, name="other"))
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as err:
        main(["pool", str(a), str(b), "--out", str(out)])
    assert err.value.code == 2 and not out.exists()
    assert "not the same commands" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["pool", str(tmp_path / "missing"), "--out", str(out)])
    with pytest.raises(SystemExit) as err:
        main(["pool", str(a), "--out", str(out), "--effect", "-1"])
    assert err.value.code == 2
    assert not out.exists()


def test_pool_reads_suite_folders_with_the_reports_own_numbers(tmp_path: Path) -> None:
    from noma_prorl_bench.analysis.report import suite_rows
    from noma_prorl_bench.analysis.runlog import find_run_dirs, load_runs

    a, b = write_grid(tmp_path / "a", "reverse_digits"), write_grid(tmp_path / "b", "reverse_digits")
    record = {"cpu": "CPU X", "cores": 2, "arch": "x86_64", "cpu_flags": ["avx2"], "torch": "2.13"}
    for cfg in b.glob("*/config.json"):
        cfg.write_text(json.dumps(dict(json.loads(cfg.read_text()), machine=record)))
    out = tmp_path / "out"
    assert main(["pool", str(a), str(b), "--out", str(out)]) == 0
    data = json.loads((out / "pooled.json").read_text())
    assert data["machines"][0]["machine"] == "unrecorded" and data["machines"][1]["machine"].startswith(
        "CPU X, 2 cores"
    )
    assert data["machines"][0]["source"] == "runs" and data["machines"][0]["runs"] == 48
    settings = json.loads((a / "settings.json").read_text()) if (a / "settings.json").is_file() else {}
    rows = suite_rows(load_runs(find_run_dirs(a)), settings, json.loads((a / "suite.json").read_text()))[-1]
    assert len(data["questions"]) == len(rows) == 4 and data["family_size"] == 4
    for q, row in zip(data["questions"], rows):
        assert q["name"] == row["name"] and q["family"] == row["family"]
        assert q["machines"]["M1"]["diff"] == pytest.approx(row["diff"]) and q["machines"]["M1"]["n"] == 8
        assert q["machines"]["M1"]["p"] == pytest.approx(row["p"])  # the report's sign-flip p on one machine
        assert q["diff"] == pytest.approx(row["diff"]) and q["n_pairs"] == 16 and q["n_seeds"] == 8
        if q["heterogeneity_p"] is not None:
            assert q["heterogeneity_p"] > 0.5  # the two machines gave the same numbers
