"""`prorl-bench replicate`: re-running a committed suite's arms on this machine and putting each
comparison's new answer beside the committed one. On the machine and commit that made the suite,
runs are bit-deterministic, so the replication must reproduce every number exactly: from the
suite directory (its suite.json's flags) and from a report folder holding only summary.json (the
runs rebuilt from its provenance), on a chosen subset of seeds too."""

import json
import shutil

import pytest

from noma_prorl_bench.suite import main as suite_main
from noma_prorl_bench.suite import replicate_main

pytestmark = pytest.mark.smoke


def test_replicate_reproduces_a_suite_on_its_own_machine(tmp_path, capsys):
    src = tmp_path / "aa"
    assert suite_main(["--preset", "aa", "--seeds", "2", "--outdir", str(src), "--jobs", "2", "--quiet"]) == 0
    committed = json.loads((src / "summary.json").read_text())
    info = committed["provenance"]["machine_info"]  # the machine is recorded
    assert info["torch_cpu_capability"] and info["cores"] >= 1 and isinstance(info["cpu_flags"], list)
    run_cfg = json.loads(next(src.glob("*/config.json")).read_text())
    assert run_cfg["machine"]["torch_cpu_capability"] == info["torch_cpu_capability"]

    new = tmp_path / "again"
    assert replicate_main([str(src), "--outdir", str(new), "--jobs", "2", "--quiet"]) == 0
    rep = json.loads((new / "replication.json").read_text())
    (row,) = rep["rows"]
    (old,) = committed["comparisons"]
    assert row["name"] == old["name"] == "AA-2 vs AA-1"
    assert row["new"]["diff"] == old["diff"] and row["new"]["ci95"] == old["ci95"]  # bit-identical runs
    assert row["replicates"] and row["overlap"] and row["within"]
    assert rep["replicated"] == rep["compared"] == 1 and rep["machines"]["kernel_differences"] == []
    assert str(tmp_path) not in rep["command"]  # no machine path in a file meant to be committed
    trained = json.loads(next(new.glob("*/config.json")).read_text())["versions"]["git_commit"]
    if trained:  # the commit the new runs were trained at, from their own config.json
        assert rep["commits"]["new"] == trained
        assert json.loads((new / "summary.json").read_text())["provenance"]["run_commits"] == [trained]
    md = (new / "replication.md").read_text()
    assert md.startswith("# Replication\n\n**1 of 1 verdicts replicated**")
    assert "AA-2 vs AA-1" in capsys.readouterr().out

    # a report folder with only summary.json: runs rebuilt from its provenance; one seed of two
    folder = tmp_path / "docs_aa"
    folder.mkdir()
    shutil.copy(src / "summary.json", folder / "summary.json")
    one = tmp_path / "one"
    assert replicate_main([str(folder), "--seeds", "1", "--outdir", str(one), "--jobs", "2", "--quiet"]) == 0
    (row,) = json.loads((one / "replication.json").read_text())["rows"]
    assert row["new"]["n_pairs"] == 1 and row["committed"]["n_pairs"] == 2
    runs = sorted(p.name for p in one.iterdir() if (p / "config.json").is_file())
    assert runs == ["AA-1_s1", "AA-2_s1001"] and all((src / name / "config.json").is_file() for name in runs)

    # --runs: compare runs trained before, train nothing, write beside them (never inside DIR)
    before = sorted(p.name for p in src.iterdir())
    assert replicate_main([str(folder), "--runs", str(src), "--quiet"]) == 0
    assert json.loads((src / "replication.json").read_text())["replicated"] == 1
    assert sorted(p.name for p in src.iterdir()) == sorted(before + ["replication.json", "replication.md"])
    with pytest.raises(SystemExit) as e:  # a run missing there: refused, nothing trained
        replicate_main([str(folder), "--runs", str(one), "--quiet"])
    assert e.value.code == 2 and not (one / "AA-1_s0").exists()


@pytest.mark.parametrize(
    "argv, flag",
    [
        (["--seeds", "7"], "--seeds"),
        (["--seeds", "x"], "--seeds"),
        (["--jobs", "0"], "--jobs"),
        (["--arms", "AA-1,nope"], "--arms"),
        (["--arms", ","], "--arms"),
    ],
)
def test_replicate_bad_input_is_one_line_and_exit_2(tmp_path, capsys, argv, flag):
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "summary.json").write_text(
        json.dumps({"comparisons": [], "provenance": {"preset": "aa", "seeds": 2, "steps": 12}})
    )
    with pytest.raises(SystemExit) as e:
        replicate_main([str(tmp_path / "s"), *argv, "--outdir", str(tmp_path / "new")])
    assert e.value.code == 2 and f"argument {flag}" in capsys.readouterr().err
    assert not (tmp_path / "new").exists()


def test_replicate_a_subset_of_arms_says_its_families_are_smaller(tmp_path):
    # a committed quick-preset folder (100 steps: 10 evaluations for its K = 10; 2 seeds): re-running only beta 1's none and keep arms
    # compares keep vs none alone; its Holm family holds 1 question where the committed one held 2
    cmp = dict(
        metric="score",
        family="beta 1",
        diff=0.01,
        ci95=[-0.01, 0.03],
        verdict="no detectable difference",
        n_pairs=2,
        p_holm=1.0,
    )
    summary = {
        "comparisons": [
            dict(cmp, name="beta 1: reset-keep vs no reset"),
            dict(cmp, name="beta 1: reset-hard vs reset-keep"),
        ],
        "provenance": {"preset": "quick", "seeds": 2, "steps": 100},
    }
    (tmp_path / "q").mkdir()
    (tmp_path / "q" / "summary.json").write_text(json.dumps(summary))
    new = tmp_path / "new"
    argv = [str(tmp_path / "q"), "--arms", "b1-none,b1-keep", "--outdir", str(new), "--jobs", "2", "--quiet"]
    assert replicate_main(argv) == 0
    runs = sorted(p.name for p in new.iterdir() if (p / "config.json").is_file())
    assert runs == ["b1-keep_s0", "b1-keep_s1", "b1-none_s0", "b1-none_s1"]
    rep = json.loads((new / "replication.json").read_text())
    (row,) = rep["rows"]
    assert row["name"] == "beta 1: reset-keep vs no reset" and row["new"]["n_pairs"] == 2
    assert row["committed"]["family_size"] == 2 and row["new"]["family_size"] == 1
    md = (new / "replication.md").read_text()
    assert "beta 1: reset-keep vs no reset 1 of 2" in md
    # the committed summary has no machine record: said as such, not as a difference named "unrecorded"
    assert "the committed runs carry no machine record" in md and "differ in: unrecorded" not in md
