"""Resident memory over one run, by training stage: where the peak happens and how much of it is
what the C library's allocator keeps after tensors are freed.

    .venv/bin/python benchmarks/speed/rss_by_stage.py OUTDIR [run flags ...]
    MALLOC_MMAP_THRESHOLD_=131072 .venv/bin/python benchmarks/speed/rss_by_stage.py OUTDIR [run flags ...]

Runs `prorl-bench run --outdir OUTDIR <run flags>` in this process (one torch thread) while a
thread samples the resident set size (/proc/self/statm) every 20 ms; the trainer's stage timer
(`rollout`, `ref`, `train`, `eval`, ...) marks where each sample falls. Prints the largest sample
per stage in MiB (`setup`: everything before the first step, the evaluation before RL included),
the overall peak, the process's ru_maxrss and the run's own memory estimate (its
`memory_estimate` event); writes OUTDIR.rss.json with every sample and mark.

glibc raises its mmap threshold to the size of the largest block it has freed (up to 32 MiB), so
after the first large tensors are freed, later tensors of a few MiB come from the heap, whose
freed pieces stay resident; `MALLOC_MMAP_THRESHOLD_=131072` fixes the threshold at glibc's
default (every block of 128 KiB or more is mapped and unmapped), which shows what is alive.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import threading
import time
from contextlib import contextmanager

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "src"))

PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE / 2**20


class Sampler:
    """RSS samples (seconds, MiB) from a daemon thread, and stage marks from StageTimer."""

    def __init__(self, every_s: float = 0.02):
        self.samples: list[tuple[float, float]] = []
        self.marks: list[tuple[float, str]] = []
        self.every_s, self.t0, self._stop = every_s, time.perf_counter(), threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.samples.append((time.perf_counter() - self.t0, rss_mib()))
            self._stop.wait(self.every_s)

    def mark(self, what: str) -> None:
        self.marks.append((time.perf_counter() - self.t0, what))

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def peak_by_stage(self) -> dict[str, float]:
        """The largest sample within each stage; samples between stages count as `after <stage>`."""
        stage, best, i = "setup", {}, 0
        for t, r in self.samples:
            while i < len(self.marks) and self.marks[i][0] <= t:
                what = self.marks[i][1]
                stage = what[1:] if what[0] == "+" else f"after {what[1:]}"
                i += 1
            best[stage] = max(best.get(stage, 0.0), r)
        return best


def patch_stage_timer(sampler: Sampler) -> None:
    """Mark entry (+stage) and exit (-stage) of every `with timer(stage)` block of the trainer."""
    from noma_prorl_bench.io import metrics  # noqa: PLC0415

    original = metrics.StageTimer.__call__

    @contextmanager
    def timed(self, stage: str):
        sampler.mark("+" + stage)
        with original(self, stage):
            yield
        sampler.mark("-" + stage)

    metrics.StageTimer.__call__ = timed


def estimate_mib(outdir: str) -> float | None:
    """total_mib of the run's memory_estimate event (None when the run wrote none)."""
    with open(os.path.join(outdir, "events.jsonl")) as f:
        events = [json.loads(line) for line in f if line.strip()]
    return next((e.get("total_mib") for e in events if e.get("event") == "memory_estimate"), None)


def main(argv: list[str]) -> int:
    if argv and argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0
    if not argv or argv[0].startswith("-"):
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    import torch  # noqa: PLC0415

    from noma_prorl_bench.run import main as run_main  # noqa: PLC0415

    torch.set_num_threads(1)
    outdir, flags = argv[0], argv[1:]
    sampler = Sampler()
    patch_stage_timer(sampler)
    with sampler:
        rc = run_main(["--outdir", outdir, "--quiet", "--threads", "1", *flags])
    peaks = sampler.peak_by_stage()
    result = {
        "rc": rc,
        "peak_by_stage_mib": {k: round(v) for k, v in peaks.items()},
        "peak_mib": round(max(r for _, r in sampler.samples)),
        "ru_maxrss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "estimate_mib": estimate_mib(outdir) if rc == 0 else None,
        "malloc_mmap_threshold": os.environ.get("MALLOC_MMAP_THRESHOLD_", "glibc default (dynamic)"),
        "loadavg": os.getloadavg(),
        "flags": flags,
    }
    with open(outdir.rstrip("/") + ".rss.json", "w") as f:
        json.dump({**result, "samples": sampler.samples, "marks": sampler.marks}, f)
    print(json.dumps(result, indent=1))
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
