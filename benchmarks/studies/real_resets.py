"""The reset question on the real model: figures and the form / correctness split of a
`prorl-bench suite --preset real_resets` directory, and the pilot's curves. Reads saved logs only
(metrics.jsonl, events.jsonl of each run).

    python benchmarks/studies/real_resets.py pilot RUN_DIR [RUN_DIR ...] --out docs/real_model/resets/pilot
    python benchmarks/studies/real_resets.py suite SUITE_DIR --out docs/real_model/resets

`pilot` writes OUT/pilot.json (per-step kl/k3, beta * kl/k3, loss/pg, train reward, validation) and
OUT/pilot.png. `suite` writes OUT/form.json, OUT/form.md (per arm: greedy correctness before and
after, split into the answer form and correctness within it; the same split of each reset arm's
difference from no reset and hard vs keep, paired by seed, t intervals; a per-seed table) and OUT/curves.png (validation correctness
and KL to the reference per step, mean over seeds, resets marked).

Split (tasks/reasoning_gym.py: `answer_form`, `correct_in_form` are evaluation metrics):
correct = form * cgf + out, cgf = correct_in_form / form (correct given the form), out = correct -
correct_in_form (correct although the response does not end in its answer). For a change
before -> after: d correct = d form * cgf_before  [form]  + form_after * d cgf  [within form]
+ d out  [outside the form], an identity.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys

import numpy as np

ARMS = ("real-none", "real-keep", "real-hard")  # the preset's order (analysis/matrix.py)
PAIRS = (("real-keep", "real-none"), ("real-hard", "real-none"), ("real-hard", "real-keep"))
STYLES = ("-", "--", "-.", ":")
VAL = ("reward/val_correct", "reward/val_answer_form", "reward/val_correct_in_form")
PARTS = ("correct", "answer_form", "correct_in_form")  # summary.json "validation" keys (before / after)
TRAIN = ("reward/mean", "kl/k3", "loss/pg", "loss/kl", "kl/beta", "policy/entropy", "response/len_mean")


def read_run(run_dir: str) -> dict:
    """{'steps', per-step TRAIN keys, 'val': {step: {key: value}}, 'resets': [steps], 'config'}."""
    rows = [json.loads(x) for x in open(os.path.join(run_dir, "metrics.jsonl")) if x.strip()]
    rows = list({r["step"]: r for r in rows}.values())  # a resumed run may repeat a step
    out = {
        "steps": [r["step"] for r in rows],
        "val": {},
        "config": json.load(open(os.path.join(run_dir, "config.json"))),
    }
    for k in TRAIN:
        out[k] = [r.get(k) for r in rows]
    for r in rows:
        if "reward/val" in r:
            out["val"][r["step"]] = {k: r[k] for k in ("reward/val", *VAL) if k in r}
    events = [json.loads(x) for x in open(os.path.join(run_dir, "events.jsonl")) if x.strip()]
    out["resets"] = [e["step"] for e in events if e.get("event") == "ref_reset"]
    for e in events:  # the warm-start evaluation (step 0)
        if e.get("event") == "warmstart" and "val_reward" in e:
            out["val"].setdefault(0, {"reward/val": e["val_reward"]})
    return out


def split(validation: dict) -> dict:
    """The identity of the module docstring for a run's summary.json "validation" (before / after)."""
    c0, f0, i0 = (validation[k]["before"]["mean"] for k in PARTS)
    c1, f1, i1 = (validation[k]["after"]["mean"] for k in PARTS)
    g0, g1 = (i0 / f0 if f0 else 0.0), (i1 / f1 if f1 else 0.0)
    return {
        "correct": [c0, c1],
        "form": [f0, f1],
        "correct_given_form": [g0, g1],
        "d_correct": c1 - c0,
        "part_form": (f1 - f0) * g0,
        "part_within_form": f1 * (g1 - g0),
        "part_outside_form": (c1 - i1) - (c0 - i0),
    }


def t_interval(d: list[float]) -> list[float]:
    from scipy import stats

    d = np.asarray(d, float)
    if len(d) < 2:
        return [float("nan"), float("nan")]
    half = stats.t.ppf(0.975, len(d) - 1) * d.std(ddof=1) / np.sqrt(len(d))
    return [float(d.mean() - half), float(d.mean() + half)]


def _arm_order(arms) -> list[str]:
    return sorted(arms, key=lambda a: (ARMS.index(a) if a in ARMS else len(ARMS), a))


def suite_split(suite: str) -> dict:
    """Per arm and seed: the split of the lift (last evaluation vs step 0); for each pair of PAIRS
    present: each part's difference, paired by seed (the seeds both arms finished)."""
    runs = {}
    for name in sorted(os.listdir(suite)):
        m = re.fullmatch(r"(real-\w+)_s(\d+)", name)
        p = os.path.join(suite, name)
        summary = os.path.join(p, "summary.json")
        if m and os.path.isfile(summary):
            validation = json.load(open(summary)).get("validation", {})
            if all(k in validation for k in PARTS):
                last = [json.loads(x) for x in open(os.path.join(p, "metrics.jsonl")) if x.strip()][-1]
                runs.setdefault(m.group(1), {})[int(m.group(2))] = {
                    **split(validation),
                    "kl_to_init_after": last.get("kl/to_init"),
                }
    keys = ("d_correct", "part_form", "part_within_form", "part_outside_form")
    arms = {
        a: {
            "seeds": sorted(by),
            **{k: float(np.mean([by[s][k] for s in by])) for k in keys},
            "form_after": float(np.mean([by[s]["form"][1] for s in by])),
            "cgf_after": float(np.mean([by[s]["correct_given_form"][1] for s in by])),
            "kl_to_init_after": [by[s]["kl_to_init_after"] for s in sorted(by)],
            "before": next(iter(by.values())),
        }
        for a, by in ((a, runs[a]) for a in _arm_order(runs))
    }
    diffs = {}
    for a, b in PAIRS:
        common = sorted(set(runs.get(a, {})) & set(runs.get(b, {})))
        if len(common) >= 2:
            diffs[f"{a} - {b}"] = {
                "seeds": common,
                **{
                    k: {
                        "mean": float(np.mean([runs[a][s][k] - runs[b][s][k] for s in common])),
                        "ci95_t": t_interval([runs[a][s][k] - runs[b][s][k] for s in common]),
                    }
                    for k in keys
                },
            }
    return {"arms": arms, "paired": diffs, "per_seed": runs}


def _mean_curve(runs: list[dict], key: str) -> tuple[list, list]:
    n = min(len(r["steps"]) for r in runs)
    return runs[0]["steps"][:n], list(np.mean([[v or 0.0 for v in r[key][:n]] for r in runs], axis=0))


def _val_curve(runs: list[dict]) -> tuple[list, list]:
    steps = sorted(set.intersection(*[set(r["val"]) for r in runs]))
    return steps, [float(np.mean([r["val"][s]["reward/val"] for r in runs])) for s in steps]


def plot(groups: dict[str, list[dict]], path: str, title: str) -> None:
    """Three panels: validation reward (greedy correct), KL to the reference (k3), train reward; one
    line per group (mean over its runs), dotted verticals at the first group's resets."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(12, 3.4))
    axes = fig.subplots(1, 3)
    for i, (label, runs) in enumerate(groups.items()):
        color, ls = f"C{i}", STYLES[i % len(STYLES)]
        axes[0].plot(*_val_curve(runs), "o", ls=ls, color=color, label=f"{label} (n={len(runs)})")
        axes[1].plot(*_mean_curve(runs, "kl/k3"), ls=ls, color=color)
        axes[2].plot(*_mean_curve(runs, "reward/mean"), ls=ls, color=color)
        for s in runs[0]["resets"]:
            for ax in axes[1:]:
                ax.axvline(s, color=color, ls=":", lw=0.8)
    for ax, t in zip(axes, ("greedy val correct (mean over seeds)", "k3 KL to the reference", "train reward")):
        ax.set_title(t, fontsize=9)
        ax.set_xlabel("RL step")
    axes[0].legend(fontsize=7)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def pilot(dirs: list[str], out: str) -> None:
    os.makedirs(out, exist_ok=True)
    runs = {os.path.basename(d.rstrip("/")): read_run(d) for d in dirs}
    rows = {}
    for name, r in runs.items():
        beta = r["config"]["beta"]
        rows[name] = {
            "lr": r["config"]["lr"],
            "beta": beta,
            "seed": r["config"]["seed"],
            "steps": r["steps"],
            "kl_k3": r["kl/k3"],
            "beta_kl": [beta * (v or 0.0) for v in r["kl/k3"]],
            "loss_pg": r["loss/pg"],
            "train_reward": r["reward/mean"],
            "entropy": r["policy/entropy"],
            "val": {str(k): v for k, v in sorted(r["val"].items())},
        }
    json.dump(rows, open(os.path.join(out, "pilot.json"), "w"), indent=1)
    plot(
        {n: [r] for n, r in runs.items()},
        os.path.join(out, "pilot.png"),
        "pilot: SmolLM2-135M-Instruct + LoRA r8, rg:basic_arithmetic, fixed reference (no reset)",
    )


def suite(root: str, out: str) -> None:
    os.makedirs(out, exist_ok=True)
    res = suite_split(root)
    json.dump(res, open(os.path.join(out, "form.json"), "w"), indent=1)
    lines = [
        "| arm | seeds | correct before -> after | d correct | form part | within-form part | outside-form part "
        "| form before -> after | correct given form before -> after | kl/to_init at the end, per seed |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for a, v in res["arms"].items():
        b = v["before"]
        lines.append(
            f"| {a} | {len(v['seeds'])} | {b['correct'][0]:.3f} -> {b['correct'][0] + v['d_correct']:.3f} "
            f"| {v['d_correct']:+.3f} | {v['part_form']:+.3f} | {v['part_within_form']:+.3f} "
            f"| {v['part_outside_form']:+.3f} | {b['form'][0]:.3f} -> {v['form_after']:.3f} "
            f"| {b['correct_given_form'][0]:.3f} -> {v['cgf_after']:.3f} "
            f"| {', '.join(f'{x:.4f}' for x in v['kl_to_init_after'])} |"
        )
    lines += [
        "",
        "| paired by seed | seeds | d correct [95% t] | form part | within-form part | outside-form part |",
        "|---|---|---|---|---|---|",
    ]
    for name, v in res["paired"].items():
        cells = [
            f"{v[k]['mean']:+.3f} [{v[k]['ci95_t'][0]:+.3f}, {v[k]['ci95_t'][1]:+.3f}]"
            for k in ("d_correct", "part_form", "part_within_form", "part_outside_form")
        ]
        lines.append(f"| {name} | {len(v['seeds'])} | " + " | ".join(cells) + " |")
    per_seed, arms = res["per_seed"], list(res["arms"])
    seeds = sorted(set().union(*[set(per_seed[a]) for a in arms])) if arms else []
    lines += [
        "",
        "| seed | "
        + " | ".join(f"{a}: correct after" for a in arms)
        + " | "
        + " | ".join(f"{a} - {b}" for a, b in PAIRS if a in arms and b in arms)
        + " | kl/to_init at the end, "
        + " / ".join(arms)
        + " |",
        "|---" * (2 + len(arms) + sum(a in arms and b in arms for a, b in PAIRS)) + "|",
    ]
    cell = lambda a, s, k: per_seed[a][s][k] if s in per_seed[a] else None  # noqa: E731
    for s in seeds:
        after = [cell(a, s, "correct") for a in arms]
        d = [
            (after[arms.index(a)][1] - after[arms.index(b)][1])
            if after[arms.index(a)] and after[arms.index(b)]
            else None
            for a, b in PAIRS
            if a in arms and b in arms
        ]
        kl = [cell(a, s, "kl_to_init_after") for a in arms]
        lines.append(
            f"| {s} | "
            + " | ".join("—" if x is None else f"{x[1]:.3f}" for x in after)
            + " | "
            + " | ".join("—" if x is None else f"{x:+.3f}" for x in d)
            + " | "
            + " / ".join("—" if x is None else f"{x:.4f}" for x in kl)
            + " |"
        )
    open(os.path.join(out, "form.md"), "w").write("\n".join(lines) + "\n")
    groups: dict[str, list[dict]] = {}
    for name in sorted(os.listdir(root), key=lambda n: (_arm_order([n.split("_s")[0]]), n)):
        m = re.fullmatch(r"(real-\w+)_s(\d+)", name)
        if m and os.path.isfile(os.path.join(root, name, "summary.json")):
            groups.setdefault(m.group(1), []).append(read_run(os.path.join(root, name)))
    groups = {a: groups[a] for a in _arm_order(groups)}
    plot(
        groups,
        os.path.join(out, "curves.png"),
        "SmolLM2-135M-Instruct + LoRA r8, rg:basic_arithmetic: "
        "no reset vs reset + keep vs reset + hard (resets dotted)",
    )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("mode", choices=("pilot", "suite"))
    ap.add_argument("dirs", nargs="+")
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    pilot(a.dirs, a.out) if a.mode == "pilot" else suite(a.dirs[0], a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
