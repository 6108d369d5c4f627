"""The docs stay true: the generated blocks (README's file tree, docs/flags.md, docs/presets.md,
docs/files.md) are current, every metric key and event a run can write is defined in
docs/metrics.md, and the README stays a newcomer's page (short, the smoke preset, the results
placeholder, links that resolve)."""

import json
import os
import re
import subprocess
import sys

import pytest

from noma_prorl_bench.run import main

pytestmark = pytest.mark.smoke
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CONFIGS = [
    ["--ref_compute", "naive_epoch", "--tis_cap", "2"],
    ["--variant", "B", "--kl_estimator", "full"],
    ["--kl_in", "reward", "--overlong", "shape", "--loss", "gspo"],
    ["--dynamic_sampling", "1", "--overlong", "filter", "--target_kl", "0.1"],
    ["--enable_growth", "1", "--grow_every", "2", "--reset_every", "2"],
    ["--ref_update", "ema", "--ref_ema_every", "2", "--kl_clip", "0.1"],
    ["--reset_every", "2", "--reset_to", "elastic"],
]


def _documented_keys(readme: str) -> set[str]:
    section = readme.split("## Metric keys", 1)[1].split("\n## ", 1)[0]
    keys = set()
    for row in section.splitlines():
        if row.startswith("| `"):
            keys.update(re.findall(r"`([a-z_]+(?:/[a-z0-9_]+)?)`", row.split("|")[1]))
    return keys


def test_readme_generated_blocks_are_current():
    r = subprocess.run(
        [sys.executable, os.path.join(ROOT, "scripts", "update_readme.py"), "--check"], capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr


def _documented_events(readme: str) -> set[str]:
    section = readme.split("## Events", 1)[1].split("\n## ", 1)[0]
    return {row.split("`")[1] for row in section.splitlines() if row.startswith("| `")}


def test_every_metric_key_and_event_is_documented(tmp_path, fast_flags):
    readme = open(os.path.join(ROOT, "docs", "metrics.md"), encoding="utf-8").read()
    seen, events = set(), set()
    for i, flags in enumerate(CONFIGS):
        out = tmp_path / f"r{i}"
        assert main(["--outdir", str(out), *fast_flags, "--steps", "4", "--save_every", "2", *flags]) == 0
        for line in (out / "metrics.jsonl").read_text().splitlines():
            seen.update(json.loads(line))
        events.update(json.loads(line)["event"] for line in (out / "events.jsonl").read_text().splitlines())
    assert {"warmstart", "ref_reset", "opt_reset", "growth", "checkpoint", "adapters"} <= events
    missing = sorted(seen - _documented_keys(readme))
    assert not missing, f"metric keys missing from docs/metrics.md: {missing}"
    missing = sorted(events - _documented_events(readme))
    assert not missing, f"events missing from docs/metrics.md: {missing}"


def test_readme_is_a_newcomers_page():
    readme = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    assert len(readme.splitlines()) <= 200
    assert "--preset smoke" in readme and "bash scripts/setup.sh" in readme and "bash scripts/test.sh" in readme
    assert "<!-- results:start -->" in readme and "<!-- results:end -->" in readme
    assert "PYTHONPATH=src python" not in readme  # needs an active venv: use .venv/bin/
    for target in re.findall(r"\]\(([^)#]+)\)", readme):
        if not target.startswith("http"):
            assert os.path.exists(os.path.join(ROOT, target)), target


def test_readme_atlas_numbers_are_the_summaries_rounded_once():
    # the atlas table is generated from docs/atlas/summary.json (update_readme.atlas_table): each
    # number is the stored value rounded once to 3 decimals, e.g. beta 1's keep-vs-none lower end
    # 0.012453 -> +0.012 (not +0.013 by way of 0.0125) and soft-vs-keep -0.019475 -> -0.019
    readme = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    block = readme.split("<!-- atlas_table:start -->")[1].split("<!-- atlas_table:end -->")[0]
    comps = {c["name"]: c for c in json.load(open(os.path.join(ROOT, "docs", "atlas", "summary.json")))["comparisons"]}
    row = next(line for line in block.splitlines() if line.startswith("| 1 |"))
    keep, soft = comps["beta 1: reset-keep vs no reset"], comps["beta 1: reset-soft vs reset-keep"]
    for v in (keep["diff"], *keep["ci95"], soft["diff"], *soft["ci95"]):
        assert f"{v:+.3f}" in row
    assert "+0.012, +0.036" in row and "-0.019 [-0.031, -0.008]" in row


def _update_readme():
    import importlib.util

    spec = importlib.util.spec_from_file_location("update_readme", os.path.join(ROOT, "scripts", "update_readme.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _block(readme: str, name: str) -> str:
    return readme.split(f"<!-- {name}:start -->\n")[1].split(f"\n<!-- {name}:end -->")[0]


def test_readme_results_are_made_from_the_committed_result_files():
    # suite_full, growth, cost, bf16 and real-model numbers: the README block is what the generator
    # makes from the committed summary/result files, each number rounded once from the stored value
    gen = _update_readme()
    readme = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    more = _block(readme, "results_more")
    assert more == "\n\n".join([gen.full_section(), gen.growth_section(), gen.cost_real_section(), gen.speed_section()])
    f32 = json.load(open(os.path.join(ROOT, "benchmarks", "results", "vs_trl_smollm2_float32.json")))
    assert f"TRL/ours {f32['ratio_trl_over_ours']:.2f}x in float32" in more
    assert _block(readme, "grid_map") == gen.grid_section()
    full = {
        c["name"]: c for c in json.load(open(os.path.join(ROOT, "docs", "suite_full", "summary.json")))["comparisons"]
    }
    b = full["B vs A1"]
    assert f"| B vs A1 | {b['diff']:+.3f} [{b['ci95'][0]:+.3f}, {b['ci95'][1]:+.3f}] | {b['verdict']} |" in more
    arms = json.load(open(os.path.join(ROOT, "docs", "growth", "suite", "summary.json")))["arms"]
    assert f"full fine-tune {arms['full-rank']['score'] - arms['full-rank']['warm']:+.3f}" in more
    lift = json.load(open(os.path.join(ROOT, "docs", "real_model", "demo.json")))["over_seeds"]["correct"]
    said = f"{lift['mean_lift']:+.3f} [{lift['ci95'][0]:+.3f}, {lift['ci95'][1]:+.3f}]"
    assert said in more
    # the demo command's comment (inside a code block, so checked rather than generated)
    demo_line = next(line for line in readme.splitlines() if line.startswith("# The real-model demo:"))
    assert said in demo_line and f"({lift['n_seeds']} seeds, all up)" in demo_line
    assert lift["seeds_up"] == lift["n_seeds"]


def test_readme_grid_block_reads_the_committed_map(tmp_path, monkeypatch):
    gen = _update_readme()
    monkeypatch.setattr(gen, "ROOT", str(tmp_path))
    assert "is not yet committed" in gen.grid_section() and "](docs/grid" not in gen.grid_section()
    (tmp_path / "docs" / "grid").mkdir(parents=True)
    cell = {"machine": "CPU X (VM), 2 cores", "runs": 300}
    suites = [{"task": t, "k": 10, "machines": [cell]} for t in ("reverse_digits", "sort_digits")]
    (tmp_path / "docs" / "grid" / "map.json").write_text(
        json.dumps({"answer": "**On both tasks, A.** B.", "suites": suites})
    )
    text = gen.grid_section()
    assert "[map](docs/grid/map.md)" in text and "**On both tasks, A.** B." in text and "K = 10" in text
    assert "Machine: CPU X (VM), 2 cores (every run)." in text
    assert "\n" not in text  # one line: the README stays within its 200 lines


def test_readme_machines_block_reads_the_committed_replications():
    # the replication status is the committed replication.json files', not typed
    gen = _update_readme()
    readme = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    block = _block(readme, "machines")
    assert block == gen.machines_section()
    rep = json.load(open(os.path.join(ROOT, "docs", "suite_quick", "replication_xeon_amx", "replication.json")))
    assert f"**{rep['replicated']} of {rep['compared']} verdicts replicate**" in block
    assert sum(not r["replicates"] for r in rep["rows"]) == block.count(" -> ")
    assert gen._short_machine(rep["machines"]["new"]) == "a 2-core Intel Xeon with AMX (avx512_bf16, amx_bf16)"
    assert (
        gen._short_machine("AMD EPYC 7B13, 2 cores, x86_64; avx2; torch 2.13") == "a 2-core AMD EPYC 7B13 (AVX2 only)"
    )
