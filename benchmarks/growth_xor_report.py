"""Report for ``growth_xor.py --lrs ...``: report.md, summary.json and growth_xor.png in one folder.

Per seed and lr, every arm branches from the same phase-1 state, so arms are compared as paired
differences over seeds (growth_stats.py: BCa bootstrap CI, sign-flip p, Holm over the report).
Metrics: ``steps`` = steps after growth until the train loss is <= target (a run that never gets
there within ``post_steps`` counts as ``post_steps``; the tables say how many did not);
``final`` = mean train loss over the last 100 steps.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess

import growth_stats
import numpy as np

COMPARISONS = [("preserve", "reset"), ("noma_flat", "preserve"), ("preserve_shared_step", "preserve")]
METRIC_LABEL = {"steps": "steps to target", "final": "final loss"}
ARMS = ["preserve", "preserve_shared_step", "reset", "naive", "noma_flat", "nogrow", "scratch16"]


def _steps(curve: list[float], target: float) -> tuple[int, bool]:
    hit = next((i for i, v in enumerate(curve) if v <= target), None)
    return (len(curve), False) if hit is None else (hit, True)


def arm_metrics(results: list[dict], arm: str, target: float) -> dict:
    """Per-seed steps-to-target (censored at post_steps), reached flags, final loss, step/lr."""
    steps, reached, final, rel = [], [], [], []
    for r in results:
        rec = r["modes"][arm]
        s, ok = _steps(rec["curve"], target)
        steps.append(s)
        reached.append(ok)
        final.append(float(np.mean(rec["curve"][-100:])))
        rel.append(rec["new_step_rel"])
    return {"steps": steps, "reached": reached, "final": final, "new_step_rel": rel}


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


def build(saved: dict) -> tuple[list[dict], dict]:
    cfg = saved["config"]
    comps, arms = [], {}
    for lr, results in saved["runs"].items():
        present = [a for a in ARMS if a in results[0]["modes"]]
        arms[lr] = {a: arm_metrics(results, a, cfg["target"]) for a in present}
        for arm, base in COMPARISONS:
            if arm not in arms[lr] or base not in arms[lr]:
                continue
            for metric in ("steps", "final"):
                c = growth_stats.compare(f"{arm} - {base} @ lr {lr}", metric, arms[lr][arm][metric],
                                         arms[lr][base][metric], lower_is_better=True)
                c["lr"] = float(lr)
                comps.append(c)
    return growth_stats.finish(comps), arms


def _arm_rows(arms_lr: dict, post: int) -> list[str]:
    rows = ["| arm | reached | steps to target: mean +- sd | median | final loss (last 100) | new-entry step / lr |",
            "|---|---|---|---|---|---|"]
    for arm, m in arms_lr.items():
        s = np.array(m["steps"], dtype=float)
        rel = [v for v in m["new_step_rel"] if v is not None]
        rel_s = f"{np.mean(rel):.2f}" if rel else "-"
        rows.append(f"| {arm} | {sum(m['reached'])}/{len(s)} | {s.mean():.1f} +- {s.std(ddof=1):.1f} | "
                    f"{np.median(s):.1f} | {np.mean(m['final']):.4f} +- {np.std(m['final'], ddof=1):.4f} | {rel_s} |")
    rows.append(f"\n(steps of a run that never reached the target count as {post}; scratch16 counts from its own step 0)")
    return rows


def _comp_rows(comps: list[dict]) -> list[str]:
    rows = ["| comparison (arm - baseline) | metric | pairs | mean diff | 95% CI | p (Holm) | verdict |",
            "|---|---|---|---|---|---|---|"]
    for c in comps:
        fmt = "{:+.1f}" if c["metric"] == "steps" else "{:+.4f}"
        ci = "[" + ", ".join(fmt.format(v) for v in c["ci95"]) + "]"
        rows.append(f"| {c['name']} | {METRIC_LABEL[c['metric']]} | {c['n_pairs']} | {fmt.format(c['diff'])} | {ci} | "
                    f"{c['p_holm']:.4f} | {c['verdict']} |")
    return rows


def write_report(saved: dict, out_dir: str) -> None:
    os.makedirs(out_dir, exist_ok=True)
    comps, arms = build(saved)
    cfg = saved["config"]
    meta = {"command": saved.get("command"), "commit": saved.get("commit") or _commit(),
            "machine": saved.get("machine") or machine(), "torch": saved.get("torch"),
            "wall_s": saved.get("wall_s"), "seeds": cfg["seeds"], "lrs": list(saved["runs"]),
            "target": cfg["target"], "grow_at": cfg["grow_at"], "post_steps": cfg["post_steps"]}
    keep = ("name", "metric", "n_pairs", "diff", "ci95", "p_holm", "verdict", "lr", "arm_mean", "base_mean", "p")
    summary = {"comparisons": [{k: c[k] for k in keep} for c in comps], "meta": meta,
               "arms": {lr: {a: {k: m[k] for k in ("steps", "reached", "final")} for a, m in a_lr.items()}
                        for lr, a_lr in arms.items()}}
    with open(os.path.join(out_dir, "summary.json"), "w") as fh:
        json.dump(summary, fh, indent=1)
    lines = [f"# Growth experiment (a): spiral MLP 2 -> 16 hidden units, {cfg['seeds']} seeds x {len(arms)} learning rates",
             "", f"- command: `{meta['command']}`", f"- commit: `{meta['commit']}`", f"- machine: {meta['machine']}",
             f"- torch {meta['torch']}, 1 thread, nice 5; wall time {meta['wall_s']:.0f} s (shared machine)", "",
             "Evidence run (not a smoke run). Arms of one seed and lr branch from one phase-1 state (paired). "
             f"Growth after {cfg['grow_at']} Adam steps, {cfg['post_steps']} steps after it; target train loss "
             f"{cfg['target']}. `preserve_shared_step` is the pre-issue-15 `preserve` (new entries share the "
             "tensor's Adam step). Statistics: paired differences over seeds, 95% BCa bootstrap CI, two-sided "
             "sign-flip p-value, Holm across all comparisons below; verdict at Holm p < 0.05 (lower is better "
             "for both metrics).", "", "## Comparisons", ""]
    lines += _comp_rows(comps)
    same = {lr: all(r["modes"]["naive"]["curve"] == r["modes"]["reset"]["curve"] for r in saved["runs"][lr])
            for lr in saved["runs"]}
    summary["naive_equals_reset"] = same
    with open(os.path.join(out_dir, "summary.json"), "w") as fh:
        json.dump(summary, fh, indent=1)
    lines += ["", "`naive` vs `reset` is not a statistical comparison: both discard all Adam state, and their "
              "loss curves are bit-identical at every step of every seed: "
              + ", ".join(f"lr {lr}: {'yes' if v else 'NO'}" for lr, v in same.items()) + "."]
    for lr, a_lr in arms.items():
        lines += ["", f"## Arms at lr {lr}", ""] + _arm_rows(a_lr, cfg["post_steps"])
    lines += ["", "![growth_xor](growth_xor.png)", ""]
    with open(os.path.join(out_dir, "report.md"), "w") as fh:
        fh.write("\n".join(lines))
    plot(saved, comps, os.path.join(out_dir, "growth_xor.png"))
    print("\n".join(_comp_rows(comps)))
    print(f"wrote {out_dir}/report.md, summary.json, growth_xor.png")


def plot(saved: dict, comps: list[dict], path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = {"preserve": "C0", "preserve_shared_step": "C9", "reset": "C1", "naive": "C3", "noma_flat": "C2",
              "nogrow": "0.5"}
    lrs = list(saved["runs"])
    fig = plt.figure(figsize=(4.6 * len(lrs), 8.0))
    grid = fig.add_gridspec(2, len(lrs), height_ratios=(1.1, 1.0))
    axes = [fig.add_subplot(grid[0, i]) for i in range(len(lrs))] + [fig.add_subplot(grid[1, :])]
    zoom = 500
    for ax, lr in zip(axes, lrs):
        for arm, col in colors.items():
            curves = np.array([r["modes"][arm]["curve"][:zoom] for r in saved["runs"][lr]])
            ax.plot(np.median(curves, 0), ("--" if arm == "naive" else "-"), color=col, lw=1.3, label=arm)
            ax.fill_between(np.arange(curves.shape[1]), curves.min(0), curves.max(0), color=col, alpha=0.08)
        ax.axhline(saved["config"]["target"], color="k", lw=0.5, ls=":")
        ax.set_yscale("log")
        ax.set_title(f"lr {lr}: median, min-max over seeds")
        ax.set_xlabel("steps after growth")
    axes[0].set_ylabel("train cross-entropy")
    axes[0].legend(fontsize=7)
    steps = [c for c in comps if c["metric"] == "steps"]
    ax = axes[-1]
    for i, c in enumerate(steps):
        col = "C3" if c["verdict"] == "worse" else "C2" if c["verdict"] == "better" else "0.4"
        ax.errorbar(c["diff"], i, xerr=[[c["diff"] - c["ci95"][0]], [c["ci95"][1] - c["diff"]]], fmt="o", color=col)
    ax.axvline(0, color="k", lw=0.6)
    ax.set_yticks(range(len(steps)), [c["name"] for c in steps], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("paired diff in steps to target (95% CI)")
    ax.set_title("paired difference arm - baseline, mean and 95% bootstrap CI over seeds "
                 "(red: worse, green: better, grey: no detectable difference; Holm)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
