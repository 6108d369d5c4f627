"""Markdown sections of the result report (report.py assembles them). Tables a person reads:
fixed decimals with units, at most 8 columns; the long per-seed tables go to the appendix. Text
read from run or suite directories (names, labels, seeds, metric keys) is shown through
`untrusted.md_text` / `md_code`, never as markup."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from noma_prorl_bench.analysis.compare import METRICS, margin_text, run_numbers
from noma_prorl_bench.analysis.findings import Stat
from noma_prorl_bench.analysis.runlog import Run, kl_loss_key, reduce_key
from noma_prorl_bench.analysis.tables import markdown_table
from noma_prorl_bench.analysis.untrusted import md_code, md_text


def _cell(text: Any, limit: int = 60) -> str:
    """A table cell holding `text` as data (`untrusted.md_text`), cut to `limit` characters."""
    return md_text(text, limit)


def _f(x: float, decimals: int = 3, unit: str = "", sign: bool = False) -> str:
    """Fixed decimals (and a unit); '—' for NaN."""
    if x is None or not math.isfinite(x):
        return "—"
    return f"{x:+.{decimals}f}" if sign else f"{x:.{decimals}f}" + (f" {unit}" if unit else "")


def provenance_lines(settings: dict, n_runs: int, n_arms: int, k: int, evidence: bool) -> list[str]:
    lines = (
        []
        if evidence
        else [
            "> **Smoke run, not evidence.** This preset checks that the pipeline works; its seeds "
            "and steps are too few to detect effects. The evidence is the `full` preset.",
            "",
        ]
    )
    lines += [
        f"{n_runs} runs in {n_arms} arms. Made at commit {settings.get('commit', '`unknown`')} "
        + (
            f"(the runs were trained at {', '.join(md_code(str(c), 80) for c in settings['run_commits'])}) "
            if settings.get("run_commits") and [str(settings.get("commit", "")).strip("`")] != settings["run_commits"]
            else ""
        )
        + f"on {settings.get('machine', 'an unrecorded machine')}, by this command:",
        "",
        f"    {settings.get('command', '(command not recorded)')}",
        "",
        f"A run's **score** is its mean validation reward (`reward/val`) over its last K = {k} evaluations. Every "
        "comparison is paired by seed: the effect is the mean of the per-seed differences (arm − baseline) with "
        "its 95% interval (the Student t interval, widened to the bootstrap-t interval on a side where the "
        "differences' skew pulls further; coverage simulated in docs/statistics.md), a two-sided sign-flip "
        "permutation p-value, Holm-corrected within the comparison's **family** (the questions one reader asks "
        "together; timing rows are a family of their own), and a verdict at family-wise 5%: `better`, `worse` or "
        "`no detectable difference` (for times, lower is better). **mde80** is the smallest effect the row could "
        "detect with 80% power, an estimate: the effect at which the sign-flip test reaches p < 0.05/m (Holm's "
        "first step, m questions in the family) in 80% of simulated studies of n normal differences with the "
        "observed sd(d); ∞ when the sign-flip test cannot reach 0.05/m with n pairs (2/2ⁿ ≥ 0.05/m). The CI is "
        "the row's own, before the family correction: a row marked *CI excludes 0 (uncorrected)* has an interval "
        "without 0 but did not survive Holm; a verdict marked *CI includes 0* passed the test while its interval,"
        " widened on a skewed side, reaches 0. **margin** is the fewest paired differences whose sign flip or "
        "removal would change the verdict, the rest of its family as it is; a verdict with margin 1 is "
        "**fragile**: one seed decides it.",
        "",
    ]
    return lines


def _diff_ci(r: dict) -> str:
    _, unit, _, scale, dec = METRICS[r["metric"]]
    lo, hi = r["ci95"]
    return (
        f"{_f(r['diff'] * scale, dec, sign=True)} [{_f(lo * scale, dec, sign=True)}, {_f(hi * scale, dec, sign=True)}]"
    )


def _mde(r: dict) -> str:
    _, _, _, scale, dec = METRICS[r["metric"]]
    v = r.get("mde80", math.nan)
    return "∞" if v == math.inf else _f(v * scale, dec)


def verdict_text(r: dict) -> str:
    """The verdict, and for a null whose own CI excludes 0 the plain statement of which is which."""
    if r["verdict"] == "no detectable difference" and r.get("ci_excludes_0"):
        return "no detectable difference; *CI excludes 0 (uncorrected)*"
    if r["verdict"] in ("better", "worse") and r.get("ci_excludes_0") is False:
        return f"{r['verdict']}; *CI includes 0 (widened for skew; the test decides)*"
    return r["verdict"]


def comparison_lines(rows: list[dict], timing_note: str = "") -> list[str]:
    """One table per Holm family (in order of first appearance), then `timing_note`."""
    lines = ["## Paired comparisons", ""]
    if not rows:
        lines += ["No comparisons (fewer than two arms, or only identical-by-construction pairs).", ""]
    for fam in dict.fromkeys(r["family"] for r in rows):
        members = [r for r in rows if r["family"] == fam]
        m = members[0].get("family_size", len(members))
        lines += [f"### Family {md_code(fam, 60)}: {m} question{'s' * (m != 1)}, Holm within", ""]
        body = [
            [
                _cell(r["name"], 48),
                METRICS[r["metric"]][1],
                r["n_pairs"],
                _diff_ci(r),
                f"{_f(r['p'], 3)}, {_f(r['p_holm'], 3)}",
                verdict_text(r),
                _mde(r),
                margin_text(r),
            ]
            for r in members
        ]
        lines += markdown_table(
            [
                "comparison (arm vs baseline)",
                "metric",
                "pairs",
                "mean diff [95% CI]",
                "p, p (Holm)",
                "verdict",
                "mde80",
                "margin",
            ],
            body,
        ) + [""]
    return lines + ([timing_note, ""] if timing_note else [])


def check_lines(checks: list[dict]) -> list[str]:
    """The identical-by-construction checks: `identical: yes`, or **identical: NO** and where."""
    if not checks:
        return []
    body = []
    for c in checks:
        if c["identical"] is None:
            verdict = "not checked (no shared pair)"
        elif c["identical"]:
            verdict = "identical: yes"
        else:
            fd = c["first_difference"]
            where = (
                f"pair {md_text(fd['pair'], 30)}, {md_code(fd['metric'], 60)}"
                + (f" at step {fd['step']}" if fd["step"] is not None else "")
                + f": {md_text(fd['values'][0], 30)} vs {md_text(fd['values'][1], 30)}"
            )
            verdict = f"**identical: NO** (ERROR; first difference {where})"
        body.append([_cell(c["name"], 40), f"{_cell(c['arm'], 40)} = {_cell(c['baseline'], 40)}", c["pairs"], verdict])
    return (
        [
            "## Checks: arms identical by construction",
            "",
            "These pairs compute the same thing by different means (only their cost may differ), "
            "so they are verified, not tested: every metric except timing, throughput, memory and "
            "work counters (`time/*`, `perf/*`, `count/*`, `derived/*`) must be equal at every "
            "step of every pair. A failure is an error in the harness; the suite exits non-zero.",
            "",
        ]
        + markdown_table(["check", "arms", "pairs", "result"], body)
        + [""]
    )


def gain_lines(gains: list[dict]) -> list[str]:
    if not gains:
        return []
    body = [
        [
            _cell(g["name"], 30),
            g["n_pairs"],
            _f(g["warm"]),
            _f(g["gain_a"], sign=True),
            _f(g["gain_b"], sign=True),
            f"{_pct(g['share'])} [{_pct(g['ci95'][0])}, {_pct(g['ci95'][1])}]",
            g["held_80"],
            g["held_90"],
        ]
        for g in gains
    ]
    return (
        [
            "## B (no reference model) vs A: share of the RL gain",
            "",
            "gain = score − warm-start score (validation reward of the warm-started policy before "
            "RL, same seed); share = mean(B's gain) ÷ mean(A's gain) with Fieller's 95% interval "
            "(t with n − 1 df, paired; no resampling). Criterion: B keeps ≥ 80% "
            "(≥ 90%) of A's gain at a lower step time; "
            "`held` when the CI's lower end is ≥ the level and B's step time is detectably lower, "
            "`not held` when the CI's upper end is below the level (or B is detectably slower), "
            "otherwise `undecided` (always, unless not held, when the runs were not interleaved "
            "in time: their step times are not compared).",
            "",
        ]
        + markdown_table(
            ["B vs A", "pairs", "warm-start score", "A gain", "B gain", "share kept [95% CI]", "≥ 80%", "≥ 90%"], body
        )
        + [""]
    )


def _pct(x: float) -> str:
    return f"{x:.0%}" if x is not None and math.isfinite(x) else "—"


def arm_lines(arms: dict[str, dict[Any, Run]], k: int) -> list[str]:
    body = []
    for arm, runs in arms.items():
        nums = [run_numbers(r, k) for r in runs.values()]
        st = {m: Stat.of([n[m] for n in nums]) for m in ("score", "final_val", "s_step", "s_token")}
        kl = Stat.of([reduce_key(r, kl_loss_key(r), np.mean) for r in runs.values()])
        ref = Stat.of([reduce_key(r, "count/ref_fwd", np.mean) for r in runs.values()])
        body.append(
            [
                _cell(arm, 40),
                len(runs),
                st["score"].fmt(3),
                st["final_val"].fmt(3),
                st["s_step"].fmt(3, unit="s"),
                _scaled(st["s_token"], 1e6, 1, "µs"),
                ref.fmt(1),
                kl.fmt(4),
            ]
        )
    return (
        [
            "## Arms",
            "",
            "Mean ± std over seeds (std with ddof = 1). Step time and time per "
            "generated token are per-run medians (evaluation steps included); KL = the estimate "
            "in the loss (for B: to the old policy, not a reference).",
            "",
        ]
        + markdown_table(
            [
                "arm",
                "runs",
                f"score (last {k} evals)",
                "final val reward",
                "step time",
                "time / generated token",
                "ref fwd / step",
                "KL mean",
            ],
            body,
        )
        + [""]
    )


def _scaled(st: Stat, scale: float, decimals: int, unit: str) -> str:
    return Stat(st.mean * scale, st.std * scale, st.min * scale, st.max * scale, st.n, st.n_total).fmt(
        decimals, unit=unit
    )


def cost_lines(cost: list[dict], interleaved: bool = True) -> list[str]:
    if not interleaved:
        return [
            "## Cost model check (A0 vs A1)",
            "",
            "Not made: the arms did not run interleaved "
            "in time (the `cost` preset does); a step-time ratio between runs made at "
            "different machine loads measures the load.",
            "",
        ]
    intro = (
        "predicted A0 step = A1 (rollout + train + other) + A0 reference units per step × "
        "(A1 `time/ref` ÷ A1 reference units per step), units = `count/tokens_ref` (or "
        "`count/ref_fwd`), other = step − rollout − ref − train; ratios are A0 step ÷ A1 "
        "step (means over steps, then over seeds); noise = 2 × the pooled per-step standard "
        "error (it understates the noise: steps are not independent)."
    )
    body = [
        [
            _cell(c["a0"], 30),
            _cell(c["a1"], 30),
            c["unit"],
            _f(c["ref_fwd_a0"], 1),
            _f(c["predicted_ratio"], 3),
            _f(c["measured_ratio"], 3),
            f"±{c['ratio_noise']:.3f}",
            _cell(", ".join(c["differs_in"]), 120) or "—",
        ]
        for c in cost
    ]
    return (
        ["## Cost model check (A0 vs A1)", "", intro, ""]
        + (
            markdown_table(
                [
                    "A0",
                    "A1",
                    "unit",
                    "A0 ref fwd / step",
                    "predicted ratio",
                    "measured ratio",
                    "timing noise (2 SE)",
                    "configs also differ in",
                ],
                body,
            )
            if body
            else ["No A0/A1 pair in these runs."]
        )
        + [""]
    )


def per_seed_lines(arms: dict[str, dict[Any, Run]], k: int) -> list[str]:
    body = []
    for arm, runs in arms.items():
        for pair, run in sorted(runs.items(), key=lambda item: str(item[0])):
            n = run_numbers(run, k)
            body.append(
                [
                    _cell(arm, 40),
                    _cell(pair, 30),
                    _cell(run.seed, 30),
                    _f(n["score"]),
                    _f(n["final_val"]),
                    _f(n["warm"]),
                    _f(n["s_step"], 3, "s"),
                    _f(n["s_token"] * 1e6, 1, "µs"),
                ]
            )
    return (
        ["## Per-seed numbers", ""]
        + markdown_table(
            [
                "arm",
                "pair",
                "seed",
                f"score (last {k} evals)",
                "final val reward",
                "warm-start score",
                "step time",
                "time / generated token",
            ],
            body,
        )
        + [""]
    )


def details_lines(
    groups: dict[str, list[Run]], matrix: dict, threshold: float, source: str, window: int, spike: int, origin=("", "")
) -> list[str]:
    what = (
        "validation reward (`reward/val`)"
        if source == "val"
        else f"train reward (`reward/mean`, trailing mean over {window} steps)"
    )
    reach = (
        f"first step where the {what} reaches {threshold:.3f}"
        + (f" ({origin[0]}{md_text(origin[1], 80)})" if origin[0] else "")
        if math.isfinite(threshold)
        else "not computed (no positive reward to set a threshold)"
    )
    body = [
        [
            _cell(label, 60),
            len(runs),
            matrix[label]["steps_to_thr"].fmt(1, counts=True),
            matrix[label]["kl_max"].fmt(4),
            matrix[label]["kl_spike"].fmt(4),
            _scaled(matrix[label]["tokens_per_s"], 1e-3, 1, "k tok/s"),
            matrix[label]["peak_mem"].fmt(1, unit="MB"),
        ]
        for label, runs in groups.items()
    ]
    return (
        [
            "## Configuration details",
            "",
            f"Mean ± std over seeds; `[n/N]` = seeds that reached the threshold. Steps to "
            f"threshold: {reach}. Spike = max KL within {spike} steps after a reset. Policy "
            "tokens/s = `count/tokens_policy` ÷ `time/step` (per-run median); peak RSS is the "
            "per-run max.",
            "",
        ]
        + markdown_table(
            [
                "configuration",
                "runs",
                "steps to threshold",
                "KL max",
                "KL spike after reset",
                "policy tokens/s",
                "peak RSS",
            ],
            body,
        )
        + [""]
    )
