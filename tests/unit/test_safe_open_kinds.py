"""Only regular files are opened in a run directory (docs/reliability.md, "Run directories are untrusted
input"): io/safe_files.py's `open_nofollow`, through which every run file is opened, refuses a FIFO,
socket or directory without blocking and a file with more than one hard link before truncating or
writing it; `kind_error` finds such entries without opening anything; the readers built on them (the
lock, the JSONL sinks, resume's cut-back, the suite's run state, runlog's report reading) refuse them
or treat them as absent. A FIFO opened without O_NONBLOCK would block for ever: SIGALRM fails the test
instead."""

from __future__ import annotations

import os
import signal
import socket
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from fakeruns import write_run  # noqa: E402

from noma_prorl_bench.analysis.runlog import find_run_dirs, load_run  # noqa: E402
from noma_prorl_bench.io import resume, run_procs, safe_files  # noqa: E402
from noma_prorl_bench.io.lock import acquire, lock_error, read_lock  # noqa: E402
from noma_prorl_bench.io.metrics import JsonlSink  # noqa: E402

pytestmark = pytest.mark.unit
MARK = b"harmless marker\n"


@pytest.fixture(autouse=True)
def _fail_if_blocked():
    def fail(*_):
        raise TimeoutError("blocked opening a special file (FIFO opened without O_NONBLOCK)")

    old = signal.signal(signal.SIGALRM, fail)
    signal.alarm(10)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


def _sock(path: Path) -> None:
    cwd = os.getcwd()
    os.chdir(path.parent)  # a relative name keeps within AF_UNIX's path limit
    try:
        with socket.socket(socket.AF_UNIX) as s:
            s.bind(path.name)
    finally:
        os.chdir(cwd)


@pytest.mark.parametrize(
    "flags",
    [os.O_RDONLY, os.O_WRONLY, os.O_RDWR | os.O_CREAT, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_TRUNC],
    ids=["read", "write", "lock", "sink"],
)
@pytest.mark.parametrize("make,what", [(os.mkfifo, "is a FIFO"), (_sock, "is a socket"), (os.mkdir, "is a directory")])
def test_open_refuses_what_is_not_a_regular_file(tmp_path, flags, make, what):
    p = tmp_path / "metrics.jsonl"
    make(p)
    with pytest.raises(safe_files.NotRegularFile) as e:
        safe_files.open_nofollow(str(p), flags)
    assert str(e.value).count("\n") == 0 and str(p) in str(e.value) and what in str(e.value)
    assert e.value.path == str(p) and os.path.lexists(p)


def test_a_hard_link_is_refused_before_it_is_truncated_or_written(tmp_path):
    victim, p = tmp_path / "victim", tmp_path / "metrics.jsonl"
    victim.write_bytes(MARK)
    os.link(victim, p)
    for make in (
        lambda: JsonlSink(str(p), "w"),
        lambda: JsonlSink(str(p), "a"),
        lambda: safe_files.read_bytes(str(p)),
        lambda: safe_files.append_text(str(p), "x"),
    ):
        with pytest.raises(safe_files.NotRegularFile, match="has 2 hard links"):
            make()
    os.link(victim, tmp_path / "run.lock")
    with pytest.raises(safe_files.NotRegularFile, match="run.lock' has 3 hard links"):
        acquire(str(tmp_path))
    assert victim.read_bytes() == MARK
    assert safe_files.read_bytes(str(p), links_ok=True) == MARK  # reading for a report is fine


def test_an_opened_regular_file_blocks_again_and_is_truncated_after_the_check(tmp_path):
    import fcntl

    p = tmp_path / "metrics.jsonl"
    p.write_bytes(MARK)
    fd = safe_files.open_nofollow(str(p), os.O_WRONLY | os.O_TRUNC)
    try:
        assert not fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_NONBLOCK
    finally:
        os.close(fd)
    assert p.read_bytes() == b""


def test_write_bytes_refuses_a_fifo_and_remove_tree_removes_one(tmp_path):
    p = tmp_path / "summary.json"
    os.mkfifo(p)
    with pytest.raises(safe_files.NotRegularFile, match="is a FIFO"):
        safe_files.write_json(str(p), {"complete": True})
    assert [n for n in os.listdir(tmp_path)] == ["summary.json"]  # no temporary left behind
    safe_files.remove_tree(str(p))
    assert not os.path.lexists(p)


@pytest.mark.parametrize(
    "name,make,needle",
    [
        ("run.lock", os.mkfifo, "run.lock' is a FIFO"),
        ("events.jsonl", os.mkdir, "events.jsonl' is a directory, not a regular file"),
        ("checkpoints", lambda p: p.write_text("x"), "checkpoints' is a file, not a directory"),
        ("checkpoints", os.mkfifo, "checkpoints' is a FIFO (named pipe), not a directory"),
        ("checkpoints/step_000002", lambda p: p.write_text("x"), "step_000002' is a file, not a directory"),
        ("checkpoints/step_000002/COMPLETE", _sock, "COMPLETE' is a socket"),
        (
            "suite.json",
            lambda p: (Path(str(p) + ".txt").write_text("x"), os.link(str(p) + ".txt", p)),
            "suite.json' has 2 hard links",
        ),
    ],
)
def test_kind_error_names_the_first_bad_entry_without_opening_it(tmp_path, name, make, needle):
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "checkpoints").mkdir()
    if name.startswith("checkpoints/step_000002/"):
        (tmp_path / "checkpoints" / "step_000002").mkdir()
    if name == "checkpoints":
        (tmp_path / "checkpoints").rmdir()
    assert safe_files.kind_error(str(tmp_path)) is None
    make(tmp_path / name)
    err = safe_files.kind_error(str(tmp_path))
    assert err is not None and needle in err and err.startswith("argument --outdir: ")


def test_lock_and_suite_state_treat_a_fifo_as_no_lock_and_no_run(tmp_path):
    for name in ("run.lock", "config.json", "summary.json"):
        os.mkfifo(tmp_path / name)
    assert "run.lock' is a FIFO" in lock_error(str(tmp_path))
    assert read_lock(str(tmp_path)) == {}
    assert run_procs.live_holder(str(tmp_path)) is None  # not waited for as a live run
    assert run_procs.run_state(str(tmp_path), ["--steps", "4"]) == "new"
    err = run_procs.suite_dir_error(str(tmp_path.parent), [tmp_path.name])
    assert err is not None and "is a FIFO" in err


def test_resume_cut_back_refuses_a_fifo_log(tmp_path):
    os.mkfifo(tmp_path / "events.jsonl")
    with pytest.raises(safe_files.NotRegularFile, match="events.jsonl' is a FIFO"):
        resume.truncate_jsonl(str(tmp_path / "events.jsonl"), 2)
    assert "metrics.jsonl' is a FIFO" in resume.check_metrics_log(_fifo(tmp_path / "metrics.jsonl"), 2)


def _fifo(p: Path) -> str:
    os.mkfifo(p)
    return str(p)


@pytest.mark.parametrize("name", ["metrics.jsonl", "config.json", "events.jsonl", "summary.json"])
def test_report_reading_refuses_a_fifo_with_one_line(tmp_path, name):
    d = write_run(tmp_path / "run", seed=0)
    (d / name).unlink()
    os.mkfifo(d / name)
    with pytest.raises(ValueError, match=f"{name}' is a FIFO") as e:
        load_run(d)
    assert "\n" not in str(e.value) and not str(e.value).startswith("argument")


def test_report_reading_refuses_a_hard_linked_copy(tmp_path):
    """A run file with two names is refused for reading too (one rule for every command: exactly one link)."""
    d = write_run(tmp_path / "run", seed=0)
    copy = tmp_path / "copy"
    copy.mkdir()
    for f in os.listdir(d):
        os.link(d / f, copy / f)
    assert find_run_dirs(tmp_path) == [copy, d]
    with pytest.raises(ValueError, match="config.json' has 2 hard links") as e:
        load_run(copy)
    assert "\n" not in str(e.value)
