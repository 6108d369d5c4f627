"""`prorl-bench bench`: the benchmark scripts of a source checkout as named commands.

    prorl-bench bench list                          # name, kind, the question, the committed result
    prorl-bench bench run vs_trl -- --real --betas 0.01 --out /tmp/v.json

Each entry names a script (relative to the repository root) and the committed result it made; its
kind is the script's folder (benchmarks/README.md: studies, speed, micro) and its question
is the first paragraph of the script's docstring, so neither is written twice. `run` executes the script
with this interpreter, src/ importable and the repository root as working directory, passing the
arguments after `--` unchanged; its exit status is the script's.
"""

from __future__ import annotations

import argparse
import ast
import os
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple, Optional


class Bench(NamedTuple):
    script: str  # relative to the repository root
    result: str  # the committed result it made (a file under benchmarks/results/ or a report under docs/)


R = "benchmarks/results/"
BENCHES: dict[str, Bench] = {
    # studies: runs that answer a learning question
    "critic_study": Bench("benchmarks/studies/critic_study.py", R + "critic_study.json"),
    "growth_rl": Bench("benchmarks/studies/growth_rl.py", "docs/growth/rl/summary.json"),
    "growth_rl_report": Bench("benchmarks/studies/growth_rl_report.py", "docs/growth/rl/report.md"),
    "growth_xor": Bench("benchmarks/studies/growth_xor.py", "docs/growth/xor/summary.json"),
    "growth_xor_report": Bench("benchmarks/studies/growth_xor_report.py", "docs/growth/xor/report.md"),
    "interval_coverage": Bench("benchmarks/studies/interval_coverage.py", "docs/statistics.md"),
    "real_baseline": Bench("benchmarks/studies/real_baseline.py", R + "real_baseline.json"),
    "real_bf16": Bench("benchmarks/studies/real_bf16.py", "docs/real_model/bf16/bf16.json"),
    "real_demo": Bench("benchmarks/studies/real_demo.py", "docs/real_model/demo.json"),
    "real_resets": Bench("benchmarks/studies/real_resets.py", "docs/real_model/resets/form.json"),
    "reset_ablation": Bench("benchmarks/studies/reset_ablation.py", "docs/resets.md"),
    "trl_reset_study": Bench("benchmarks/studies/trl_reset_study.py", R + "trl_reset_study_soft.json"),
    "gpu_study": Bench("benchmarks/studies/gpu_study.py", "docs/gpu.md"),  # on a lent GPU: scripts/gpu_study.sh
    # speed: step time and memory of whole runs
    "linearity": Bench("benchmarks/speed/linearity.py", "docs/performance.md"),
    "ray_engines": Bench("benchmarks/speed/ray_engines.py", "docs/ray.md"),
    "real_speed": Bench("benchmarks/speed/real_speed.py", R + "real_speed.json"),
    "real_wedge": Bench("benchmarks/speed/real_wedge.py", R + "real_wedge.json"),
    "ref_cost": Bench("benchmarks/speed/ref_cost.py", R + "ref_cost_toy.txt"),
    "toy_speed": Bench("benchmarks/speed/toy_speed.py", R + "toy_speed.json"),
    "rss_by_stage": Bench("benchmarks/speed/rss_by_stage.py", "docs/performance.md"),
    "vs_trl": Bench("benchmarks/speed/vs_trl.py", R + "vs_trl_smollm2_float32.json"),
    # micro: one component
    "attention_dtype": Bench("benchmarks/micro/attention_dtype.py", R + "attention_dtype.json"),
    "decode_floor": Bench("benchmarks/micro/decode_floor.py", R + "decode_floor_packed.json"),
    "eval_memory": Bench("benchmarks/micro/eval_memory.py", "docs/performance.md"),
    "merged_rollout": Bench("benchmarks/micro/merged_rollout.py", R + "merged_rollout_bf16.json"),
    "rollout_kv": Bench("benchmarks/micro/rollout_kv.py", "docs/models.md"),
    "roofline": Bench("benchmarks/micro/roofline.py", R + "roofline_cpu.json"),
    "sampler": Bench("benchmarks/micro/sampler.py", R + "sampler_smollm2_bfloat16_packed.json"),
    "shared_prompt": Bench("benchmarks/micro/shared_prompt.py", R + "shared_prompt_float32.json"),
    "trl_reset_cost": Bench("benchmarks/micro/trl_reset_cost.py", R + "trl_reset_cost.json"),
    "update_rss": Bench("benchmarks/micro/update_rss.py", R + "update_rss.log"),
}

DESCRIPTION = (
    "The benchmark scripts of a source checkout as named commands: `list` prints each one's kind, "
    "question and committed result; `run NAME -- ARGS` runs its script with src/ importable, from the "
    "repository root, with ARGS unchanged, and exits with the script's status."
)


def repo_root() -> Optional[Path]:
    """The source checkout this package runs from (src/noma_prorl_bench/ -> the root), or None
    when the package is installed without one."""
    root = Path(__file__).resolve().parents[3]
    return root if (root / "benchmarks").is_dir() else None


def kind(b: Bench) -> str:
    """The script's folder: studies, speed or micro."""
    return Path(b.script).parent.name


def question(root: Path, b: Bench) -> str:
    """The first paragraph of the script's docstring on one line, cut at 110 characters."""
    doc = ast.get_docstring(ast.parse((root / b.script).read_text(encoding="utf-8"))) or ""
    text = " ".join(doc.strip().split("\n\n", 1)[0].split())
    return text if len(text) <= 110 else text[:107].rstrip() + "..."


def listing(root: Path) -> str:
    width = max(map(len, BENCHES)) + 2
    lines = []
    for name, b in BENCHES.items():
        lines.append(f"{name:<{width}}{kind(b):<9}{question(root, b)}")
        lines.append(f"{'':<{width + 9}}{b.script} -> {b.result}")
    return "\n".join(lines)


def bench_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="prorl-bench bench", description=DESCRIPTION)
    sub = ap.add_subparsers(dest="action", required=True, metavar="{list,run}")
    sub.add_parser("list", help="name, kind, question, script and committed result of every entry")
    run = sub.add_parser("run", help="run one entry's script: NAME -- ARGS")
    run.add_argument("name", choices=list(BENCHES), metavar="NAME", help="an entry of `list`")
    run.add_argument("args", nargs=argparse.REMAINDER, help="after --: the script's own arguments")
    return ap


def main(argv: list[str]) -> int:
    a = bench_parser().parse_args(argv)
    root = repo_root()
    if root is None:
        print("prorl-bench bench: error: needs a source checkout (benchmarks/ next to src/)", file=sys.stderr)
        return 2
    if a.action == "list":
        print(listing(root))
        return 0
    args = a.args[1:] if a.args[:1] == ["--"] else a.args
    src = str(root / "src")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH")) if p)}
    return subprocess.call([sys.executable, str(root / BENCHES[a.name].script), *args], cwd=root, env=env)
