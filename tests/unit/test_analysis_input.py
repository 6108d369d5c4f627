"""What the analyses (report, map, replicate) refuse or fold before they compute anything
(docs/reliability.md, "Run directories are untrusted input"): an arm whose runs differ in more than
their seed (configuration, recorded commit or machine) is one line naming the arm and the key; a
comparison listed several times is one comparison; `report --out` (or `--figures`) naming a run's
own files and `plot --out` with a non-figure extension are one line, exit 2, nothing written."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from fakeruns import write_run  # noqa: E402

from noma_prorl_bench.analysis.commands import plot_main, report_main  # noqa: E402
from noma_prorl_bench.analysis.replicate import compare_summaries  # noqa: E402

pytestmark = pytest.mark.unit


def _suite(root: Path, edit=None) -> Path:
    """Two arms (A1, B) on three seeds, with suite.json; `edit(name, config)` changes a run's config."""
    runs = []
    for arm, kw in (("A1", {}), ("B", {"variant": "B"})):
        for seed in range(3):
            name = f"{arm}_s{seed}"
            d = write_run(root / name, seed=seed, steps=20, **kw)
            if edit:
                cfg = json.loads((d / "config.json").read_text())
                edit(name, cfg)
                (d / "config.json").write_text(json.dumps(cfg))
            runs.append({"name": name, "arm": arm, "pair": seed, "flags": []})
    (root / "settings.json").write_text(json.dumps({"score_evals": 3}))  # 4 evaluations in 20 steps
    (root / "suite.json").write_text(json.dumps({"runs": runs, "comparisons": [["B vs A1", "B", "A1"]] * 3}))
    return root


def _error(capsys) -> str:
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if "error" in ln]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def _set(key, value, run="A1_s1"):
    def edit(name, cfg):
        if name == run:
            if "." in key:
                top, sub = key.split(".")
                cfg[top] = {**(cfg.get(top) or {}), sub: value}
            else:
                cfg[key] = value

    return edit


@pytest.mark.parametrize(
    "edit,key",
    [
        (_set("lr", 0.5), "'lr'"),
        (_set("beta", 0.0), "'beta'"),
        (_set("versions.git_commit", "f" * 40), "'versions.git_commit'"),
        (_set("machine.torch_cpu_capability", "AVX2"), "'machine.torch_cpu_capability'"),
    ],
    ids=["lr", "beta", "commit", "machine"],
)
def test_a_mixed_arm_is_refused_naming_the_arm_and_key(tmp_path, capsys, edit, key):
    def both(name, cfg):  # every run records a commit and a machine, one run of A1 differs
        cfg["versions"] = {**(cfg.get("versions") or {}), "git_commit": "a" * 40}
        cfg["machine"] = {"cpu": "c", "cores": 2, "torch_cpu_capability": "AVX512"}
        edit(name, cfg)

    root = _suite(tmp_path / "suite", both)
    with pytest.raises(SystemExit) as e:
        report_main([str(root)])
    line = _error(capsys)
    assert e.value.code == 2 and "arm 'A1'" in line and key in line and "A1_s1" in line
    assert not (root / "report.md").exists()


def test_an_arm_on_several_seeds_is_not_mixed(tmp_path):
    root = _suite(tmp_path / "suite")
    assert report_main([str(root)]) == 0


def test_a_comparison_listed_three_times_is_reported_once(tmp_path):
    root = _suite(tmp_path / "suite")
    assert report_main([str(root)]) == 0
    summary = json.loads((root / "summary.json").read_text())
    rows = [c for c in summary["comparisons"] if c["name"] == "B vs A1" and c["metric"] == "score"]
    assert len(rows) == 1
    tripled = {"comparisons": summary["comparisons"] * 3}
    compared = compare_summaries(tripled, tripled)
    assert len(compared) == len(summary["comparisons"]) and sum(r["replicates"] for r in compared) == len(compared)
    assert compared[0]["committed"]["family_size"] == compare_summaries(summary, summary)[0]["committed"]["family_size"]


@pytest.mark.parametrize("out", ["metrics.jsonl", "summary.json", "report.md", "checkpoints/report.md", "plots/r.md"])
def test_report_out_naming_a_runs_own_files_is_refused(tmp_path, capsys, out):
    d = write_run(tmp_path / "run", seed=0, steps=20)
    before = {p.name: p.read_bytes() for p in d.iterdir() if p.is_file()}
    with pytest.raises(SystemExit) as e:
        report_main([str(d), "--out", str(d / out)])
    line = _error(capsys)
    assert e.value.code == 2 and "argument --out" in line and "run directory" in line
    assert {p.name: p.read_bytes() for p in d.iterdir() if p.is_file()} == before


def test_report_figures_in_a_run_dir_is_refused(tmp_path, capsys):
    d = write_run(tmp_path / "run", seed=0, steps=20)
    with pytest.raises(SystemExit) as e:
        report_main([str(d), "--out", str(tmp_path / "r" / "report.md"), "--figures", str(d)])
    assert e.value.code == 2 and "argument --figures" in _error(capsys)
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("out", ["p.txt", "p", "p.json", "p.png.sh"])
def test_plot_out_must_name_a_figure_format(tmp_path, capsys, out):
    d = write_run(tmp_path / "run", seed=0, steps=20)
    with pytest.raises(SystemExit) as e:
        plot_main(["--runs", str(d), "--out", str(tmp_path / out)])
    line = _error(capsys)
    assert e.value.code == 2 and "argument --out" in line and ".png, .pdf, .svg" in line
    assert not (tmp_path / out).exists() and not (tmp_path / "ref_cost.png").exists()
