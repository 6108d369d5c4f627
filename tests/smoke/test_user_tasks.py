"""Your own task (docs/tasks.md): `--task module.path:factory` and `--task jsonl:PATH` from the CLI,
the suite and a resume (subprocesses, as a user runs them), and the Python API; bad user tasks
exit 2 before anything is written."""
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from runhelp import read_jsonl

pytestmark = pytest.mark.smoke
ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "docs" / "examples" / "copy_task.py"
SMALL = ["--batch_size", "4", "--group_size", "2", "--n_val", "8", "--eval_every", "2", "--warmstart_steps", "5",
         "--quiet"]
TIMING = re.compile(r"^(time/|perf/)")


def _cli(cwd, *args, module="noma_prorl_bench.run", path=True):
    """The command in `cwd`, with `cwd` on PYTHONPATH (the user names it: it is never searched implicitly)."""
    env = dict(os.environ)
    if path:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(cwd), env.get("PYTHONPATH", "")) if p)
    return subprocess.run([sys.executable, "-m", module, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600, env=env)


def _metrics(path):
    return [{k: v for k, v in r.items() if not TIMING.match(k)} for r in read_jsonl(path / "metrics.jsonl")]


@pytest.fixture
def work(tmp_path):
    """A directory holding the docs' example task module, as a user's project would."""
    shutil.copy(EXAMPLE, tmp_path / "copy_task.py")
    return tmp_path


def test_docs_show_the_example_file_verbatim():
    doc = (ROOT / "docs" / "tasks.md").read_text()
    assert EXAMPLE.read_text().strip() in doc


def test_factory_task_runs_from_the_cli_and_resumes_exactly(work):
    task = ["--task", "copy_task:make", "--task_kwargs", '{"length": 3}', *SMALL]
    r = _cli(work, "--outdir", "full", "--steps", "4", *task)
    assert r.returncode == 0, r.stderr
    cfg = json.loads((work / "full" / "config.json").read_text())
    assert (cfg["task"], json.loads(cfg["task_kwargs"])) == ("copy_task:make", {"length": 3})
    rows = _metrics(work / "full")
    assert [m["step"] for m in rows] == [0, 1, 2, 3, 4] and "reward/val" in rows[-1]
    samples = read_jsonl(work / "full" / "samples.jsonl")
    assert all(len(s["answer"]) == 3 and s["answer"] == s["prompt"] for s in samples)   # kwargs reached the task
    assert _cli(work, "--outdir", "part", "--steps", "2", *task).returncode == 0
    r = _cli(work, "--outdir", "part", "--resume", "--steps", "4")      # code named only by the checkpoint
    assert r.returncode == 2 and "--task copy_task:make" in r.stderr and len(_metrics(work / "part")) == 3
    r = _cli(work, "--outdir", "part", "--resume", "--steps", "4", "--task", "copy_task:make")
    assert r.returncode == 0, r.stderr
    assert _metrics(work / "part") == rows


def test_factory_task_runs_in_the_suite(work):
    r = _cli(work, "--preset", "smoke", "--arms", "A1,B", "--steps", "2", "--outdir", "suite", "--quiet",
             "--task", "copy_task:make", module="noma_prorl_bench.suite")
    assert r.returncode == 0, r.stderr
    for arm in ("A1_s0", "B_s0"):
        assert json.loads((work / "suite" / arm / "config.json").read_text())["task"] == "copy_task:make"
        assert len(read_jsonl(work / "suite" / arm / "metrics.jsonl")) == 3       # step 0 (before RL), 1, 2
    assert (work / "suite" / "report.md").is_file()
    started = [shlex.split(line[2:]) for line in r.stderr.splitlines() if line.startswith("$ ")]
    assert len(started) == 2 and all(c[0] == sys.executable and c[1:3] == ["-m", "noma_prorl_bench.run"]
                                     for c in started)               # a printed command pastes in any shell
    r = _cli(work, "--preset", "smoke", "--outdir", "suite2", "--task", "copy_task:mak", module="noma_prorl_bench.suite")
    assert r.returncode == 2 and "has no attribute 'mak'" in r.stderr and not (work / "suite2").exists()


def test_factory_task_from_the_python_api(work, monkeypatch):
    from noma_prorl_bench import Config, load_run, train
    monkeypatch.syspath_prepend(str(work))                  # importable, as the docs say
    run = load_run(train(Config(outdir=str(work / "py"), steps=2, task="copy_task:make", batch_size=4, group_size=2,
                                n_val=8, eval_every=2, warmstart_steps=5, quiet=True)))
    assert run.config["task"] == "copy_task:make" and len(run.metrics["reward/mean"]) == 2


def _write_jsonl(path, n=40):
    with open(path, "w") as f:
        for i in range(n):
            f.write(json.dumps({"question": f"{i}+{i % 7}=", "sol": str(i + i % 7), "other": [i]}) + "\n")


def test_jsonl_task_runs_from_the_cli_suite_and_resume(work):
    _write_jsonl(work / "add.jsonl")
    task = ["--task", "jsonl:add.jsonl", "--prompt_field", "question", "--answer_field", "sol",
            "--reward_fn", "numeric", "--reward_tol", "0.5", *SMALL]
    assert _cli(work, "--outdir", "full", "--steps", "4", *task).returncode == 0
    samples = read_jsonl(work / "full" / "samples.jsonl")
    assert samples and all(re.fullmatch(r"\d+\+\d=", s["prompt"]) for s in samples)
    assert _cli(work, "--outdir", "part", "--steps", "2", *task).returncode == 0
    assert _cli(work, "--outdir", "part", "--resume", "--steps", "4").returncode == 0
    assert _metrics(work / "part") == _metrics(work / "full")
    r = _cli(work, "--preset", "smoke", "--arms", "A1", "--steps", "2", "--outdir", "suite", "--quiet",
             *task[:10], module="noma_prorl_bench.suite")
    assert r.returncode == 0, r.stderr
    assert json.loads((work / "suite" / "A1_s0" / "config.json").read_text())["reward_fn"] == "numeric"


@pytest.mark.parametrize("flags, message", [
    (["--task", "jsonl:up.jsonl", "--n_val", "1"], "outside the character vocabulary of --model gru ('H')"),
    (["--task", "jsonl:up.jsonl", "--n_val", "2"], "argument --n_val: 2 leaves no training prompt"),
    (["--task", "jsonl:missing.jsonl"], "cannot read 'missing.jsonl'"),
    (["--task", "nomodule:make"], "cannot import 'nomodule'"),
    (["--task", "copy_task:make", "--task_kwargs", '{"size": 3}'], "argument --task_kwargs: copy_task:make(size"),
    (["--task", "noma_prorl_bench.tasks:Example", "--task_kwargs", '{"prompt": "a", "answer": "b"}'],
     "returned Example, which lacks name, max_new_tokens, sample, validation_set, reward"),
    (["--task", "copy_digits"], "invalid choice: 'copy_digits'"),
    (["--task", "jsonl:up.jsonl", "--reward_fn", "numerc"], "(did you mean numeric?)"),
    (["--reward_tol", "0.1"], "argument --reward_tol: only applies to --task jsonl:PATH"),
    (["--task", "copy_task:make", "--prompt_field", "q"], "argument --prompt_field: only applies"),
])
def test_bad_user_tasks_exit_2_and_write_nothing(work, flags, message):
    (work / "up.jsonl").write_text('{"prompt": "Hello", "answer": "x"}\n{"prompt": "b", "answer": "x"}\n')
    r = _cli(work, "--outdir", "out", "--steps", "2", *flags)
    assert r.returncode == 2 and message in r.stderr, r.stderr
    assert not (work / "out").exists()
