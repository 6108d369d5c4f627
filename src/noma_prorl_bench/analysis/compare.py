"""Paired comparisons between arms of a suite: per-run scores, per-seed differences, bootstrap
CIs, Holm-corrected p-values and verdicts (statistics in `stats.py`), and the B-vs-A share of
the RL gain. Pure functions of `runlog.Run` objects; report.py renders them.

Per-run numbers (one value per run):
  score    mean `reward/val` over the run's last K evaluations (K stated in every report;
           NaN when the run logged fewer than K evaluations)
  warm     `warmstart_val_reward` from summary.json: the validation reward of the warm-started
           policy before the first RL step (NaN when absent)
  s_step   median `time/step` (seconds per RL step, evaluation steps included)
  s_token  median over steps of `time/step` / generated tokens, generated tokens of a step =
           `response/len_mean` x batch_size x group_size (arms generate different lengths, so
           this is the fair cost; reported in microseconds per token)

Arms and pairs: a suite's `suite.json` names each run's arm and pair (its seed index; the A/A
preset's second arm uses seed + offset and the same pair). Without it, arms are the
configuration groups of `runlog.group_runs` and pairs are seeds.
"""

from __future__ import annotations

import json
import math
from typing import Any, Sequence

import numpy as np

from noma_prorl_bench.analysis import stats
from noma_prorl_bench.analysis.runlog import Run, config_key, group_runs

DEFAULT_K = 10
#: metric -> (what it is, unit, higher is better, scale for printing, decimals)
METRICS = {
    "score": ("validation reward, mean of the last K evaluations", "reward", True, 1.0, 3),
    "s_step": ("median seconds per RL step", "s/step", False, 1.0, 3),
    "s_token": ("median seconds per generated token", "µs/token", False, 1e6, 1),
}
#: arms whose comparison with their baseline also covers cost (s/step, s/token)
TIMED_VARIANTS = ("A0", "A2", "B")


def run_score(run: Run, k: int) -> float:
    """Mean of the last `k` logged `reward/val` values; NaN with fewer than `k`."""
    _, v = run.series("reward/val")
    return float(v[-k:].mean()) if v.size >= k else math.nan


def seconds_per_token(run: Run) -> float:
    """Median over steps of time/step / generated tokens (module docstring); NaN if unknown."""
    n_seq = int(run.config.get("batch_size", 0) or 0) * int(run.config.get("group_size", 0) or 0)
    step_t, length = run.metrics.get("time/step"), run.metrics.get("response/len_mean")
    if step_t is None or length is None or n_seq <= 0:
        return math.nan
    with np.errstate(divide="ignore", invalid="ignore"):
        per_tok = step_t / (length * n_seq)
    per_tok = per_tok[np.isfinite(per_tok)]
    return float(np.median(per_tok)) if per_tok.size else math.nan


def run_numbers(run: Run, k: int) -> dict[str, float]:
    """score, warm, s_step, s_token and final_val of one run."""
    _, step_t = run.series("time/step")
    _, val = run.series("reward/val")
    warm = (run.summary or {}).get("warmstart_val_reward")
    return {"score": run_score(run, k), "final_val": float(val[-1]) if val.size else math.nan,
            "warm": float(warm) if isinstance(warm, (int, float)) else math.nan,
            "s_step": float(np.median(step_t)) if step_t.size else math.nan,
            "s_token": seconds_per_token(run)}


def _variant(run: Run) -> str:
    return json.loads(config_key(run.config)["variant"]).split()[0]


def arm_table(runs: Sequence[Run], suite: dict | None = None) -> dict[str, dict[Any, Run]]:
    """arm -> pair -> run (module docstring). Incomplete runs (no summary.json saying complete)
    and runs the suite does not list are left out: a partial run's last evaluations are not the
    same thing as a finished run's."""
    arms: dict[str, dict[Any, Run]] = {}
    runs = [r for r in runs if r.complete]
    if suite and suite.get("runs"):
        listed = {r["name"]: r for r in suite["runs"]}
        for run in runs:
            entry = listed.get(run.path.name)
            if entry is not None:
                arms.setdefault(entry["arm"], {})[entry["pair"]] = run
        return arms
    for label, members in group_runs(list(runs)).items():
        arms[label] = {json.dumps(r.seed): r for r in members}
    return arms


def _typical_a1(arms: dict[str, dict[Any, Run]]) -> str | None:
    """The A1 arm whose configuration differs least from the most common value of each field."""
    keys = {a: config_key(next(iter(rs.values())).config) for a, rs in arms.items()}
    fields = {n for k in keys.values() for n in k} - {"variant"}
    common = {}
    for n in fields:
        values = [k.get(n) for k in keys.values()]
        common[n] = max(set(values), key=values.count)
    a1 = [a for a, k in keys.items() if json.loads(k["variant"]).startswith("A1")]
    return min(a1, key=lambda a: sum(keys[a].get(n) != common[n] for n in fields), default=None)


def default_comparisons(arms: dict[str, dict[Any, Run]]) -> list[list[str]]:
    """Without a suite.json: every arm against the most typical A1 arm."""
    base = _typical_a1(arms)
    return [[f"{a} vs {base}", a, base] for a in arms if base is not None and a != base]


def compare(arms: dict[str, dict[Any, Run]], comparisons: Sequence[Sequence[str]],
            k: int) -> list[dict[str, Any]]:
    """One row per (comparison, metric): score for every comparison, s/step and s/token too
    when the first arm is A0, A2 or B. Holm over all rows (module `stats`)."""
    nums = {a: {p: run_numbers(r, k) for p, r in rs.items()} for a, rs in arms.items()}
    rows = []
    for name, x, y in comparisons:
        if x not in arms or y not in arms:
            continue
        pairs = sorted(set(nums[x]) & set(nums[y]), key=str)
        timed = _variant(next(iter(arms[x].values()))) in TIMED_VARIANTS
        for metric in ("score", "s_step", "s_token") if timed else ("score",):
            xs = np.array([nums[x][p][metric] for p in pairs])
            ys = np.array([nums[y][p][metric] for p in pairs])
            ok = np.isfinite(xs) & np.isfinite(ys)
            if not ok.any():
                continue                      # metric not logged by these runs
            d = xs[ok] - ys[ok]
            lo, hi = stats.bootstrap_ci(xs[ok], ys[ok])
            rows.append(dict(name=name, arm=x, baseline=y, metric=metric, n_pairs=int(ok.sum()),
                             diff=float(d.mean()), ci95=[lo, hi], p=stats.sign_flip_p(d),
                             mean_arm=float(xs[ok].mean()), mean_baseline=float(ys[ok].mean())))
    for row, p_adj in zip(rows, stats.holm([r["p"] for r in rows])):
        row["p_holm"] = p_adj
        row["verdict"] = stats.verdict(row["diff"], p_adj, METRICS[row["metric"]][2])
    return rows


def gain_kept(arms: dict[str, dict[Any, Run]], rows: list[dict], k: int) -> list[dict[str, Any]]:
    """For each compared B arm and its A baseline: the share of A's RL gain (score - warm-start
    score, per seed) that B keeps, mean(gain_B) / mean(gain_A), with its paired bootstrap CI,
    and the seed's criterion at 80% and 90% read from the CI and B's s/step verdict."""
    out = []
    for row in rows:
        if row["metric"] != "score" or _variant(next(iter(arms[row["arm"]].values()))) != "B":
            continue
        b, a = arms[row["arm"]], arms[row["baseline"]]
        if _variant(next(iter(a.values()))) == "B":
            continue
        pairs = sorted(set(a) & set(b), key=str)
        nb = [run_numbers(b[p], k) for p in pairs]
        na = [run_numbers(a[p], k) for p in pairs]
        warm = np.array([x["warm"] for x in na])
        gb = np.array([x["score"] for x in nb]) - warm
        ga = np.array([x["score"] for x in na]) - warm
        share, lo, hi = stats.ratio_ci(gb, ga)
        speed = next((r["verdict"] for r in rows if r["name"] == row["name"]
                      and r["metric"] == "s_step"), stats.VERDICTS[2])
        crit = {lvl: _criterion(stats.criterion(lo, hi, lvl), speed) for lvl in (0.8, 0.9)}
        out.append(dict(name=row["name"], b=row["arm"], a=row["baseline"],
                        n_pairs=int(np.isfinite(gb + ga).sum()), warm=float(np.nanmean(warm)),
                        gain_a=float(np.nanmean(ga)), gain_b=float(np.nanmean(gb)),
                        share=share, ci95=[lo, hi], speed=speed,
                        held_80=crit[0.8], held_90=crit[0.9]))
    return out


def _criterion(share: str, speed: str) -> str:
    """Seed 000's criterion (B keeps >= L of A's gain at a lower step time) from the share's CI
    reading and B's s/step verdict ('better' = faster)."""
    if share == "not held" or speed == "worse":
        return "not held"
    return "held" if share == "held" and speed == "better" else "undecided"
