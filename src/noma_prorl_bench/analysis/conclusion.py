"""The generated conclusion of a report: sentences stating only what the paired comparisons of
`compare.py` (paired interval, sign-flip test Holm-corrected per family), the A0/A1 cost-model
check and the RL-gain shares support (`answer`, `headline`, `conclusion`); findings.py computes
the numbers they quote, report.py renders them. The sentences are markdown: names and caveats read
from a suite or its settings.json go in through `untrusted.md_text` / `md_code`.
"""

from __future__ import annotations

import math
import re
from typing import Sequence

from noma_prorl_bench.analysis.compare import METRICS
from noma_prorl_bench.analysis.untrusted import md_code, md_text


def _cost_sentences(cost: list[dict]) -> list[str]:
    lines = []
    for c in cost:
        r, p = c["measured_ratio"], c["predicted_ratio"]
        size = (
            f"took {r:.2f}× A1's step time"
            if abs(r - 1) > max(c["ratio_noise"], 0.02)
            else f"showed no measurable step-time difference from A1 ({r:.2f}×, timing noise ±{c['ratio_noise']:.2f})"
        )
        lines.append(
            f"Reference cost: A0 ({c['ref_fwd_a0']:.3g} reference forwards per step "
            f"against A1's {c['ref_fwd_a1']:.3g}) {size}; the stage-time cost model "
            f"predicted {p:.2f}× ({p / r - 1:+.0%} off)."
        )
    return lines


def _fmt_diff(row: dict) -> str:
    _, unit, _, scale, dec = METRICS[row["metric"]]
    lo, hi = (v * scale for v in row["ci95"])
    ci = f"95% CI {lo:+.{dec}f} to {hi:+.{dec}f}" if math.isfinite(lo) and math.isfinite(hi) else "no CI with < 2 pairs"
    fragile = "; **fragile**: one seed's flip changes the verdict" if row.get("fragile") else ""
    return f"{row['diff'] * scale:+.{dec}f} {unit} ({ci}, n = {row['n_pairs']}, p_holm = {row['p_holm']:.3f}{fragile})"


def _short_diff(row: dict) -> str:
    """'+0.017 reward [+0.011, +0.026], p_holm 0.010'."""
    _, unit, _, scale, dec = METRICS[row["metric"]]
    lo, hi = (v * scale for v in row["ci95"])
    ci = f" [{lo:+.{dec}f}, {hi:+.{dec}f}]" if math.isfinite(lo) and math.isfinite(hi) else ""
    return f"{row['diff'] * scale:+.{dec}f} {unit}{ci}, p_holm {row['p_holm']:.3f}"


def fmt_mde(row: dict) -> str:
    """'mde80 0.021 reward' (in the metric's unit), '∞' when undetectable at this n."""
    _, unit, _, scale, dec = METRICS[row["metric"]]
    v = row.get("mde80", math.nan)
    if v == math.inf:
        return f"mde80 ∞: {row['n_pairs']} pairs cannot reach p < 0.05/{row.get('family_size', 1)}"
    return f"mde80 {v * scale:.{dec}f} {unit}" if math.isfinite(v) else "mde80 —"


_WHAT = {"score": "validation score", "s_step": "step time", "s_token": "time per generated token"}


def _is_aa(row: dict) -> bool:
    return row["name"].startswith("A/A") or row["arm"].startswith("AA-")


def _comparison_sentences(rows: list[dict]) -> list[str]:
    """The A/A control first, then every verdict, then the null results in one sentence, each
    with the smallest effect it could have detected (mde80)."""
    lines = []
    for row in rows:
        if _is_aa(row):
            lines.append(
                f"A/A control ({md_text(row['arm'], 60)} vs {md_text(row['baseline'], 60)}: "
                f"identical settings, different seeds), {_WHAT[row['metric']]}: {row['verdict']}, "
                f"{_fmt_diff(row)}, {fmt_mde(row)}."
            )
    for row in rows:
        if row["verdict"] != "no detectable difference":
            lines.append(
                f"{md_text(row['name'], 60)}, {_WHAT[row['metric']]}: {md_text(row['arm'], 60)} is "
                f"{row['verdict']} than {md_text(row['baseline'], 60)}, {_fmt_diff(row)}."
            )
    nulls = [
        f"{md_text(r['name'], 60)} ({_WHAT[r['metric']]}, {fmt_mde(r)}"
        + ("; its own 95% CI excludes 0 before the family correction" if r.get("ci_excludes_0") else "")
        + ")"
        for r in rows
        if r["verdict"] == "no detectable difference" and not _is_aa(r)
    ]
    if nulls:
        lines.append(
            "No detectable difference (p_holm >= 0.05; effects and CIs in the table "
            "below; mde80 = the effect each could have detected with 80% power): " + "; ".join(nulls) + "."
        )
    return lines


def _null_power(nulls: list[dict]) -> str:
    """'; with 80% power they could have detected effects of A to B reward (...)' and how many
    could detect nothing (too few pairs for the sign-flip test) or have no SD (< 2 pairs)."""
    spans, inf, unknown = [], 0, 0
    for unit in dict.fromkeys(METRICS[r["metric"]][1] for r in nulls):
        _, _, _, scale, dec = next(v for v in METRICS.values() if v[1] == unit)
        vals = [r.get("mde80", math.nan) * scale for r in nulls if METRICS[r["metric"]][1] == unit]
        fin = [v for v in vals if math.isfinite(v)]
        inf += sum(v == math.inf for v in vals)
        unknown += sum(math.isnan(v) for v in vals)
        if fin:
            spans.append(
                f"{min(fin):.{dec}f} {unit}"
                if min(fin) == max(fin)
                else f"{min(fin):.{dec}f} to {max(fin):.{dec}f} {unit}"
            )
    parts = []
    if spans:
        parts.append(
            "with 80% power they could have detected effects of "
            + "; ".join(spans)
            + " (mde80 per row below), so smaller effects are not ruled out"
        )
    if inf:
        parts.append(
            f"{inf} of them could detect no effect at all (too few pairs for the sign-flip test to reach 0.05/m)"
        )
    if unknown:
        parts.append(f"{unknown} of them have no mde80 (fewer than 2 pairs)")
    return ("; " + "; ".join(parts) if parts else "") + "."


def _effect(row: dict) -> str:
    """'-0.025 [-0.035, -0.014]' in the metric's printed units."""
    _, _, _, scale, dec = METRICS[row["metric"]]
    lo, hi = (v * scale for v in row["ci95"])
    ci = f" [{lo:+.{dec}f}, {hi:+.{dec}f}]" if math.isfinite(lo) and math.isfinite(hi) else ""
    return f"{row['diff'] * scale:+.{dec}f}{ci}"


def _where(r: dict) -> tuple[str, str]:
    """(question, ' at beta B' or '') of a comparison row: the beta its name starts with, after its
    family's name (an atlas family is a beta; the anchors family holds both betas)."""
    fam, name = str(r["family"]), str(r["name"])
    label = name[len(fam) + 2 :] if name.startswith(fam + ": ") else name
    where = f" at {fam}" if name.startswith(fam + ": ") and fam.startswith("beta ") else ""
    beta = re.match(r"(beta [^:]+): (.+)$", label) if not where else None
    if beta:
        where, label = f" at {beta.group(1)}", beta.group(2)
    return label + (f" ({_WHAT[r['metric']]})" if r["metric"] != "score" else ""), where


def _and(items: list[str]) -> str:
    return ", ".join(items[:-1]) + " and" + items[-1] if len(items) > 1 else items[-1]


def answer(rows: list[dict], evidence: bool = True) -> str:
    """The report's opening, one or two sentences a reader can quote: each question that reached
    a verdict, with where (its family, when the family is a beta) and its effect [95% CI]; then each
    question that found no detectable difference, by name, and the smallest effects they could
    have detected."""
    questions = [r for r in rows if not _is_aa(r)]
    if not questions:
        return ""
    found: dict[str, dict[str, list[str]]] = {}
    null_at: dict[str, list[str]] = {}
    for r in questions:
        what, where = _where(r)
        if r["verdict"] == "no detectable difference":
            null_at.setdefault(what, []).append(where)
            continue
        found.setdefault(what, {}).setdefault(r["verdict"], []).append(f"{where} ({_effect(r)})")
    parts = [
        md_text(what, 80) + ": " + ", ".join(verdict + _and(places) for verdict, places in by_verdict.items())
        for what, by_verdict in found.items()
    ]
    nulls = [r for r in questions if r["verdict"] == "no detectable difference"]
    mdes = [
        r["mde80"] * METRICS[r["metric"]][3]
        for r in nulls
        if r["metric"] == "score" and math.isfinite(r.get("mde80", math.nan))
    ]
    named = "; ".join(md_text(what, 80) + (_and(places) if any(places) else "") for what, places in null_at.items())
    rest = f"{len(nulls)} of {len(questions)} questions found no detectable difference" + (
        f" ({named})" if named else ""
    )
    rest += (
        f"; effects below mde80 {min(mdes):.3f}{f'-{max(mdes):.3f}' if max(mdes) > min(mdes) else ''} "
        "reward are not ruled out"
        if mdes
        else ""
    )
    smoke = "" if evidence else " (a smoke run: its sizes check the pipeline, not the questions)"
    if not parts:
        return f"**Answer{smoke}.** No question reached a verdict: {rest}."
    return f"**Answer{smoke}.** " + "; ".join(parts) + f". {rest[0].upper() + rest[1:]}."


def headline(rows: list[dict], checks: Sequence[dict], evidence: bool = True) -> str:
    """The report's first paragraph: what it found and how sure it is (verdicts with effect and
    CI; nulls with the range of their mde80; the identity checks)."""
    questions = [r for r in rows if not _is_aa(r)]
    fams = list(dict.fromkeys(r["family"] for r in questions))
    if not questions:
        text = "This report makes no comparison (fewer than two arms)."
    else:
        found = [r for r in questions if r["verdict"] != "no detectable difference"]
        n_aa = len(rows) - len(questions)
        text = (
            f"**What it found.** {len(questions)} question{'s' * (len(questions) != 1)}"
            + (f" (plus {n_aa} A/A control row{'s' * (n_aa != 1)})" if n_aa else "")
            + f" in {len(fams)} Holm famil{'ies' if len(fams) != 1 else 'y'} "
            f"({', '.join(md_code(f, 60) for f in fams)}; family-wise error 5% within "
            f"{'each' if len(fams) != 1 else 'it'}); {len(found)} reached a verdict"
        )
        text += (
            ": "
            + "; ".join(
                md_text(r["name"], 60)
                + (f" ({_WHAT[r['metric']]})" if r["metric"] != "score" else "")
                + f": **{r['verdict']}**, {_short_diff(r)}"
                for r in found
            )
            + "."
            if found
            else "."
        )
        nulls = [r for r in questions if r["verdict"] == "no detectable difference"]
        if nulls:
            text += f" {len(nulls)} found no detectable difference" + _null_power(nulls)
    if checks:
        bad = [md_text(c["name"], 60) for c in checks if c["identical"] is False]
        ok = sum(c["identical"] is True for c in checks)
        text += (
            f" **ERROR: identical-by-construction check failed: {', '.join(bad)}.**"
            if bad
            else f" Identical-by-construction checks: {ok} of {len(checks)} identical: yes."
        )
    if not evidence:
        text += " This is a smoke run: its sizes check the pipeline, not the questions."
    return text


def _gain_sentences(gains: list[dict]) -> list[str]:
    lines = []
    for g in gains:
        if not math.isfinite(g["share"]):
            lines.append(
                f"{md_text(g['b'], 60)} vs {md_text(g['a'], 60)}: the share of the RL gain cannot be computed "
                f"({md_text(g['a'], 60)}'s mean gain over the warm-start score is "
                f"{g['gain_a']:+.3f}, not positive)."
            )
            continue
        lo, hi = g["ci95"]
        ci = (
            f"95% Fieller interval {lo:.0%} to {hi:.0%}"
            if math.isfinite(lo) and math.isfinite(hi)
            else "95% Fieller interval unbounded: A's gain is not clearly above 0"
            if lo == -math.inf
            else "no interval with < 2 pairs"
        )
        lines.append(
            f"{md_text(g['b'], 60)} kept {g['share']:.0%} of {md_text(g['a'], 60)}'s RL gain over the "
            f"warm-start score {g['warm']:.3f} ({ci}, n = {g['n_pairs']}; "
            f"gains {g['gain_b']:+.3f} vs {g['gain_a']:+.3f}); B's step time: "
            f"{g['speed']}. Criterion 'keeps >= 80% at lower step time': "
            f"{g['held_80']}; '>= 90%': {g['held_90']}."
        )
    return lines


def conclusion(
    cost: list[dict],
    rows: list[dict],
    gains: list[dict],
    n_pairs: int,
    partial: int = 0,
    evidence: bool = True,
    caveats: Sequence[str] = (),
) -> list[str]:
    """Short statements, each backed by a number computed above, plus caveats (`caveats`: what
    the person who ran the suite knows and the logs do not, e.g. machine load, printed first, as
    data: `untrusted.md_text`, at most 1000 characters each)."""
    lines = (
        []
        if evidence
        else [
            "This is a smoke run, not evidence: its preset is sized to check that the pipeline "
            "works, not to detect effects (see the `full` preset)."
        ]
    )
    lines += [f"Caveat: {md_text(c, 1000)}" for c in caveats]
    lines += _cost_sentences(cost) + _gain_sentences(gains) + _comparison_sentences(rows)
    if n_pairs < 10:
        lines.append(
            f"Caveat: as few as {n_pairs} paired seed(s) per comparison; with n pairs "
            f"the smallest possible p-value is 2/2^n ({2 / 2 ** max(n_pairs, 1):.3f}), "
            "so small effects cannot be detected."
        )
    if partial:
        lines.append(
            f"Caveat: {partial} run(s) are incomplete (no summary.json); their numbers cover the steps logged so far."
        )
    return lines
