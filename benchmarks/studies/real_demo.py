"""The real-model demo: `--preset smollm2_demo` on SmolLM2-135M-Instruct (dequantised
Q4_1), before/after greedy validation reward per prompt, 95% bootstrap CI over prompts, per seed.

One process per seed (run them in parallel, 1 torch thread each), then `--report`:

    for s in 0 1 2; do PYTHONPATH=src OMP_NUM_THREADS=1 nice -n 5 python benchmarks/studies/real_demo.py \\
        --seed $s --root runs/real_demo [run flags...] & done; wait
    PYTHONPATH=src python benchmarks/studies/real_demo.py --report --root runs/real_demo --doc docs/real_model

A seed's run is exactly `prorl-bench run --preset smollm2_demo --seed S --outdir ROOT/seedS` plus the
extra flags given (the same Trainer, via engines.local). To keep per-prompt results without a
second evaluation, the script wraps the trainer module's `evaluate` (the greedy validation pass):
the first call is the warm-start evaluation of the untouched model ("before"), the last one the
final step's ("after"); each prompt's `correct` and `format` parts are recomputed from the texts.
The "before" pass is the same for every seed (greedy decoding of the same model on the same
prompts), so the first seed to finish it saves its texts to ROOT/before.json and the others reuse
them (start seeds 1, 2 after that file exists; scores are recomputed from the texts).
Statistics: difference after - before, paired by prompt; 95% percentile bootstrap (5000
resamples of prompts). Writes ROOT/seedS/demo_eval.json; `--report` writes DOC/demo.json,
DOC/demo.md and DOC/demo.png.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np


def run_seed(seed: int, root: str, extra: list[str]) -> None:
    import noma_prorl_bench.training.trainer as trainer_mod
    from noma_prorl_bench.config import parse_config
    from noma_prorl_bench.engines.local import build_trainer, run

    calls = []
    original = trainer_mod.evaluate

    before_path = os.path.join(root, "before.json")  # the untouched model's greedy texts: same for every seed

    def recording_evaluate(policy, task, tok, examples, *a, **kw):
        while not calls and seed != 0 and not os.path.exists(before_path):
            time.sleep(10)  # seed 0 computes it; no duplicate work
        if not calls and os.path.exists(before_path):
            cached = json.load(open(before_path))
            if cached["prompts"] == [e.prompt for e in examples]:
                texts = cached["texts"]
                val = sum(task.reward(s, e.answer) for s, e in zip(texts, examples)) / len(examples)
                from noma_prorl_bench.rollout.sampling import GenStats

                stats = GenStats()
                rows = [task.reward_parts(s, e.answer) for s, e in zip(texts, examples)]
                calls.append(
                    {
                        "val": val,
                        "correct": [r["correct"] for r in rows],
                        "format": [r["format"] for r in rows],
                        "texts": texts[:8],
                        "cached": True,
                    }
                )
                return val, texts, stats
        val, texts, stats = original(policy, task, tok, examples, *a, **kw)
        if not calls:
            os.makedirs(root, exist_ok=True)
            with open(before_path + ".tmp", "w") as fh:
                json.dump({"prompts": [e.prompt for e in examples], "texts": texts}, fh)
            os.replace(before_path + ".tmp", before_path)
        rows = [task.reward_parts(s, e.answer) for s, e in zip(texts, examples)]
        calls.append(
            {
                "val": val,
                "correct": [r["correct"] for r in rows],
                "format": [r["format"] for r in rows],
                "texts": texts[:8],
            }
        )
        return val, texts, stats

    trainer_mod.evaluate = recording_evaluate
    outdir = os.path.join(root, f"seed{seed}")
    cfg = parse_config(
        ["--preset", "smollm2_demo", "--seed", str(seed), "--outdir", outdir, "--overwrite", "--quiet", *extra]
    )
    trainer, buffers = build_trainer(cfg)
    summary = run(cfg, None, trainer, buffers)
    out = {
        "seed": seed,
        "flags": extra,
        "config": cfg.to_dict(),
        "before": calls[0],
        "after": calls[-1],
        "n_evals": len(calls),
        "summary_complete": summary.get("complete", True),
    }
    with open(os.path.join(outdir, "demo_eval.json"), "w") as fh:
        json.dump(out, fh, indent=1)
    b, a = np.mean(calls[0]["correct"]), np.mean(calls[-1]["correct"])
    print(f"seed {seed}: val correct {b:.3f} -> {a:.3f}", flush=True)


def paired_ci(before, after, n_boot: int = 5000, seed: int = 0):
    """(mean diff, lo, hi): 95% percentile bootstrap over prompts of mean(after - before)."""
    d = np.asarray(after, float) - np.asarray(before, float)
    idx = np.random.default_rng(seed).integers(0, len(d), size=(n_boot, len(d)))
    boots = d[idx].mean(1)
    return float(d.mean()), float(np.percentile(boots, 2.5)), float(np.percentile(boots, 97.5))


def mean_ci(x, n_boot: int = 5000, seed: int = 0):
    x = np.asarray(x, float)
    boots = x[np.random.default_rng(seed).integers(0, len(x), size=(n_boot, len(x)))].mean(1)
    return float(x.mean()), float(np.percentile(boots, 2.5)), float(np.percentile(boots, 97.5))


def over_seeds(befores, afters, n_boot: int = 5000, seed: int = 0) -> dict:
    """The lift averaged over training seeds, mean over seeds s and prompts p of (after_sp -
    before_p), with a 95% two-level percentile bootstrap CI (each replicate resamples seeds and,
    independently, prompts; the prompt sample is shared by before and every seed, so the pairing
    by prompt is kept: the CI covers both the training-seed and the prompt-sampling variability),
    and the exact two-sided sign-flip p over the per-seed lifts (analysis/stats.sign_flip_p)."""
    from noma_prorl_bench.analysis.stats import sign_flip_p

    D = np.asarray(afters, float) - np.asarray(befores, float)  # [S, P]
    S, P = D.shape
    rng = np.random.default_rng(seed)
    boots = np.array([D[np.ix_(rng.integers(0, S, S), rng.integers(0, P, P))].mean() for _ in range(n_boot)])
    per_seed = D.mean(1)
    return {
        "n_seeds": S,
        "n_prompts": P,
        "mean_lift": float(D.mean()),
        "ci95": [float(np.percentile(boots, 2.5)), float(np.percentile(boots, 97.5))],
        "sign_flip_p": float(sign_flip_p(per_seed)),
        "seeds_up": int((per_seed > 0).sum()),
        "per_seed": [float(x) for x in per_seed],
    }


def report(root: str, doc: str) -> None:
    seeds = sorted(
        d for d in os.listdir(root) if d.startswith("seed") and os.path.exists(os.path.join(root, d, "demo_eval.json"))
    )
    rows, curves = [], {}
    for d in seeds:
        r = json.load(open(os.path.join(root, d, "demo_eval.json")))
        row = {"seed": r["seed"], "n": len(r["before"]["correct"]), "flags": r["flags"]}
        for part in ("correct", "format"):
            row[f"{part}_before"] = mean_ci(r["before"][part])
            row[f"{part}_after"] = mean_ci(r["after"][part])
            row[f"{part}_diff"] = paired_ci(r["before"][part], r["after"][part])
        rows.append(row)
        ms = [json.loads(ln) for ln in open(os.path.join(root, d, "metrics.jsonl"))]
        curves[r["seed"]] = {
            "step": [m["step"] for m in ms],
            "correct": [m.get("reward/correct") for m in ms],
            "step_s": [m.get("time/step") for m in ms],
        }
    evals = [json.load(open(os.path.join(root, d, "demo_eval.json"))) for d in seeds]
    summary = {
        part: over_seeds([e["before"][part] for e in evals], [e["after"][part] for e in evals])
        for part in ("correct", "format")
    }
    os.makedirs(doc, exist_ok=True)
    json.dump(
        {"rows": rows, "curves": curves, "over_seeds": summary}, open(os.path.join(doc, "demo.json"), "w"), indent=1
    )
    lines = [
        "| seed | n | correct before [95% CI] | correct after [95% CI] | after - before [95% CI] | "
        "format before | format after |",
        "|---|---|---|---|---|---|---|",
    ]
    f = lambda t: f"{t[0]:.3f} [{t[1]:.3f}, {t[2]:.3f}]"  # noqa: E731
    for r in rows:
        lines.append(
            f"| {r['seed']} | {r['n']} | {f(r['correct_before'])} | {f(r['correct_after'])} | "
            f"{f(r['correct_diff'])} | {r['format_before'][0]:.3f} | {r['format_after'][0]:.3f} |"
        )
    c = summary["correct"]
    lines += [
        "",
        f"Over the {c['n_seeds']} seeds: mean lift in `correct` {c['mean_lift']:+.3f} "
        f"[{c['ci95'][0]:+.3f}, {c['ci95'][1]:+.3f}] (95% two-level bootstrap over seeds and prompts), "
        f"{c['seeds_up']} of {c['n_seeds']} seeds up, sign-flip p = {c['sign_flip_p']:.4f} over the per-seed lifts; "
        f"format lift {summary['format']['mean_lift']:+.3f}.",
    ]
    open(os.path.join(doc, "demo.md"), "w").write("\n".join(lines) + "\n")
    print("\n".join(lines))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 2, figsize=(11, 3.8))
    for s, c in curves.items():
        ax[0].plot(c["step"], c["correct"], label=f"seed {s}", alpha=0.8)
    ax[0].set(xlabel="RL step", ylabel="train reward/correct (batch mean)", title="training batches (T=sampling)")
    ax[0].legend()
    x = np.arange(len(rows))
    for k, (key, lab) in enumerate((("correct_before", "before"), ("correct_after", "after"))):
        m = np.array([r[key][0] for r in rows])
        err = np.array([[r[key][0] - r[key][1], r[key][2] - r[key][0]] for r in rows]).T
        ax[1].bar(x + 0.38 * k, m, 0.38, yerr=err, capsize=3, label=lab)
    ax[1].set_xticks(x + 0.19, [str(r["seed"]) for r in rows])
    ax[1].set(
        xlabel="training seed", ylabel="greedy val correct (n prompts)", title="validation before / after, 95% CI"
    )
    ax[1].legend()
    fig.tight_layout()
    fig.savefig(os.path.join(doc, "demo.png"), dpi=110)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--root", default="runs/real_demo")
    p.add_argument("--report", action="store_true")
    p.add_argument("--doc", default="docs/real_model")
    args, extra = p.parse_known_args(argv)
    if args.report:
        report(args.root, args.doc)
    else:
        run_seed(args.seed, args.root, extra)
    return 0


if __name__ == "__main__":
    sys.exit(main())
