"""Equal learning in bf16: the real-model demo trained with `--dtype bf16_mixed` against the same
demo in float32, paired by training seed.

Both arms are `benchmarks/studies/real_demo.py` roots of the demo recipe (`--preset smollm2_demo --steps 16
--batch_size 4 --group_size 4 --eval_every 16`, as docs/real_model/demo.json), one per dtype, made on
the same machine (or, with `--float32 docs/real_model/demo.json`, against the recorded float32 demo):

    for d in float32 bf16_mixed; do for s in 0 1 2 3 4 5 6 7 8 9; do
        PYTHONPATH=src OMP_NUM_THREADS=1 python benchmarks/studies/real_demo.py --seed $s --root runs/real_demo_$d \\
            --steps 16 --batch_size 4 --group_size 4 --eval_every 16 --dtype $d; done; done   # 2 at a time
    PYTHONPATH=src python benchmarks/studies/real_bf16.py --float32 runs/real_demo_float32 \\
        --bf16 runs/real_demo_bf16_mixed --out docs/real_model/bf16

The question asked (one, so no family correction): does a seed learn as much in bf16 as in
float32? Its unit is the per-seed lift of greedy correctness on the 200 held-out prompts (after
RL minus the untouched model's score in the same dtype); the effect is the mean of the per-seed
differences of lifts (bf16 - float32) with its Student t 95% interval, the exact sign-flip p and
mde80 (analysis/stats.py: the suite's statistics). Final correctness is reported beside it; it
differs from the lift difference by the constant before-RL gap of the two dtypes. Writes
OUT/bf16.json, OUT/bf16.md and OUT/bf16.png.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "src"))


def load_root(root: str) -> dict[int, dict]:
    """{seed: {before, after, flags, dtype}} from ROOT/seed*/demo_eval.json (per-prompt means)."""
    out = {}
    for d in sorted(os.listdir(root)):
        path = os.path.join(root, d, "demo_eval.json")
        if d.startswith("seed") and os.path.exists(path):
            r = json.load(open(path))
            rows = [json.loads(ln) for ln in open(os.path.join(root, d, "metrics.jsonl"))]
            first, last = rows[0], rows[-1]  # the step-0 row (before RL) and the final step
            form = {
                f"{k}_{w}": row.get(f"reward/val_{k}")
                for k in ("answer_form", "correct_in_form")
                for w, row in (("before", first), ("after", last))
            }
            out[int(r["seed"])] = {
                **form,
                "before": float(np.mean(r["before"]["correct"])),
                "after": float(np.mean(r["after"]["correct"])),
                "flags": r["flags"],
                "n_prompts": len(r["after"]["correct"]),
                "dtype": r["config"]["dtype"],
                "complete": r["summary_complete"],
            }
    return out


def load_float32(path: str) -> dict[int, dict]:
    """{seed: {before, after, flags}} from a real_demo.py root, or from the demo's demo.json (rows:
    [mean, lo, hi] per part)."""
    if os.path.isdir(path):
        runs = load_root(path)
        bad = [s for s, r in runs.items() if r["dtype"] != "float32" or not r["complete"]]
        if bad:
            raise SystemExit(f"seeds {bad} in {path} are not complete float32 runs")
        return runs
    rows = json.load(open(path))["rows"]
    return {
        int(r["seed"]): {
            "before": r["correct_before"][0],
            "after": r["correct_after"][0],
            "flags": r["flags"],
            "n_prompts": r["n"],
        }
        for r in rows
    }


def load_previous(path: str) -> dict[int, float]:
    """{seed: bf16 lift} from an earlier bf16.json of this script (an earlier bf16 code path)."""
    return {int(r["seed"]): r["bf16_after"] - r["bf16_before"] for r in json.load(open(path))["per_seed"]}


# Speed switches the bf16 arm may add (--speed_flags): each samples the same distribution and
# computes the same function as without it (other float rounding, other tokens per seed)
SPEED_FLAGS = {"--sample_draw": 1, "--shared_prompt": 0}  # flag -> how many values follow it


def split_speed_flags(flags: list[str]) -> tuple[list[str], list[str]]:
    """flags -> (the recipe without SPEED_FLAGS, the speed flags with their values)."""
    recipe, speed, i = [], [], 0
    while i < len(flags):
        n = SPEED_FLAGS.get(flags[i])
        if n is None:
            recipe.append(flags[i])
            i += 1
        else:
            speed += flags[i : i + 1 + n]
            i += 1 + n
    return recipe, speed


def compare(
    f32: dict[int, dict], b16: dict[int, dict], previous: dict[int, float] | None = None, speed_flags: bool = False
) -> dict:
    from noma_prorl_bench.analysis.stats import holm, mde80, sign_flip_p, t_ci

    seeds = sorted(set(f32) & set(b16))
    if len(seeds) < 2:
        raise SystemExit(f"need >= 2 seeds in both arms, have {seeds}")

    def recipe(flags: list[str]) -> list[str]:  # the flags bar --dtype X
        return [f for i, f in enumerate(flags) if f != "--dtype" and (i == 0 or flags[i - 1] != "--dtype")]

    speed: set[tuple[str, ...]] = set()
    for s in seeds:  # the same recipe on both sides, bar the dtype (and, with speed_flags, bf16's speed switches)
        b16_flags = b16[s]["flags"]
        if speed_flags:
            b16_flags, extra_flags = split_speed_flags(b16_flags)
            speed.add(tuple(extra_flags))
        if recipe(f32[s]["flags"]) != recipe(b16_flags):
            raise SystemExit(f"seed {s}: flags differ: {f32[s]['flags']} vs {b16[s]['flags']}")
    if len(speed) > 1:
        raise SystemExit(f"the bf16 seeds differ in their speed flags: {sorted(speed)}")
    bf16_speed_flags = list(speed.pop()) if speed else []
    lift = {
        k: np.array([a[s]["after"] - a[s]["before"] for s in seeds]) for k, a in (("float32", f32), ("bf16_mixed", b16))
    }
    after = {k: np.array([a[s]["after"] for s in seeds]) for k, a in (("float32", f32), ("bf16_mixed", b16))}

    def row(d: np.ndarray) -> dict:
        lo, hi = t_ci(d)
        return {
            "mean": float(d.mean()),
            "ci95": [lo, hi],
            "sign_flip_p": sign_flip_p(d),
            "sd": float(d.std(ddof=1)),
            "mde80": mde80(float(d.std(ddof=1)), len(d)),
            "positive": int((d > 0).sum()),
            "negative": int((d < 0).sum()),
        }

    def form(a: dict) -> dict | None:  # answer form and correctness within it, mean over seeds
        keys = ("answer_form_before", "answer_form_after", "correct_in_form_before", "correct_in_form_after")
        if any(a[s].get(k) is None for s in seeds for k in keys):
            return None
        return {k: float(np.mean([a[s][k] for s in seeds])) for k in keys}

    extra = {}
    if previous is not None:  # the second question: this bf16 code path against the earlier one, same seeds
        both = [s for s in seeds if s in previous]
        if len(both) < 2:
            raise SystemExit(f"need >= 2 seeds shared with the previous bf16 file, have {both}")
        d = np.array([b16[s]["after"] - b16[s]["before"] - previous[s] for s in both])
        extra = {
            "previous_question": "lift in bf16_mixed now - lift in bf16_mixed in the previous file (per seed)",
            "previous_seeds": both,
            "lift_vs_previous": row(d),
            "previous_lift": [previous[s] for s in both],
        }
    if extra:  # two questions: Holm over their sign-flip p-values
        p_holm = holm(
            [row(lift["bf16_mixed"] - lift["float32"])["sign_flip_p"], extra["lift_vs_previous"]["sign_flip_p"]]
        )
        extra["p_holm"] = {"lift_diff": p_holm[0], "lift_vs_previous": p_holm[1]}
    return {
        **extra,
        "bf16_speed_flags": bf16_speed_flags,
        "seeds": seeds,
        "n": len(seeds),
        "form": {"float32": form(f32), "bf16_mixed": form(b16)},
        "before": {
            k: sorted({round(a[s]["before"], 6) for s in seeds}) for k, a in (("float32", f32), ("bf16_mixed", b16))
        },
        "lift": {k: row(v) for k, v in lift.items()},
        "question": "lift in bf16_mixed - lift in float32 (per seed)",
        "lift_diff": row(lift["bf16_mixed"] - lift["float32"]),
        "after_diff": row(after["bf16_mixed"] - after["float32"]),
        "per_seed": [
            {
                "seed": s,
                "float32_before": f32[s]["before"],
                "float32_after": f32[s]["after"],
                "bf16_before": b16[s]["before"],
                "bf16_after": b16[s]["after"],
            }
            for s in seeds
        ],
    }


def markdown(res: dict) -> str:
    ci = lambda r: f"{r['mean']:+.3f} [{r['ci95'][0]:+.3f}, {r['ci95'][1]:+.3f}]"  # noqa: E731
    d = res["lift_diff"]
    verdict = (
        "no detectable difference"
        if d["sign_flip_p"] >= 0.05
        else ("bf16 learns more" if d["mean"] > 0 else "bf16 learns less")
    )
    lines = [
        "# Equal learning in bf16 on the real model",
        "",
        "Regime: the demo recipe (`--preset smollm2_demo`: SmolLM2-135M-Instruct, dequantised Q4_1, LoRA r8 on "
        "q/k/v/o, `rg:basic_arithmetic`, k3 beta 0.01, lr 2e-4, B 4 x G 4, 32 new tokens, 16 RL steps), greedy "
        "correctness on 200 held-out prompts, float32 vs `--dtype bf16_mixed`"
        + (f" with `{' '.join(res['bf16_speed_flags'])}`" if res.get("bf16_speed_flags") else "")
        + ", paired by seed (`benchmarks/studies/real_bf16.py`; machine and timings: docs/performance.md, bf16 section).",
        "",
        f"Paired by training seed, n = {res['n']}: lift (greedy correctness after 16 RL steps minus the "
        f"untouched model's, 200 prompts) float32 {ci(res['lift']['float32'])}, bf16_mixed "
        f"{ci(res['lift']['bf16_mixed'])} (95% t over seeds).",
        "",
        f"**bf16 - float32 lift: {ci(d)}**, sign-flip p = {d['sign_flip_p']:.3f}: {verdict} "
        f"(mde80 {d['mde80']:.3f}; bf16 ahead on {d['positive']}, behind on {d['negative']} seeds). "
        f"Final correctness bf16 - float32: {ci(res['after_diff'])} (before RL: float32 "
        f"{res['before']['float32']}, bf16 {res['before']['bf16_mixed']}).",
        "",
        *previous_lines(res),
        *form_lines(res),
        "| seed | float32 before -> after | bf16_mixed before -> after | lift bf16 - float32 |",
        "|---|---|---|---|",
    ]
    for r in res["per_seed"]:
        lines.append(
            f"| {r['seed']} | {r['float32_before']:.3f} -> {r['float32_after']:.3f} | "
            f"{r['bf16_before']:.3f} -> {r['bf16_after']:.3f} | "
            f"{(r['bf16_after'] - r['bf16_before']) - (r['float32_after'] - r['float32_before']):+.3f} |"
        )
    lines += ["", "![Lift per seed, float32 and bf16_mixed, with 95% t intervals](bf16.png)"]
    return "\n".join(lines) + "\n"


def previous_lines(res: dict) -> list[str]:
    """The bf16 code path against the previous one (`--previous`), when asked."""
    d = res.get("lift_vs_previous")
    if d is None:
        return []
    word = "no detectable difference" if d["sign_flip_p"] >= 0.05 else ("more" if d["mean"] > 0 else "less")
    return [
        f"Against the previous bf16 code path (`--previous`, same seeds, n = {len(res['previous_seeds'])}): "
        f"lift now - lift then {d['mean']:+.3f} [{d['ci95'][0]:+.3f}, {d['ci95'][1]:+.3f}], sign-flip p = "
        f"{d['sign_flip_p']:.3f}: {word} (mde80 {d['mde80']:.3f}; ahead on {d['positive']}, behind on "
        f"{d['negative']} seeds).",
        *(
            [
                f"Two questions, Holm-adjusted sign-flip p: bf16 - float32 {res['p_holm']['lift_diff']:.3f}, "
                f"now - then {res['p_holm']['lift_vs_previous']:.3f}."
            ]
            if "p_holm" in res
            else []
        ),
        "",
    ]


def form_lines(res: dict) -> list[str]:
    """Form vs correctness: how often the answer has the form the extractor reads, and the
    correctness within it (reward/val_answer_form, reward/val_correct_in_form), before -> after."""
    parts = []
    for k, f in res["form"].items():
        if f:
            parts.append(
                f"{k}: answer form {f['answer_form_before']:.3f} -> {f['answer_form_after']:.3f}, "
                f"correct within the form {f['correct_in_form_before']:.3f} -> {f['correct_in_form_after']:.3f}"
            )
    return ["Form vs correctness (mean over seeds): " + "; ".join(parts) + ".", ""] if parts else []


def figure(res: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.2, 3.8))
    labels: dict[float, list[str]] = {}  # seeds ending at the same lift share one label
    for r in res["per_seed"]:
        ys = [r["float32_after"] - r["float32_before"], r["bf16_after"] - r["bf16_before"]]
        ax.plot([0, 1], ys, "-o", color="0.6", lw=1, ms=4)
        labels.setdefault(round(ys[1], 4), []).append(str(r["seed"]))
    for y, seeds in labels.items():
        ax.annotate("seed " + ", ".join(seeds), (1.03, y), fontsize=7, va="center")
    for x, k, m in ((0, "float32", "s"), (1, "bf16_mixed", "D")):
        row = res["lift"][k]
        ax.errorbar(
            [x - 0.08],
            [row["mean"]],
            yerr=[[row["mean"] - row["ci95"][0]], [row["ci95"][1] - row["mean"]]],
            fmt=m,
            color="k",
            capsize=4,
            label=f"{k}: mean, 95% t CI",
        )
    ax.axhline(0, color="0.8", lw=0.8)
    ax.set_xticks([0, 1], ["float32", "bf16_mixed"])
    ax.set_xlim(-0.3, 1.4)
    ax.set(
        ylabel="lift in greedy correctness (200 prompts)", title=f"Demo lift per seed, float32 vs bf16 (n = {res['n']})"
    )
    ax.legend(fontsize=7, loc="lower center")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bf16", default="runs/real_demo_bf16", help="real_demo.py root of the bf16_mixed seeds")
    p.add_argument(
        "--float32",
        default="docs/real_model/demo.json",
        help="the float32 seeds: a real_demo.py root, or the float32 demo's demo.json",
    )
    p.add_argument("--out", default="docs/real_model/bf16")
    p.add_argument(
        "--previous", default=None, help="an earlier bf16.json of this script: also compare the two bf16 code paths"
    )
    p.add_argument(
        "--speed_flags",
        action="store_true",
        help="the bf16 seeds may add --sample_draw X and --shared_prompt (same distribution, same function)",
    )
    a = p.parse_args(argv)
    b16 = load_root(a.bf16)
    bad = [s for s, r in b16.items() if r["dtype"] != "bf16_mixed" or not r["complete"]]
    if bad:
        raise SystemExit(f"seeds {bad} in {a.bf16} are not complete bf16_mixed runs")
    res = compare(
        load_float32(a.float32), b16, load_previous(a.previous) if a.previous else None, speed_flags=a.speed_flags
    )
    os.makedirs(a.out, exist_ok=True)
    json.dump(res, open(os.path.join(a.out, "bf16.json"), "w"), indent=1)
    md = markdown(res)
    open(os.path.join(a.out, "bf16.md"), "w").write(md)
    figure(res, os.path.join(a.out, "bf16.png"))
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
