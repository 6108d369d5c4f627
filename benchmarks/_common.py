"""Shared by the benchmark scripts: one measured configuration in its own process, and the machine facts.

A script that measures in subprocesses re-runs itself with its worker flags (`run_worker`); the
worker prints one `RESULT {json}` line (`print_result`), which the parent parses. Only the standard
library is imported here, so a worker's peak RSS counts nothing this module adds.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(os.path.dirname(HERE), "src")
RESULT = "RESULT "
# one thread per worker, no hub access, quiet transformers
WORKER_ENV = {
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_VERBOSITY": "error",
}


def run_worker(script: str, argv: list[str], what: str) -> dict:
    """Run `python script *argv` with src/ importable and WORKER_ENV; return its last RESULT line's
    object. RuntimeError("<what> failed (<exit status>): <end of stderr>") when it fails or prints none."""
    cmd = [sys.executable, os.path.abspath(script), *argv]
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", ""), **WORKER_ENV}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(RESULT)]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{what} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(lines[-1][len(RESULT) :])


def print_result(obj: dict) -> None:
    """Print the worker's result line, with the 1/5/15-minute load averages at its end."""
    print(RESULT + json.dumps({**obj, "loadavg_end": os.getloadavg()}), flush=True)


def peak_rss_mb() -> float:
    """This process's peak resident memory in MB (ru_maxrss is in KiB on Linux): model, optimizer,
    activations and every library the process imports."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def git_commit() -> str:
    """The short commit of the checkout the benchmarks run from ("?" without git)."""
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=HERE, capture_output=True, text=True
        ).stdout.strip()
    except OSError:
        return "?"


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo ("?" where it has none)."""
    return next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")), "?")


def run_record(model_dir: str, loadavg_start: tuple) -> dict:
    """The facts every single-process model benchmark records beside its numbers: the model
    directory (the home directory as ~), the machine (io/machine.py, with the CPU's model name), the
    commit and the load averages at its start and now. Needs src/ importable (the caller's sys.path)."""
    return {
        "model_dir": model_dir.replace(os.path.expanduser("~"), "~"),
        **provenance(),
        "loadavg_start": loadavg_start,
        "loadavg_end": os.getloadavg(),
    }


def provenance() -> dict:
    """What every result file records about where it was made: the machine (io/machine.py, with
    the CPU's model name) and the commit, in the file, not in its name. Needs src/ importable."""
    from noma_prorl_bench.io.machine import machine_info  # noqa: PLC0415

    return {"machine": {**machine_info(), "cpu": cpu_model()}, "commit": git_commit()}


def sample_draws() -> tuple[str, ...]:
    """--sample_draw's values, the package's one list (config/choices.py), for a benchmark's parser."""
    if SRC not in sys.path:
        sys.path.insert(0, SRC)
    from noma_prorl_bench.config.choices import SAMPLE_DRAWS  # noqa: PLC0415

    return SAMPLE_DRAWS
