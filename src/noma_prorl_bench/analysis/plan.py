"""`prorl-bench plan DIR`: how many paired seeds each comparison of a pilot suite needs.

Reads a finished (pilot) suite directory the way the report does (suite.json's arms, pairs,
comparisons, Holm families and checks; settings.json's K and whether the runs were interleaved),
takes each comparison's observed SD of the paired differences, and solves for the smallest
number of pairs n whose minimal detectable effect at the requested power, after the family's
correction, is at most the effect to detect (`stats.seeds_needed`; Bonferroni's alpha/m is
Holm's first step, and n also has to let the sign-flip test reach alpha/m: 2/2^n < alpha/m):

    rows = plan_rows(run_dirs, suite, settings, effect=0.02)   # effect in the score's units
    print("\n".join(plan_lines(rows, power=0.8)))

With no effect given, each row's target is its own observed |mean difference| (the seeds that
would detect the pilot's effect if it is real). The SD is a pilot estimate: with few pilot pairs
it is itself uncertain, so treat the answer as a planning figure, not a guarantee.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Sequence

from noma_prorl_bench.analysis import compare as cmp
from noma_prorl_bench.analysis import stats
from noma_prorl_bench.analysis.runlog import load_runs
from noma_prorl_bench.analysis.untrusted import term_text


def plan_rows(
    run_dirs: Sequence[str | Path],
    suite: dict | None,
    settings: dict | None,
    effect: float | None = None,
    power: float = 0.8,
) -> list[dict[str, Any]]:
    """One row per comparison the report would make: name, family, m (family size), metric,
    n_pairs, sd, diff, effect (the target: `effect` for score rows, else |diff|), and
    seeds_needed (inf: never within 10 000 pairs or zero effect; NaN: SD unknown)."""
    settings = settings or {}
    runs = load_runs(run_dirs)
    arms = cmp.arm_table(runs, suite)
    comparisons = (suite or {}).get("comparisons") or cmp.default_comparisons(arms)
    rows = cmp.compare(
        arms,
        comparisons,
        int(settings.get("score_evals", cmp.DEFAULT_K)),
        (suite or {}).get("families"),
        (suite or {}).get("checks") or [],
        bool(settings.get("interleaved", False)),
    )
    out = []
    for r in rows:
        target = effect if effect is not None and r["metric"] == "score" else abs(r["diff"])
        out.append(
            dict(
                name=r["name"],
                family=r["family"],
                m=r["family_size"],
                metric=r["metric"],
                n_pairs=r["n_pairs"],
                sd=r["sd"],
                diff=r["diff"],
                effect=target,
                seeds_needed=stats.seeds_needed(r["sd"], target, max(r["family_size"], 1), power=power),
            )
        )
    return out


def plan_lines(rows: list[dict], power: float = 0.8) -> list[str]:
    """A plain table: comparison, family (m), metric, pilot pairs, SD, effect, seeds needed; names
    from suite.json shown by `untrusted.term_text` (no control character reaches the terminal)."""
    head = (
        f"{'comparison':<44} {'family (m)':<18} {'metric':<9} {'pilot':>5} {'sd(d)':>9} "
        f"{'effect':>9} {'seeds for ' + format(power, '.0%') + ' power':>22}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        _, unit, _, scale, dec = cmp.METRICS[r["metric"]]
        n = r["seeds_needed"]
        need = (
            "unknown (SD needs 2 pilot pairs)"
            if not math.isfinite(n) and math.isnan(n)
            else "> 10000"
            if n == math.inf
            else str(int(n))
        )
        fam = f"{term_text(r['family'], 14)} ({r['m']})"
        lines.append(
            f"{term_text(r['name'], 44):<44} {fam[:18]:<18} "
            f"{unit:<9} {r['n_pairs']:>5} {r['sd'] * scale:>9.{dec + 1}f} "
            f"{r['effect'] * scale:>9.{dec + 1}f} {need:>22}"
        )
    lines += [
        "",
        "seeds = smallest n with (t(1 - 0.05/(2m), n-1) + t(power, n-1)) sd / sqrt(n) "
        "<= effect and 2/2^n < 0.05/m (Holm's first step within the family of m "
        "questions); sd from the pilot's paired differences.",
    ]
    return lines
