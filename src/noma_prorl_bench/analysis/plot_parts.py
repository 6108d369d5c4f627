"""The parts every figure of saved runs is drawn with: entries (one per run, or per configuration
or suite arm, averaging its seeds), their curves (mean and min-max band over seeds), colours and
line styles, reset and growth markers, panels, legends and layout. plots.py draws the summary,
reference-cost and diagnostics figures with them; the atlas (atlas.py) its curve panels.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import numpy as np
from matplotlib.artist import Artist
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from noma_prorl_bench.analysis.runlog import RESET_EVENTS, Run, group_runs, smooth
from noma_prorl_bench.analysis.untrusted import plot_text

if TYPE_CHECKING:
    from matplotlib.typing import LineStyleType

#: A plotted entry: (legend label, the runs it averages; one run = that run's own line).
Entry = tuple[str, list[Run]]


def smooth_window(n_steps: int) -> int:
    """Window used for noisy per-step curves: about 2% of the run, at least 1."""
    return max(1, n_steps // 50)


def run_lines(ax) -> list[Line2D]:
    """The data lines of a panel (event markers and style keys excluded)."""
    return [ln for ln in ax.get_lines() if not ln.get_label().startswith("_")]


def entries(runs: Sequence[Run], by_config: bool = False) -> list[Entry]:
    """One entry per run, or (by_config) one per suite arm (when the report set `run.arm`),
    else per configuration, averaging its seeds. Arms keep an A/A control (same configuration,
    other seeds) apart from the arm it controls."""
    if not by_config:
        return [(r.label, [r]) for r in runs]
    group_runs(list(runs))  # sets run.group
    groups: dict[str, list[Run]] = {}
    for r in runs:
        groups.setdefault(r.arm or r.group, []).append(r)
    return [(f"{g} ({len(rs)} seeds)" if len(rs) > 1 else g, rs) for g, rs in groups.items()]


def curve(runs: Sequence[Run], key: str, window: int = 1, initial: bool = False):
    """(steps, mean, min, max) across `runs` of the (trailing-mean smoothed) series `key`,
    on the union of steps where any run logged it; `initial`: from step 0 (before RL) on."""
    series = [r.series(key, initial) for r in runs]
    steps = np.unique(np.concatenate([s for s, _ in series])) if series else np.zeros(0, int)
    table = np.full((len(series), steps.size), np.nan)
    for row, (s, v) in zip(table, series):
        row[np.searchsorted(steps, s)] = smooth(v, window)
    if steps.size == 0:
        return steps, *(np.zeros(0),) * 3
    return steps, np.nanmean(table, 0), np.nanmin(table, 0), np.nanmax(table, 0)


def _draw(ax, label: str, runs: Sequence[Run], key: str, color, window: int = 1, initial: bool = False, **kw) -> None:
    steps, mean, lo, hi = curve(runs, key, window, initial)
    if 0 < steps.size <= 3:  # measured at 1-3 steps only: a bare line is invisible
        kw = {"marker": "o", **kw}
    ax.plot(steps, mean, color=color, label=plot_text(label, 200), **kw)
    if len(runs) > 1 and steps.size:
        ax.fill_between(steps, lo, hi, color=color, alpha=0.15, linewidth=0)
        if steps.size <= 3:
            ax.errorbar(steps, mean, yerr=[mean - lo, hi - mean], color=color, fmt="none", capsize=3)


def _colors(n: int) -> list:
    from matplotlib import colormaps  # noqa: PLC0415  (matplotlib loads only when plotting)

    cmap = colormaps["tab10" if n <= 10 else "tab20"]
    return [cmap(i % cmap.N) for i in range(n)]


#: data line styles, cycled with the colours so neighbouring entries differ in both (a reader
#: without colour, or a printout, still tells them apart)
LINE_STYLES: tuple[LineStyleType, ...] = ("-", "--", "-.", (0, (1, 1)))


def _style(i: int) -> LineStyleType:
    return LINE_STYLES[i % len(LINE_STYLES)]


def merge_twins(ents: Sequence[Entry], twins: dict[str, str] | None) -> dict[str, str]:
    """{shown label: original label} of the entries left when arms identical by construction to
    another shown arm (`twins`: arm -> the arm it equals; report.py passes the checks that held)
    are dropped; the kept arm's label names the dropped ones."""
    arm_of = {lab: (rs[0].arm or lab) for lab, rs in ents}
    present = set(arm_of.values())
    twin_of = twins or {}
    dropped = {lab for lab, arm in arm_of.items() if twin_of.get(arm) in present}
    shown = {}
    for lab, arm in arm_of.items():
        if lab in dropped:
            continue
        same = [arm_of[d] for d in dropped if twin_of[arm_of[d]] == arm]
        shown[f"{lab} = {' = '.join(same)} (identical by construction)" if same else lab] = lab
    return shown


def _mark_events(ax, ents: Sequence[Entry], colors: Sequence) -> None:
    for (_, runs), color in zip(ents, colors):
        for kinds, style, name in ((RESET_EVENTS, ":", "_reset"), (("growth",), "--", "_growth")):
            for step in sorted({s for r in runs for s in r.event_steps(*kinds)}):
                ax.axvline(step, color=color, linestyle=style, linewidth=0.9, alpha=0.7, label=name)


def _panel(ax, title: str, ylabel: str) -> None:
    ax.set_title(title, fontsize=10)
    ax.set_xlabel("step")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)


def _legend(
    fig: Figure, ents: Sequence[Entry], colors: Sequence, extra: Sequence[Artist], styles: Sequence | None = None
) -> int:
    """Figure legend below the panels; returns its number of rows."""
    styles = styles or [_style(i) for i in range(len(ents))]
    handles: list[Artist] = [
        Line2D([], [], color=c, linestyle=st, label=plot_text(lab, 120))
        for (lab, _), c, st in zip(ents, colors, styles)
    ]
    handles += list(extra)
    fig.legend(handles=handles, loc="lower center", ncol=min(3, max(1, len(handles))), fontsize=8, frameon=False)
    return -(-len(handles) // 3)


def _event_keys(ents: Sequence[Entry]) -> list[Artist]:
    runs = [r for _, rs in ents for r in rs]
    keys: list[Artist] = []
    if any(r.event_steps(*RESET_EVENTS) for r in runs):
        keys.append(Line2D([], [], color="k", linestyle=":", label="reset (dotted)"))
    if any(r.event_steps("growth") for r in runs):
        keys.append(Line2D([], [], color="k", linestyle="--", label="growth (dashed)"))
    if any(len(rs) > 1 for _, rs in ents):
        keys.append(Patch(color="gray", alpha=0.3, label="min–max over seeds"))
    return keys


def _finish(fig: Figure, title: str, legend_rows: int) -> None:
    """Title, and a layout leaving about 0.18 in per legend row at the bottom."""
    fig.suptitle(title, fontsize=12)
    fig.tight_layout(rect=(0, (0.25 + 0.18 * legend_rows) / fig.get_figheight(), 1, 0.96))
