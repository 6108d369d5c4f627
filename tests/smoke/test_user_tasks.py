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
SMALL = [
    "--batch_size",
    "4",
    "--group_size",
    "2",
    "--n_val",
    "8",
    "--eval_every",
    "2",
    "--warmstart_steps",
    "5",
    "--quiet",
]
TIMING = re.compile(r"^(time/|perf/)")


def _cli(cwd, *args, module="noma_prorl_bench.run", path=True):
    """The command in `cwd`, with `cwd` on PYTHONPATH (the user names it: it is never searched implicitly)."""
    env = dict(os.environ)
    if path:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(cwd), env.get("PYTHONPATH", "")) if p)
    return subprocess.run(
        [sys.executable, "-m", module, *args], cwd=cwd, capture_output=True, text=True, timeout=600, env=env
    )


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
    assert all(len(s["answer"]) == 3 and s["answer"] == s["prompt"] for s in samples)  # kwargs reached the task
    assert _cli(work, "--outdir", "part", "--steps", "2", *task).returncode == 0
    r = _cli(work, "--outdir", "part", "--resume", "--steps", "4")  # code named only by the checkpoint
    assert r.returncode == 2 and "--task copy_task:make" in r.stderr and len(_metrics(work / "part")) == 3
    r = _cli(work, "--outdir", "part", "--resume", "--steps", "4", "--task", "copy_task:make")
    assert r.returncode == 0, r.stderr
    assert _metrics(work / "part") == rows


def test_factory_task_runs_in_the_suite(work):
    r = _cli(
        work,
        "--preset",
        "smoke",
        "--arms",
        "A1,B",
        "--steps",
        "2",
        "--outdir",
        "suite",
        "--quiet",
        "--task",
        "copy_task:make",
        module="noma_prorl_bench.suite",
    )
    assert r.returncode == 0, r.stderr
    for arm in ("A1_s0", "B_s0"):
        assert json.loads((work / "suite" / arm / "config.json").read_text())["task"] == "copy_task:make"
        assert len(read_jsonl(work / "suite" / arm / "metrics.jsonl")) == 3  # step 0 (before RL), 1, 2
    assert (work / "suite" / "report.md").is_file()
    started = [shlex.split(line[2:]) for line in r.stderr.splitlines() if line.startswith("$ ")]
    assert len(started) == 2 and all(
        c[0] == sys.executable and c[1:3] == ["-m", "noma_prorl_bench.run"] for c in started
    )  # a printed command pastes in any shell
    r = _cli(
        work, "--preset", "smoke", "--outdir", "suite2", "--task", "copy_task:mak", module="noma_prorl_bench.suite"
    )
    assert r.returncode == 2 and "has no attribute 'mak'" in r.stderr and not (work / "suite2").exists()


def test_factory_task_from_the_python_api(work, monkeypatch):
    from noma_prorl_bench import Config, load_run, train

    monkeypatch.syspath_prepend(str(work))  # importable, as the docs say
    run = load_run(
        train(
            Config(
                outdir=str(work / "py"),
                steps=2,
                task="copy_task:make",
                batch_size=4,
                group_size=2,
                n_val=8,
                eval_every=2,
                warmstart_steps=5,
                quiet=True,
            )
        )
    )
    assert run.config["task"] == "copy_task:make" and len(run.metrics["reward/mean"]) == 2


def _write_jsonl(path, n=40):
    with open(path, "w") as f:
        for i in range(n):
            f.write(json.dumps({"question": f"{i}+{i % 7}=", "sol": str(i + i % 7), "other": [i]}) + "\n")


def test_jsonl_task_runs_from_the_cli_suite_and_resume(work):
    _write_jsonl(work / "add.jsonl")
    task = [
        "--task",
        "jsonl:add.jsonl",
        "--prompt_field",
        "question",
        "--answer_field",
        "sol",
        "--reward_fn",
        "numeric",
        "--reward_tol",
        "0.5",
        *SMALL,
    ]
    assert _cli(work, "--outdir", "full", "--steps", "4", *task).returncode == 0
    samples = read_jsonl(work / "full" / "samples.jsonl")
    assert samples and all(re.fullmatch(r"\d+\+\d=", s["prompt"]) for s in samples)
    assert _cli(work, "--outdir", "part", "--steps", "2", *task).returncode == 0
    assert _cli(work, "--outdir", "part", "--resume", "--steps", "4").returncode == 0
    assert _metrics(work / "part") == _metrics(work / "full")
    r = _cli(
        work,
        "--preset",
        "smoke",
        "--arms",
        "A1",
        "--steps",
        "2",
        "--outdir",
        "suite",
        "--quiet",
        *task[:10],
        module="noma_prorl_bench.suite",
    )
    assert r.returncode == 0, r.stderr
    assert json.loads((work / "suite" / "A1_s0" / "config.json").read_text())["reward_fn"] == "numeric"


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--task", "jsonl:up.jsonl", "--n_val", "1"], "outside the character vocabulary of --model gru ('H')"),
        (["--task", "jsonl:up.jsonl", "--n_val", "2"], "argument --n_val: 2 leaves no training prompt"),
        (["--task", "jsonl:missing.jsonl"], "cannot read 'missing.jsonl'"),
        (["--task", "nomodule:make"], "cannot import 'nomodule'"),
        (["--task", "copy_task:make", "--task_kwargs", '{"size": 3}'], "argument --task_kwargs: copy_task:make(size"),
        (
            ["--task", "noma_prorl_bench.tasks:Example", "--task_kwargs", '{"prompt": "a", "answer": "b"}'],
            "returned Example, which lacks name, max_new_tokens, sample, validation_set, reward",
        ),
        (["--task", "copy_digits"], "invalid choice: 'copy_digits'"),
        (["--task", "jsonl:up.jsonl", "--reward_fn", "numerc"], "(did you mean numeric?)"),
        (["--reward_tol", "0.1"], "argument --reward_tol: only applies to --task jsonl:PATH"),
        (["--task", "copy_task:make", "--prompt_field", "q"], "argument --prompt_field: only applies"),
    ],
)
def test_bad_user_tasks_exit_2_and_write_nothing(work, flags, message):
    (work / "up.jsonl").write_text('{"prompt": "Hello", "answer": "x"}\n{"prompt": "b", "answer": "x"}\n')
    r = _cli(work, "--outdir", "out", "--steps", "2", *flags)
    assert r.returncode == 2 and message in r.stderr, r.stderr
    assert not (work / "out").exists()


@pytest.mark.parametrize(
    "line, flags, message",
    [
        (
            json.dumps({"prompt": "a" * 10_000_000, "answer": "b"}),
            [],
            "argument --max_line_bytes: big.jsonl:1 is longer than --max_line_bytes 1,048,576 bytes",
        ),
        (
            '{"prompt": ' + "[" * 100_000 + "]" * 100_000 + ', "answer": "a"}',
            [],
            "argument --task: big.jsonl:1 nests JSON deeper than 64 levels",
        ),
        (
            json.dumps({"prompt": "1" * 1_000_000, "answer": "2"}),
            ["--max_line_bytes", "2000000", "--max_prompt_chars", "1000000"],
            "sequences of the task's longest prompt, 1,000,002 tokens",
        ),  # the memory preflight
    ],
    ids=["10MB_line", "100k_deep", "1M_char_prompt"],
)
@pytest.mark.parametrize("n_val", [[], ["--n_val", "2"]], ids=["n_val_fitted", "n_val_given"])
def test_an_oversized_task_line_exits_2_with_one_line(work, line, flags, message, n_val):
    (work / "big.jsonl").write_text(
        line + "\n" + "".join(json.dumps({"prompt": f"{i}+1=", "answer": str(i + 1)}) + "\n" for i in range(11))
    )
    r = _cli(work, "--outdir", "out", "--steps", "2", "--task", "jsonl:big.jsonl", *flags, *n_val)
    assert r.returncode == 2 and message in r.stderr, r.stderr[-2000:]
    assert [line for line in r.stderr.splitlines() if "error:" in line] == [
        line for line in r.stderr.splitlines() if message in line
    ]  # one line says it
    assert "Traceback" not in r.stderr and len(r.stderr.splitlines()) <= 3  # usage, the --n_val note, the error
    assert not (work / "out").exists()


def test_a_small_jsonl_task_fits_n_val_in_the_run_its_resume_and_the_suite(work):
    _write_jsonl(work / "add.jsonl", n=12)
    task = ["--task", "jsonl:add.jsonl", "--prompt_field", "question", "--answer_field", "sol"]
    r = _cli(work, "--outdir", "part", "--steps", "2", *task, *SMALL[:4], *SMALL[6:])  # SMALL without --n_val
    assert r.returncode == 0, r.stderr
    assert "--n_val 2: not given" in r.stderr
    assert json.loads((work / "part" / "config.json").read_text())["n_val"] == 2  # 12 // 5
    r = _cli(work, "--outdir", "part", "--resume", "--steps", "4")
    assert r.returncode == 0 and "not given" not in r.stderr, r.stderr  # the recorded value, as is
    assert json.loads((work / "part" / "config.json").read_text())["n_val"] == 2
    r = _cli(
        work,
        "--preset",
        "smoke",
        "--arms",
        "A1",
        "--steps",
        "2",
        "--outdir",
        "suite",
        "--quiet",
        *task,
        module="noma_prorl_bench.suite",
    )
    assert r.returncode == 0, r.stderr
    assert "--n_val 2 for every run" in r.stderr and "fewer than the preset's 32" in r.stderr
    assert json.loads((work / "suite" / "A1_s0" / "config.json").read_text())["n_val"] == 2
