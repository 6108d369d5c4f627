"""Run directories are untrusted input, end to end through the run CLI (docs/reliability.md,
"Run directories are untrusted input"): symlinked run files are refused (exit 2) and their
targets (a harmless marker file) untouched; --overwrite refuses what is not ours and a scratch
HOME; two real processes on one empty outdir never both "succeed"; a damaged checkpoint or log is
refused before anything is written; non-finite sampling, no applied update and SIGHUP end with
their own exit codes; bad input is one line naming the flag."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from noma_prorl_bench.run import main

pytestmark = pytest.mark.smoke
MARK = "harmless marker\n"
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


def _run(argv):
    try:
        return main(argv)
    except SystemExit as e:
        return e.code


def _error_lines(err):
    return [line for line in err.splitlines() if "error:" in line]


def _snapshot(d):
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file() and not p.is_symlink()}


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    d = tmp_path_factory.mktemp("base") / "run"
    assert main(["--outdir", str(d), *FAST, "--save_every", "2"]) == 0
    return d


@pytest.fixture
def run_copy(finished, tmp_path):
    d = tmp_path / "run"
    shutil.copytree(finished, d)
    return d


@pytest.fixture
def victim(tmp_path):
    v = tmp_path / "victim.txt"
    v.write_text(MARK)
    return v


def _interrupted(d):
    """As if stopped after the step-2 checkpoint: resume continues from step 2."""
    shutil.rmtree(d / "checkpoints" / "step_000004")
    (d / "summary.json").unlink()


# ------------------------------------------------------------------ symlinks
@pytest.mark.parametrize(
    "name,mode",
    [
        ("metrics.jsonl.tmp", "resume"),  # --resume cut metrics.jsonl back through this name
        ("config.json.tmp", "overwrite"),  # a fresh --overwrite run wrote config.json through it
        ("run.lock", "overwrite"),  # the lock truncated its target
        ("events.jsonl", "resume"),
        ("summary.json", "overwrite"),
    ],
)
def test_symlinked_run_file_is_refused_and_its_target_untouched(run_copy, victim, capsys, name, mode):
    _interrupted(run_copy)
    if (run_copy / name).exists():
        (run_copy / name).unlink()
    os.symlink(victim, run_copy / name)
    before = _snapshot(run_copy)
    argv = (
        ["--outdir", str(run_copy), "--resume"]
        if mode == "resume"
        else ["--outdir", str(run_copy), *FAST, "--overwrite"]
    )
    capsys.readouterr()
    assert _run(argv) == 2
    err = capsys.readouterr().err
    assert victim.read_text() == MARK
    assert len(_error_lines(err)) == 1 and name in err and "symbolic link" in err and "Traceback" not in err
    assert _snapshot(run_copy) == before


def test_symlinked_checkpoint_file_is_refused(run_copy, victim, capsys):
    _interrupted(run_copy)
    state = run_copy / "checkpoints" / "step_000002" / "state.json"
    state.unlink()
    os.symlink(victim, state)
    assert _run(["--outdir", str(run_copy), "--resume"]) == 2
    assert "state.json" in capsys.readouterr().err and victim.read_text() == MARK


def test_suite_refuses_a_symlinked_suite_json(tmp_path, victim, capsys):
    from noma_prorl_bench.suite import main as suite_main

    (tmp_path / "s").mkdir()
    os.symlink(victim, tmp_path / "s" / "suite.json")
    assert _run_suite(suite_main, ["--preset", "smoke", "--outdir", str(tmp_path / "s")]) == 2
    assert "suite.json" in capsys.readouterr().err and victim.read_text() == MARK


def _run_suite(fn, argv):
    try:
        return fn(argv)
    except SystemExit as e:
        return e.code


# ------------------------------------------------------------------ ownership
def test_overwrite_refuses_a_foreign_directory(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    d = tmp_path / "project"
    for sub in ("checkpoints", "plots", "tb"):
        (d / sub).mkdir(parents=True)
        (d / sub / "data.bin").write_text("theirs")
    for f in ("config.json", "metrics.csv", "summary.json"):
        (d / f).write_text('{"theirs": 1}')
    before = _snapshot(d)
    assert _run(["--outdir", str(d), *FAST, "--overwrite"]) == 2
    assert "--overwrite" in _error_lines(capsys.readouterr().err)[0]
    assert _snapshot(d) == before


@pytest.mark.parametrize("where", ["home", "cwd"])
def test_overwrite_refuses_home_and_cwd_with_a_scratch_home(finished, tmp_path, where):
    home = tmp_path / "home"
    shutil.copytree(finished, home)  # even a run of ours there is not cleared
    env = {**os.environ, "HOME": str(home), "OMP_NUM_THREADS": "1"}
    outdir = "~" if where == "home" else "."
    cmd = [
        sys.executable,
        "-m",
        "noma_prorl_bench.run",
        "--outdir",
        os.path.expanduser(outdir) if where == "cwd" else str(home),
        *FAST,
        "--overwrite",
    ]
    before = _snapshot(home)
    p = subprocess.run(cmd, env=env, cwd=str(home), capture_output=True, text=True, timeout=300)
    assert p.returncode == 2, p.stderr
    assert "refusing to clear" in p.stderr and "Traceback" not in p.stderr
    assert _snapshot(home) == before


def test_two_runs_on_one_empty_outdir_never_both_succeed(tmp_path):
    """The emptiness check is repeated under the lock: the slower run (a longer warm start) finds
    the faster one's files and refuses (or finds its lock), so the finished run survives."""
    out = tmp_path / "race"
    out.mkdir()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    base = [sys.executable, "-m", "noma_prorl_bench.run", "--outdir", str(out), *FAST]
    a = subprocess.Popen(base + ["--seed", "1"], env=env, stderr=subprocess.PIPE, text=True)
    b = subprocess.Popen(base + ["--seed", "2", "--warmstart_steps", "600"], env=env, stderr=subprocess.PIPE, text=True)
    err_a, err_b = a.communicate(timeout=600)[1], b.communicate(timeout=600)[1]
    codes = sorted([a.returncode, b.returncode])
    assert codes == [0, 2], (err_a, err_b)
    winner = 1 if a.returncode == 0 else 2
    loser_err = err_b if winner == 1 else err_a
    assert "--outdir" in loser_err and "Traceback" not in loser_err
    assert json.loads((out / "config.json").read_text())["seed"] == winner
    assert json.loads((out / "summary.json").read_text())["complete"] is True


def test_run_id_is_kept_across_a_resume(run_copy):
    _interrupted(run_copy)
    rid = json.loads((run_copy / "config.json").read_text())["run_id"]
    assert _run(["--outdir", str(run_copy), "--resume"]) == 0
    cfg = json.loads((run_copy / "config.json").read_text())
    assert cfg["run_id"] == rid and len(cfg["resumes"]) == 1


# ------------------------------------------------------------------ integrity
@pytest.mark.parametrize(
    "damage,needle",
    [
        ("flip", "tensors.safetensors does not match the sha256"),
        ("swap", "tensors.safetensors does not match the sha256"),
        ("gap", "missing steps 2"),
        ("duplicate", "repeated steps 1"),
        ("lost_rows", "missing steps 1-2"),
    ],
)
def test_damaged_checkpoint_or_log_is_refused_before_anything_is_written(run_copy, tmp_path, capsys, damage, needle):
    _interrupted(run_copy)
    t = run_copy / "checkpoints" / "step_000002" / "tensors.safetensors"
    lines = (run_copy / "metrics.jsonl").read_text().splitlines(keepends=True)
    if damage == "flip":
        data = bytearray(t.read_bytes())
        data[-200:-136] = bytes(x ^ 0xFF for x in data[-200:-136])  # 64 bytes of tensor data
        t.write_bytes(bytes(data))
    elif damage == "swap":
        other = tmp_path / "other"
        assert main(["--outdir", str(other), *FAST, "--save_every", "2", "--seed", "7"]) == 0
        shutil.copy(other / "checkpoints" / "step_000002" / "tensors.safetensors", t)
    elif damage == "gap":  # lines[0] is step 0 (the evaluation before RL)
        (run_copy / "metrics.jsonl").write_text("".join(lines[:2] + lines[3:]))
    elif damage == "duplicate":
        (run_copy / "metrics.jsonl").write_text("".join(lines[:2] + lines[1:]))
    else:
        (run_copy / "metrics.jsonl").write_text("".join(lines[:1] + lines[3:]))
    before = _snapshot(run_copy)
    capsys.readouterr()
    assert _run(["--outdir", str(run_copy), "--resume"]) == 2
    err = capsys.readouterr().err
    assert needle in err and "--resume" in _error_lines(err)[0] and "Traceback" not in err
    assert _snapshot(run_copy) == before


def test_nested_json_in_events_or_state_is_not_a_traceback(run_copy, capsys):
    _interrupted(run_copy)
    with open(run_copy / "events.jsonl", "a") as f:
        f.write("[" * 100_000 + "]" * 100_000 + "\n")
    assert _run(["--outdir", str(run_copy), "--resume"]) == 0  # the unreadable line is dropped
    assert "Traceback" not in capsys.readouterr().err
    _interrupted(run_copy)
    (run_copy / "checkpoints" / "step_000002" / "state.json").write_text("[" * 100_000 + "]" * 100_000)
    assert _run(["--outdir", str(run_copy), "--resume"]) == 2
    err = capsys.readouterr().err
    assert "--resume" in _error_lines(err)[0] and "Traceback" not in err


# ------------------------------------------------------------------ numerical faults
def test_non_finite_logits_while_sampling_are_a_nan_guard_stop(tmp_path, capsys):
    d = tmp_path / "blowup"
    assert _run(["--outdir", str(d), *FAST, "--model", "transformer", "--lr", "1e6", "--save_every", "1"]) == 3
    err = capsys.readouterr().err
    assert "non-finite logits" in err and "Traceback" not in err
    events = [json.loads(x) for x in (d / "events.jsonl").read_text().splitlines()]
    guard = [e for e in events if e["event"] == "nan_guard"]
    assert guard and guard[-1]["reason"] == "non-finite logits before sampling"
    saved = sorted(os.listdir(d / "checkpoints"))
    assert saved and int(saved[-1][5:]) < guard[-1]["step_sampled"]  # no checkpoint of the broken step
    assert _run(["--outdir", str(d), "--resume"]) == 3  # resuming repeats it: exit 3, no crash
    assert "Traceback" not in capsys.readouterr().err


def test_a_run_with_no_applied_update_is_not_complete(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("NOMA_PRORL_INJECT_NAN_STEP", "1")
    d = tmp_path / "nan"
    assert _run(["--outdir", str(d), *FAST, "--steps", "1"]) == 3
    summary = json.loads((d / "summary.json").read_text())
    assert summary["complete"] is False and summary["no_updates"] is True
    assert "no update was applied" in capsys.readouterr().err


# ------------------------------------------------------------------ signals
def test_sighup_checkpoints_and_exits_129(tmp_path):
    d = tmp_path / "hup"
    cmd = [sys.executable, "-m", "noma_prorl_bench.run", "--outdir", str(d), *FAST, "--steps", "400"]
    p = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    t0 = time.time()
    while not ((d / "metrics.jsonl").exists() and (d / "metrics.jsonl").read_text().count("\n") >= 2):
        assert time.time() - t0 < 300 and p.poll() is None
        time.sleep(0.2)
    p.send_signal(signal.SIGHUP)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 129, err
    assert "SIGHUP" in err and os.listdir(d / "checkpoints")
    assert _run(["--outdir", str(d), "--resume", "--steps", "6"]) in (0, 2)  # resumable (or a --steps refusal)


def _catches(pid, signum):
    """Whether process `pid` has a handler installed for `signum` (SigCgt in /proc/PID/status)."""
    with open(f"/proc/{pid}/status") as f:
        mask = next(int(line.split()[1], 16) for line in f if line.startswith("SigCgt:"))
    return bool(mask >> (signum - 1) & 1)


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads /proc/PID/status")
def test_sighup_during_the_warm_start_stops_at_once_leaving_nothing(tmp_path):
    """SIGHUP while the supervised warm start runs (its handler is installed once the Trainer is
    being built, seen in SigCgt; the model build before the warm start takes milliseconds): exit
    129 at once with one line naming the signal and the warm start, no traceback, and nothing
    written (no lock, no config.json), so the same command starts over."""
    d = tmp_path / "hup_warmstart"
    cmd = [sys.executable, "-m", "noma_prorl_bench.run", "--outdir", str(d), *FAST, "--warmstart_steps", "100000"]
    p = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    t0 = time.time()
    while not _catches(p.pid, signal.SIGHUP):
        assert time.time() - t0 < 120 and p.poll() is None
        time.sleep(0.1)
    time.sleep(1.0)
    p.send_signal(signal.SIGHUP)
    _, err = p.communicate(timeout=120)
    lines = [line for line in err.splitlines() if line.strip()]
    assert p.returncode == 129, err
    assert len(lines) == 1 and "interrupted by SIGHUP during the set-up (warm start)" in lines[0], err
    assert "nothing was written" in lines[0] and not d.exists()


# ------------------------------------------------------------------ bad input: one line, exit 2, nothing written
@pytest.mark.parametrize(
    "extra,flag",
    [
        (["--threads", "100000"], "--threads"),
        (["--seed", "9" * 30], "--seed"),
        (["--lr", "1e300"], "--lr"),
        (["--beta", "1e39"], "--beta"),
        (["--ppo_epochs", "1000000000"], "--ppo_epochs"),
        (["--model", "transformer", "--d_model", "300000"], "--d_model"),  # the memory refusal names the model size
    ],
)
def test_out_of_range_numbers_name_their_flag(tmp_path, capsys, extra, flag):
    out = tmp_path / "never"
    assert _run(["--outdir", str(out), *FAST, *extra]) == 2
    err = capsys.readouterr().err
    assert flag in _error_lines(err)[0] and "Traceback" not in err and not out.exists()


@pytest.mark.parametrize("case", ["under_a_file", "proc", "bad_suite_json", "nested_suite_json"])
def test_suite_bad_outdir_is_one_line(tmp_path, capsys, case):
    from noma_prorl_bench.suite import main as suite_main

    (tmp_path / "afile").write_text("x")
    outdir = {"under_a_file": tmp_path / "afile" / "sub", "proc": "/proc/x"}.get(case, tmp_path / "s")
    if case.endswith("suite_json"):
        (tmp_path / "s").mkdir()
        (tmp_path / "s" / "suite.json").write_text(
            "[1, 2]" if case == "bad_suite_json" else "[" * 100_000 + "]" * 100_000
        )
    assert _run_suite(suite_main, ["--preset", "smoke", "--outdir", str(outdir)]) == 2
    err = capsys.readouterr().err
    assert len(_error_lines(err)) == 1 and "--outdir" in err and "Traceback" not in err


# ------------------------------------------------------------------ suite restart
def test_suite_waits_for_a_run_still_going_instead_of_failing_it(tmp_path, capsys):
    """An earlier suite was killed with -9 and its child run goes on (it holds its lock): a new
    suite waits for it, leaves its log alone, and counts it once it completes."""
    from noma_prorl_bench.suite import expand
    from noma_prorl_bench.suite import main as suite_main

    out = tmp_path / "s"
    out.mkdir()
    spec = expand("smoke", 1, 40, ["A1"])[0]
    (out / f"{spec.name}.log").write_text("the earlier suite's log\n")
    child = subprocess.Popen(
        spec.command(str(out)),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        start_new_session=True,
    )
    try:
        metrics = out / spec.name / "metrics.jsonl"
        t0 = time.time()
        while not (metrics.exists() and metrics.read_text().count("\n") >= 1):
            assert time.time() - t0 < 300 and child.poll() is None
            time.sleep(0.1)
        code = _run_suite(
            suite_main,
            [
                "--preset",
                "smoke",
                "--arms",
                "A1",
                "--seeds",
                "1",
                "--steps",
                "40",
                "--jobs",
                "1",
                "--quiet",
                "--outdir",
                str(out),
            ],
        )
    finally:
        child.wait(timeout=600)
    err = capsys.readouterr().err
    assert code == 0, err
    assert "is still going" in err and "failed" not in err
    assert (out / f"{spec.name}.log").read_text() == "the earlier suite's log\n"
    assert json.loads((out / spec.name / "summary.json").read_text())["complete"] is True
    assert child.returncode == 0
