"""One safe open for every file read from a run or suite directory (docs/reliability.md, "Run
directories are untrusted input"): no symlink and no symlinked directory below the run or suite,
exactly one hard link, regular files only, and a size bound checked with `fstat` before any byte is
read. A sparse metrics.jsonl or events.jsonl larger than its bound is refused by its size (one line
naming the file, exit 2); a sparse samples.jsonl is read only as far as the report needs. The
commands run under an address-space limit smaller than the sparse file, so reading it whole fails
the test instead of filling the machine's memory."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from fakeruns import write_run  # noqa: E402

from noma_prorl_bench.analysis.runlog import find_run_dirs, load_run  # noqa: E402
from noma_prorl_bench.io import resume, safe_files  # noqa: E402

pytestmark = pytest.mark.unit
SRC = str(Path(__file__).resolve().parents[2] / "src")
SPARSE = 4 << 30  # a 4 GiB file that takes no disk space
AS_LIMIT = 3 << 30  # the address space the report command gets: less than the sparse file


@pytest.fixture(autouse=True)
def _fail_if_blocked():
    def fail(*_):
        raise TimeoutError("blocked reading a special file")

    old = signal.signal(signal.SIGALRM, fail)
    signal.alarm(60)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


def _sparse(path: Path, size: int = SPARSE) -> None:
    if path.exists():
        path.unlink()
    with open(path, "wb") as f:
        f.truncate(size)


def _python(code: str, *args: str) -> subprocess.CompletedProcess:
    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (AS_LIMIT, AS_LIMIT))

    env = {**os.environ, "PYTHONPATH": SRC, "MPLBACKEND": "Agg"}
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, preexec_fn=limit, timeout=120
    )


def _report(*args: str) -> subprocess.CompletedProcess:
    return _python(
        "import sys; from noma_prorl_bench.analysis.commands import report_main; sys.exit(report_main(sys.argv[1:]))",
        *args,
    )


def _lines(err: str) -> list[str]:
    return [ln for ln in err.splitlines() if "error" in ln]


@pytest.mark.parametrize("name", ["metrics.jsonl", "events.jsonl"])
def test_a_sparse_log_is_refused_by_its_size_with_one_line(tmp_path, name):
    d = write_run(tmp_path / "run", seed=0)
    _sparse(d / name)
    r = _report(str(d))
    assert r.returncode == 2, r.stderr[-2000:]
    assert len(_lines(r.stderr)) == 1 and name in r.stderr and "bytes, more than" in r.stderr
    assert "Traceback" not in r.stderr and not (d / "report").exists()


def test_a_sparse_samples_log_is_read_in_bounded_form(tmp_path):
    d = write_run(tmp_path / "run", seed=0)
    _sparse(d / "samples.jsonl")
    code = "from noma_prorl_bench.analysis.runlog import load_run; r = load_run(%r); print(len(r.samples), r.dropped)"
    r = _python(code % str(d))
    assert r.returncode == 0 and r.stdout.split()[0] == "0" and "samples.jsonl:1" in r.stdout, r.stderr[-2000:]


def test_bounds_are_checked_before_reading(tmp_path, monkeypatch):
    p = tmp_path / "config.json"
    p.write_bytes(b"{}" + b" " * 100)
    monkeypatch.setattr(safe_files, "JSON_LIMIT", 50)
    with pytest.raises(safe_files.TooLarge, match="config.json' is 102 bytes, more than the 50"):
        safe_files.read_bytes(str(p))
    data, size = safe_files.read_head(str(p), 10)
    assert data == b"{}" + b" " * 8 and size == 102
    assert safe_files.read_head(str(p), 200) == (p.read_bytes(), 0)


def test_no_symlinked_directory_below_the_root_is_followed(tmp_path):
    run, elsewhere = tmp_path / "run", tmp_path / "elsewhere" / "step_000002"
    elsewhere.mkdir(parents=True)
    (elsewhere / "state.json").write_text("{}")
    (run / "checkpoints").mkdir(parents=True)
    os.symlink(elsewhere, run / "checkpoints" / "step_000002")
    target = run / "checkpoints" / "step_000002" / "state.json"
    with pytest.raises(safe_files.UnsafePath, match="step_000002' is a symbolic link"):
        safe_files.read_bytes(str(target), root=str(run))
    os.rename(run / "checkpoints", tmp_path / "real")
    os.symlink(tmp_path / "real", run / "checkpoints")  # the link one level up
    with pytest.raises(safe_files.UnsafePath, match="checkpoints' is a symbolic link"):
        safe_files.read_bytes(str(target), root=str(run))
    with pytest.raises(ValueError, match="is not inside"):
        safe_files.read_bytes(str(tmp_path / "real" / "x"), root=str(run))


def test_a_suite_run_reached_through_a_link_is_not_read(tmp_path):
    suite = tmp_path / "suite"
    write_run(suite / "A1_s0", seed=0)
    write_run(tmp_path / "foreign", seed=1)
    os.symlink(tmp_path / "foreign", suite / "A1_s1")
    assert find_run_dirs(suite) == [suite / "A1_s0"]
    with pytest.raises(ValueError, match="A1_s1' is a symbolic link"):
        load_run(suite / "A1_s1", root=suite)


def test_resume_refuses_an_oversized_log_before_reading_it(tmp_path):
    d = write_run(tmp_path / "run", seed=0)
    _sparse(d / "samples.jsonl")
    err = safe_files.run_dir_links(str(d))
    assert err is not None and "samples.jsonl' is 4,294,967,296 bytes" in err and "\n" not in err
    _sparse(d / "metrics.jsonl")
    problem = resume.check_metrics_log(str(d / "metrics.jsonl"), 3)
    assert problem is not None and "metrics.jsonl" in problem and "bytes, more than" in problem


def test_report_settings_fifo_is_one_line(tmp_path):
    d = write_run(tmp_path / "run", seed=0)
    os.mkfifo(tmp_path / "settings.json")
    r = _report(str(d), "--settings", str(tmp_path / "settings.json"))
    assert r.returncode == 2 and len(_lines(r.stderr)) == 1 and "is a FIFO" in r.stderr, r.stderr[-2000:]
