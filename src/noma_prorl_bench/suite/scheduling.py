"""Running a suite's runs: skip the complete, resume the interrupted, wait for ones a live
process still holds, at most `--jobs` at once with a progress bar; the expected duration printed
before the first run starts (`expected_duration`). Signals are forwarded (io/run_procs.py)."""

from __future__ import annotations

import json
import os
import shlex
import sys
from typing import Optional

from noma_prorl_bench.io import safe_files
from noma_prorl_bench.io.run_procs import LocalExecutor, SuiteSignals, live_holder, report_end, run_state
from noma_prorl_bench.matrix import RunSpec, preset_arms


def is_complete(run_dir: str, spec: RunSpec) -> bool:
    """True if run_dir holds a complete run made with the same flags."""
    return run_state(run_dir, spec.command("X")[3:]) == "complete"


def _steps_done(run_dir: str) -> int:
    """RL steps in the run's metrics.jsonl so far (its lines, less the step-0 row)."""
    try:  # read as a run file (no link, FIFO or device: io/safe_files.py), line by line
        with os.fdopen(safe_files.open_nofollow(os.path.join(run_dir, "metrics.jsonl"), os.O_RDONLY), "rb") as f:
            return sum(1 for line in f if not line.startswith(b'{"step": 0,'))
    except (OSError, safe_files.RunDirRefused):
        return 0


def run_all(
    specs: list[RunSpec],
    outdir: str,
    jobs: int,
    quiet: bool = False,
    stop: Optional[SuiteSignals] = None,
    executor=None,
) -> list[str]:
    """Run the specs with at most `jobs` in parallel; return the failed ones' names. Complete
    runs are skipped, interrupted ones (a checkpoint, same flags) continued with `--resume`; a
    run still held by a live process (an earlier suite's child that outlived it) is waited for,
    its log left alone, then counted as complete or continued.
    SIGINT/SIGTERM (`stop`, installed here if not given) are forwarded to the running runs,
    which checkpoint and exit 130/143; no new run starts and this returns once they exited
    (`stop.signum` is set; the interrupted runs are not counted as failures).
    `executor` starts the runs (default: io/run_procs.py LocalExecutor with `jobs`; RayExecutor:
    Ray tasks, as many at once as its `capacity()`); a run it lost (no exit code) is a failure."""
    if executor is None:
        executor = LocalExecutor(jobs, local_env())
    states = {s.name: run_state(os.path.join(outdir, s.name), s.command("X")[3:]) for s in specs}
    pending = [s for s in specs if states[s.name] != "complete"]
    n_resume = sum(states[s.name] == "resumable" for s in pending)
    print(
        f"suite: {len(specs)} runs, {len(specs) - len(pending)} already complete (skipped), {len(pending)} to "
        f"run ({n_resume} resumed from their checkpoints), {executor.describe()}",
        file=sys.stderr,
    )
    if pending:
        print("suite: " + expected_duration(pending, specs, outdir, executor.capacity()), file=sys.stderr)
    own = stop is None
    signals = SuiteSignals().install() if stop is None else stop
    try:
        return _run_pending(pending, states, outdir, executor, quiet, signals)
    finally:
        if own:
            signals.restore()


#: CPU-seconds of one run per RL step where no run of the suite has finished yet: (CPU-seconds, steps) of
#: a measured run (an atlas run of 300 steps, GRU defaults, one thread, `time`: 23.3 s user, 2-core Xeon VM)
MEASURED_CPU_S = {"quick": (23.3, 300), "atlas": (23.3, 300), "grid": (23.3, 300)}
#: critic: the mean of the two arms' CPU-seconds per 150-step run in benchmarks/results/critic_study.txt
#: (gae 24.8, grpo 15.4; same regime, one thread each, 2-core Xeon with AMX)
MEASURED_CPU_S["critic"] = (20.1, 150)


def _measured_cpu_per_step(specs: list[RunSpec], outdir: str) -> tuple[float, str] | None:
    """Median CPU-seconds per step of the suite's complete, never-resumed runs (their summary.json's
    `cpu_seconds`), else MEASURED_CPU_S of the preset whose arms the specs are; None when neither exists."""
    rates = []
    for s in specs:
        try:
            summ = json.loads(safe_files.read_bytes(os.path.join(outdir, s.name, "summary.json")))
        except (OSError, ValueError, UnicodeDecodeError):
            continue
        cpu, steps = summ.get("cpu_seconds"), summ.get("steps")
        if (
            summ.get("complete") is True
            and "resumed_from_step" not in summ
            and isinstance(cpu, (int, float))
            and isinstance(steps, int)
            and steps > 0
            and cpu > 0
        ):
            rates.append(cpu / steps)
    if rates:
        return sorted(rates)[len(rates) // 2], f"median of this suite's {len(rates)} finished runs"
    preset = next((p for p in MEASURED_CPU_S if specs[0].arm in preset_arms(p)), None)
    if preset is None:
        return None
    cpu, steps = MEASURED_CPU_S[preset]
    return cpu / steps, f"a measured run of these arms: {cpu} CPU-s / {steps} steps"


def expected_duration(
    pending: list[RunSpec],
    specs: list[RunSpec],
    outdir: str,
    jobs: int,
    cores: int | None = None,
    load: float | None = None,
) -> str:
    """'expected duration ~M min: N runs x S steps at R CPU-s/step (source), J jobs, load L on C
    cores (each job gets min(1, C / (L + J)) of a core)'. The wall time is the CPU work of the pending
    runs divided by the cores the jobs can get: sum(R x steps) / (min(J, N) x min(1, C / (L + J)))."""
    cores = cores or os.cpu_count() or 1
    load = os.getloadavg()[0] if load is None and hasattr(os, "getloadavg") else (load or 0.0)
    rate = _measured_cpu_per_step(specs, outdir)
    if rate is None:
        return "expected duration: unknown until the first run finishes (no measured CPU-seconds for these runs)"
    per_step, source = rate
    work = sum(per_step * _spec_steps(s) for s in pending)
    running = min(jobs, len(pending))
    share = min(1.0, cores / (load + running))
    wall = work / (running * share)
    return (
        f"expected duration ~{wall / 60:.0f} min ({wall:.0f} s): {len(pending)} runs, {work:.0f} CPU-s at "
        f"{per_step:.3f} CPU-s/step ({source}), {running} jobs, load {load:.1f} on {cores} cores "
        f"(each job gets {share:.2f} of a core)"
    )


def local_env() -> dict:
    """The suite's environment with this package's source first on PYTHONPATH (for its runs)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = SRC + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


SRC = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # src/


def _start(spec: RunSpec, state: str, outdir: str, executor):
    """Print the run's command and start it with `executor` (its own session: signals come from the suite)."""
    cmd = spec.command(outdir, "--resume" if state == "resumable" else "--overwrite")
    print("$ " + shlex.join(cmd), file=sys.stderr)  # sys.executable: pastes in any shell
    return executor.start(spec.name, cmd, os.path.join(outdir, f"{spec.name}.log"), state == "resumable")


def _run_pending(pending, states, outdir, executor, quiet, stop: SuiteSignals) -> list[str]:
    total_steps = sum(_spec_steps(s) for s in pending)
    bar = None
    if not quiet and total_steps:
        from tqdm import tqdm

        bar = tqdm(total=total_steps, desc="suite", unit="step", file=sys.stderr, dynamic_ncols=True)
    running: dict[str, tuple] = {}  # name -> (process or RayRun, RunSpec)
    adopted: dict[str, RunSpec] = {}  # runs still going from an earlier suite process (they hold their lock)
    failures: list = []
    queue, finished_steps = list(pending), 0
    while running or ((queue or adopted) and stop.signum is None):
        while queue and len(running) + len(adopted) < executor.capacity() and stop.signum is None:
            spec = queue.pop(0)
            holder = live_holder(os.path.join(outdir, spec.name))
            if holder is not None:  # e.g. the earlier suite was killed with -9: wait, never truncate its log
                print(
                    f"suite: run {spec.name} is still going (pid {holder.get('pid')}, started earlier); "
                    "waiting for it to finish",
                    file=sys.stderr,
                )
                adopted[spec.name] = spec
                continue
            running[spec.name] = (_start(spec, states[spec.name], outdir, executor), spec)
            stop.children[spec.name] = running[spec.name][0]
        executor.wait(0.5)
        finished_steps += _collect_adopted(adopted, queue, states, outdir)
        for name in list(running):
            proc, spec = running[name]
            if proc.poll() is not None:
                del running[name]
                stop.children.pop(name, None)
                finished_steps += _spec_steps(spec)
                report_end(name, proc, outdir, stop, failures)
        if bar is not None:
            live = sum(_steps_done(os.path.join(outdir, n)) for n in running)
            bar.n = min(finished_steps + live, total_steps)
            bar.set_postfix(running=len(running), queued=len(queue), refresh=False)
            bar.refresh()
    if bar is not None:
        bar.close()
    return failures


def _collect_adopted(adopted: dict, queue: list, states: dict, outdir: str) -> int:
    """Adopted runs that ended: complete ones are done (their steps returned), others queued first."""
    steps = 0
    for name in list(adopted):
        run_dir = os.path.join(outdir, name)
        if live_holder(run_dir) is None:  # it ended: complete, resumable or to start over
            spec = adopted.pop(name)
            states[name] = run_state(run_dir, spec.command("X")[3:])
            if states[name] == "complete":
                steps += _spec_steps(spec)
                print(f"suite: run {name} (started earlier) finished", file=sys.stderr)
            else:
                queue.insert(0, spec)
    return steps


def _spec_steps(spec: RunSpec) -> int:
    return int(spec.flags[spec.flags.index("--steps") + 1])
