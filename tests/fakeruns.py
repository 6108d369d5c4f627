"""Test helper: write small, deterministic synthetic run directories (the output contract of docs/design.md).

Numbers follow simple formulas so tests can predict them: a saturating reward curve scaled by
`quality`, a KL that grows linearly since the last reference reset (with a spike after a hard
optimizer reset), exact reference counters per variant (A0: E*M forwards over E*N*T tokens,
A1/A2: one forward over N*T tokens, B: none) and stage times whose cost model holds exactly.

    from tests.fakeruns import write_run, write_suite
    dirs = write_suite(tmp_path)              # several configs x 3 seeds
"""

from __future__ import annotations

import json
import math
import zlib
from pathlib import Path
from typing import Any

import numpy as np

N_SEQ, T_TOK = 8, 6  # sequences per step, response tokens per sequence
F_REF_TOKEN = 0.02 / (N_SEQ * T_TOK)  # seconds per reference token
T_ROLLOUT, T_TRAIN, T_OTHER, T_EVAL = 0.10, 0.20, 0.01, 0.05


def _config(**kw: Any) -> dict[str, Any]:
    cfg = dict(
        variant="A",
        ref_compute="cached",
        opt_reset="keep",
        reset_every=10,
        seed=0,
        steps=40,
        ppo_epochs=2,
        minibatches=2,
        task="reverse_digits",
        enable_growth=False,
        growth_migration="adam_map",
        beta=0.05,
        kl_estimator="k3",
        eval_every=5,
        grow_every=15,
        lr=1e-3,
        batch_size=4,
        group_size=2,
    )  # N_SEQ = 8
    cfg.update(kw)
    cfg["versions"] = {"noma_prorl_bench": "0.1.0", "torch": "fake"}
    cfg["outdir"] = "set-per-run"
    return cfg


def _ref_counts(cfg: dict[str, Any]) -> tuple[int, int]:
    """(reference forwards, reference tokens) per step."""
    if cfg["variant"] == "B":
        return 0, 0
    if cfg["ref_compute"] == "naive_epoch":
        return cfg["ppo_epochs"] * cfg["minibatches"], cfg["ppo_epochs"] * N_SEQ * T_TOK
    return 1, N_SEQ * T_TOK


def _step_row(cfg: dict, t: int, since: int, quality: float, rng: np.random.Generator, rank: int) -> dict[str, Any]:
    curve = 0.9 * quality * (1.0 - math.exp(-t / 12.0))
    ref_fwd, ref_tok = _ref_counts(cfg)
    eval_step = t % cfg["eval_every"] == 0 or t == cfg["steps"]
    rollout = T_ROLLOUT + 0.002 * rng.random()
    ref = ref_tok * F_REF_TOKEN
    train = T_TRAIN + 0.002 * rng.random()
    step_time = rollout + ref + train + T_OTHER + (T_EVAL if eval_step else 0.0)
    tokens = N_SEQ * T_TOK
    row: dict[str, Any] = {
        "step": t,
        "reward/mean": round(curve + 0.03 * (rng.random() - 0.5), 6),
        "reward/std": 0.3,
        "loss/total": 0.5 - 0.01 * t,
        "loss/pg": 0.4,
        "clip/frac": 0.1,
        "policy/entropy": 1.5 - 0.01 * t,
        "optim/grad_norm": 1.0,
        "optim/lr": cfg["lr"],
        "count/policy_fwd_rollout": 1,
        "count/policy_fwd_train": cfg["ppo_epochs"] * cfg["minibatches"],
        "count/ref_fwd": ref_fwd,
        "count/tokens_policy": tokens,
        "count/tokens_ref": ref_tok,
        "time/rollout": rollout,
        "time/ref": ref,
        "time/train": train,
        "time/step": step_time,
        "perf/tokens_per_s": tokens / step_time,
        "perf/peak_rss_mb": 300.0 + 0.5 * t + (50.0 if ref_fwd > 1 else 0.0),
        "reset/steps_since": since,
        "kl/to_init": 0.001 * t,
        "response/len_mean": float(T_TOK),
    }
    if cfg["variant"] != "B":
        spike = 0.05 if (cfg["opt_reset"] == "hard" and 0 < since <= 2 and t > since) else 0.0
        k3 = 0.002 * since + spike + 0.001 * cfg["seed"]
        row.update(
            {"kl/k1": 1.1 * k3, "kl/k2": 0.9 * k3, "kl/k3": k3, "loss/kl": cfg["beta"] * k3, "kl/beta": cfg["beta"]}
        )
    if eval_step:
        row["reward/val"] = round(curve + 0.01 * cfg["seed"], 6)
    if cfg["enable_growth"]:
        row["adapter/rank"] = rank
    return row


def write_run(
    outdir: str | Path,
    *,
    quality: float = 1.0,
    complete: bool = True,
    partial_last_line: bool = False,
    step0: bool = False,
    **cfg_kw: Any,
) -> Path:
    """Write one synthetic run directory and return its path; `step0`: metrics.jsonl starts with
    the step-0 row (the evaluation before RL, val = the curve at t = 0: 0.01 * seed) as runs
    write it now; without it the run looks like one written before that row existed."""
    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    cfg = _config(**cfg_kw)
    cfg["outdir"] = str(out)
    (out / "config.json").write_text(json.dumps(cfg, indent=2))
    rng = np.random.default_rng(zlib.crc32(json.dumps(cfg_kw, sort_keys=True).encode()))
    rows, events, samples = [], [], []
    last_reset, rank = 0, 4
    has_ref = cfg["variant"] != "B"  # B has no reference, so no reference resets
    for t in range(1, cfg["steps"] + 1):
        row = _step_row(cfg, t, t - last_reset, quality, rng, rank)
        rows.append(row)
        if "reward/val" in row:
            for i in range(2):
                samples.append(
                    {
                        "step": t,
                        "prompt": f"12{i}{t % 10}",
                        "response": f"{t % 10}{i}21",
                        "answer": f"{t % 10}{i}21",
                        "reward": row["reward/val"],
                    }
                )
        if has_ref and cfg["reset_every"] and t % cfg["reset_every"] == 0 and t < cfg["steps"]:
            events.append({"step": t, "event": "ref_reset", "reason": "periodic"})
            if cfg["opt_reset"] != "keep":
                events.append({"step": t, "event": "opt_reset", "reason": cfg["opt_reset"]})
            last_reset = t
        if cfg["enable_growth"] and t % cfg["grow_every"] == 0:
            events.append(
                {
                    "step": t,
                    "event": "growth",
                    "reason": "periodic",
                    "old_rank": rank,
                    "new_rank": rank + 4,
                    "migration": cfg["growth_migration"],
                }
            )
            rank += 4
    if step0:
        rows.insert(0, {"step": 0, "reward/val": 0.01 * cfg["seed"], "perf/peak_rss_mb": 290.0})
    with open(out / "metrics.jsonl", "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
        if partial_last_line:
            f.write('{"step": %d, "reward/mean": 0.' % (cfg["steps"] + 1))
    (out / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    (out / "samples.jsonl").write_text("".join(json.dumps(s) + "\n" for s in samples))
    if complete:
        # the warm-started policy's val reward is the curve at t = 0: 0.01 * seed
        (out / "summary.json").write_text(
            json.dumps({"complete": True, "steps": cfg["steps"], "warmstart_val_reward": 0.01 * cfg["seed"]})
        )
    return out


#: (directory stem, config overrides, quality) of the default synthetic suite.
SUITE = [
    ("A0", dict(ref_compute="naive_epoch"), 1.0),
    ("A1", dict(ref_compute="cached"), 1.0),
    ("A2", dict(ref_compute="ring"), 1.0),
    ("B", dict(variant="B"), 0.85),
    ("hard", dict(opt_reset="hard"), 0.97),
    ("soft", dict(opt_reset="soft"), 0.99),
    ("asym", dict(opt_reset="asym"), 0.98),
    ("grow", dict(enable_growth=True), 1.0),
]


def write_suite(root: str | Path, seeds: tuple[int, ...] = (0, 1, 2), suite: list | None = None) -> list[Path]:
    """Write every SUITE entry for every seed under `root`; return the run directories."""
    dirs = []
    for stem, kw, quality in suite or SUITE:
        for seed in seeds:
            dirs.append(write_run(Path(root) / f"{stem}_s{seed}", quality=quality, seed=seed, **kw))
    return dirs


#: the fabricated beta grid (write_grid): score over the last GRID_K evaluations, 8 paired seeds
GRID_K, GRID_SEEDS, GRID_STEPS, GRID_EVERY = 5, list(range(8)), 40, 5
GRID_BETAS = ("0.1", "1")
#: task -> beta -> treatment -> quality (fakeruns: val reward = 0.9 q (1 - exp(-t/12)) + 0.01 seed)
GRID_QUALITY = {
    "reverse_digits": {"0.1": dict(none=1.0, keep=0.9, hard=0.9), "1": dict(none=0.9, keep=1.0, hard=1.0)},
    "sort_digits": {"0.1": dict(none=1.0, keep=1.0, hard=1.0), "1": dict(none=0.8, keep=1.0, hard=1.0)},
}


def grid_jitter(arm: str, seed: int) -> float:
    """0, 0.01, ..., 0.04 by seed and treatment (none, keep differ; hard gets keep's)."""
    return 0.01 * ((seed * 7 + ord(arm.split("-")[1][0])) % 5)


def write_grid(root: str | Path, task: str) -> Path:
    """A grid suite of `task` under `root` (suite.json, settings.json, 2 betas x none/keep/hard x 8
    seeds; GRID_QUALITY): keep and hard have the same rewards; sort_digits at beta 0.1 is flat."""
    root = Path(root)
    runs, comps = [], []
    for beta in GRID_BETAS:
        for t, q in GRID_QUALITY[task][beta].items():
            arm = f"b{beta}-{t}"
            # keep and hard share quality and jitter: identical rewards (the two-identical-arms case)
            jit_arm = arm.replace("hard", "keep")
            for s in GRID_SEEDS:
                write_run(
                    root / f"{arm}_s{s}",
                    seed=s,
                    beta=float(beta),
                    task=task,
                    steps=GRID_STEPS,
                    eval_every=GRID_EVERY,
                    quality=q + (0.0 if task == "sort_digits" and beta == "0.1" else grid_jitter(jit_arm, s)),
                    opt_reset="hard" if t == "hard" else "keep",
                    reset_every=0 if t == "none" else 10,
                )
                runs.append({"name": f"{arm}_s{s}", "arm": arm, "pair": s})
        comps += [
            [f"beta {beta}: reset-keep vs no reset", f"b{beta}-keep", f"b{beta}-none"],
            [f"beta {beta}: reset-hard vs reset-keep", f"b{beta}-hard", f"b{beta}-keep"],
        ]
    suite = {
        "preset": "grid",
        "runs": runs,
        "comparisons": comps,
        "families": {c[0]: c[0].split(":")[0] for c in comps},
    }
    (root / "suite.json").write_text(json.dumps(suite))
    (root / "settings.json").write_text(json.dumps({"score_evals": GRID_K, "commit": "abc123"}))
    return root
