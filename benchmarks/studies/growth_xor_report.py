"""Report for ``growth_xor.py --lrs ...``: report.md, summary.json and growth_xor.png in one folder.

Per seed and lr, every arm branches from the same phase-1 state, so arms are compared as paired
differences over seeds (growth_stats.py: Student t CI, sign-flip p, Holm over the report, mde80).
Metrics: ``steps`` = steps after growth until the train loss is <= target (a run that never gets
there within ``post_steps`` counts as ``post_steps``; the tables say how many did not);
``final`` = mean train loss over the last 100 steps.

Written by ``growth_xor.py --lrs ... --out_dir DIR`` (or ``--from_json``). Without the run's JSON:

    PYTHONPATH=src python benchmarks/studies/growth_xor_report.py --from_summary docs/growth/xor/summary.json

recomputes the comparisons from the per-seed ``steps`` / ``final`` of an earlier summary.json and
rewrites summary.json and report.md in its folder (meta kept). The loss curves are not in a
summary: the CI panels go to growth_xor_ci.png, and an existing growth_xor.png that still has its
CI panel is cropped to its curve row (growth_xor_figures.py).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys

import growth_stats
import numpy as np
from growth_xor_figures import crop_to_curve_row, plot

from noma_prorl_bench.analysis.tables import markdown_table

COMPARISONS = [("preserve", "reset"), ("noma_flat", "preserve"), ("preserve_shared_step", "preserve")]
METRIC_LABEL = {"steps": "steps to target", "final": "final loss"}
ARMS = ["preserve", "preserve_shared_step", "reset", "naive", "noma_flat", "nogrow", "scratch16"]


def _steps(curve: list[float], target: float) -> tuple[int, bool]:
    hit = next((i for i, v in enumerate(curve) if v <= target), None)
    return (len(curve), False) if hit is None else (hit, True)


def arm_metrics(results: list[dict], arm: str, target: float) -> dict:
    """Per-seed steps-to-target (censored at post_steps), reached flags, final loss; mean new-entry step/lr."""
    steps, reached, final, rel = [], [], [], []
    for r in results:
        rec = r["modes"][arm]
        s, ok = _steps(rec["curve"], target)
        steps.append(s)
        reached.append(ok)
        final.append(float(np.mean(rec["curve"][-100:])))
        rel.append(rec["new_step_rel"])
    known = [v for v in rel if v is not None]
    return {
        "steps": steps,
        "reached": reached,
        "final": final,
        "new_step_rel_mean": float(np.mean(known)) if known else None,
    }


def machine() -> str:
    cpu = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as fh:
            cpu = next(line.split(":", 1)[1].strip() for line in fh if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{platform.node()} ({cpu}, {os.cpu_count()} cores, {platform.system()} {platform.release()})"


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def compare_arms(arms: dict) -> list[dict]:
    """Every COMPARISONS pair at every lr, both metrics, Holm across all (lower is better)."""
    comps = []
    for lr, a_lr in arms.items():
        for arm, base in COMPARISONS:
            if arm not in a_lr or base not in a_lr:
                continue
            for metric in ("steps", "final"):
                c = growth_stats.compare(
                    f"{arm} - {base} @ lr {lr}", metric, a_lr[arm][metric], a_lr[base][metric], lower_is_better=True
                )
                c["lr"] = float(lr)
                comps.append(c)
    return growth_stats.finish(comps)


def build(saved: dict) -> tuple[list[dict], dict]:
    cfg = saved["config"]
    arms = {}
    for lr, results in saved["runs"].items():
        present = [a for a in ARMS if a in results[0]["modes"]]
        arms[lr] = {a: arm_metrics(results, a, cfg["target"]) for a in present}
    return compare_arms(arms), arms


def _arm_rows(arms_lr: dict, post: int) -> list[str]:
    cells = []
    for arm, m in arms_lr.items():
        s = np.array(m["steps"], dtype=float)
        rel = m.get("new_step_rel_mean")
        rel_s = "-" if rel is None else f"{rel:.2f}"
        cells.append(
            [arm, f"{sum(m['reached'])}/{len(s)}", f"{s.mean():.1f} +- {s.std(ddof=1):.1f}", f"{np.median(s):.1f}"]
            + [f"{np.mean(m['final']):.4f} +- {np.std(m['final'], ddof=1):.4f}", rel_s]
        )
    header = ["arm", "reached", "steps to target: mean +- sd", "median", "final loss (last 100)"]
    rows = markdown_table([*header, "new-entry step / lr"], cells)
    rows.append(
        f"\n(steps of a run that never reached the target count as {post}; scratch16 counts from its own step 0)"
    )
    return rows


def _comp_rows(comps: list[dict]) -> list[str]:
    cells = []
    for c in comps:
        fmt = "{:+.1f}" if c["metric"] == "steps" else "{:+.4f}"
        ci = "[" + ", ".join(fmt.format(v) for v in c["ci95"]) + "]"
        cells.append(
            [c["name"], METRIC_LABEL[c["metric"]], c["n_pairs"], fmt.format(c["diff"]), ci, f"{c['p_holm']:.4f}"]
            + [c["verdict"], fmt.format(c["mde80"]).lstrip("+")]
        )
    header = ["comparison (arm - baseline)", "metric", "pairs", "mean diff", "95% CI", "p (Holm)", "verdict", "mde80"]
    return markdown_table(header, cells)


def _summary(comps: list[dict], arms: dict, meta: dict, same: dict) -> dict:
    keep = (
        "name",
        "metric",
        "n_pairs",
        "diff",
        "ci95",
        "p_holm",
        "verdict",
        "lr",
        "arm_mean",
        "base_mean",
        "p",
        "mde80",
    )
    rows = [{k: (None if isinstance(c[k], float) and not np.isfinite(c[k]) else c[k]) for k in keep} for c in comps]
    return {
        "comparisons": rows,
        "meta": meta,
        "naive_equals_reset": same,
        "arms": {
            lr: {a: {k: m.get(k) for k in ("steps", "reached", "final", "new_step_rel_mean")} for a, m in a_lr.items()}
            for lr, a_lr in arms.items()
        },
    }


def _header(meta: dict, n_lrs: int, from_summary: bool) -> list[str]:
    lines = [
        f"# Growth experiment (a): spiral MLP 2 -> 16 hidden units, {meta['seeds']} seeds x {n_lrs} learning rates",
        "",
        f"- command: `{meta['command']}`",
        f"- commit: `{meta['commit']}`",
        f"- machine: {meta['machine']}",
        f"- torch {meta['torch']}, 1 thread, nice 5; wall time {meta['wall_s']:.0f} s (shared machine)",
    ]
    if from_summary:
        lines += [
            "- statistics and growth_xor_ci.png recomputed by `benchmarks/studies/growth_xor_report.py --from_summary` "
            "from the per-seed values in summary.json; curves (growth_xor.png): from the original run's data, "
            "which is not in the repository"
        ]
    return lines + [
        "",
        "Evidence run (not a smoke run). Arms of one seed and lr branch from one phase-1 state (paired). "
        f"Growth after {meta['grow_at']} Adam steps, {meta['post_steps']} steps after it; target train loss "
        f"{meta['target']}. `preserve_shared_step` is the earlier `preserve`, before per-entry step counts (new "
        "entries share the tensor's Adam step). Statistics: paired differences over seeds, 95% Student t CI of the "
        "mean difference (t(0.975, n-1) sd/sqrt(n); the BCa bootstrap covered only 87-90% at 10 pairs), two-sided "
        "sign-flip p-value, Holm across all comparisons below; verdict at Holm p < 0.05 (lower is better for both "
        "metrics); mde80 = the smallest |mean diff| detectable with 80% power after Holm.",
        "",
        "## Comparisons",
        "",
    ]


def write_outputs(comps: list[dict], arms: dict, meta: dict, same: dict, out_dir: str, from_summary: bool) -> None:
    """report.md and summary.json in out_dir (the figures are the caller's)."""
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "summary.json"), "w") as fh:
        json.dump(_summary(comps, arms, meta, same), fh, indent=1)
    lines = _header(meta, len(arms), from_summary) + _comp_rows(comps)
    lines += [
        "",
        "`naive` vs `reset` is not a statistical comparison: both discard all Adam state, and their "
        "loss curves are bit-identical at every step of every seed: "
        + ", ".join(f"lr {lr}: {'yes' if v else 'NO'}" for lr, v in same.items())
        + ".",
    ]
    for lr, a_lr in arms.items():
        lines += ["", f"## Arms at lr {lr}", ""] + _arm_rows(a_lr, meta["post_steps"])
    lines += ["", "![growth_xor](growth_xor.png)", ""]
    if from_summary:
        lines[-1:] = ["", "![growth_xor_ci](growth_xor_ci.png)", ""]
    with open(os.path.join(out_dir, "report.md"), "w") as fh:
        fh.write("\n".join(lines))
    print("\n".join(_comp_rows(comps)))


def write_report(saved: dict, out_dir: str) -> None:
    """From a saved sweep (growth_xor.py --lrs): report.md, summary.json, growth_xor.png (curves + CIs)."""
    comps, arms = build(saved)
    cfg = saved["config"]
    meta = {
        "command": saved.get("command"),
        "commit": saved.get("commit") or _commit(),
        "machine": saved.get("machine") or machine(),
        "torch": saved.get("torch"),
        "wall_s": saved.get("wall_s"),
        "seeds": cfg["seeds"],
        "lrs": list(saved["runs"]),
        "target": cfg["target"],
        "grow_at": cfg["grow_at"],
        "post_steps": cfg["post_steps"],
    }
    same = {
        lr: all(r["modes"]["naive"]["curve"] == r["modes"]["reset"]["curve"] for r in saved["runs"][lr])
        for lr in saved["runs"]
    }
    write_outputs(comps, arms, meta, same, out_dir, from_summary=False)
    plot(comps, os.path.join(out_dir, "growth_xor.png"), saved)
    print(f"wrote {out_dir}/report.md, summary.json, growth_xor.png")


def from_summary(path: str) -> None:
    """Recompute the comparisons from an earlier summary.json's per-seed values, in its folder."""
    with open(path) as fh:
        summary = json.load(fh)
    out_dir = os.path.dirname(os.path.abspath(path))
    arms = summary["arms"]
    comps = compare_arms(arms)
    write_outputs(comps, arms, summary["meta"], summary["naive_equals_reset"], out_dir, from_summary=True)
    plot(comps, os.path.join(out_dir, "growth_xor_ci.png"))
    cropped = crop_to_curve_row(os.path.join(out_dir, "growth_xor.png"))
    print(
        f"wrote {out_dir}/report.md, summary.json, growth_xor_ci.png"
        + ("; cropped growth_xor.png to its curve row" if cropped else "")
    )


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--from_summary",
        required=True,
        help="an earlier summary.json: recompute from its per-seed values and rewrite its folder",
    )
    args = p.parse_args(argv)
    if not os.path.isfile(args.from_summary):
        p.error(f"--from_summary: no such file {args.from_summary}")
    from_summary(args.from_summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
