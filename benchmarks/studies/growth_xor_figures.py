"""Figures of the growth_xor report: loss curves (needs the run's curves) and the paired-CI panels.

``plot(comps, path, saved)`` draws one figure: with ``saved`` (a sweep from ``growth_xor.py --lrs``)
a row of loss-curve panels, one per lr, above the CI panels; without it the CI panels alone (what a
report rebuilt from summary.json can draw). ``crop_to_curve_row(path)`` cuts an earlier combined
figure down to its curve row, for a folder whose raw curves are gone.
"""

from __future__ import annotations

import os

import numpy as np

COLORS = {
    "preserve": "C0",
    "preserve_shared_step": "C9",
    "reset": "C1",
    "naive": "C3",
    "noma_flat": "C2",
    "nogrow": "0.5",
}
ZOOM = 500


def _curves(axes, saved: dict) -> None:
    """One panel per lr: median and min-max band over seeds of each arm's loss after growth."""
    for ax, lr in zip(axes, saved["runs"]):
        for arm, col in COLORS.items():
            curves = np.array([r["modes"][arm]["curve"][:ZOOM] for r in saved["runs"][lr]])
            ax.plot(np.median(curves, 0), ("--" if arm == "naive" else "-"), color=col, lw=1.3, label=arm)
            ax.fill_between(np.arange(curves.shape[1]), curves.min(0), curves.max(0), color=col, alpha=0.08)
        ax.axhline(saved["config"]["target"], color="k", lw=0.5, ls=":")
        ax.set_yscale("log")
        ax.set_title(f"lr {lr}: median, min-max over seeds")
        ax.set_xlabel("steps after growth")
    axes[0].set_ylabel("train cross-entropy")
    axes[0].legend(fontsize=7)


def _ci_panels(ax_steps, ax_final, comps: list[dict]) -> None:
    """Mean paired difference and its 95% CI per comparison; colour = verdict after Holm."""
    for ax, metric, label in ((ax_steps, "steps", "steps to target"), (ax_final, "final", "final loss")):
        rows = [c for c in comps if c["metric"] == metric]
        for i, c in enumerate(rows):
            col = "C3" if c["verdict"] == "worse" else "C2" if c["verdict"] == "better" else "0.4"
            ax.errorbar(
                c["diff"],
                i,
                xerr=[[c["diff"] - c["ci95"][0]], [c["ci95"][1] - c["diff"]]],
                fmt="o",
                color=col,
                capsize=2,
            )
        ax.axvline(0, color="k", lw=0.6)
        ax.set_yticks(range(len(rows)), [c["name"] for c in rows] if ax is ax_steps else [""] * len(rows), fontsize=7)
        ax.set_ylim(len(rows) - 0.5, -0.5)
        ax.set_xlabel(f"paired diff in {label} (arm - baseline; lower is better)")
        ax.set_title(f"{label}: mean and 95% Student t CI", fontsize=10)


def plot(comps: list[dict], path: str, saved: dict | None = None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n_pairs = comps[0]["n_pairs"] if comps else 0
    title = (
        f"paired difference arm - baseline over {n_pairs} seeds (red: worse, green: better, grey: no "
        "detectable difference; Holm across the report)"
    )
    if saved is None:
        fig, (ax_s, ax_f) = plt.subplots(1, 2, figsize=(13.0, 4.4))
    else:
        lrs = list(saved["runs"])
        fig = plt.figure(figsize=(max(13.0, 4.6 * len(lrs)), 8.4))
        grid = fig.add_gridspec(2, len(lrs), height_ratios=(1.1, 1.0))
        _curves([fig.add_subplot(grid[0, i]) for i in range(len(lrs))], saved)
        bottom = grid[1, :].subgridspec(1, 2)
        ax_s, ax_f = fig.add_subplot(bottom[0, 0]), fig.add_subplot(bottom[0, 1])
    _ci_panels(ax_s, ax_f, comps)
    fig.suptitle(title, fontsize=10, y=0.02 if saved is not None else 0.99, va="bottom" if saved is not None else "top")
    fig.tight_layout(rect=(0, 0.04, 1, 1) if saved is not None else (0, 0, 1, 0.97))
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def _longest_dark_run(row: np.ndarray) -> int:
    best = run = 0
    for dark in row:
        run = run + 1 if dark else 0
        best = max(best, run)
    return best


def crop_to_curve_row(path: str, margin: int = 8) -> bool:
    """Cut the old combined figure (curve row above one CI panel spanning the width) above the CI
    panel's title. The panel is found by its top spine, a dark line longer than 60% of the width
    that no curve-row panel has; without one (already cropped, or another layout) nothing is written.
    Returns whether the file was cropped (False when it does not exist)."""
    import matplotlib.image as mpimg

    if not os.path.isfile(path):
        return False
    img = mpimg.imread(path)
    grey = img[..., :3].mean(-1) if img.ndim == 3 else img
    dark = grey < 0.5
    height, width = dark.shape
    spine = next((y for y in range(height // 3, height) if _longest_dark_run(dark[y]) > 0.6 * width), None)
    if spine is None:
        return False
    blank = ~(grey < 0.98).any(1)
    y = spine
    for want_blank in (False, True, False):  # the spine's own rows, the gap above it, the title
        while y > 0 and blank[y] == want_blank:
            y -= 1
    gap_end = y  # last blank row above the title
    while y > 0 and blank[y]:  # the gap between the curve row and the title
        y -= 1
    cut = min(gap_end + 1, y + 1 + margin)
    mpimg.imsave(path, img[:cut])
    return True
