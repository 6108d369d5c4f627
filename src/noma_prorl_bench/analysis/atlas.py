"""The regime map (atlas): a suite whose arms are named `b{beta}-{treatment}` (suite.py's
`atlas` and `quick` presets) is read as a beta x reference-treatment grid. For each beta the
`none` arm never resets the reference; every other treatment resets it periodically and differs
in what Adam does there (keep, hard, soft, asym, step).

    grid = parse_arms(arms)            # {beta: {treatment: arm}} or None
    cells = effect_cells(arms, rows, k)  # effect vs that beta's none arm + the tested verdict
    lines = atlas_section(arms, rows, k, figures_dir, rel)   # markdown + two figures

A cell's number is the mean paired effect on the score against that beta's `none` arm with its
95% t interval (`stats.bootstrap_ci`); its mark is the verdict of the question the suite tests
for that cell: `keep` vs `none`, and every other treatment vs `keep` (suite.py
ATLAS_COMPARISONS). The clamp figure shows, per beta, the weighted KL term (beta x `loss/kl`)
against |`loss/pg`| and `kl/to_init` over steps (resets dotted), the evidence that a fixed
reference clamps the policy at large beta.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Callable

import numpy as np

from noma_prorl_bench.analysis import stats
from noma_prorl_bench.analysis.compare import run_numbers
from noma_prorl_bench.analysis.runlog import RESET_EVENTS, Run

ARM_RE = re.compile(r"^b(?P<beta>[0-9.]+(?:e-?[0-9]+)?)-(?P<treatment>[a-z]+)$")
#: the short verdict marks printed in cells
MARKS = {"better": "better", "worse": "worse", "no detectable difference": "n.d."}


def parse_arms(arms: dict[str, Any]) -> dict[str, dict[str, str]] | None:
    """{beta (as named): {treatment: arm}} in the arms' order, when every arm is named
    b{beta}-{treatment} and some beta has a `none` arm and another treatment; else None."""
    grid: dict[str, dict[str, str]] = {}
    for arm in arms:
        m = ARM_RE.match(arm)
        if m is None:
            return None
        grid.setdefault(m["beta"], {})[m["treatment"]] = arm
    if not any("none" in ts and len(ts) > 1 for ts in grid.values()):
        return None
    return dict(sorted(grid.items(), key=lambda kv: float(kv[0])))


def treatments(grid: dict[str, dict[str, str]]) -> list[str]:
    """Treatment columns in the arms' order (none first)."""
    cols = list(dict.fromkeys(t for ts in grid.values() for t in ts))
    return sorted(cols, key=lambda t: t != "none")


def _tested_row(rows: list[dict], arm: str, base: str) -> dict | None:
    return next((r for r in rows if r["metric"] == "score" and r["arm"] == arm
                 and r["baseline"] == base), None)


def effect_cells(arms: dict[str, dict[Any, Run]], rows: list[dict], k: int) -> dict:
    """{(beta, treatment): cell}: diff and ci95 of the score against that beta's none arm
    (paired by seed), n, and the verdict / p_holm / mde80 of the cell's tested question (keep vs
    none; X vs keep) with that question's baseline."""
    grid = parse_arms(arms) or {}
    cells = {}
    for beta, ts in grid.items():
        base = ts.get("none")
        for t, arm in ts.items():
            if base is None or t == "none":
                continue
            pairs = sorted(set(arms[arm]) & set(arms[base]), key=str)
            x = np.array([run_numbers(arms[arm][p], k)["score"] for p in pairs])
            y = np.array([run_numbers(arms[base][p], k)["score"] for p in pairs])
            ok = np.isfinite(x) & np.isfinite(y)
            tested_base = base if t == "keep" else ts.get("keep", base)
            row = _tested_row(rows, arm, tested_base)
            cells[(beta, t)] = dict(
                diff=float(np.mean(x[ok] - y[ok])) if ok.any() else np.nan,
                ci95=list(stats.bootstrap_ci(x[ok], y[ok])), n=int(ok.sum()),
                tested=f"{t} vs {'none' if tested_base == base else 'keep'}",
                verdict=row["verdict"] if row else None, p_holm=row["p_holm"] if row else np.nan,
                mde80=row["mde80"] if row else np.nan,
                tested_diff=row["diff"] if row else np.nan)
    return cells


def _fmt(v: float, sign: bool = True) -> str:
    return "—" if not np.isfinite(v) else f"{v:+.3f}" if sign else f"{v:.3f}"


def atlas_section(arms: dict[str, dict[Any, Run]], rows: list[dict], k: int,
                  figures_dir: Path, rel: Callable[[Path], str]) -> list[str]:
    """The map's markdown (a beta x treatment table) and its two figures; [] for other suites."""
    grid = parse_arms(arms)
    if grid is None:
        return []
    from noma_prorl_bench.analysis.plots import clamp_figure, heatmap_figure

    cells = effect_cells(arms, rows, k)
    cols = [t for t in treatments(grid) if t != "none"]
    body = []
    for beta, ts in grid.items():
        line = [f"beta {beta}"]
        for t in cols:
            c = cells.get((beta, t))
            if c is None:
                line.append("—")
                continue
            lo, hi = c["ci95"]
            mark = MARKS.get(c["verdict"], "not tested")
            line.append(f"{_fmt(c['diff'])} [{_fmt(lo)}, {_fmt(hi)}] {mark} ({c['tested']})")
        body.append(line)
    figures_dir.mkdir(parents=True, exist_ok=True)
    heat, clamp = figures_dir / "atlas_heatmap.png", figures_dir / "atlas_clamp.png"
    heatmap_figure(grid, cells).savefig(heat, dpi=110, bbox_inches="tight")
    clamp_figure(arms, grid).savefig(clamp, dpi=110, bbox_inches="tight")
    header = ["beta"] + [f"{t}" for t in cols]
    return ["## The map: reference treatment x beta", "",
            f"Each cell: mean paired effect on the score (last {k} evaluations) against that "
            "beta's `none` arm (no reference reset), with its 95% t interval, then the verdict "
            "of the question the suite tests for the cell (Holm within the beta's family; "
            "`n.d.` = no detectable difference): `keep` is tested against `none`, every other "
            "treatment against `keep` (so a cell can differ from `none` and still be `n.d.` "
            "against `keep`). Effects and mde80 of the tested questions are in the comparison "
            "tables below.", ""] + _table(header, body) + [
        "", f"![Atlas heatmap]({rel(heat)})", "",
        "Clamp evidence per beta: the weighted KL term (beta × `loss/kl`, solid) against "
        "|`loss/pg`| (dashed), and the policy's KL to its warm start (`kl/to_init`) over steps, "
        "means over seeds; resets dotted.", "", f"![Clamp evidence]({rel(clamp)})", ""]


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return out + ["| " + " | ".join(row) + " |" for row in rows]


def reset_steps(runs: list[Run]) -> list[int]:
    """Steps where any of `runs` logged a reference/optimizer reset."""
    return sorted({s for r in runs for s in r.event_steps(*RESET_EVENTS)})
