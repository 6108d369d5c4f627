"""Figures from saved run directories: `summary.png`, `ref_cost.png` and per-run plots.

Everything here reads runs through `runlog` (saved logs only) and builds matplotlib `Figure`
objects without pyplot, so it works headless (Agg) and tests can inspect panels before saving:

    fig = summary_figure(runs)       # 2x2: train reward, validation reward, KL, throughput
    fig = ref_cost_figure(runs)      # 3 panels: ref forwards/step, ref time/step, stage times
    save_summary(runs, "runs/summary.png")     # also writes runs/ref_cost.png
    run_plots("runs/A1")             # runs/A1/plots/{summary,ref_cost,diagnostics}.png

In every time-series panel each run is one line labelled with `Run.label` (with
`by_config=True`: one line per configuration, the mean over its seeds, with a min–max band);
reference/optimizer resets are vertical dotted lines and growth events vertical dashed lines in
the entry's colour (their Line2D labels start with "_", so `run_lines(ax)` returns data lines);
entries, curves, styles and legends are drawn with plot_parts.py.
The command line entry (`analysis/commands.plot_main`, which parses before importing this module)
backs `scripts/plot_runs.py` and `prorl-bench plot`. Labels and titles built from a run's files
(config values, suite arm names, directory names) go through `untrusted.plot_text` (one line,
no mathtext); every output path is checked (`check_outputs`) before the first figure is written.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import numpy as np
from matplotlib.artist import Artist
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from noma_prorl_bench.analysis.plot_parts import (
    Entry,
    _colors,
    _draw,
    _event_keys,
    _finish,
    _legend,
    _mark_events,
    _panel,
    _style,
    curve,
    entries,
    merge_twins,
    run_lines,
    smooth_window,
)
from noma_prorl_bench.analysis.runlog import THROUGHPUT_KEY, Run, kl_loss_key, load_run
from noma_prorl_bench.analysis.untrusted import plot_text

if TYPE_CHECKING:
    from matplotlib.typing import LineStyleType

STAGES = ("rollout", "ref", "train", "eval", "other")
STAGE_COLORS = {"rollout": "#4c72b0", "ref": "#dd8452", "train": "#55a868", "eval": "#c44e52", "other": "#8c8c8c"}


# ---------------------------------------------------------------- summary figure

KL_STYLES: tuple[tuple[str, LineStyleType], ...] = (("kl/k1", "-."), ("kl/k3", (0, (4, 1, 1, 1, 1, 1))))


def _clip_outliers(ax, q: float = 99.0, margin: float = 1.3) -> None:
    """Cap the y-axis at `margin` x the q-th percentile of the plotted data, so a few k3
    spikes (k3 = r - 1 - log r is heavy-tailed) do not flatten every other line; the title
    says when it is capped."""
    per_line = [np.asarray(line.get_ydata(), dtype=float) for line in ax.get_lines()]
    ys = np.concatenate([y[np.isfinite(y)] for y in per_line]) if per_line else np.array([])
    if ys.size == 0:
        return
    top, peak = float(np.percentile(ys, q)) * margin, float(ys.max())
    if peak > top > 0:
        ax.set_ylim(min(0.0, float(ys.min())), top)
        ax.set_title(ax.get_title() + f"\n(y capped at {top:.3g}; max {peak:.3g})", fontsize=9)


def summary_figure(
    runs: Sequence[Run], by_config: bool = False, throughput: bool = True, twins: dict[str, str] | None = None
) -> Figure:
    """2x2 panels against step, one line per run (or, by_config, per configuration: the mean
    over seeds with a min–max band): train reward (trailing mean), validation reward, KL
    (solid: the estimate in the loss; dash-dot k1, dash-dot-dot k3; for B the anchor is the
    old policy) and throughput (policy tokens/s, `runlog.THROUGHPUT_KEY`, trailing mean), or
    with `throughput=False` (runs not interleaved in time, whose throughputs compare machine
    loads) the KL to the warm-started policy (`kl/to_init`) instead. Arms identical by
    construction (`twins`, arm -> arm it equals) are drawn once, the kept line's label naming
    them (throughput keeps every arm: their costs differ). Entries differ in colour and line
    style. Resets dotted, growth dashed. An entry that never logged a panel's key still gets an
    (empty) line there."""
    ents = entries(runs, by_config)
    color = dict(zip((lab for lab, _ in ents), _colors(len(ents))))
    style = {lab: _style(i) for i, (lab, _) in enumerate(ents)}
    members = dict(ents)
    src = merge_twins(ents, twins)  # shown label -> entry label
    shown = [(lab, members[orig]) for lab, orig in src.items()]
    n_legend = len(shown) + len(_event_keys(ents)) + 3
    fig = Figure(figsize=(12, 8 + 0.18 * -(-n_legend // 3)))
    axes = fig.subplots(2, 2, sharex=True).ravel()
    w = smooth_window(max((len(r.steps) for r in runs), default=0))
    avg = f" (trailing mean of {w})" if w > 1 else ""
    _panel(axes[0], "Train reward" + avg, "reward/mean")
    _panel(axes[1], "Validation reward", "reward/val")
    _panel(axes[2], "KL in the loss (A: to reference; B: to old policy)", "KL estimate")
    if throughput:
        _panel(axes[3], "Throughput: policy tokens / step time" + avg, "tokens/s")
    else:
        _panel(axes[3], "KL to the warm-started policy (kl/to_init)", "kl/to_init")
    for label, rs in shown:
        c, ls = color[src[label]], style[src[label]]
        _draw(axes[0], label, rs, "reward/mean", c, w, linestyle=ls)
        _draw(axes[1], label, rs, "reward/val", c, initial=True, marker="o", markersize=3, linestyle=ls)
        key = kl_loss_key(rs[0])
        _draw(axes[2], label, rs, key, c, linestyle=ls)
        for other, kl_style in KL_STYLES:
            if other != key and rs[0].has(other):
                steps, mean, _, _ = curve(rs, other)
                axes[2].plot(steps, mean, color=c, linestyle=kl_style, linewidth=0.8, alpha=0.6, label=f"_{other}")
        if not throughput:
            _draw(axes[3], label, rs, "kl/to_init", c, linestyle=ls)
    if throughput:
        for label, rs in ents:
            _draw(axes[3], label, rs, THROUGHPUT_KEY, color[label], w, linestyle=style[label])
    _clip_outliers(axes[2])
    for ax in axes:
        _mark_events(ax, shown, [color[src[lab]] for lab, _ in shown])
    rows = _summary_legend(fig, ents, shown, src, color, style, throughput)
    _finish(fig, "Training summary", rows)
    return fig


def _summary_legend(
    fig: Figure,
    ents: Sequence[Entry],
    shown: Sequence[Entry],
    src: dict[str, str],
    color: dict,
    style: dict,
    throughput: bool,
) -> int:
    """The summary figure's legend: the shown entries (and, with the throughput panel, the twins
    drawn there only), the event keys and the KL line styles; returns its number of rows."""
    kl_keys: list[Artist] = [Line2D([], [], color="gray", label="KL in the loss (the entry's line)")]
    kl_keys += [
        Line2D([], [], color="gray", linestyle=st, linewidth=0.8, label=f"{k[3:]} (thin)") for k, st in KL_STYLES
    ]
    extra = (
        [(f"{lab} (throughput panel only)", rs) for lab, rs in ents if lab not in src.values()] if throughput else []
    )
    legend_ents = list(shown) + extra
    origin = dict(src) | {f"{lab} (throughput panel only)": lab for lab, _ in ents}
    return _legend(
        fig,
        legend_ents,
        [color[origin[lab]] for lab, _ in legend_ents],
        _event_keys(ents) + kl_keys,
        [style[origin[lab]] for lab, _ in legend_ents],
    )


# ---------------------------------------------------------------- reference cost figure


def stage_means(run: Run) -> dict[str, float]:
    """Mean seconds per step (over all steps) in rollout / ref / train / eval (0 where a stage
    was never logged) and `other` = step - the four, floored at 0."""
    means = {}
    for stage in ("rollout", "ref", "train", "eval", "step"):
        _, v = run.series(f"time/{stage}")
        means[stage] = float(v.sum() / max(len(run.steps), 1)) if v.size else 0.0
    parts = sum(means[s] for s in STAGES[:-1])
    means["other"] = max(0.0, means["step"] - parts)
    return means


def ref_cost_figure(runs: Sequence[Run], by_config: bool = False) -> Figure:
    """Three panels: reference forwards per step and reference seconds per step against step
    (one line per run, or per configuration with a seed band), and below them one horizontal
    stacked bar per run (configuration: mean over seeds) of mean rollout / ref / train /
    eval / other seconds per step."""
    ents = entries(runs, by_config)
    colors = _colors(len(ents))
    bar_h = 1.0 + 0.3 * len(ents)
    n_legend = len(ents) + len(_event_keys(ents))
    fig = Figure(figsize=(13, 4.2 + bar_h + 0.18 * -(-n_legend // 3)))
    grid = fig.add_gridspec(2, 2, height_ratios=(4.0, bar_h))
    axes = [fig.add_subplot(grid[0, 0]), fig.add_subplot(grid[0, 1]), fig.add_subplot(grid[1, :])]
    _panel(axes[0], "Reference forwards per step", "count/ref_fwd")
    _panel(axes[1], "Reference time per step", "time/ref (s)")
    for (label, rs), color in zip(ents, colors):
        _draw(axes[0], label, rs, "count/ref_fwd", color, drawstyle="steps-mid")
        _draw(axes[1], label, rs, "time/ref", color)
    for ax in axes[:2]:
        _mark_events(ax, ents, colors)
    _stage_bars(axes[2], ents)
    rows = _legend(fig, ents, colors, _event_keys(ents))
    _finish(fig, "Reference cost", rows)
    return fig


def _stage_bars(ax, ents: Sequence[Entry]) -> None:
    ax.set_title("Mean stage time per step", fontsize=10)
    ax.set_xlabel("seconds per step")
    ax.grid(alpha=0.3, axis="x")
    y = np.arange(len(ents))
    left = np.zeros(len(ents))
    means = [[stage_means(r) for r in rs] for _, rs in ents]
    for stage in STAGES:
        w = np.array([np.mean([m[stage] for m in ms]) for ms in means])
        ax.barh(y, w, left=left, color=STAGE_COLORS[stage], label=stage)
        left += w
    ax.set_yticks(y, [plot_text(lab, 200) for lab, _ in ents], fontsize=8)  # whole labels, never cut
    ax.invert_yaxis()
    ax.set_xlim(0, 1.3 * max(float(left.max(initial=0.0)), 1e-9))
    ax.legend(fontsize=8, loc="lower right")


# ---------------------------------------------------------------- per-run diagnostics

DIAGNOSTIC_KEYS = (
    ("loss/total", "loss/pg", "loss/kl"),
    ("clip/frac",),
    ("policy/entropy",),
    ("optim/grad_norm",),
    ("optim/lr", "kl/beta"),
    ("adapter/rank", "reset/steps_since"),
)


def diagnostics_figure(run: Run) -> Figure:
    """2x3 panels of one run's optimisation diagnostics (losses, clipping, entropy, grad norm,
    lr/beta, adapter rank and steps since reset); a key never logged leaves its panel empty."""
    fig = Figure(figsize=(13, 7))
    axes = fig.subplots(2, 3, sharex=True).ravel()
    for ax, keys in zip(axes, DIAGNOSTIC_KEYS):
        _panel(ax, " / ".join(keys), "")
        for key in keys:
            s, v = run.series(key)
            if v.size:
                ax.plot(s, v, label=key)
        if run_lines(ax):
            ax.legend(fontsize=7)
        else:
            ax.text(0.5, 0.5, "not logged", transform=ax.transAxes, ha="center", color="gray")
        _mark_events(ax, [(run.label, [run])], ["k"])
    fig.suptitle(f"Diagnostics: {plot_text(run.label)} ({plot_text(run.path.name, 60)})", fontsize=12)
    fig.tight_layout(rect=(0, 0, 1, 0.96))
    return fig


# ---------------------------------------------------------------- saving


def check_outputs(paths: Sequence[str | Path], flag: str = "--out") -> None:
    """Refuse (RunDirRefused, naming `flag` and the path) before anything is written when two of
    `paths` are the same file, or one is a symbolic link or exists as something other than a
    regular file (a directory, FIFO, socket or device); a missing path is fine."""
    from noma_prorl_bench.io.safe_files import RunDirRefused, UnsafePath  # noqa: PLC0415

    seen: set[str] = set()
    for p in map(str, paths):
        key = os.path.normpath(os.path.abspath(p))
        if key in seen:
            raise RunDirRefused(f"argument {flag}: {p!r} is also another file this command writes; choose another name")
        seen.add(key)
        try:
            mode = os.lstat(p).st_mode
        except FileNotFoundError:
            continue
        if stat.S_ISLNK(mode):
            raise UnsafePath(p, flag)
        if not stat.S_ISREG(mode):
            raise RunDirRefused(
                f"argument {flag}: {p!r} exists and is not a regular file (a directory, "
                "FIFO, socket or device); refusing to write over it"
            )


def save_summary(
    runs: Sequence[Run],
    out_png: str | Path,
    dpi: int = 110,
    by_config: bool = False,
    throughput: bool = True,
    twins: dict[str, str] | None = None,
    ref_cost: bool = True,
) -> list[Path]:
    """Write `summary_figure` (with `throughput` and `twins`) to `out_png` and, with `ref_cost`,
    `ref_cost_figure` to `ref_cost.png` beside it; every path is checked (`check_outputs`) before
    any is written. The paths written, the summary first."""
    from noma_prorl_bench.io.safe_files import makedirs, save_figure  # noqa: PLC0415

    out = Path(out_png)
    ref_png = out.parent / "ref_cost.png"
    paths = [out, ref_png] if ref_cost else [out]
    check_outputs(paths)
    makedirs(str(out.parent))
    save_figure(summary_figure(runs, by_config, throughput, twins), str(out), dpi=dpi, bbox_inches="tight")
    if ref_cost:
        save_figure(ref_cost_figure(runs, by_config), str(ref_png), dpi=dpi, bbox_inches="tight")  # never via a link
    return paths


def run_plots(run_dir: str | Path, dpi: int = 100) -> list[Path]:
    """Per-run plots under `run_dir/plots/`: summary.png, ref_cost.png, diagnostics.png."""
    run = load_run(run_dir)
    plots = run.path / "plots"
    diag = plots / "diagnostics.png"
    check_outputs([plots / "summary.png", plots / "ref_cost.png", diag], "--outdir")
    written = save_summary([run], plots / "summary.png", dpi=dpi)
    from noma_prorl_bench.io.safe_files import save_figure  # noqa: PLC0415

    save_figure(diagnostics_figure(run), str(diag), dpi=dpi)
    return written + [diag]
