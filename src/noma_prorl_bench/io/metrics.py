"""Metric sinks, stage timers and exact counters.

Metrics are flat dicts of namespaced keys (`reward/mean`, `count/ref_fwd`, `time/ref`, ...;
every key is defined in docs/metrics.md). A sink is swappable: `JsonlSink` appends one JSON
object per line (one write each, never torn); `CsvSink` and `TensorBoardSink` take the same
records for `--report_to`, and so does `WandbSink` (Weights & Biases, offline by default);
`NullSink` drops everything; `MultiSink` fans out.
Code never branches on whether logging is on.
"""

from __future__ import annotations

import csv
import errno
import io
import json
import math
import os
import resource
import shutil
import time
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Optional

from noma_prorl_bench.io import safe_files

#: one step's metrics: namespaced keys (see the module docstring) -> values
Metrics = dict[str, float]

#: the step-metric keys the run's own decisions read (reset and growth triggers): spelled once,
#: here, and read only by `StepSignals.of`. The KL key is the loss estimator's
#: (`KLTerm.metric_key`, derived from the estimator: config/specs/objective.kl_metric_key), handed
#: to `of` by the Trainer.
REWARD_MEAN = "reward/mean"
REWARD_VAL = "reward/val"


@dataclass(frozen=True)
class StepSignals:
    """What the reset and growth triggers act on, read once from a step's metrics so that no
    trigger spells a metric key. reward_mean: `reward/mean`; reward_val: `reward/val` (eval
    steps only, else None); kl: the loss estimator's per-step mean KL (e.g. `kl/k3`; None when
    the step did not log it). The values are the metrics' own objects, not converted."""

    reward_mean: float
    reward_val: Optional[float] = None
    kl: Optional[float] = None

    @classmethod
    def of(cls, m: Mapping[str, Any], kl_key: str) -> StepSignals:
        """The signals of step metrics `m`; `kl_key` names the KL estimate in the loss."""
        return cls(reward_mean=m[REWARD_MEAN], reward_val=m.get(REWARD_VAL), kl=m.get(kl_key))


def _clean(v):
    """JSON-safe scalars: floats stay floats (NaN/Inf become null), tensors become floats."""
    if hasattr(v, "item") and not isinstance(v, (list, dict)):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


class JsonlSink:
    """Append JSON lines to a file: one `os.write` per line, so each line reaches the file (and
    is visible to readers) at once. A line is never torn: if a write fails part-way (disk full,
    file-size limit, an exception from a signal handler), the file is cut back to where the line
    began and the error is raised."""

    def __init__(self, path: str, mode: str = "a"):
        self.path = path
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | (os.O_TRUNC if mode == "w" else 0)
        self._fd: Optional[int] = safe_files.open_nofollow(path, flags, 0o644)  # never through a symlink

    def write(self, record: dict) -> None:
        data = (json.dumps({k: _clean(v) for k, v in record.items()}) + "\n").encode("utf-8")
        fd = self._fd
        if fd is None:
            raise ValueError(f"{self.path} is closed")
        start = os.lseek(fd, 0, os.SEEK_END)
        try:
            written = os.write(fd, data)
            if written != len(data):
                raise OSError(errno.ENOSPC, f"short write ({written} of {len(data)} bytes)", self.path)
        except BaseException:
            os.ftruncate(fd, start)
            raise

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class NullSink:
    """Discard records."""

    def write(self, record: dict) -> None:
        pass

    def close(self) -> None:
        pass


class MemorySink:
    """Keeps records in memory: set-up records held until the run's files open (local engine),
    an actor's records until `drain()` returns them to the driver (Ray engines)."""

    def __init__(self):
        self.records: list[dict] = []

    def write(self, record: dict) -> None:
        self.records.append(dict(record))

    def drain(self) -> list[dict]:
        out, self.records = self.records, []
        return out

    def close(self) -> None:
        pass


class MultiSink:
    """Write to several sinks."""

    def __init__(self, sinks: Iterable):
        self.sinks = list(sinks)

    def write(self, record: dict) -> None:
        for s in self.sinks:
            s.write(record)

    def close(self) -> None:
        for s in self.sinks:
            s.close()


class CsvSink:
    """OUTDIR/metrics.csv: one row per record, one column per key (the keys of metrics.jsonl, in
    first-seen order; a cell is empty where a step has no value, e.g. `reward/val` off eval
    steps). When a record brings a new key the file is rewritten with the wider header
    (atomically); otherwise a row is appended. `history` (records already logged) seeds it."""

    def __init__(self, path: str, history: Iterable[dict] = ()):
        self.path = path
        self.rows: list[dict] = []
        self.columns: list[str] = []
        for rec in history:
            self._add(rec)
        self._rewrite()

    def _add(self, record: dict) -> bool:
        row = {k: _clean(v) for k, v in record.items()}
        new = [k for k in row if k not in self.columns]
        self.columns += new
        self.rows.append(row)
        return bool(new)

    def _line(self, row: dict) -> str:
        buf = io.StringIO()
        csv.writer(buf, lineterminator="\n").writerow(["" if row.get(k) is None else row[k] for k in self.columns])
        return buf.getvalue()

    def _rewrite(self) -> None:
        safe_files.write_text(
            self.path, self._line({k: k for k in self.columns}) + "".join(self._line(r) for r in self.rows)
        )

    def write(self, record: dict) -> None:
        if self._add(record):
            self._rewrite()
        else:
            safe_files.append_text(self.path, self._line(self.rows[-1]))

    def close(self) -> None:
        pass


class TensorBoardSink:
    """OUTDIR/tb/: every numeric value of a record as a scalar named by its key (`reward/mean`,
    `kl/k3`, ...) at x = record["step"] (torch.utils.tensorboard; needs the tensorboard package).
    Missing values (NaN/Inf are logged as null in metrics.jsonl) are skipped. `history` (records
    already logged) is written first into a fresh directory."""

    def __init__(self, logdir: str, history: Iterable[dict] = ()):
        from torch.utils.tensorboard import SummaryWriter  # noqa: PLC0415  (optional package)

        safe_files.remove_tree(logdir)  # a symlink is removed, not followed
        self._w = SummaryWriter(log_dir=logdir, flush_secs=10)
        for rec in history:
            self.write(rec)

    def write(self, record: dict) -> None:
        step = record.get("step")
        for k, v in record.items():
            v = _clean(v)
            if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool):
                self._w.add_scalar(k, v, global_step=step)

    def close(self) -> None:
        self._w.close()


class WandbSink:
    """OUTDIR/wandb/: a Weights & Biases run whose history holds every numeric value of a record
    under its metrics.jsonl key at step = record["step"], and whose config is the run's config.
    Mode: $WANDB_MODE, offline when unset (files on disk; `wandb sync OUTDIR/wandb/offline-run-*`
    uploads them); project: $WANDB_PROJECT or "prorl-bench"; run name: the outdir's name. As for
    TensorBoard, `history` (records already logged, e.g. before a --resume) is written first into
    a fresh directory, so the W&B run always equals metrics.jsonl."""

    def __init__(self, outdir: str, config: Optional[dict] = None, history: Iterable[dict] = ()):
        import wandb  # noqa: PLC0415  (optional package)

        self._own_service = wandb.run is None
        logdir = os.path.join(outdir, "wandb")
        if os.path.isdir(logdir):
            shutil.rmtree(logdir)
        os.makedirs(logdir)
        mode: Any = os.environ.get("WANDB_MODE", "offline")  # wandb checks the value
        self._run: Any = wandb.init(
            dir=outdir,
            config=config or {},
            mode=mode,
            project=os.environ.get("WANDB_PROJECT", "prorl-bench"),
            name=os.path.basename(os.path.abspath(outdir)),
            settings=wandb.Settings(silent=True, console="off"),
        )
        for rec in history:
            self.write(rec)

    def write(self, record: dict) -> None:
        values = {k: _clean(v) for k, v in record.items() if k != "step"}
        values = {k: v for k, v in values.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        self._run.log(values, step=int(record.get("step", 0)))

    def close(self) -> None:
        """Finish the run and wait until its file is on disk: `finish()` returns before W&B's
        service has flushed and closed run-*.wandb, so a caller reading the run right after
        `run.main` returns in the same process could find it empty. Tearing the service down
        waits for it to exit (the next `wandb.init` starts a new one); a run the caller had open
        before this sink started is left alone."""
        if self._run is not None:
            import wandb  # noqa: PLC0415  (optional package)

            self._run.finish()
            self._run = None
            if self._own_service and wandb.run is None:
                wandb.teardown()


def report_targets(report_to: str) -> list[str]:
    """--report_to as a list: "csv,wandb" -> ["csv", "wandb"]; "none" -> []."""
    return [t.strip() for t in report_to.split(",") if t.strip() and t.strip() != "none"]


def report_sink(report_to: str, outdir: str, history: Iterable[dict] = (), config: Optional[dict] = None):
    """The `--report_to` sink(s) for a run directory: one per name of the comma list, fanned out
    (NullSink for none)."""
    history = list(history)
    sinks: list[Any] = []
    for target in report_targets(report_to):
        if target == "csv":
            sinks.append(CsvSink(os.path.join(outdir, "metrics.csv"), history))
        elif target == "tensorboard":
            sinks.append(TensorBoardSink(os.path.join(outdir, "tb"), history))
        elif target == "wandb":
            sinks.append(WandbSink(outdir, config, history))
    return sinks[0] if len(sinks) == 1 else MultiSink(sinks) if sinks else NullSink()


class StageTimer:
    """Accumulates wall-clock seconds per stage within one step: `with timer("ref"): ...`."""

    def __init__(self):
        self.totals: dict[str, float] = defaultdict(float)

    @contextmanager
    def __call__(self, stage: str):
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.totals[stage] += time.perf_counter() - t0

    def pop(self) -> dict[str, float]:
        """Return {'time/<stage>': seconds} and start over."""
        out = {f"time/{k}": v for k, v in self.totals.items()}
        self.totals = defaultdict(float)
        return out


class Counters:
    """Exact per-step integer counters: `counters.add('policy_fwd_train', 1)`."""

    def __init__(self, keys: Iterable[str] = ()):
        self._keys = list(keys)
        self.values: dict[str, int] = {k: 0 for k in self._keys}

    def add(self, key: str, n: int = 1) -> None:
        self.values[key] = self.values.get(key, 0) + int(n)

    def pop(self) -> dict[str, int]:
        """Return {'count/<key>': n} (declared keys always present) and zero them."""
        out = {f"count/{k}": v for k, v in self.values.items()}
        self.values = {k: 0 for k in self._keys}
        return out


class ForwardCounter(Counters):
    """Exact count of one model role's forwards and the tokens they processed, plus their
    seconds: `count/<fwd_key>`, `count/<tokens_key>`. The reference holder (`ref_fwd`,
    `tokens_ref`) and the drift monitor (`monitor_fwd`, `tokens_monitor`) keep one each; the
    trainer merges their `pop_counts()` into the step's metrics."""

    def __init__(self, fwd_key: str, tokens_key: str):
        super().__init__((fwd_key, tokens_key))
        self.fwd_key, self.tokens_key = fwd_key, tokens_key
        self.seconds = 0.0

    def forward(self, n_tokens: int, seconds: float = 0.0, calls: int = 1) -> None:
        """Count `calls` forwards over `n_tokens` tokens that took `seconds`."""
        self.add(self.fwd_key, calls)
        self.add(self.tokens_key, n_tokens)
        self.seconds += seconds

    def pop_counts(self) -> dict[str, int]:
        """{"count/<fwd_key>", "count/<tokens_key>"} since the last pop, then zero them."""
        return self.pop()

    def pop_time(self) -> float:
        """Seconds since the last pop, then zero."""
        out, self.seconds = self.seconds, 0.0
        return out


def peak_rss_mb() -> float:
    """Peak resident set size of this process so far, in MiB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def open_run_files(outdir: str, mode: str = "w"):
    """(metrics sink, events sink) for a run directory."""
    safe_files.makedirs(outdir)
    return JsonlSink(os.path.join(outdir, "metrics.jsonl"), mode), JsonlSink(os.path.join(outdir, "events.jsonl"), mode)
