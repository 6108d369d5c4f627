"""The suite's executor interface without Ray: bad --executor / --ray_address flags (exit 2,
nothing written), the scheduling loop with a scripted executor (capacity, lost runs, signals),
and the Ray executor's Popen-like handle and forwarded environment."""

import signal
import socket

import pytest

from noma_prorl_bench.io.ray_procs import RayRun, address_error, forwarded_env
from noma_prorl_bench.io.run_procs import SuiteSignals
from noma_prorl_bench.suite import expand, main, run_all

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    "argv, flag, words",
    [
        (["--executor", "dask"], "--executor", ["'local'", "'ray'"]),
        (["--ray_address", "127.0.0.1:6379"], "--ray_address", ["--executor ray"]),
        (["--executor", "local", "--ray_address", "auto"], "--ray_address", ["--executor local"]),
    ],
)
def test_bad_executor_flags_exit_2_and_write_nothing(tmp_path, capsys, argv, flag, words):
    out = tmp_path / "suite"
    with pytest.raises(SystemExit) as e:
        main(["--preset", "aa", "--outdir", str(out), *argv])
    assert e.value.code == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"argument {flag}" in last and all(w in last for w in words)
    assert not out.exists()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_address_nobody_answers_at_exits_2_before_joining(tmp_path, capsys):
    pytest.importorskip("ray")
    port, out = _closed_port(), tmp_path / "suite"
    assert "nothing answers at 127.0.0.1" in address_error(f"127.0.0.1:{port}")
    assert address_error("auto") is None and address_error("ray://head:10001") is None
    with pytest.raises(SystemExit) as e:
        main(["--preset", "aa", "--outdir", str(out), "--executor", "ray", "--ray_address", f"127.0.0.1:{port}"])
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert e.value.code == 2 and "argument --ray_address: cannot join the Ray cluster" in last
    assert not out.exists()


class ScriptedRun:
    """A run that ends after `ticks` waits with `rc`, or is lost (`error`)."""

    def __init__(self, name, rc, ticks, error=None):
        self.name, self.rc, self.ticks, self.error_after = name, rc, ticks, error
        self.returncode = self.error = self.node = None
        self.signals = []

    def poll(self):
        return self.returncode

    def send_signal(self, signum):
        self.signals.append(signum)


class ScriptedExecutor:
    """Runs end on a script: `outcome[name]` = (exit code, waits, error or None)."""

    def __init__(self, capacity, outcome, on_wait=None):
        self.cap, self.outcome, self.on_wait = capacity, outcome, on_wait
        self.runs, self.started, self.most_in_flight = [], [], 0

    def describe(self):
        return "scripted"

    def capacity(self):
        return self.cap

    def start(self, name, cmd, log_path, append):
        rc, ticks, error = self.outcome.get(name, (0, 1, None))
        run = ScriptedRun(name, rc, ticks, error)
        self.runs.append(run)
        self.started.append((name, cmd, append))
        return run

    def wait(self, timeout):
        live = [r for r in self.runs if r.returncode is None]
        self.most_in_flight = max(self.most_in_flight, len(live))
        if self.on_wait:
            self.on_wait(self)
        for run in live:
            run.ticks -= 1
            if run.ticks <= 0:
                run.returncode = -1 if run.error_after else run.rc
                run.error = run.error_after

    def close(self):
        pass


def test_run_all_keeps_to_capacity_and_counts_lost_and_failed_runs(tmp_path, capsys):
    specs = expand("aa", 2, 4)  # AA-1_s0, AA-2_s1000, AA-1_s1, AA-2_s1001
    ex = ScriptedExecutor(
        2,
        {"AA-2_s1000": (-1, 2, "its Ray task ended without an exit code (NodeDiedError: x)"), "AA-1_s1": (1, 1, None)},
    )
    failures = run_all(specs, str(tmp_path), 99, quiet=True, executor=ex)
    err = capsys.readouterr().err
    assert sorted(failures) == ["AA-1_s1", "AA-2_s1000"]
    assert [s[0] for s in ex.started] == [s.name for s in specs] and ex.most_in_flight == 2
    assert all("--overwrite" in cmd and not append for _, cmd, append in ex.started)
    assert (
        "suite: run AA-2_s1000 lost: its Ray task ended without an exit code (NodeDiedError: x); "
        "the same command restarts it (no checkpoint)" in err
    )
    assert "suite: run AA-1_s1 failed (exit 1)" in err and "scripted" in err.splitlines()[0]


def test_run_all_forwards_a_signal_and_starts_nothing_after_it(tmp_path, capsys):
    stop = SuiteSignals()

    def interrupt(ex):  # SIGTERM arrives during the first wait
        if stop.signum is None:
            stop._handle(signal.SIGTERM, None)

    ex = ScriptedExecutor(1, {"AA-1_s0": (143, 3, None)}, on_wait=interrupt)
    failures = run_all(expand("aa", 2, 4), str(tmp_path), 1, quiet=True, stop=stop, executor=ex)
    assert failures == [] and [s[0] for s in ex.started] == ["AA-1_s0"]
    assert ex.runs[0].signals == [signal.SIGTERM]
    assert "run AA-1_s0 stopped (exit 143) before its first checkpoint" in capsys.readouterr().err


def test_ray_run_is_a_process_to_the_suite_and_the_env_puts_the_driver_package_first(monkeypatch):
    run = RayRun("A1_s0", ref=None)
    assert run.poll() is None
    run.send_signal(signal.SIGINT)
    run.send_signal(signal.SIGINT)
    assert run.signals == [signal.SIGINT, signal.SIGINT]  # delivered in order on the next wait
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    monkeypatch.setenv("NOMA_PRORL_FAULT", "generator_exit@2")
    monkeypatch.setenv("HOME", "/driver/home")
    env = forwarded_env("/shared/src")
    assert env["PYTHONPATH"] == "/shared/src:/elsewhere" and env["NOMA_PRORL_FAULT"] == "generator_exit@2"
    assert "HOME" not in env
