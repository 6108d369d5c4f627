"""The test command, scripts/test.sh, stops on one Ctrl-C (SIGINT to its process group, as a terminal
sends it) and on a SIGTERM to the script, and leaves no process behind: not pytest, whose test swallows
SIGINT (as a run does in-process, with its own handler), nor the subprocess that test started in its
own session (which no terminal's Ctrl-C reaches). Setup and lint are skipped (PRORL_TEST_SKIP_SETUP).
pytest run directly stops such a subprocess on Ctrl-C too (tests/conftest.py pytest_keyboard_interrupt)."""

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.slow
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROBE = "PRORL_SIGNAL_PROBE"  # where test_probe writes its pids; only set by the test below


def test_probe():
    """What the tests below run: swallow SIGINT (unless PRORL_SIGNAL_PROBE_KEEP_SIGINT is set), start a
    long subprocess in its own session, wait."""
    out = os.environ.get(PROBE)
    if not out:
        pytest.skip("run by the tests below only")
    caught = []
    if os.environ.get("PRORL_SIGNAL_PROBE_CATCH"):  # as a run in-process: its handler records the SIGINT
        signal.signal(signal.SIGINT, lambda *_: caught.append(1))
    elif not os.environ.get("PRORL_SIGNAL_PROBE_KEEP_SIGINT"):
        signal.signal(signal.SIGINT, lambda *_: None)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
    with open(out + ".tmp", "w") as f:
        json.dump({"pytest": os.getpid(), "child": child.pid, "tag": os.environ.get("PRORL_TEST_TREE")}, f)
    os.replace(out + ".tmp", out)
    if os.environ.get("PRORL_SIGNAL_PROBE_CATCH"):
        while not caught:  # then returns, cut short, with the wrong answer (a run's 130 instead of 0)
            time.sleep(0.05)
        assert not caught, "stopped by SIGINT"
    child.wait()


def alive(pid):
    """pid exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def tagged(tag):
    """pids of the processes whose environment has PRORL_TEST_TREE=tag."""
    out = []
    for d in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{d}/environ", "rb") as f:
                if f"PRORL_TEST_TREE={tag}".encode() in f.read().split(b"\0") and alive(d):
                    out.append(int(d))
        except OSError:
            pass
    return out


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["ctrl-c", "sigterm"])
def test_one_signal_stops_the_test_command_and_all_it_started(tmp_path, sig, code):
    probe_and_stop(
        tmp_path, ["bash", "scripts/test.sh"], {"PRORL_TEST_SKIP_SETUP": "1"}, sig, code, f"stopped (exit {code})"
    )


def test_ctrl_c_when_a_test_catches_the_sigint_itself_gives_pytest_summary_and_no_failure(tmp_path):
    """A command run in-process (run.main) has its own SIGINT handler: it stops cleanly and the test,
    cut short, would fail. The test command's Ctrl-C instead ends pytest with its KeyboardInterrupt
    summary before the script's SIGTERM, and the interrupted test is not counted as failed."""
    log = probe_and_stop(
        tmp_path,
        ["bash", "scripts/test.sh"],
        {"PRORL_TEST_SKIP_SETUP": "1", "PRORL_SIGNAL_PROBE_CATCH": "1"},
        signal.SIGINT,
        130,
        "KeyboardInterrupt",
    )
    assert re.search(r"no tests ran in \d|\d+ \w+ in \d", log), log  # pytest's summary line
    assert "failed" not in log and "AssertionError" not in log and "stopped by SIGINT" not in log, log


def test_ctrl_c_to_pytest_itself_stops_what_a_test_started_in_its_own_session(tmp_path):
    env = {"PRORL_SIGNAL_PROBE_KEEP_SIGINT": "1", "PRORL_TEST_TREE": None}  # None: pytest's own tag (conftest)
    probe_and_stop(
        tmp_path,
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        env,
        signal.SIGINT,
        2,
        "KeyboardInterrupt",
    )


def _terminal_signals():
    """SIGINT and SIGQUIT at their defaults, as under a terminal: a test run started in the background by
    a non-interactive shell inherits them ignored, and a shell or Python started with SIGINT ignored can
    never act on a Ctrl-C (bash cannot trap a signal ignored at its entry; Python installs no
    KeyboardInterrupt handler then)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGQUIT, signal.SIG_DFL)


def probe_and_stop(tmp_path, cmd, env, sig, code, said):
    """Run test_probe under `cmd` in its own session; once the probe's subprocess runs, send `sig` (SIGINT
    to the whole process group, as a terminal does; SIGTERM to the command alone); the command must exit
    with `code`, its output must contain `said`, and neither pytest nor the subprocess may remain. `env`
    is added to the environment (None: left out)."""
    out = str(tmp_path / "probe.json")
    env = {k: v for k, v in {**os.environ, **env, PROBE: out}.items() if v is not None}
    script = subprocess.Popen(
        [*cmd, f"{os.path.abspath(__file__)}::test_probe"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=_terminal_signals,
    )
    info = {}
    try:
        for _ in range(3000):  # pytest's start (torch import) and the probe's: up to 300 s on a loaded machine
            if os.path.exists(out) or script.poll() is not None:
                break
            time.sleep(0.1)
        assert os.path.exists(out), script.communicate()[0]
        with open(out) as f:
            info = json.load(f)
        assert alive(info["pytest"]) and alive(info["child"])
        if sig == signal.SIGINT:
            os.killpg(script.pid, signal.SIGINT)  # the terminal's Ctrl-C: the whole foreground group
        else:
            script.send_signal(signal.SIGTERM)  # the script alone
        log = script.communicate(timeout=60)[0].decode()
        assert script.returncode == code, log
        assert said in log, log
        # every process it started is gone: a SIGKILLed process can take a moment to disappear on a loaded
        # machine, so allow 30 s (the probe's subprocess would otherwise live for 600 s)
        for _ in range(300):
            if not alive(info["pytest"]) and not alive(info["child"]) and tagged(info["tag"]) == []:
                break
            time.sleep(0.1)
        assert not alive(info["pytest"]) and not alive(info["child"]), log
        assert tagged(info["tag"]) == [], log
        return log
    finally:
        for pid in [script.pid, *([info["pytest"], info["child"]] if info else []), *tagged(info.get("tag"))]:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
