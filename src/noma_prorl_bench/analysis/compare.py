"""Paired comparisons between arms of a suite: per-run scores, per-seed differences, paired
intervals (`stats.paired_interval`), Holm-corrected p-values and verdicts (statistics in
`stats.py`), and the B-vs-A share of the RL gain. Pure functions of `runlog.Run` objects; report.py renders them.

Per-run numbers (one value per run):
  score    mean `reward/val` over the run's last K evaluations of RL steps (K stated in every
           report; NaN when the run logged fewer than K); the step-0 row is never counted
  warm     the validation reward of the warm-started policy before the first RL step: the step-0
           row, else the warmstart event, else summary.json's `warmstart_val_reward` (NaN when absent)
  s_step   median `time/step` (seconds per RL step, evaluation steps included)
  s_token  median over steps of `time/step` / generated tokens, generated tokens of a step =
           `response/len_mean` x batch_size x group_size (arms generate different lengths, so
           this is the fair cost; reported in microseconds per token)

Arms and pairs: a suite's `suite.json` names each run's arm and pair (its seed index; the A/A
preset's second arm uses seed + offset and the same pair). Without it, arms are the
configuration groups of `runlog.group_runs` and pairs are seeds.

Families and checks (suite.json "families", "checks"): each comparison's score row is tested
within its Holm family (default "outcome"); step-time and per-token rows form the family "cost"
and are made only for runs interleaved in time (`timing=True`; the `cost` and `critic`
presets), because arms run at different times see different machine loads, and only when the
comparison's first arm costs differently by design (variant A0, A2 or B; a critic, --adv gae).
Pairs identical by construction (A0 or A2 vs A1, naive vs reset growth) are checks, not
questions: `identity_check` compares their non-timing metrics step by step, and their score rows
are not tested.
"""

from __future__ import annotations

import json
import math
from typing import Any, Sequence

import numpy as np

from noma_prorl_bench.analysis import pooled, stats
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
#: Holm family of the timing rows; of score rows when suite.json names none
COST_FAMILY, DEFAULT_FAMILY = "cost", "outcome"
#: metric prefixes a check skips: timing, throughput and memory, work counters (A0 does E x M
#: reference forwards by design) and what is derived from them
CHECK_SKIP = ("time/", "perf/", "count/", "derived/")
#: B's step-time reading when the runs were not interleaved (no timing rows)
NOT_TIMED = "not measured (runs not interleaved)"


def resolution(metric: str) -> float:
    """The precision a report prints `metric` at (one unit of its last printed decimal, in the
    metric's own units): the spread `stats.paired_interval` assumes when every difference is equal."""
    _, _, _, scale, dec = METRICS[metric]
    return 10.0**-dec / scale


def run_score(run: Run, k: int) -> float:
    """Mean of the last `k` logged `reward/val` values of RL steps (the step-0 row before RL is
    never one of them: runlog.Run.initial); NaN with fewer than `k`."""
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
    warm = run.initial.get("reward/val", (run.summary or {}).get("warmstart_val_reward"))  # before RL
    return {
        "score": run_score(run, k),
        "final_val": float(val[-1]) if val.size else math.nan,
        "warm": float(warm) if isinstance(warm, (int, float)) else math.nan,
        "s_step": float(np.median(step_t)) if step_t.size else math.nan,
        "s_token": seconds_per_token(run),
    }


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
    else:
        for label, members in group_runs(list(runs)).items():
            arms[label] = {json.dumps(r.seed): r for r in members}
    mixed = mixed_arm(arms)
    if mixed:
        raise ValueError(mixed)
    return arms


#: config.json keys in which the runs of one arm may differ: the seed, and where a run was written and how
#: it was driven (flags a resume may change that change nothing it computes); the commit and the machine
#: are compared apart (`versions.git_commit`, the machine record's kernel fields)
PER_RUN_KEYS = frozenset(
    {"seed", "outdir", "run_id", "argv", "resumes", "overwrite", "resume", "quiet", "plots", "save_every"}
    | {"keep_checkpoints", "on_nan", "threads", "versions", "machine"}
)


def mixed_arm(arms: dict[str, dict[Any, Run]]) -> str | None:
    """Why an arm's runs are not one treatment on several seeds (one line naming the arm, the key and
    both runs' values), else None: their configurations differ outside PER_RUN_KEYS, or the commit or
    the machine their config.json records (when both record one) differ."""
    for arm, members in arms.items():
        runs = list(members.values())
        for other in runs[1:]:
            diff = _difference(runs[0].config, other.config)
            if diff:
                key, x, y, more = diff
                return (
                    f"arm {arm!r} mixes runs that differ in {key!r} ({runs[0].path.name}: {str(x)[:60]!r}, "
                    f"{other.path.name}: {str(y)[:60]!r}{f'; {more} more keys differ' if more else ''}): the "
                    "runs of one arm differ only in --seed (same configuration, commit and machine)"
                )
    return None


def _difference(a: dict, b: dict) -> tuple[str, Any, Any, int] | None:
    """(the first key in which two runs' config.json differ, its two values, how many more keys differ)."""
    from noma_prorl_bench.io.machine import kernel_differences  # noqa: PLC0415

    keys = sorted(k for k in set(a) | set(b) if k not in PER_RUN_KEYS and a.get(k) != b.get(k))
    if keys:
        return keys[0], a.get(keys[0]), b.get(keys[0]), len(keys) - 1
    va: dict = a["versions"] if isinstance(a.get("versions"), dict) else {}
    vb: dict = b["versions"] if isinstance(b.get("versions"), dict) else {}
    if va.get("git_commit") and vb.get("git_commit") and va["git_commit"] != vb["git_commit"]:
        return "versions.git_commit", va["git_commit"], vb["git_commit"], 0
    machine = kernel_differences(a.get("machine"), b.get("machine"))
    if machine and machine != ["unrecorded"]:
        return f"machine.{machine[0]}", a["machine"].get(machine[0]), b["machine"].get(machine[0]), len(machine) - 1
    return None


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


def _pair_set(checks: Sequence[Sequence[str]]) -> set[frozenset]:
    return {frozenset(c[1:3]) for c in checks}


def shared_beta(*arm_runs: dict[Any, Run]) -> float | None:
    """The `beta` of every run's config.json when all runs of the given arms share it, else None."""
    betas = {json.dumps(r.config.get("beta")) for runs in arm_runs for r in runs.values()}
    if len(betas) != 1:
        return None
    value = json.loads(betas.pop())
    return float(value) if isinstance(value, (int, float)) else None


def compare(
    arms: dict[str, dict[Any, Run]],
    comparisons: Sequence[Sequence[str]],
    k: int,
    families: dict[str, str] | None = None,
    checks: Sequence[Sequence[str]] = (),
    timing: bool = False,
) -> list[dict[str, Any]]:
    """One row per (comparison, metric): score for every comparison whose arms are not a check
    pair (`checks`), s/step and s/token too when `timing` (interleaved runs) and the first arm
    is A0, A2 or B or has a critic (--adv gae). Holm within each family (`families`: name -> family, default "outcome";
    timing rows: "cost"); `mde80` with the family's size (module docstring)."""
    nums = {a: {p: run_numbers(r, k) for p, r in rs.items()} for a, rs in arms.items()}
    families, skip = families or {}, _pair_set(checks)
    rows: list[dict[str, Any]] = []
    diffs: list[np.ndarray] = []  # each row's paired differences, for its margin
    for name, x, y in comparisons:
        if x not in arms or y not in arms:
            continue
        pairs = sorted(set(nums[x]) & set(nums[y]), key=str)
        first = next(iter(arms[x].values()))
        timed = timing and (_variant(first) in TIMED_VARIANTS or first.config.get("adv") == "gae")
        metrics = ("score",) * (frozenset((x, y)) not in skip) + ("s_step", "s_token") * timed
        for metric in metrics:
            xs = np.array([nums[x][p][metric] for p in pairs])
            ys = np.array([nums[y][p][metric] for p in pairs])
            ok = np.isfinite(xs) & np.isfinite(ys)
            if not ok.any():
                continue  # metric not logged by these runs
            d = xs[ok] - ys[ok]
            diffs.append(d)
            lo, hi = stats.paired_interval(d, resolution=resolution(metric))
            rows.append(
                dict(
                    name=name,
                    arm=x,
                    baseline=y,
                    metric=metric,
                    family=(families.get(name, DEFAULT_FAMILY) if metric == "score" else COST_FAMILY),
                    beta=shared_beta(arms[x], arms[y]),
                    n_pairs=int(ok.sum()),
                    diff=float(d.mean()),
                    ci95=[lo, hi],
                    p=stats.sign_flip_p(d),
                    sd=float(d.std(ddof=1)) if d.size > 1 else math.nan,
                    mean_arm=float(xs[ok].mean()),
                    mean_baseline=float(ys[ok].mean()),
                )
            )
    for fam in dict.fromkeys(r["family"] for r in rows):
        members = [r for r in rows if r["family"] == fam]
        m = sum(math.isfinite(r["p"]) for r in members)
        for row, p_adj in zip(members, stats.holm([r["p"] for r in members])):
            row["p_holm"], row["family_size"] = p_adj, m
            row["verdict"] = stats.verdict(row["diff"], p_adj, METRICS[row["metric"]][2])
            row["mde80"] = stats.mde80(row["sd"], row["n_pairs"], max(m, 1))
            lo, hi = row["ci95"]
            row["ci_excludes_0"] = bool(lo > 0 or hi < 0)
    add_margins(rows, diffs)
    return rows


def add_margins(rows: list[dict[str, Any]], diffs: list[np.ndarray]) -> None:
    """Each score row's `margin`: the fewest of its paired differences whose sign flip or removal
    changes its verdict, the rest of its Holm family as it is (`pooled.margin` on one machine;
    `margin_exact` False when only the greedy search found it, None when nothing changes it), and
    `fragile` when that is 1: one seed decides the verdict."""
    for fam in dict.fromkeys(r["family"] for r in rows if r["metric"] == "score"):
        idx = [i for i, r in enumerate(rows) if r["family"] == fam and r["metric"] == "score"]
        tabs = [diffs[i].reshape(-1, 1) for i in idx]
        for j, i in enumerate(idx):
            k, exact = pooled.margin(tabs, j) if diffs[i].size else (None, True)
            rows[i].update(margin=k, margin_exact=exact, fragile=k == 1)


def identity_check(arms: dict[str, dict[Any, Run]], name: str, x: str, y: str) -> dict[str, Any]:
    """Arms `x` and `y` identical by construction: for every pair both ran, the same steps and,
    for every metric outside CHECK_SKIP, the same value at every step (NaN equals NaN).
    `identical` is False at the first difference (`first_difference` names pair, metric, step,
    both values) and None when the two arms share no pair."""
    out: dict[str, Any] = dict(name=name, arm=x, baseline=y, pairs=0, identical=None, first_difference=None)
    if x not in arms or y not in arms:
        return out
    for pair in sorted(set(arms[x]) & set(arms[y]), key=str):
        rx, ry = arms[x][pair], arms[y][pair]
        out["pairs"] += 1
        diff = _first_difference(rx, ry)
        if diff is not None:
            out.update(identical=False, first_difference=dict(pair=str(pair), **diff))
            return out
    out["identical"] = True if out["pairs"] else None
    return out


def _first_difference(rx: Run, ry: Run) -> dict[str, Any] | None:
    if not np.array_equal(rx.steps, ry.steps):
        return dict(metric="step", step=None, values=[len(rx.steps), len(ry.steps)])
    keys = sorted(k for k in set(rx.metrics) | set(ry.metrics) if not k.startswith(CHECK_SKIP))
    for key in keys:
        vx, vy = rx.metrics.get(key), ry.metrics.get(key)
        if vx is None or vy is None:
            return dict(
                metric=key,
                step=None,
                values=["logged" if vx is not None else "absent", "logged" if vy is not None else "absent"],
            )
        same = (vx == vy) | (np.isnan(vx) & np.isnan(vy))
        if not same.all():
            i = int(np.argmin(same))
            return dict(metric=key, step=int(rx.steps[i]), values=[float(vx[i]), float(vy[i])])
    return None


def gain_kept(arms: dict[str, dict[Any, Run]], rows: list[dict], k: int) -> list[dict[str, Any]]:
    """For each compared B arm and its A baseline: the share of A's RL gain (score - warm-start
    score, per seed) that B keeps, mean(gain_B) / mean(gain_A), with its Fieller interval,
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
        speed = next((r["verdict"] for r in rows if r["name"] == row["name"] and r["metric"] == "s_step"), NOT_TIMED)
        crit = {lvl: _criterion(stats.criterion(lo, hi, lvl), speed) for lvl in (0.8, 0.9)}
        out.append(
            dict(
                name=row["name"],
                b=row["arm"],
                a=row["baseline"],
                n_pairs=int(np.isfinite(gb + ga).sum()),
                warm=float(np.nanmean(warm)),
                gain_a=float(np.nanmean(ga)),
                gain_b=float(np.nanmean(gb)),
                share=share,
                ci95=[lo, hi],
                speed=speed,
                held_80=crit[0.8],
                held_90=crit[0.9],
            )
        )
    return out


def _criterion(share: str, speed: str) -> str:
    """The gain-share criterion (B keeps >= L of A's gain at a lower step time) from the share's CI
    reading and B's s/step verdict ('better' = faster)."""
    if share == "not held" or speed == "worse":
        return "not held"
    return "held" if share == "held" and speed == "better" else "undecided"


def margin_text(r: dict) -> str:
    """'2', '4 (greedy bound)', '1 **fragile**', 'none' (nothing flips it) or '—' (a timing row)."""
    if "margin" not in r:
        return "—"
    k = r["margin"]
    if k is None:
        return "none"
    return f"{k}" + (" (greedy bound)" if not r.get("margin_exact", True) else "") + (" **fragile**" if k == 1 else "")
