"""Shared test set-up: one torch thread, src/ importable, small-run helpers; on Ctrl-C, no process
that a test started outlives the session."""

import os
import signal
import sys
import time

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.path.join(ROOT, "src")
if SRC not in sys.path:
    sys.path.insert(0, SRC)
os.environ.setdefault("PYTHONPATH", SRC)
torch.set_num_threads(1)
# Every process a test starts inherits this tag (scripts/test.sh sets its own first), also runs, suites and
# Ray workers started in their own session, which a terminal's Ctrl-C does not reach: see
# pytest_keyboard_interrupt.
TREE = os.environ.setdefault("PRORL_TEST_TREE", f"pytest-{os.getpid()}")


def _ancestors():
    """This process and its ancestors (their environments may carry the tag too)."""
    pids, pid = set(), os.getpid()
    while pid > 1 and pid not in pids:
        pids.add(pid)
        try:
            with open(f"/proc/{pid}/stat") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return pids


def _parent(pid):
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def tagged_pids(tag=TREE):
    """Live processes whose environment has PRORL_TEST_TREE=tag, this process and its ancestors left out,
    and so the other children of those ancestors (scripts/test.sh's own `sleep`s and subshells: it waits
    for this process and is not one of the tests' processes)."""
    mine, out, entry = _ancestors(), [], f"PRORL_TEST_TREE={tag}".encode()
    theirs = mine - {os.getpid()}
    for d in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{d}/environ", "rb") as f:
                if int(d) not in mine and entry in f.read().split(b"\0") and _parent(d) not in theirs:
                    out.append(int(d))
        except (OSError, ValueError, IndexError):
            pass
    return out


def pytest_keyboard_interrupt(excinfo):
    """Ctrl-C: SIGTERM to every process the tests started, SIGKILL to those left after 3 s."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in tagged_pids():
            try:
                os.kill(pid, sig)
            except OSError:
                pass
        for _ in range(30):
            if not tagged_pids():
                return
            time.sleep(0.1)


# scripts/test.sh creates this file before it relays a Ctrl-C to pytest. A test that runs a command
# in-process gets the command's own SIGINT handler (a run stops cleanly, exit 130), so pytest never sees
# the KeyboardInterrupt, and the test, cut short, would be reported as failed. With the file there, the
# test being run is reported as interrupted instead and pytest stops with its summary.
STOP_FILE = os.environ.get("PRORL_TEST_STOP_FILE")


def _stop_requested():
    return bool(STOP_FILE) and os.path.exists(STOP_FILE)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    if _stop_requested():
        raise KeyboardInterrupt
    try:
        return (yield)
    finally:
        if _stop_requested():
            raise KeyboardInterrupt  # replaces the cut-short outcome


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    try:
        return (yield)
    finally:
        if _stop_requested():
            raise KeyboardInterrupt  # replaces the cut-short outcome


#: test files that start Ray clusters: under `pytest -n N --dist loadgroup` (scripts/test.sh) they run
#: one after another in one worker, which holds the session's cluster (tests/ray/conftest.py), so no two
#: clusters of 2 CPUs each compete for the cores at once
RAY_FILES = ("tests/ray/", "tests/slow/test_ray_reaper.py", "tests/slow/test_suite_ray.py")


def pytest_collection_modifyitems(items):
    for item in items:
        path = os.path.relpath(str(item.path), ROOT).replace(os.sep, "/")
        if path.startswith(RAY_FILES):
            item.add_marker(pytest.mark.xdist_group("ray"))


# Flags that make a run take a second or two: tiny batch, short warm start.
FAST = [
    "--steps",
    "3",
    "--batch_size",
    "4",
    "--group_size",
    "4",
    "--warmstart_steps",
    "5",
    "--n_val",
    "16",
    "--eval_every",
    "2",
    "--quiet",
]


@pytest.fixture
def fast_flags():
    return list(FAST)
