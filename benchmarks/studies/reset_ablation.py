"""Reset experiments: the KL-clamp phenomenon and the optimizer-state ablation.

Run:  PYTHONPATH=src python benchmarks/studies/reset_ablation.py [--scratch /tmp/reset_ablation] [--jobs 2]
      (--analyse_only re-reads saved runs; finished runs are skipped unless --fresh)
Defaults: 15 runs x 500 steps at 2 runs at a time. docs/resets.md records the 600-step run with
--with_no_kl (18 runs), with its wall time and load.

Every run is `python -m noma_prorl_bench.run` on reverse_digits with the same settings
(COMMON below, printed with the commands), one torch thread, at most `--jobs` at a time; runs
are saved under --scratch/<condition>/seed<k>/ and everything below is computed from their
metrics.jsonl / events.jsonl only.

(a) Phenomenon: a strong KL to a *fixed* reference (`--kl_estimator k3 --beta B`) against the
    same beta with periodic reference resets (`--reset_every R`, optimizer kept); with
    --with_no_kl also a no-KL run (`--beta 0`) for context.
(b) Ablation at the same cadence R: `--opt_reset keep | hard | soft | asym` (f = 0.2).
    `keep` is the reset run of (a).

Reported per condition, over seeds (mean, std, min..max):
  final val     mean `reward/val` over the evaluations in the last FINAL_WINDOW steps
  final train   mean `reward/mean` (sampled at temperature 1) over the last FINAL_WINDOW steps
  steps-to-thr  first eval step with `reward/val` >= --threshold (runs that never reach it
                are counted, not averaged)
  KL spike      after each reset at step k: max over steps k+1..k+SPIKE_WINDOW of the loss
                estimator's KL to the new reference (`kl/k3`), averaged over resets; and the
                update-size jump: `policy/approx_kl_old` at step k+1 over its mean on steps
                k-9..k (the 10 steps before the reset)
  recover       mean `steps_to_recover` of the run's `recovery` events (train reward back to
                its mean over the 10 steps before the reset)
Figures: docs/figures/resets_phenomenon.png, docs/figures/resets_ablation.png.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FINAL_WINDOW = 100  # final val reward = mean val over the last 100 steps' evaluations
SPIKE_WINDOW = 5  # steps after a reset scanned for the KL spike

COMMON = [
    "--task",
    "reverse_digits",
    "--batch_size",
    "8",
    "--group_size",
    "8",
    "--lr",
    "2e-3",
    "--kl_estimator",
    "k3",
    "--eval_every",
    "20",
    "--n_val",
    "256",
    "--threads",
    "1",
    "--quiet",
]


def conditions(beta: float, every: int, with_no_kl: bool) -> dict[str, list[str]]:
    """Condition name -> flags (on top of COMMON, --steps and --seed)."""
    reset = ["--beta", str(beta), "--reset_every", str(every)]
    return {
        **({"no_kl": ["--beta", "0"]} if with_no_kl else {}),
        "fixed_ref": ["--beta", str(beta)],
        "keep": [*reset, "--opt_reset", "keep"],
        "hard": [*reset, "--opt_reset", "hard"],
        "soft": [*reset, "--opt_reset", "soft", "--soft_factor", "0.2"],
        "asym": [*reset, "--opt_reset", "asym", "--soft_factor", "0.2"],
    }


PHENOMENON = ("no_kl", "fixed_ref", "keep")
ABLATION = ("keep", "hard", "soft", "asym")


# ---------------------------------------------------------------- running


def command(outdir: str, flags: list[str], steps: int, seed: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "noma_prorl_bench.run",
        "--outdir",
        outdir,
        "--overwrite",
        "--steps",
        str(steps),
        "--seed",
        str(seed),
        *COMMON,
        *flags,
    ]


def run_all(jobs: list[tuple[str, list[str]]], n_workers: int, fresh: bool) -> None:
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "src"), OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    todo = [(d, c) for d, c in jobs if fresh or not os.path.isfile(os.path.join(d, "summary.json"))]
    print(
        f"# {len(jobs)} runs, {len(jobs) - len(todo)} already complete, {len(todo)} to run ({n_workers} at a time)",
        flush=True,
    )

    def one(job):
        d, cmd = job
        t0 = time.perf_counter()
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "stderr.log"), "w") as err:
            rc = subprocess.run(cmd, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err).returncode
        print(f"  done rc={rc} {time.perf_counter() - t0:5.1f}s {d}", flush=True)
        if rc != 0:
            raise RuntimeError(f"run failed (rc={rc}): {' '.join(cmd)}")

    with ThreadPoolExecutor(max_workers=n_workers) as pool:
        list(pool.map(one, todo))


# ---------------------------------------------------------------- analysis (saved logs only)


def load(d: str) -> tuple[list[dict], list[dict]]:
    with open(os.path.join(d, "metrics.jsonl")) as f:
        metrics = [json.loads(line) for line in f]
    with open(os.path.join(d, "events.jsonl")) as f:
        events = [json.loads(line) for line in f]
    return metrics, events


def run_stats(metrics: list[dict], events: list[dict], threshold: float) -> dict:
    last = metrics[-1]["step"]
    vals = [(m["step"], m["reward/val"]) for m in metrics if m.get("reward/val") is not None]
    final = statistics.mean(v for s, v in vals if s > last - FINAL_WINDOW)
    reach = next((s for s, v in vals if v >= threshold), None)
    by_step = {m["step"]: m for m in metrics}
    spikes, jumps = [], []
    for e in events:
        if e["event"] != "ref_reset":
            continue
        k = e["step"]
        after = [by_step[j]["kl/k3"] for j in range(k + 1, k + SPIKE_WINDOW + 1) if j in by_step]
        before = [by_step[j]["policy/approx_kl_old"] for j in range(k - 9, k + 1) if j in by_step]
        if after:
            spikes.append(max(after))
        if k + 1 in by_step and before and statistics.mean(before) > 0:
            jumps.append(by_step[k + 1]["policy/approx_kl_old"] / statistics.mean(before))
    recov = [e["steps_to_recover"] for e in events if e["event"] == "recovery" and e["recovered"]]
    return {
        "final": final,
        "reach": reach,
        "recover": statistics.mean(recov) if recov else None,
        "train": statistics.mean(m["reward/mean"] for m in metrics if m["step"] > last - FINAL_WINDOW),
        "spike": statistics.mean(spikes) if spikes else None,
        "jump": statistics.mean(jumps) if jumps else None,
        "n_resets": len(spikes),
        "kl_to_init": statistics.mean(
            m["kl/to_init"] for m in metrics if "kl/to_init" in m and m["step"] > last - FINAL_WINDOW
        ),
    }


def _fmt(xs: list, digits: int = 3) -> str:
    xs = [x for x in xs if x is not None]
    if not xs:
        return "n/a"
    sd = statistics.stdev(xs) if len(xs) > 1 else 0.0
    return f"{statistics.mean(xs):.{digits}f} ± {sd:.{digits}f} ({min(xs):.{digits}f}..{max(xs):.{digits}f})"


def table(stats: dict[str, list[dict]], names: tuple[str, ...], threshold: float) -> str:
    rows = [
        "| condition | final val reward | final train reward | steps to val >= %.2f (reached) "
        "| kl/to_init (final) | post-reset KL spike (max kl/k3, 5 steps) "
        "| update-size jump (approx_kl_old k+1 / before) | steps to recover |" % threshold,
        "|---|---|---|---|---|---|---|---|",
    ]
    for name in names:
        st = stats[name]
        reached = [s["reach"] for s in st if s["reach"] is not None]
        reach = f"{statistics.mean(reached):.0f} ({len(reached)}/{len(st)})" if reached else f"never (0/{len(st)})"
        rows.append(
            f"| {name} | {_fmt([s['final'] for s in st])} | {_fmt([s['train'] for s in st])} | {reach} "
            f"| {_fmt([s['kl_to_init'] for s in st])} | {_fmt([s['spike'] for s in st])} "
            f"| {_fmt([s['jump'] for s in st], 2)} | {_fmt([s['recover'] for s in st], 1)} |"
        )
    return "\n".join(rows)


# ---------------------------------------------------------------- figures


def _curves(runs: list[list[dict]], key: str) -> tuple[list[int], list[float], list[float], list[float]]:
    """Steps where every run has `key`; mean, min, max across runs."""
    per = [{m["step"]: m[key] for m in ms if m.get(key) is not None} for ms in runs]
    steps = sorted(set.intersection(*(set(p) for p in per)))
    cols = [[p[s] for p in per] for s in steps]
    return steps, [statistics.mean(c) for c in cols], [min(c) for c in cols], [max(c) for c in cols]


def _smooth(xs: list[float], w: int) -> list[float]:
    out = []
    for i in range(len(xs)):
        win = xs[max(0, i - w + 1) : i + 1]
        out.append(sum(win) / len(win))
    return out


def _by_phase(runs: list[list[dict]], key: str, every: int) -> tuple[list[int], list[float]]:
    """Mean of `key` at each step k + j after a periodic reset at k (j = 1..every), over resets
    (all but the first `every` steps) and runs: the shape of the KL after a reset."""
    cols: dict[int, list[float]] = {}
    for ms in runs:
        for m in ms:
            if m["step"] > every and m.get(key) is not None:
                j = (m["step"] - 1) % every + 1
                cols.setdefault(j, []).append(m[key])
    js = sorted(cols)
    return js, [statistics.mean(cols[j]) for j in js]


def plot(
    all_metrics: dict[str, list[list[dict]]],
    names: tuple[str, ...],
    path: str,
    every: int,
    title: str,
    phase_panel: bool = False,
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    panels = [
        ("reward/val", "validation reward (greedy)", 1),
        ("kl/k3", "KL to pi_ref (kl/k3, 10-step mean)", 10),
        ("kl/to_init", "KL to the initial policy (kl/to_init)", 1),
    ]
    if phase_panel:
        ax = axes[1]
        for name in names:
            js, mean = _by_phase(all_metrics[name], "kl/k3", every)
            ax.plot(js, mean, label=name, lw=1.5)
        ax.set_title("KL to pi_ref (kl/k3) vs steps since the reset (mean over resets, seeds)", fontsize=10)
        ax.set_xlabel("steps after the reset")
        panels[1] = None
    for ax, panel in zip(axes, panels):
        if panel is None:
            continue
        key, label, w = panel
        for name in names:
            steps, mean, lo, hi = _curves(all_metrics[name], key)
            (line,) = ax.plot(steps, _smooth(mean, w), label=name, lw=1.5)
            ax.fill_between(steps, _smooth(lo, w), _smooth(hi, w), color=line.get_color(), alpha=0.15, lw=0)
        if key == "kl/k3":
            ax.set_yscale("log")
        if every:
            for x in range(every, max(steps) + 1, every):
                ax.axvline(x, color="grey", lw=0.5, ls=":")
        ax.set_title(label, fontsize=10)
        ax.set_xlabel("RL step")
    axes[0].legend(fontsize=8)
    fig.suptitle(title + "  (line: mean over seeds; band: min..max; dotted: resets)", fontsize=10)
    fig.tight_layout()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ---------------------------------------------------------------- main


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scratch", default="/tmp/reset_ablation", help="where the runs are saved")
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--beta", type=float, default=1.0)
    ap.add_argument("--reset_every", type=int, default=50)
    ap.add_argument("--threshold", type=float, default=0.5, help="val reward for steps-to-threshold")
    ap.add_argument("--jobs", type=int, default=2, help="runs in parallel (one thread each)")
    ap.add_argument("--figdir", default=os.path.join(ROOT, "docs", "figures"))
    ap.add_argument("--with_no_kl", action="store_true", help="add the beta=0 context runs (3 more)")
    ap.add_argument("--fresh", action="store_true", help="re-run finished runs too")
    ap.add_argument("--analyse_only", action="store_true", help="only read saved runs")
    args = ap.parse_args(argv)

    conds = conditions(args.beta, args.reset_every, args.with_no_kl)
    phenomenon = tuple(n for n in PHENOMENON if n in conds)
    jobs, dirs = [], {}
    for name, flags in conds.items():
        for seed in range(args.seeds):
            d = os.path.join(args.scratch, name, f"seed{seed}")
            dirs.setdefault(name, []).append(d)
            jobs.append((d, command(d, flags, args.steps, seed)))
    print("# commands (run from the repository root with PYTHONPATH=src):")
    for _, cmd in jobs:
        print("  " + " ".join(["python", *cmd[1:]]))
    t0 = time.perf_counter()
    if not args.analyse_only:
        run_all(jobs, args.jobs, args.fresh)
    print(f"# wall time of the runs: {time.perf_counter() - t0:.0f}s")

    all_metrics, stats = {}, {}
    for name, ds in dirs.items():
        loaded = [load(d) for d in ds]
        all_metrics[name] = [m for m, _ in loaded]
        stats[name] = [run_stats(m, e, args.threshold) for m, e in loaded]
    warm = statistics.mean(
        json.load(open(os.path.join(d, "summary.json")))["warmstart_val_reward"] for d in dirs["keep"]
    )
    print(
        f"\n# warm-start val reward (mean over seeds): {warm:.3f}; final = mean val over the last "
        f"{FINAL_WINDOW} steps; {args.seeds} seeds; mean ± std (min..max)\n"
    )
    print(f"## (a) phenomenon: fixed reference vs periodic resets (beta {args.beta}, k3, every {args.reset_every})\n")
    print(table(stats, phenomenon, args.threshold))
    print(f"\n## (b) optimizer state at the reset (every {args.reset_every}, beta {args.beta})\n")
    print(table(stats, ABLATION, args.threshold))
    plot(
        all_metrics,
        phenomenon,
        os.path.join(args.figdir, "resets_phenomenon.png"),
        args.reset_every,
        f"(a) beta={args.beta} k3: fixed reference vs reset every {args.reset_every} (keep); no_kl: beta=0",
    )
    plot(
        all_metrics,
        ABLATION,
        os.path.join(args.figdir, "resets_ablation.png"),
        args.reset_every,
        f"(b) reset every {args.reset_every}, beta={args.beta} k3: optimizer state keep / hard / soft / asym",
        phase_panel=True,
    )
    print(f"\n# figures: {args.figdir}/resets_phenomenon.png, resets_ablation.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
