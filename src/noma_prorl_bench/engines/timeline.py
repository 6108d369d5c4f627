"""Stage spans of every actor -> `OUTDIR/timeline.jsonl` -> a Gantt plot `OUTDIR/plots/timeline.png`.

A span is one line `{"actor", "stage", "start", "end", "step"}`: seconds relative to the
run start (the driver's `time.time()` at launch, handed to every actor; one machine shares
one clock, on a multi-node cluster the spans carry the nodes' clock offsets). Stages:
`setup` (the actor's constructor: model build, the learner's warm start), `generate` (sampling
+ rewards), `ref` (reference forward), `train` (the learner's update,
reference-in-train included), `eval` (validation + monitors), `sync` (packing, fetching or
loading weights, reference resets included) and `idle` (the gap between two spans of one
actor, recorded when the next span starts). `step` is the RL step the span works for.

`SpanRecorder` lives in each actor; its `drain()` is returned with each call's result and the
driver appends the spans to timeline.jsonl. Plots read only the saved file:

    spans = load_timeline("runs/async")
    timeline_figure(spans).savefig("t.png")      # or save_timeline_plot("runs/async")
    stage_seconds(spans)                         # {(actor, stage): seconds}
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path

STAGES = ("setup", "generate", "ref", "train", "eval", "sync", "idle")
COLORS = {
    "setup": "#937860",
    "generate": "#4c72b0",
    "ref": "#dd8452",
    "train": "#55a868",
    "eval": "#c44e52",
    "sync": "#8172b3",
    "idle": "#e5e5e5",
}
MIN_IDLE = 1e-4  # gaps shorter than this are not recorded as idle


class SpanRecorder:
    """Per-actor span log with times relative to `t0` (seconds since the epoch, shared)."""

    def __init__(self, actor: str, t0: float):
        self.actor, self.t0 = actor, t0
        self.spans: list[dict] = []
        self.last_end: float | None = None

    def now(self) -> float:
        return time.time() - self.t0

    def add(self, stage: str, start: float, end: float, step: int) -> None:
        """Record [start, end] (relative seconds); the gap since the previous span is `idle`."""
        if self.last_end is not None and start - self.last_end > MIN_IDLE:
            self.spans.append(
                {"actor": self.actor, "stage": "idle", "start": self.last_end, "end": start, "step": step}
            )
        self.spans.append({"actor": self.actor, "stage": stage, "start": start, "end": end, "step": step})
        self.last_end = max(end, self.last_end or end)

    @contextmanager
    def span(self, stage: str, step: int):
        start = self.now()
        try:
            yield
        finally:
            self.add(stage, start, self.now(), step)

    def drain(self) -> list[dict]:
        out, self.spans = self.spans, []
        return out


def load_timeline(run_dir: str | Path) -> list[dict]:
    """The spans of a run directory (a partial last line is dropped; read as a run file: io/safe_files.py)."""
    from noma_prorl_bench.io.safe_files import read_bytes  # noqa: PLC0415

    spans = []
    for line in read_bytes(str(Path(run_dir) / "timeline.jsonl")).decode("utf-8", errors="replace").splitlines():
        try:
            spans.append(json.loads(line))
        except (json.JSONDecodeError, RecursionError):
            continue
    return spans


def stage_seconds(spans: list[dict]) -> dict[tuple[str, str], float]:
    """Total seconds per (actor, stage)."""
    out: dict[tuple[str, str], float] = defaultdict(float)
    for s in spans:
        out[(s["actor"], s["stage"])] += s["end"] - s["start"]
    return dict(out)


def _actor_order(name: str) -> tuple:
    rank = {"learner": 0, "reference": 2}
    base = name.split("/")[0]
    return (rank.get(base, 1), name)


def _gantt(ax, spans: list[dict], actors: list[str], lo: float, hi: float) -> None:
    for row, actor in enumerate(actors):
        mine = [s for s in spans if s["actor"] == actor and s["end"] >= lo and s["start"] <= hi]
        for stage in STAGES:
            bars = [(s["start"], s["end"] - s["start"]) for s in mine if s["stage"] == stage]
            if bars:
                ax.broken_barh(
                    bars,
                    (row - 0.38, 0.76),
                    facecolors=COLORS[stage],
                    edgecolor="none" if stage == "idle" else "white",
                    linewidth=0.3,
                )
        busy = sum(min(s["end"], hi) - max(s["start"], lo) for s in mine if s["stage"] != "idle")
        ax.text(hi, row, f" busy {busy / max(hi - lo, 1e-9):.0%}", va="center", fontsize=8)
    ax.set_yticks(range(len(actors)), actors)
    ax.set_ylim(len(actors) - 0.5, -0.5)
    ax.set_xlim(lo, hi + 0.1 * (hi - lo))


def zoom_window(spans: list[dict], last_steps: int) -> tuple[float, float]:
    """(start, end) of the last `last_steps` steps' work spans (setup and idle excluded)."""
    work = [s for s in spans if s["stage"] not in ("setup", "idle")]
    if not work:
        return 0.0, 1.0
    top = max(s["step"] for s in work)
    win = [s for s in work if s["step"] > top - last_steps]
    return min(s["start"] for s in win), max(s["end"] for s in work)


def timeline_figure(spans: list[dict], title: str = "timeline", zoom_steps: int = 6):
    """Gantt chart (a matplotlib Figure, no pyplot), one row per actor and one bar per span,
    with each row's busy fraction: the whole run on top, the last `zoom_steps` steps below."""
    from matplotlib.figure import Figure  # noqa: PLC0415  (actors import this module; keep them light)
    from matplotlib.patches import Patch  # noqa: PLC0415

    actors = sorted({s["actor"] for s in spans}, key=_actor_order)
    fig = Figure(figsize=(11, 2.2 + 1.2 * max(len(actors), 1)))
    ax_all, ax_zoom = fig.add_subplot(2, 1, 1), fig.add_subplot(2, 1, 2)
    end = max((s["end"] for s in spans), default=1.0)
    _gantt(ax_all, spans, actors, 0.0, end)
    ax_all.set_title(f"{title}: whole run (setup included)", fontsize=10)
    lo, hi = zoom_window(spans, zoom_steps)
    _gantt(ax_zoom, spans, actors, lo, hi)
    ax_zoom.set_title(f"last {zoom_steps} steps", fontsize=10)
    ax_zoom.set_xlabel("seconds since run start")
    used = [st for st in STAGES if any(s["stage"] == st for s in spans)]
    fig.legend(
        handles=[Patch(color=COLORS[st], label=st) for st in used],
        loc="lower center",
        ncol=len(used),
        frameon=False,
        fontsize=8,
    )
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    return fig


def save_timeline_plot(run_dir: str | Path, dpi: int = 110, title: str | None = None) -> Path:
    """OUTDIR/plots/timeline.png from OUTDIR/timeline.jsonl."""
    from noma_prorl_bench.io.safe_files import makedirs, save_figure  # noqa: PLC0415

    run_dir = Path(run_dir)
    out = run_dir / "plots" / "timeline.png"
    makedirs(str(out.parent))
    save_figure(timeline_figure(load_timeline(run_dir), title or f"timeline: {run_dir.name}"), str(out), dpi=dpi)
    return out
