"""Metric sinks, stage timers and exact counters.

Metrics are flat dicts of namespaced keys (`reward/mean`, `count/ref_fwd`, `time/ref`, ...;
every key is defined in the README). A sink is swappable: `JsonlSink` appends one JSON
object per line and flushes every write; `NullSink` drops everything; `MultiSink` fans out.
Code never branches on whether logging is on.
"""
from __future__ import annotations

import json
import math
import os
import resource
import time
from collections import defaultdict
from contextlib import contextmanager
from typing import Iterable


def _clean(v):
    """JSON-safe scalars: floats stay floats (NaN/Inf become null), tensors become floats."""
    if hasattr(v, "item") and not isinstance(v, (list, dict)):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


class JsonlSink:
    """Append JSON lines to a file, flushing after every record."""

    def __init__(self, path: str, mode: str = "a"):
        self.path = path
        self._f = open(path, mode, encoding="utf-8")

    def write(self, record: dict) -> None:
        self._f.write(json.dumps({k: _clean(v) for k, v in record.items()}) + "\n")
        self._f.flush()

    def close(self) -> None:
        self._f.close()


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


def peak_rss_mb() -> float:
    """Peak resident set size of this process so far, in MiB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def open_run_files(outdir: str, mode: str = "w"):
    """(metrics sink, events sink) for a run directory."""
    os.makedirs(outdir, exist_ok=True)
    return JsonlSink(os.path.join(outdir, "metrics.jsonl"), mode), JsonlSink(os.path.join(outdir, "events.jsonl"), mode)
