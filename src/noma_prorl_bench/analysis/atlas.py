"""The regime map (atlas): a suite whose arms are named `b{beta}-{treatment}` (matrix.py's
`atlas` and `quick` presets) is read as a beta x reference-treatment grid. For each beta the
`none` arm never resets the reference; every other treatment resets it periodically and differs
in what Adam does there (keep, hard, soft, asym, step).

    grid = parse_arms(arms)            # {beta: {treatment: arm}} or None
    cells = effect_cells(arms, rows, k)  # the tested comparison per cell: effect, CI, verdict
    lines = atlas_section(arms, rows, k, figures_dir, rel)   # markdown + two figures

A cell shows one comparison, the question the suite tests for it: `keep` vs that beta's `none`
arm, every other treatment vs `keep` (matrix.py ATLAS_COMPARISONS). Its colour and number are that
comparison's mean paired effect on the score (95% interval: `stats.paired_interval`), its mark is
that comparison's verdict, so colour, number and verdict always agree.
The clamp figure shows, per beta, the weighted KL term (beta x `loss/kl`)
against |`loss/pg`| and `kl/to_init` over steps (resets dotted), the evidence that a fixed
reference clamps the policy at large beta.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Callable

import numpy as np
from matplotlib.figure import Figure

from noma_prorl_bench.analysis import stats
from noma_prorl_bench.analysis.compare import resolution, run_numbers
from noma_prorl_bench.analysis.plots import (
    _colors,
    _draw,
    _panel,
    _style,
    check_outputs,
    smooth_window,
    summary_figure,
)
from noma_prorl_bench.analysis.runlog import RESET_EVENTS, Run, smooth
from noma_prorl_bench.analysis.tables import markdown_table
from noma_prorl_bench.io.safe_files import makedirs, save_figure

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
    return next((r for r in rows if r["metric"] == "score" and r["arm"] == arm and r["baseline"] == base), None)


def effect_cells(arms: dict[str, dict[Any, Run]], rows: list[dict], k: int) -> dict:
    """{(beta, treatment): cell}: the cell's tested question (keep vs none; X vs keep, the same
    beta): diff and ci95 of the score against that baseline (paired by seed), n, and the
    question's verdict / p_holm / mde80."""
    grid = parse_arms(arms) or {}
    cells = {}
    for beta, ts in grid.items():
        base = ts.get("none")
        for t, arm in ts.items():
            if base is None or t == "none":
                continue
            tested_base = base if t == "keep" else ts.get("keep", base)
            pairs = sorted(set(arms[arm]) & set(arms[tested_base]), key=str)
            x = np.array([run_numbers(arms[arm][p], k)["score"] for p in pairs])
            y = np.array([run_numbers(arms[tested_base][p], k)["score"] for p in pairs])
            ok = np.isfinite(x) & np.isfinite(y)
            row = _tested_row(rows, arm, tested_base)
            cells[(beta, t)] = dict(
                diff=float(np.mean(x[ok] - y[ok])) if ok.any() else np.nan,
                ci95=list(stats.paired_interval(x[ok] - y[ok], resolution=resolution("score"))),
                n=int(ok.sum()),
                tested=f"{t} vs {'none' if tested_base == base else 'keep'}",
                verdict=row["verdict"] if row else None,
                p_holm=row["p_holm"] if row else np.nan,
                mde80=row["mde80"] if row else np.nan,
                tested_diff=row["diff"] if row else np.nan,
            )
    return cells


def _fmt(v: float, sign: bool = True) -> str:
    return "—" if not np.isfinite(v) else f"{v:+.3f}" if sign else f"{v:.3f}"


def figure_paths(grid: dict[str, dict[str, str]], figures_dir: Path) -> list[Path]:
    """The map's figures: the heatmap, the clamp figure, then one training summary per beta."""
    return [
        figures_dir / "atlas_heatmap.png",
        figures_dir / "atlas_clamp.png",
        *(figures_dir / f"summary_beta{beta}.png" for beta in grid),
    ]


def _cell_text(c: dict) -> str:
    """A map table cell: effect [95% CI], verdict mark, the comparison tested (and mde80 when n.d.)."""
    lo, hi = c["ci95"]
    mark = MARKS.get(c["verdict"], "not tested")
    mde = (
        ""
        if c["verdict"] != "no detectable difference"
        else ", mde80 ∞"
        if c["mde80"] == np.inf
        else f", mde80 {_fmt(c['mde80'], sign=False)}"
    )
    return f"{_fmt(c['diff'])} [{_fmt(lo)}, {_fmt(hi)}] {mark} ({c['tested']}{mde})"


def atlas_section(
    arms: dict[str, dict[Any, Run]], rows: list[dict], k: int, figures_dir: Path, rel: Callable[[Path], str]
) -> list[str]:
    """The map's markdown (a beta x treatment table) and its two figures; [] for other suites."""
    grid = parse_arms(arms)
    if grid is None:
        return []
    cells = effect_cells(arms, rows, k)
    cols = [t for t in treatments(grid) if t != "none"]
    body = []
    for beta, ts in grid.items():
        line = [f"beta {beta}"]
        for t in cols:
            c = cells.get((beta, t))
            line.append("—" if c is None else _cell_text(c))
        body.append(line)
    heat, clamp, *per_png = figure_paths(grid, figures_dir)
    pngs = dict(zip(grid, per_png))
    check_outputs([heat, clamp, *per_png], "--figures")  # every path before any figure is written
    makedirs(str(figures_dir))
    save_figure(heatmap_figure(grid, cells), str(heat), dpi=110, bbox_inches="tight")  # never via a link
    save_figure(clamp_figure(arms, grid), str(clamp), dpi=110, bbox_inches="tight")
    per_beta = []
    for beta, ts in grid.items():  # one readable training summary per beta
        runs = [r for arm in ts.values() for r in arms[arm].values()]
        save_figure(
            summary_figure(runs, by_config=True, throughput=False), str(pngs[beta]), dpi=100, bbox_inches="tight"
        )
        per_beta.append(f"[beta {beta}]({rel(pngs[beta])})")
    header = ["beta"] + [f"{t}" for t in cols]
    return (
        [
            "## The map: reference treatment x beta",
            "",
            f"Each cell is one comparison, the question the suite tests for it: `keep` against "
            "that beta's `none` arm (no reference reset), every other treatment against `keep`. "
            f"It shows that comparison's mean paired effect on the score (last {k} evaluations) "
            "with its 95% interval and its verdict (Holm within the beta's family; `n.d.` = no "
            "detectable difference, with its mde80).",
            "",
        ]
        + markdown_table(header, body)
        + [
            "",
            f"![Atlas heatmap]({rel(heat)})",
            "",
            "Clamp evidence per beta: the weighted KL term (beta × `loss/kl`, solid) against "
            "|`loss/pg`| (dashed), and the policy's KL to its warm start (`kl/to_init`) over steps, "
            "means over seeds; resets dotted.",
            "",
            f"![Clamp evidence]({rel(clamp)})",
            "",
            "Training curves per beta (one line per treatment, mean over seeds with a min–max "
            "band): " + ", ".join(per_beta) + ".",
            "",
        ]
    )


# ---------------------------------------------------------------- figures


def heatmap_figure(grid: dict[str, dict[str, str]], cells: dict) -> Figure:
    """Beta rows x treatment columns (analysis/atlas.py), one comparison per cell (keep vs none,
    X vs keep): colour = its mean paired score effect (diverging, 0 white), text = that effect,
    its 95% CI and its verdict; a solid frame marks `better`, a dashed frame `worse` (so the
    verdict reads without colour)."""
    betas = list(grid)
    cols = [t for t in dict.fromkeys(t for ts in grid.values() for t in ts) if t != "none"]
    data = np.full((len(betas), len(cols)), np.nan)
    for (beta, t), c in cells.items():
        if t in cols:
            data[betas.index(beta), cols.index(t)] = c["diff"]
    lim = float(np.nanmax(np.abs(data))) if np.isfinite(data).any() else 1.0
    fig = Figure(figsize=(2.1 * len(cols) + 2.2, 1.25 * len(betas) + 1.8))
    ax = fig.subplots()
    im = ax.imshow(data, cmap="RdBu", vmin=-lim, vmax=lim, aspect="auto")
    ax.set_xticks(range(len(cols)), [f"reset + {t}" for t in cols])
    ax.set_yticks(range(len(betas)), [f"beta {b}" for b in betas])
    for (beta, t), c in cells.items():
        if t not in cols:
            continue
        _draw_cell(ax, betas.index(beta), cols.index(t), c, lim)
    for i, j in zip(*np.nonzero(~np.isfinite(data))):
        ax.text(j, i, "not run", ha="center", va="center", fontsize=8, color="gray")
    fig.colorbar(im, ax=ax, label="score effect of the cell's comparison")
    ax.set_title(
        "Score effect per beta: reset + keep vs no reset; each other treatment vs reset + keep\n"
        "mean paired difference [95% CI] and its verdict (Holm per beta); "
        "frame: solid = better, dashed = worse",
        fontsize=10,
    )
    fig.tight_layout()
    return fig


def _draw_cell(ax, i: int, j: int, c: dict, lim: float) -> None:
    """One heatmap cell's text (effect, CI, verdict, mde80 when n.d.) and its verdict frame."""
    from matplotlib.patches import Rectangle  # noqa: PLC0415  (matplotlib loads only for a figure)

    lo, hi = c["ci95"]
    mark = {"better": "better", "worse": "worse"}.get(c["verdict"], "n.d.")
    if c["verdict"] is None:
        mark = "not tested"
    mde = ""
    if mark == "n.d.":
        mde = "\nmde80 ∞" if c["mde80"] == np.inf else f"\nmde80 {c['mde80']:.3f}" if np.isfinite(c["mde80"]) else ""
    dark = np.isfinite(c["diff"]) and abs(c["diff"]) > 0.6 * lim
    ci = f"[{lo:+.3f}, {hi:+.3f}]" if np.isfinite(lo) and np.isfinite(hi) else "no CI (< 2 pairs)"
    ax.text(
        j,
        i,
        f"{c['diff']:+.3f}\n{ci}\n{mark} ({c['tested']}){mde}",
        ha="center",
        va="center",
        fontsize=8,
        color="white" if dark else "black",
    )
    if c["verdict"] in ("better", "worse"):
        ax.add_patch(
            Rectangle(
                (j - 0.46, i - 0.44),
                0.92,
                0.88,
                fill=False,
                linewidth=2.2,
                edgecolor="black",
                linestyle="-" if c["verdict"] == "better" else "--",
            )
        )


def clamp_figure(arms: dict, grid: dict[str, dict[str, str]]) -> Figure:
    """Per beta (columns): top, the weighted KL term beta x `loss/kl` (solid) against |`loss/pg`|
    (dashed) for the `none` and `keep` arms (log scale; trailing means, then means over seeds);
    bottom, `kl/to_init` of every treatment. Resets dotted."""
    betas = list(grid)
    fig = Figure(figsize=(4.2 * len(betas), 8.2))
    axes = fig.subplots(2, len(betas), squeeze=False)
    for j, beta in enumerate(betas):
        ts = grid[beta]
        top, bottom = axes[0, j], axes[1, j]
        _panel(top, f"beta {beta}: KL term vs policy-gradient term", "|loss term|")
        _panel(bottom, f"beta {beta}: KL to the warm start", "kl/to_init")
        top.set_yscale("log")
        for i, t in enumerate(("none", "keep")):
            runs = list(arms[ts[t]].values()) if t in ts else []
            if not runs:
                continue
            w = smooth_window(max(len(r.steps) for r in runs)) * 2
            color = f"C{i}"
            kl = [_abs_series(r, "loss/kl", float(beta)) for r in runs]
            pg = [_abs_series(r, "loss/pg", 1.0) for r in runs]
            for series, ls, what in ((kl, "-", "beta x loss/kl"), (pg, "--", "|loss/pg|")):
                steps, mean = _mean_smoothed(series, w)
                top.plot(steps, mean, color=color, linestyle=ls, label=f"{t}: {what}")
        top.legend(fontsize=7)
        colors = _colors(len(ts))
        for i, (t, arm) in enumerate(ts.items()):
            runs = list(arms[arm].values())
            _draw(bottom, t, runs, "kl/to_init", colors[i], linestyle=_style(i), marker=".", markersize=3)
        resets = sorted({s for arm in ts.values() for r in arms[arm].values() for s in r.event_steps(*RESET_EVENTS)})
        for ax in (top, bottom):
            for step in resets:
                ax.axvline(step, color="gray", linestyle=":", linewidth=0.9, label="_reset")
        bottom.legend(fontsize=7, title="treatment (resets dotted)", title_fontsize=7)
    fig.suptitle(
        "Clamp evidence: does the KL term dominate the loss, and does the policy stop "
        "moving from its warm start? (means over seeds)",
        fontsize=11,
    )
    fig.tight_layout(rect=(0, 0, 1, 0.96))
    return fig


def _abs_series(run: Run, key: str, scale: float) -> tuple[np.ndarray, np.ndarray]:
    steps, v = run.series(key)
    return steps, np.abs(v) * scale


def _mean_smoothed(series: list, window: int) -> tuple[np.ndarray, np.ndarray]:
    """Trailing-mean smoothed series, averaged over runs on the union of their steps."""
    steps = np.unique(np.concatenate([s for s, _ in series])) if series else np.zeros(0, int)
    table = np.full((len(series), steps.size), np.nan)
    for row, (s, v) in zip(table, series):
        row[np.searchsorted(steps, s)] = smooth(v, window)
    with np.errstate(invalid="ignore"):
        return steps, np.nanmean(table, 0) if steps.size else np.zeros(0)
