"""Read saved run directories (the output contract in docs/design.md) into plain numpy data.

A run directory holds `config.json`, `metrics.jsonl`, `events.jsonl`, optionally
`samples.jsonl` and, once the run finished, `summary.json` with `"complete": true`.
Plots and reports read runs only through this module, never through a live process.

    run = load_run("runs/A1")
    steps, val = run.series("reward/val")      # finite points of RL steps 1..S
    run.initial["reward/val"]                  # before RL: the step-0 row (older runs: warmstart event)
    runs = load_runs(["runs/A0", "runs/A1"])   # labels name what varies between runs

The step-0 row is kept apart so that scores and per-run numbers cover RL steps only;
`run.series(key, initial=True)` puts it first (curves that start before RL).

Per-run numbers (one value per run; `report` aggregates them over seeds):
  final_val      last logged `reward/val`
  steps_to_thr   first step where the source curve >= threshold; source "val" (`reward/val`) or
                 "train" (trailing mean of `reward/mean` over `window` steps)
  kl_mean/kl_max mean / max of the KL estimate in the loss (`kl_loss_key`)
  kl_spike       max over resets at step s of the max KL over steps s+1..s+k (NaN without resets)
  ref_fwd        mean `count/ref_fwd`;  step_time  median `time/step` (s)
  tokens_per_s   median of THROUGHPUT_KEY (policy tokens per second of step time, see below)
  peak_mem       max `perf/peak_rss_mb`

Derived series (computed here, never logged): THROUGHPUT_KEY = `count/tokens_policy` ÷
`time/step` per step. The trainer's `perf/tokens_per_s` also counts reference tokens, so it
rises when A0 wastes work on extra reference forwards; policy tokens do not (same E, M, N, T),
which makes this the fair cross-variant throughput. Runs without those keys fall back to
`perf/tokens_per_s`.

JSONL files are read tolerantly (run_files.py): a partial last line (a run killed mid-write) is
dropped; an unparseable line elsewhere is dropped with a warning. Both are recorded in
`Run.dropped`. A run file that is a symlink, FIFO, socket, device or directory is not read:
ValueError naming it (io/safe_files.py; hard links are fine for reading).
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from noma_prorl_bench.analysis.run_files import (
    SAMPLES_LIMIT,
    align_metrics,
    initial_values,
    is_step0,
    read_jsonl,
    read_text,
)
from noma_prorl_bench.config import REF_CODES, kl_metric_key

#: Config keys that never distinguish configurations (per-run bookkeeping).
NOT_CONFIG = frozenset(
    {
        "seed",
        "outdir",
        "out_dir",
        "versions",
        "machine",
        "git",
        "git_commit",
        "commit",
        "run_id",
        "command",
        "argv",
        "hostname",
        "started",
        "start_time",
        "timestamp",
        "resume",
        "resumes",
        "plots",
        "overwrite",
        "quiet",
        "log_every",
        "save_every",
        "keep_checkpoints",
        "derived",
        "ray_address",
        "actor_timeout",
    }
)

#: Derived per-step throughput (see the module docstring).
THROUGHPUT_KEY = "derived/policy_tokens_per_s"

#: Events that mark a reset (plotted dotted; "spike after reset" windows start at them).
RESET_EVENTS = ("ref_reset", "opt_reset")

#: Keys shown in labels (in this order) when they vary between runs; others follow sorted.
LABEL_ORDER = (
    "opt_reset",
    "reset_every",
    "growth",
    "beta",
    "kl_estimator",
    "task",
    "ppo_epochs",
    "minibatches",
    "steps",
)


@dataclass
class Run:
    """One saved run. `metrics[key]` is a float array aligned with `steps` (NaN = not logged);
    `initial` holds the values before RL (the step-0 row, module docstring)."""

    path: Path
    config: dict[str, Any]
    steps: np.ndarray  # [S] int, sorted, 1-based RL step numbers
    metrics: dict[str, np.ndarray]  # key -> [S] float
    events: list[dict[str, Any]]
    samples: list[dict[str, Any]]
    summary: dict[str, Any] | None
    label: str = ""  # set by load_run / load_runs
    group: str = ""  # label without the seed (configuration label)
    arm: str = ""  # the suite arm (report.py sets it from suite.json)
    dropped: list[str] = field(default_factory=list)  # "file:line" of unparseable lines
    initial: dict[str, float] = field(default_factory=dict)  # key -> value at step 0 (before RL)

    @property
    def complete(self) -> bool:
        """True when `summary.json` says the run finished."""
        return bool(self.summary and self.summary.get("complete"))

    @property
    def seed(self) -> Any:
        return self.config.get("seed")

    def series(self, key: str, initial: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """(steps, values) where `key` was logged with a finite value; empty arrays if never.
        `initial`: start with (0, the value before RL) when the run has one for `key`."""
        vals = self.metrics.get(key, np.zeros(0))
        ok = np.isfinite(vals)
        steps, vals = (self.steps[ok], vals[ok]) if key in self.metrics else (np.zeros(0, dtype=int), vals)
        v0 = self.initial.get(key, math.nan) if initial else math.nan
        if math.isfinite(v0):
            steps, vals = np.concatenate([[0], steps]).astype(int), np.concatenate([[v0], vals])
        return steps, vals

    def has(self, key: str) -> bool:
        return key in self.metrics and bool(np.isfinite(self.metrics[key]).any())

    def event_steps(self, *kinds: str) -> list[int]:
        """Sorted distinct steps of events whose `event` is in `kinds`."""
        return sorted({int(e["step"]) for e in self.events if e.get("event") in kinds and e.get("step") is not None})


def kl_loss_key(run: Run) -> str:
    """Metric key of the KL estimate the run puts in its loss (`kl_estimator` in the config);
    if that key was never logged, the first of kl/k3, kl/k1, kl/k2 that was."""
    key = kl_metric_key(run.config.get("kl_estimator", "k3"))
    if run.has(key):
        return key
    return next((k for k in ("kl/k3", "kl/k1", "kl/k2") if run.has(k)), key)


def load_run(run_dir: str | Path, root: str | Path | None = None) -> Run:
    """Load one run directory (below `root`, a suite folder, no directory reached through a link).
    FileNotFoundError if absent; ValueError if not a run, or naming the run file that is refused."""
    path = Path(run_dir)
    base = Path(root) if root is not None else path
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such directory")
    if not path.is_dir():
        raise ValueError(f"{path} is not a run directory (it is a file)")
    missing = [n for n in ("config.json", "metrics.jsonl") if not os.path.lexists(path / n)]
    if missing:
        raise ValueError(f"{path} is not a run directory: missing {', '.join(missing)}")
    try:
        config = json.loads(read_text(path / "config.json", base))
    except (json.JSONDecodeError, RecursionError) as err:
        raise ValueError(f"{path}/config.json is not valid JSON: {err}") from err
    if not isinstance(config, dict):
        raise ValueError(f"{path}/config.json is not a JSON object")
    dropped: list[str] = []
    rows = read_jsonl(path / "metrics.jsonl", dropped, base)
    steps, metrics = align_metrics([r for r in rows if not is_step0(r)])
    events = read_jsonl(path / "events.jsonl", dropped, base)
    samples = read_jsonl(path / "samples.jsonl", dropped, base, head=SAMPLES_LIMIT)
    summary = None
    if os.path.lexists(path / "summary.json"):
        try:
            summary = json.loads(read_text(path / "summary.json", base))
        except (json.JSONDecodeError, RecursionError):
            dropped.append("summary.json")
    run = Run(
        path,
        config,
        steps,
        metrics,
        events,
        samples,
        summary if isinstance(summary, dict) else None,
        dropped=dropped,
        initial=initial_values([r for r in rows if is_step0(r)], events),
    )
    run.label = run.group = base_label(config)
    add_derived(run)
    return run


def add_derived(run: Run) -> None:
    """Add THROUGHPUT_KEY = count/tokens_policy / time/step (or a copy of perf/tokens_per_s)."""
    tokens, step_s = run.metrics.get("count/tokens_policy"), run.metrics.get("time/step")
    if tokens is not None and step_s is not None:
        with np.errstate(divide="ignore", invalid="ignore"):
            run.metrics[THROUGHPUT_KEY] = np.where(step_s > 0, tokens / step_s, np.nan)
    elif "perf/tokens_per_s" in run.metrics:
        run.metrics[THROUGHPUT_KEY] = run.metrics["perf/tokens_per_s"].copy()


# ---------------------------------------------------------------- labels and groups


def base_label(config: dict[str, Any]) -> str:
    """'A0 naive_epoch', 'A1 cached', 'A2 ring' or 'B no-ref' from variant/ref_compute."""
    if str(config.get("variant", "A")).upper() == "B":
        return "B no-ref"
    ref = str(config.get("ref_compute", "cached"))
    return f"{REF_CODES.get(ref, 'A?')} {ref}"


def config_key(config: dict[str, Any]) -> dict[str, str]:
    """The configuration a run belongs to (everything but per-run bookkeeping and the seed),
    normalised so fields that do not apply (B's ref_compute, migration without growth) drop out.
    Values are JSON strings so they can be compared and hashed."""
    cfg = {k: v for k, v in config.items() if k not in NOT_CONFIG}
    cfg["variant"] = base_label(config)
    cfg.pop("ref_compute", None)
    growth = bool(cfg.pop("enable_growth", False))
    migration = cfg.pop("growth_migration", None)
    cfg["growth"] = f"grow:{migration}" if growth else "no-grow"
    if not growth:
        for k in [k for k in cfg if k.startswith("grow_") or k == "rank_step"]:
            cfg.pop(k)
    return {k: json.dumps(v, sort_keys=True) for k, v in cfg.items()}


def _fmt_field(key: str, raw: str) -> str:
    value = json.loads(raw)
    if key == "growth":
        return str(value)
    if key == "opt_reset":
        return f"opt={value}"
    if key == "reset_every":
        return "no-reset" if not value else f"reset every {value}"
    return f"{key}={value}"


def varying_keys(keys: Sequence[dict[str, str]]) -> list[str]:
    """Config fields (other than the variant) taking more than one value among the `keys` that
    have them (so a growth-only field like grow_every shows only when growth runs differ)."""
    names = sorted({k for key in keys for k in key} - {"variant"})
    vary = [n for n in names if len({key[n] for key in keys if n in key}) > 1]
    return [n for n in LABEL_ORDER if n in vary] + [n for n in vary if n not in LABEL_ORDER]


def group_label(key: dict[str, str], vary: Sequence[str]) -> str:
    """Human label of one configuration: the variant plus the varying fields it has."""
    parts = [json.loads(key["variant"])]
    parts += [_fmt_field(n, key[n]) for n in vary if n in key]
    return ", ".join(parts)


def assign_labels(runs: Sequence[Run]) -> None:
    """Set `group` (configuration label) and `label` (plus seed when seeds vary) on `runs`;
    two runs that would still share a label get their directory name appended."""
    keys = [config_key(r.config) for r in runs]
    vary = varying_keys(keys)
    seeds_vary = len({json.dumps(r.seed) for r in runs}) > 1
    for run, key in zip(runs, keys):
        run.group = group_label(key, vary)
        run.label = f"{run.group}, seed {run.seed}" if seeds_vary else run.group
    counts: dict[str, int] = {}
    for run in runs:
        counts[run.label] = counts.get(run.label, 0) + 1
    for run in runs:
        if counts[run.label] > 1:
            run.label = f"{run.label} [{run.path.name}]"


def load_runs(run_dirs: Sequence[str | Path], root: str | Path | None = None) -> list[Run]:
    """Load several runs (below `root`, a suite folder: `load_run`) and label them by what varies between them."""
    runs = [load_run(d, root) for d in run_dirs]
    assign_labels(runs)
    return runs


def group_runs(runs: Sequence[Run]) -> dict[str, list[Run]]:
    """Runs grouped by configuration (all seeds of a config together), in first-seen order.
    Labels come from `assign_labels` over all `runs`."""
    assign_labels(runs)
    groups: dict[str, list[Run]] = {}
    for run in runs:
        groups.setdefault(run.group, []).append(run)
    return groups


def find_run_dirs(root: str | Path) -> list[Path]:
    """Run directories at or below `root` (those holding config.json and metrics.jsonl)."""
    root = Path(root)
    found = {p.parent for p in root.rglob("config.json") if (p.parent / "metrics.jsonl").is_file()}
    return sorted(p for p in found if not _below_link(p, root))


def _below_link(path: Path, root: Path) -> bool:
    """Whether a directory between `root` and `path` (or `path` itself) is a symbolic link."""
    rel = path.relative_to(root).parts
    return any((root.joinpath(*rel[: i + 1])).is_symlink() for i in range(len(rel)))


# ---------------------------------------------------------------- per-run numbers


def smooth(values: np.ndarray, window: int) -> np.ndarray:
    """Trailing mean over the last `window` finite values' positions (NaN ignored)."""
    x = np.asarray(values, dtype=float)
    if window <= 1 or x.size == 0:
        return x.copy()
    ok = np.isfinite(x)
    csum = np.concatenate([[0.0], np.cumsum(np.where(ok, x, 0.0))])
    ccnt = np.concatenate([[0], np.cumsum(ok)])
    hi = np.arange(1, x.size + 1)
    lo = np.maximum(hi - window, 0)
    cnt = ccnt[hi] - ccnt[lo]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(cnt > 0, (csum[hi] - csum[lo]) / np.maximum(cnt, 1), np.nan)


def last_value(run: Run, key: str) -> float:
    """Last finite value of `key`; NaN if never logged."""
    _, v = run.series(key)
    return float(v[-1]) if v.size else math.nan


def reduce_key(run: Run, key: str, fn) -> float:
    """`fn` (np.mean, np.median, np.max, ...) over the finite values of `key`; NaN if none."""
    _, v = run.series(key)
    return float(fn(v)) if v.size else math.nan


def threshold_curve(run: Run, source: str, window: int = 10) -> tuple[np.ndarray, np.ndarray]:
    """The curve `steps_to_threshold` scans: val reward, or trailing-mean train reward."""
    if source == "val":
        return run.series("reward/val")
    steps, v = run.series("reward/mean")
    return steps, smooth(v, window)


def steps_to_threshold(run: Run, threshold: float, source: str, window: int = 10) -> float:
    """First step whose source value reaches `threshold`; NaN if never."""
    steps, v = threshold_curve(run, source, window)
    hit = np.nonzero(v >= threshold)[0]
    return float(steps[hit[0]]) if hit.size else math.nan


def kl_spike(run: Run, k: int) -> float:
    """Max over reset steps s of the max KL (loss estimate) over steps s+1..s+k."""
    steps, v = run.series(kl_loss_key(run))
    peaks = [
        v[(steps > s) & (steps <= s + k)].max()
        for s in run.event_steps(*RESET_EVENTS)
        if ((steps > s) & (steps <= s + k)).any()
    ]
    return float(max(peaks)) if peaks else math.nan


def run_stats(run: Run, *, threshold: float, source: str, window: int = 10, k: int = 10) -> dict[str, float]:
    """Every per-run number of the result matrix (definitions in the module docstring)."""
    kl = kl_loss_key(run)
    return {
        "final_val": last_value(run, "reward/val"),
        "steps_to_thr": steps_to_threshold(run, threshold, source, window),
        "kl_mean": reduce_key(run, kl, np.mean),
        "kl_max": reduce_key(run, kl, np.max),
        "kl_spike": kl_spike(run, k),
        "ref_fwd": reduce_key(run, "count/ref_fwd", np.mean),
        "step_time": reduce_key(run, "time/step", np.median),
        "tokens_per_s": reduce_key(run, THROUGHPUT_KEY, np.median),
        "peak_mem": reduce_key(run, "perf/peak_rss_mb", np.max),
    }
