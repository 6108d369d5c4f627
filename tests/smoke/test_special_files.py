"""Only regular files are opened in a run or suite directory (docs/reliability.md, "Run directories
are untrusted input"), end to end through the run and suite CLIs: a FIFO or socket where a run file,
the lock, a checkpoint file or a suite file belongs is refused (exit 2, one line naming it and what
it is) instead of blocking for ever; a hard-linked run.lock, metrics.jsonl or config.json is refused
and the other name's bytes are left alone; a symlinked checkpoints/ gets its own message; a
finished run whose last metrics row is torn is told which checkpoint to delete, and deleting it
makes --resume continue exactly. Every refusal leaves the directory as it was (each entry's kind,
size, mtime and bytes). The FIFO cases run the CLI as a subprocess with a timeout, so a regression
fails instead of hanging the tests."""

import json
import os
import re
import shlex
import shutil
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from noma_prorl_bench.run import main

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from runhelp import read_jsonl, stable  # noqa: E402

pytestmark = pytest.mark.smoke
MARK = b"harmless marker\n"
FAST = [
    "--steps",
    "4",
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
CKPT_FILE = "checkpoints/step_000002/tensors.safetensors"


def _run(argv):
    try:
        return main(argv)
    except SystemExit as e:
        return e.code


def _cli(module, *argv):
    """`python -m module argv` with a 60 s limit; a run still going then (blocked on a FIFO) fails the test."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    try:
        return subprocess.run(
            [sys.executable, "-m", module, *argv], env=env, capture_output=True, text=True, timeout=60
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"python -m {module} {' '.join(argv)} did not exit within 60 s (blocked on a special file)")


def _error_lines(err):
    return [line for line in err.splitlines() if "error:" in line]


def _state(d):
    """Every entry under d (os.walk, no link followed): kind, size, mtime and a regular file's bytes."""
    out = {}
    for root, dirs, files in os.walk(d):
        for name in dirs + files:
            p = os.path.join(root, name)
            st = os.lstat(p)
            data = Path(p).read_bytes() if stat.S_ISREG(st.st_mode) else None
            out[os.path.relpath(p, d)] = (stat.S_IFMT(st.st_mode), st.st_size, st.st_mtime_ns, data)
    return out


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    d = tmp_path_factory.mktemp("base") / "run"
    assert main(["--outdir", str(d), *FAST, "--save_every", "2"]) == 0
    assert sorted(os.listdir(d / "checkpoints")) == ["step_000002", "step_000004"]
    return d


@pytest.fixture
def run_copy(finished, tmp_path):
    d = tmp_path / "run"
    shutil.copytree(finished, d)
    return d


def _interrupted(d):
    """As if stopped after the step-2 checkpoint: --resume would continue from step 2 and write."""
    shutil.rmtree(d / "checkpoints" / "step_000004")
    (d / "summary.json").unlink()


def _replace_by_fifo(d, name):
    p = d / name
    if p.exists():
        p.unlink()
    os.mkfifo(p)


# ------------------------------------------------------------------ FIFOs: refused, never blocking
@pytest.mark.parametrize(
    "name",
    [
        "run.lock",
        "metrics.jsonl",
        "events.jsonl",
        "samples.jsonl",
        "config.json",
        CKPT_FILE,
        "checkpoints/step_000002/COMPLETE",
    ],
)
def test_fifo_in_run_dir_is_refused_by_resume_without_blocking(run_copy, name):
    _interrupted(run_copy)
    _replace_by_fifo(run_copy, name)
    before = _state(run_copy)
    p = _cli("noma_prorl_bench.run", "--outdir", str(run_copy), "--resume")
    assert p.returncode == 2, p.stderr
    assert len(_error_lines(p.stderr)) == 1 and "Traceback" not in p.stderr
    assert os.path.join(str(run_copy), name) in p.stderr and "is a FIFO" in p.stderr and "remove it" in p.stderr
    assert _state(run_copy) == before


@pytest.mark.parametrize("name", ["run.lock", "metrics.jsonl", "summary.json"])
def test_fifo_in_run_dir_is_refused_by_overwrite_without_blocking(run_copy, name):
    _replace_by_fifo(run_copy, name)
    before = _state(run_copy)
    p = _cli("noma_prorl_bench.run", "--outdir", str(run_copy), *FAST, "--overwrite")
    assert p.returncode == 2, p.stderr
    assert len(_error_lines(p.stderr)) == 1 and name in p.stderr and "is a FIFO" in p.stderr
    assert _state(run_copy) == before


# ------------------------------------------------------------------ sockets, directories
@pytest.mark.parametrize(
    "name,what",
    [
        ("metrics.jsonl", "a socket"),
        ("run.lock", "a socket"),
        ("events.jsonl", "a directory"),
        ("config.json", "a directory"),
    ],
)
def test_socket_or_directory_at_a_run_file_is_refused(run_copy, capsys, monkeypatch, name, what):
    _interrupted(run_copy)
    if (run_copy / name).exists():
        (run_copy / name).unlink()
    if what == "a socket":
        monkeypatch.chdir(run_copy)  # a relative name keeps within AF_UNIX's path limit
        with socket.socket(socket.AF_UNIX) as s:
            s.bind(name)
    else:
        (run_copy / name).mkdir()
    before = _state(run_copy)
    capsys.readouterr()
    assert _run(["--outdir", str(run_copy), "--resume"]) == 2
    err = capsys.readouterr().err
    assert len(_error_lines(err)) == 1 and name in err and f"is {what}, not a regular file" in err
    assert _state(run_copy) == before


# ------------------------------------------------------------------ hard links
@pytest.mark.parametrize(
    "name,mode",
    [("run.lock", "overwrite"), ("run.lock", "resume"), ("metrics.jsonl", "resume"), ("config.json", "overwrite")],
)
def test_hard_linked_run_file_is_refused_and_the_other_name_untouched(run_copy, tmp_path, capsys, name, mode):
    """run.lock would be truncated and rewritten in place, metrics.jsonl appended to: through a hard
    link that changes the other name's file (here outside the run directory)."""
    _interrupted(run_copy)
    victim = tmp_path / "victim"
    victim.write_bytes((run_copy / name).read_bytes() if (run_copy / name).exists() else MARK)
    if (run_copy / name).exists():
        (run_copy / name).unlink()
    os.link(victim, run_copy / name)
    want = victim.read_bytes()
    before = _state(run_copy)
    argv = (
        ["--outdir", str(run_copy), "--resume"]
        if mode == "resume"
        else ["--outdir", str(run_copy), *FAST, "--overwrite"]
    )
    capsys.readouterr()
    assert _run(argv) == 2
    err = capsys.readouterr().err
    assert len(_error_lines(err)) == 1 and name in err and "has 2 hard links" in err and "cp, not ln" in err
    assert victim.read_bytes() == want and _state(run_copy) == before


# ------------------------------------------------------------------ a symlinked checkpoints/
def test_symlinked_checkpoints_dir_has_its_own_message(run_copy, tmp_path, capsys):
    _interrupted(run_copy)
    elsewhere = tmp_path / "elsewhere"
    shutil.move(str(run_copy / "checkpoints"), elsewhere)
    os.symlink(elsewhere, run_copy / "checkpoints")
    before, target = _state(run_copy), _state(elsewhere)
    capsys.readouterr()
    assert _run(["--outdir", str(run_copy), "--resume"]) == 2
    err = capsys.readouterr().err
    assert len(_error_lines(err)) == 1
    assert "checkpoints' is a symbolic link" in err and "not a directory" in err and "replace the link" in err
    assert "no complete checkpoint" not in err and "--overwrite" not in err
    assert _state(run_copy) == before and _state(elsewhere) == target


# ------------------------------------------------------------------ a torn last row of a finished run
def test_torn_last_row_names_the_checkpoint_to_delete_and_that_resumes(run_copy, finished, capsys):
    log = run_copy / "metrics.jsonl"
    log.write_bytes(log.read_bytes()[:-30])  # the step-4 row cut mid-write
    before = _state(run_copy)
    capsys.readouterr()
    assert _run(["--outdir", str(run_copy), "--resume"]) == 2
    err = capsys.readouterr().err
    assert len(_error_lines(err)) == 1 and "missing steps 4" in err
    newest, older = run_copy / "checkpoints" / "step_000004", run_copy / "checkpoints" / "step_000002"
    assert f"delete {newest} (`rm -r {newest}`) to resume from {older} (step 2)" in err
    assert _state(run_copy) == before
    advice = re.search(r"`([^`]*)`", err).group(1)  # follow it
    assert subprocess.run(shlex.split(advice)).returncode == 0 and not newest.exists()
    assert _run(["--outdir", str(run_copy), "--resume"]) == 0
    assert stable(read_jsonl(log)) == stable(read_jsonl(finished / "metrics.jsonl"))
    assert json.loads((run_copy / "summary.json").read_text())["complete"] is True


# ------------------------------------------------------------------ the suite
@pytest.mark.parametrize(
    "name,kind",
    [
        ("A1_s0/metrics.jsonl", "fifo"),
        ("A1_s0/run.lock", "fifo"),
        ("A1_s0.log", "fifo"),
        ("suite.json", "socket"),
        ("A1_s0/config.json", "hardlink"),
    ],
)
def test_suite_rerun_over_a_special_file_exits_with_one_line(finished, tmp_path, monkeypatch, name, kind):
    """A suite re-run reads its runs' config.json, summary.json, metrics.jsonl and run.lock and
    writes their logs: a special file in one run refuses the whole suite before any run starts."""
    s = tmp_path / "s"
    s.mkdir()
    shutil.copytree(finished, s / "A1_s0")
    if (s / name).exists():
        (s / name).unlink()
    if kind == "fifo":
        os.mkfifo(s / name)
    elif kind == "socket":
        monkeypatch.chdir(s)
        with socket.socket(socket.AF_UNIX) as sock:
            sock.bind(name)
    else:
        (tmp_path / "victim").write_bytes(MARK)
        os.link(tmp_path / "victim", s / name)
    before = _state(s)
    p = _cli("noma_prorl_bench.suite", "--preset", "smoke", "--outdir", str(s))
    assert p.returncode == 2, p.stderr
    what = {"fifo": "is a FIFO", "socket": "is a socket", "hardlink": "has 2 hard links"}[kind]
    assert len(_error_lines(p.stderr)) == 1 and os.path.join(str(s), name) in p.stderr and what in p.stderr
    assert _state(s) == before
    assert kind != "hardlink" or (tmp_path / "victim").read_bytes() == MARK
