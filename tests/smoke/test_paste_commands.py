"""Commands the tool prints paste into any shell: the resume hint names the running interpreter
(or the installed prorl-bench script) by its full path and quotes the outdir; pasted with a PATH
that has no virtual environment on it, it continues the run."""

import os
import shlex
import signal
import subprocess
import sys

import pytest

import noma_prorl_bench.training.trainer as trainer_mod
from noma_prorl_bench.config.shell import command, pip_install, program
from noma_prorl_bench.run import main

pytestmark = pytest.mark.smoke


def _interrupted_hint(tmp_path, fast_flags, monkeypatch, capsys, prog):
    real_step = trainer_mod.Trainer.train_step

    def step_then_signal(self):
        m = real_step(self)
        if self.step_idx == 2:
            signal.raise_signal(signal.SIGTERM)
        return m

    monkeypatch.setattr(trainer_mod.Trainer, "train_step", step_then_signal)
    d = tmp_path / "my runs" / "a"  # a space: the hint must quote it
    assert main(["--outdir", str(d), *fast_flags, "--steps", "4"], prog=prog) == 143
    monkeypatch.setattr(trainer_mod.Trainer, "train_step", real_step)
    err = capsys.readouterr().err
    return d, err.split("Continue with: ", 1)[1].strip()


@pytest.mark.parametrize("prog", ["python -m noma_prorl_bench.run", "prorl-bench run"])
def test_resume_hint_pastes_outside_the_venv(tmp_path, fast_flags, monkeypatch, capsys, prog):
    d, hint = _interrupted_hint(tmp_path, fast_flags, monkeypatch, capsys, prog)
    argv = shlex.split(hint)
    assert os.path.isabs(argv[0]) and argv[-3:] == ["--outdir", str(d), "--resume"]
    assert (
        argv[0] == sys.executable
        if prog.startswith("python")
        else argv[0] in (os.path.join(os.path.dirname(sys.executable), "prorl-bench"), sys.executable)
    )
    env = {"PATH": "/usr/bin:/bin", "HOME": os.environ.get("HOME", "/tmp"), "PYTHONPATH": os.environ["PYTHONPATH"]}
    r = subprocess.run(hint, shell=True, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert len((d / "metrics.jsonl").read_text().splitlines()) == 5  # step 0 (before RL), 1..4


def test_program_and_pip_hints_name_the_interpreter():
    exe = shlex.quote(sys.executable)
    assert program("python -m noma_prorl_bench.run") == f"{exe} -m noma_prorl_bench.run"
    script = os.path.join(os.path.dirname(sys.executable), "prorl-bench")
    want = shlex.quote(script) if os.access(script, os.X_OK) else f"{exe} -m noma_prorl_bench.cli"
    assert program("prorl-bench run") == f"{want} run"
    assert command("prorl-bench run", "--outdir", "a b") == f"{want} run --outdir 'a b'"
    assert pip_install("wandb") == f"{exe} -m pip install wandb"
