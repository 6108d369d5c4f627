"""Paired report for ``growth_rl.py`` results: report.md + summary.json (+ the script's figure).

    PYTHONPATH=src python benchmarks/growth_rl_report.py --json runs/growth_rl.json --out_dir docs/growth/rl \
        --command "..." --commit <sha>

Per seed (all arms share the seed, and are bit-identical up to the first growth): ``final_train``
= mean train reward of the last 20 steps, ``final_val`` = last greedy validation reward,
``delta20`` = mean over the run's growths of (train reward over the 20 steps after a growth minus
the level over the 10 steps before it). Every arm is compared with ``--baseline`` as paired
differences (growth_stats.py: BCa bootstrap CI, sign-flip p, Holm across the report; higher is
better for all three metrics).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

import growth_stats
from growth_xor_report import machine

FINAL, PRE, POST = 20, 10, 20
METRICS = {"final_train": "final train reward (last 20 steps)", "final_val": "final greedy val reward",
           "delta20": "delta20 (post - pre growth, mean over growths)"}


def per_seed(run: dict, grows: list[int]) -> dict:
    r = run["reward"]
    deltas = [statistics.fmean(r[g:g + POST]) - statistics.fmean(r[g - PRE:g]) for g in grows]
    return {"final_train": statistics.fmean(r[-FINAL:]), "final_val": run["val"][-1][1],
            "delta20": statistics.fmean(deltas)}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", required=True)
    p.add_argument("--out_dir", required=True)
    p.add_argument("--baseline", default="reset")
    p.add_argument("--command", default="")
    p.add_argument("--commit", default="")
    p.add_argument("--wall_s", type=float, default=None)
    args = p.parse_args(argv)
    with open(args.json) as fh:
        saved = json.load(fh)
    a = saved["args"]
    grows = list(range(a["grow_every"], a["steps"], a["grow_every"]))
    arms = a["arms"].split(",")
    seeds = sorted({r["seed"] for r in saved["results"]})
    data = {arm: {s: per_seed(next(r for r in saved["results"] if r["arm"] == arm and r["seed"] == s), grows)
                  for s in seeds} for arm in arms}
    comps = []
    for arm in arms:
        if arm == args.baseline:
            continue
        for metric in METRICS:
            comps.append(growth_stats.compare(f"{arm} - {args.baseline}", metric,
                                              [data[arm][s][metric] for s in seeds],
                                              [data[args.baseline][s][metric] for s in seeds], lower_is_better=False))
    growth_stats.finish(comps)
    os.makedirs(args.out_dir, exist_ok=True)
    meta = {"command": args.command, "commit": args.commit, "machine": machine(), "seeds": seeds, "settings": a,
            "wall_s": args.wall_s}
    keep = ("name", "metric", "n_pairs", "diff", "ci95", "p_holm", "verdict", "arm_mean", "base_mean", "p")
    with open(os.path.join(args.out_dir, "summary.json"), "w") as fh:
        json.dump({"comparisons": [{k: c[k] for k in keep} for c in comps], "meta": meta,
                   "per_seed": data}, fh, indent=1)
    lines = [f"# Growth experiment (b): RL with LoRA rank growth, {len(seeds)} seeds, lr {a['lr']}", "",
             f"- command: `{args.command}`", f"- commit: `{args.commit}`", f"- machine: {meta['machine']}",
             f"- 1 torch thread per run, nice 5, {a.get('jobs', 1)} run(s) at a time"
             + (f"; wall time {args.wall_s:.0f} s (shared machine)" if args.wall_s else ""), "",
             f"Default task and model (GRU, reverse_digits), LoRA on `head`, base frozen, {a['steps']} steps, "
             f"growth after steps {grows} (rank {a['initial_rank']} + {a['rank_step']} each), Adam lr {a['lr']}. "
             "Evidence run at one learning rate only (not the 3-lr design of experiment (a): see docs/growth.md). "
             "Statistics: paired differences over seeds, 95% BCa bootstrap CI, sign-flip p, Holm across the "
             "comparisons below; verdict at Holm p < 0.05 (higher reward is better).", "",
             "| comparison | metric | pairs | mean diff | 95% CI | p (Holm) | verdict |", "|---|---|---|---|---|---|---|"]
    for c in comps:
        lines.append(f"| {c['name']} | {METRICS[c['metric']]} | {c['n_pairs']} | {c['diff']:+.4f} | "
                     f"[{c['ci95'][0]:+.4f}, {c['ci95'][1]:+.4f}] | {c['p_holm']:.4f} | {c['verdict']} |")
    lines += ["", "| arm | final train reward | final val reward | delta20 |", "|---|---|---|---|"]
    for arm in arms:
        cells = []
        for metric in METRICS:
            xs = [data[arm][s][metric] for s in seeds]
            cells.append(f"{statistics.fmean(xs):.4f} +- {statistics.stdev(xs):.4f}")
        lines.append(f"| {arm} | " + " | ".join(cells) + " |")
    lines += ["", "(mean +- sd over seeds)", "", "![growth_rl](growth_rl.png)", ""]
    with open(os.path.join(args.out_dir, "report.md"), "w") as fh:
        fh.write("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
