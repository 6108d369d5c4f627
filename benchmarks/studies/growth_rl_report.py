"""Paired report for ``growth_rl.py`` results: report.md + summary.json (+ the script's figure).

    PYTHONPATH=src python benchmarks/studies/growth_rl_report.py --json runs/growth_rl.json --out_dir docs/growth/rl \
        --command "..." --commit <sha>
    PYTHONPATH=src python benchmarks/studies/growth_rl_report.py --from_summary docs/growth/rl/summary.json

Per seed (all arms share the seed, and are bit-identical up to the first growth): ``final_train``
= mean train reward of the last 20 steps, ``final_val`` = last greedy validation reward,
``delta20`` = mean over the run's growths of (train reward over the 20 steps after a growth minus
the level over the 10 steps before it). Every arm is compared with ``--baseline`` as paired
differences (growth_stats.py: Student t CI, sign-flip p, Holm across the report, mde80; higher is
better for all three metrics). ``--from_summary`` recomputes the statistics from the per-seed
values of an earlier summary.json (no run JSON needed) and rewrites summary.json and report.md in
that folder, keeping its meta and any section written below the figure link of its report.md.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys

import growth_stats
from growth_xor_report import machine

from noma_prorl_bench.analysis.tables import markdown_table

FINAL, PRE, POST = 20, 10, 20
METRICS = {
    "final_train": "final train reward (last 20 steps)",
    "final_val": "final greedy val reward",
    "delta20": "delta20 (post - pre growth, mean over growths)",
}
FIGURE = "![growth_rl](growth_rl.png)"
KEEP = ("name", "metric", "n_pairs", "diff", "ci95", "p_holm", "verdict", "arm_mean", "base_mean", "p", "mde80")


def per_seed(run: dict, grows: list[int]) -> dict:
    r = run["reward"]
    deltas = [statistics.fmean(r[g : g + POST]) - statistics.fmean(r[g - PRE : g]) for g in grows]
    return {
        "final_train": statistics.fmean(r[-FINAL:]),
        "final_val": run["val"][-1][1],
        "delta20": statistics.fmean(deltas),
    }


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--json", help="growth_rl.py's saved run JSON")
    src.add_argument("--from_summary", help="an earlier summary.json: recompute from its per_seed values, in place")
    p.add_argument("--out_dir", default=None, help="with --json only")
    p.add_argument("--baseline", default="reset")
    p.add_argument("--command", default=None, help="with --json only")
    p.add_argument("--commit", default=None, help="with --json only")
    p.add_argument("--wall_s", type=float, default=None, help="with --json only")
    args = p.parse_args(argv)
    if args.from_summary:
        for flag in ("out_dir", "command", "commit", "wall_s"):
            if getattr(args, flag) is not None:
                p.error(f"--{flag}: not used with --from_summary (it keeps the summary's meta and folder)")
        if not os.path.isfile(args.from_summary):
            p.error(f"--from_summary: no such file {args.from_summary}")
    elif args.out_dir is None:
        p.error("--out_dir: required with --json")
    return args


def load(args) -> tuple[dict, dict, str]:
    """(per-seed data arm -> seed -> metric, meta, out_dir) from a run JSON or an earlier summary."""
    if args.from_summary:
        with open(args.from_summary) as fh:
            saved = json.load(fh)
        return saved["per_seed"], saved["meta"], os.path.dirname(os.path.abspath(args.from_summary))
    with open(args.json) as fh:
        saved = json.load(fh)
    a = saved["args"]
    grows = list(range(a["grow_every"], a["steps"], a["grow_every"]))
    seeds = sorted({r["seed"] for r in saved["results"]})
    data = {
        arm: {
            str(s): per_seed(next(r for r in saved["results"] if r["arm"] == arm and r["seed"] == s), grows)
            for s in seeds
        }
        for arm in a["arms"].split(",")
    }
    meta = {
        "command": args.command or "",
        "commit": args.commit or "",
        "machine": machine(),
        "seeds": seeds,
        "settings": a,
        "wall_s": args.wall_s,
    }
    return data, meta, args.out_dir


def comparisons(data: dict, baseline: str, seeds: list[str]) -> list[dict]:
    comps = []
    for arm in data:
        if arm == baseline:
            continue
        for metric in METRICS:
            comps.append(
                growth_stats.compare(
                    f"{arm} - {baseline}",
                    metric,
                    [data[arm][s][metric] for s in seeds],
                    [data[baseline][s][metric] for s in seeds],
                    lower_is_better=False,
                )
            )
    return growth_stats.finish(comps)


def kept_tail(path: str) -> list[str]:
    """Lines of an existing report.md below its figure link (sections added by hand), else []."""
    if not os.path.isfile(path):
        return []
    with open(path) as fh:
        lines = fh.read().split("\n")
    return lines[lines.index(FIGURE) + 1 :] if FIGURE in lines else []


def report_lines(comps: list[dict], data: dict, meta: dict, from_summary: bool) -> list[str]:
    a, seeds = meta["settings"], [str(s) for s in meta["seeds"]]
    grows = list(range(a["grow_every"], a["steps"], a["grow_every"]))
    lines = [
        f"# Growth experiment (b): RL with LoRA rank growth, {len(seeds)} seeds, lr {a['lr']}",
        "",
        f"- command: `{meta['command']}`",
        f"- commit: `{meta['commit']}`",
        f"- machine: {meta['machine']}",
        f"- 1 torch thread per run, nice 5, {a.get('jobs', 1)} run(s) at a time"
        + (f"; wall time {meta['wall_s']:.0f} s (shared machine)" if meta.get("wall_s") else ""),
    ]
    if from_summary:
        lines.append(
            "- statistics recomputed by `benchmarks/studies/growth_rl_report.py --from_summary` from the per-seed "
            "values in summary.json (the run's JSON is not in the repository)"
        )
    lines += [
        "",
        f"Default task and model (GRU, reverse_digits), LoRA on `head`, base frozen, {a['steps']} steps, "
        f"growth after steps {grows} (rank {a['initial_rank']} + {a['rank_step']} each), Adam lr {a['lr']}. "
        "Evidence run at one learning rate only (not the 3-lr design of experiment (a): see docs/growth.md). "
        "Statistics: paired differences over seeds, 95% Student t CI of the mean difference "
        "(t(0.975, n-1) sd/sqrt(n); the BCa bootstrap covered only 87-90% at 10 pairs), sign-flip p, Holm "
        "across the comparisons below; verdict at Holm p < 0.05 (higher reward is better); mde80 = the "
        "smallest |mean diff| detectable with 80% power after Holm.",
        "",
    ]
    lines += markdown_table(
        ["comparison", "metric", "pairs", "mean diff", "95% CI", "p (Holm)", "verdict", "mde80"],
        [
            [c["name"], METRICS[c["metric"]], c["n_pairs"], f"{c['diff']:+.4f}"]
            + [f"[{c['ci95'][0]:+.4f}, {c['ci95'][1]:+.4f}]", f"{c['p_holm']:.4f}", c["verdict"], f"{c['mde80']:.4f}"]
            for c in comps
        ],
    )
    spread = [
        [arm]
        + [
            f"{statistics.fmean(xs):.4f} +- {statistics.stdev(xs):.4f}"
            for xs in ([data[arm][s][metric] for s in seeds] for metric in METRICS)
        ]
        for arm in data
    ]
    lines += [""] + markdown_table(["arm", "final train reward", "final val reward", "delta20"], spread)
    return lines + ["", "(mean +- sd over seeds)", "", FIGURE]


def main(argv=None) -> int:
    args = parse_args(argv)
    data, meta, out_dir = load(args)
    if args.baseline not in data:
        print(f"--baseline: {args.baseline!r} is not an arm; allowed: {', '.join(data)}", file=sys.stderr)
        return 2
    comps = comparisons(data, args.baseline, [str(s) for s in meta["seeds"]])
    os.makedirs(out_dir, exist_ok=True)
    report = os.path.join(out_dir, "report.md")
    lines = report_lines(comps, data, meta, bool(args.from_summary))
    lines += kept_tail(report) if args.from_summary else [""]
    rows = [{k: (None if isinstance(c[k], float) and not math.isfinite(c[k]) else c[k]) for k in KEEP} for c in comps]
    with open(os.path.join(out_dir, "summary.json"), "w") as fh:
        json.dump({"comparisons": rows, "meta": meta, "per_seed": data}, fh, indent=1)
    with open(report, "w") as fh:
        fh.write("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
