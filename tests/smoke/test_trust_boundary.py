"""The trust boundary (docs/reliability.md, "What a foreign directory can and cannot do"): code is
imported only when the command line names it; a checkpoint continues only the run that wrote it;
the run directory's checks come before any task, model or memory estimate is built; a suite reads
only runs inside its own directory and refuses a run directory as its --outdir. Every refusal is
one line, exit 2, and leaves the directories as they were (compared byte for byte) and no
``PWNED`` marker anywhere (the payloads create it when they run)."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from noma_prorl_bench.io import checkpoint as ck

pytestmark = pytest.mark.smoke
SMALL = [
    "--steps",
    "2",
    "--save_every",
    "1",
    "--keep_checkpoints",
    "3",
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
PAYLOAD = {"command": "touch PWNED"}


def _cli(cwd, *args, module="noma_prorl_bench.run", pythonpath=None):
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(pythonpath), env.get("PYTHONPATH", "")) if p)
    return subprocess.run(
        [sys.executable, "-m", module, *map(str, args)], cwd=cwd, capture_output=True, text=True, timeout=600, env=env
    )


def _snapshot(d):
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(Path(d).rglob("*")) if p.is_file()}


def _one_error(r, *fragments):
    lines = [x for x in r.stderr.splitlines() if "error:" in x]  # argparse prints its usage line above
    assert r.returncode == 2 and len(lines) == 1, r.stderr
    for f in fragments:
        assert f in lines[0], lines[0]
    return lines[0]


def _pwned(*roots):
    return [p for root in roots for p in Path(root).rglob("PWNED")]


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """Two finished runs (seeds 0 and 1) with checkpoints at steps 1 and 2."""
    root = tmp_path_factory.mktemp("trust")
    for seed in (0, 1):
        r = _cli(root, "--outdir", f"s{seed}", "--seed", seed, *SMALL)
        assert r.returncode == 0, r.stderr
    return root


@pytest.fixture
def work(made, tmp_path):
    for name in ("s0", "s1"):
        shutil.copytree(made / name, tmp_path / name)
    return tmp_path


def _rewrite_checkpoint(path, **config):
    """Change the config stored in a checkpoint and make it self-consistent again (hash, digests),
    as anyone who hands over a directory can."""
    state = json.loads((path / ck.STATE).read_text())
    state["config"].update(config)
    state["config_hash"] = ck.config_hash(state["config"])
    (path / ck.STATE).write_text(json.dumps(state))
    digests = {n: ck.sha256_file(str(path / n)) for n in (ck.TENSORS, ck.STATE)}
    (path / ck.MARKER).write_text(json.dumps({"step": state["step"], "sha256": digests}) + "\n")


def _plant_code(run, **extra):
    """The run's newest checkpoint and config.json name os:system as the task factory."""
    for p in (run / "checkpoints").iterdir():
        _rewrite_checkpoint(p, task="os:system", task_kwargs=json.dumps(PAYLOAD), **extra)
    rec = json.loads((run / "config.json").read_text())
    (run / "config.json").write_text(
        json.dumps({**rec, "task": "os:system", "task_kwargs": json.dumps(PAYLOAD), **extra})
    )
    (run / "summary.json").unlink()


# ------------------------------------------------------------------------ code named by files
def test_code_in_a_config_file_is_refused_until_the_command_line_names_it(tmp_path):
    (tmp_path / "theirs.json").write_text(json.dumps({"task": "os:system", "task_kwargs": PAYLOAD, "steps": 2}))
    r = _cli(tmp_path, "--config", "theirs.json", "--outdir", "out")
    _one_error(r, "argument --task:", "'theirs.json'", "'os:system'", "--task os:system")
    (tmp_path / "verifier.yaml").write_text("task: jsonl:x.jsonl\nreward_fn: os:system\n")
    r = _cli(tmp_path, "--config", "verifier.yaml", "--outdir", "out")
    _one_error(r, "argument --reward_fn:", "'verifier.yaml'", "--reward_fn os:system")
    assert not _pwned(tmp_path) and sorted(os.listdir(tmp_path)) == ["theirs.json", "verifier.yaml"]


def test_a_runs_own_config_json_with_code_is_refused(work):
    _plant_code(work / "s0")
    before = _snapshot(work)
    r = _cli(work, "--config", "s0/config.json", "--outdir", "again")
    _one_error(r, "argument --task:", "s0/config.json", "--task os:system")
    assert not _pwned(work) and _snapshot(work) == before and not (work / "again").exists()


def test_code_in_a_checkpoint_is_not_imported_on_resume(work):
    _plant_code(work / "s0")
    before = _snapshot(work)
    r = _cli(work, "--outdir", "s0", "--resume", "--steps", "4")
    _one_error(r, "argument --task:", "the checkpoint", "'os:system'", "--task os:system")
    (work / "s0" / "config.json").write_text(
        json.dumps({**json.loads((work / "s0" / "config.json").read_text()), "task": "reverse_digits"})
    )
    before = _snapshot(work)
    r = _cli(work, "--outdir", "s0", "--resume", "--steps", "4")  # config.json disagrees: refused as well
    _one_error(r, "other settings than this run's config.json", "--task (checkpoint 'os:system'")
    assert not _pwned(work) and _snapshot(work) == before


def test_a_suite_rerun_does_not_import_code_from_its_runs(work):
    r = _cli(
        work,
        "--preset",
        "smoke",
        "--arms",
        "A1",
        "--seeds",
        "1",
        "--steps",
        "2",
        "--outdir",
        "suite",
        "--quiet",
        module="noma_prorl_bench.suite",
    )
    assert r.returncode == 0, r.stderr
    _plant_code(work / "suite" / "A1_s0")  # now resumable: a checkpoint and no summary
    r = _cli(
        work,
        "--preset",
        "smoke",
        "--arms",
        "A1",
        "--seeds",
        "1",
        "--steps",
        "2",
        "--outdir",
        "suite",
        "--quiet",
        module="noma_prorl_bench.suite",
    )
    assert r.returncode == 1 and "1 runs failed: ['A1_s0']" in r.stderr, r.stderr
    assert "--task os:system" in (work / "suite" / "A1_s0.log").read_text()
    assert not _pwned(work)


def test_modules_in_the_current_directory_are_never_imported(work):
    """A run directory that ships a module of the task's name, or of a library's name (yaml), is not
    searched even when the command is started inside it."""
    run = work / "s0"
    (run / "mytask.py").write_text("open('PWNED', 'w').close()\ndef make(**kw):\n    raise SystemExit(9)\n")
    (run / "yaml.py").write_text("open('PWNED', 'w').close()\n")
    (run / "again.yaml").write_text("steps: 3\n")
    r = _cli(run, "--outdir", "x", "--task", "mytask:make", *SMALL)
    _one_error(r, "argument --task: cannot import 'mytask'", "current directory, which is not searched")
    r = _cli(run, "--config", "again.yaml", "--outdir", "../fresh", *SMALL[2:])
    assert r.returncode == 0, r.stderr  # the real yaml read the file
    assert json.loads((work / "fresh" / "config.json").read_text())["steps"] == 3
    assert not _pwned(work)


def test_a_reward_function_that_cannot_take_response_and_answer_is_refused(tmp_path):
    (tmp_path / "t.jsonl").write_text(
        "".join(json.dumps({"prompt": f"{i}", "answer": f"{i}"}) + "\n" for i in range(12))
    )
    r = _cli(tmp_path, "--outdir", "out", "--task", "jsonl:t.jsonl", "--n_val", "3", "--reward_fn", "os:system")
    _one_error(r, "argument --reward_fn: os:system(command) cannot be called as system(response, answer)")
    r = _cli(tmp_path, "--outdir", "out", "--task", "jsonl:t.jsonl", "--n_val", "3", "--reward_fn", "os:sep")
    _one_error(r, "argument --reward_fn: os:sep is a str, not a function")
    assert not _pwned(tmp_path) and os.listdir(tmp_path) == ["t.jsonl"]


# ------------------------------------------------------------------------ a checkpoint belongs to its run
def test_a_checkpoint_from_another_run_is_refused(work):
    other = work / "s1" / "checkpoints" / "step_000002"
    shutil.copytree(other, work / "s0" / "checkpoints" / "step_000003")
    (work / "s0" / "summary.json").unlink()
    before = _snapshot(work)
    r = _cli(work, "--outdir", "s0", "--resume", "--steps", "4")
    _one_error(
        r,
        "argument --resume: checkpoints/step_000003 belongs to another run",
        "remove checkpoints/step_000003 to resume from an older checkpoint",
    )
    assert _snapshot(work) == before
    shutil.rmtree(work / "s0" / "checkpoints" / "step_000003")  # the advice, followed: resumes its own
    r = _cli(work, "--outdir", "s0", "--resume", "--steps", "3")
    assert r.returncode == 0, r.stderr
    rows = [json.loads(x) for x in (work / "s0" / "metrics.jsonl").read_text().splitlines()]
    assert [x["step"] for x in rows] == [0, 1, 2, 3]


def test_the_checkpoint_digests_are_checked_before_the_task_is_built(work, tmp_path_factory):
    """A damaged checkpoint is refused before the user's own task module is even imported."""
    lib = tmp_path_factory.mktemp("lib")
    (lib / "noted_task.py").write_text(
        "import os\nopen(os.path.join(os.path.dirname(__file__), 'IMPORTED'), 'w')"
        "\nfrom noma_prorl_bench.tasks.toy import TOY_TASKS\n"
        "def make(n_val=16):\n    return TOY_TASKS['reverse_digits'](n_val=n_val)\n"
    )
    r = _cli(work, "--outdir", "mine", "--task", "noted_task:make", *SMALL, pythonpath=lib)
    assert r.returncode == 0, r.stderr
    (lib / "IMPORTED").unlink()
    (work / "mine" / "summary.json").unlink()
    t = work / "mine" / "checkpoints" / "step_000002" / ck.TENSORS
    data = bytearray(t.read_bytes())
    data[-1] ^= 1
    t.write_bytes(bytes(data))
    before = _snapshot(work)
    r = _cli(work, "--outdir", "mine", "--resume", "--steps", "3", "--task", "noted_task:make", pythonpath=lib)
    _one_error(r, "argument --resume:", "does not match the sha256")
    assert not (lib / "IMPORTED").exists() and _snapshot(work) == before


# ------------------------------------------------------------------------ suites
def test_a_suite_reads_only_runs_inside_its_directory(work):
    suite = work / "suite"
    suite.mkdir()
    for name in ("../s0", str(work / "s0"), ".hidden", "a/b"):
        (suite / "suite.json").write_text(json.dumps({"preset": "smoke", "runs": [{"name": name, "arm": "A1"}]}))
        before = _snapshot(work)
        r = _cli(
            work,
            "--preset",
            "smoke",
            "--arms",
            "A1",
            "--seeds",
            "1",
            "--outdir",
            "suite",
            "--quiet",
            module="noma_prorl_bench.suite",
        )
        _one_error(r, "argument --outdir:", f"lists {name!r}, which is not a run directory name inside the suite")
        assert _snapshot(work) == before


def test_a_suite_refuses_a_run_directory_as_its_outdir(work):
    before = _snapshot(work)
    r = _cli(work, "--preset", "smoke", "--outdir", "s0", module="noma_prorl_bench.suite")
    _one_error(r, "argument --outdir: 's0' holds a single run (config.json, metrics.jsonl, checkpoints), not a suite")
    assert _snapshot(work) == before


def test_a_model_directory_with_its_own_code_is_not_run(tmp_path):
    """An HF model directory whose config names modeling code (auto_map) is loaded with
    trust_remote_code=False: refused, its module never imported."""
    pytest.importorskip("transformers")
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(
        json.dumps(
            {
                "model_type": "evil",
                "auto_map": {"AutoConfig": "evil_code.EvilConfig", "AutoModelForCausalLM": "evil_code.EvilModel"},
            }
        )
    )
    (model / "evil_code.py").write_text(
        "open('PWNED', 'w').close()\nfrom transformers import PretrainedConfig\n"
        "class EvilConfig(PretrainedConfig):\n    model_type = 'evil'\n"
    )
    r = _cli(tmp_path, "--outdir", "out", "--model", f"hf:{model}", "--task", "arithmetic")
    _one_error(r, "argument --model:")
    assert not _pwned(tmp_path) and not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "run, message",
    [
        (
            {"name": "A1_s0", "flags": ["--task", "os:system", "--task_kwargs", json.dumps(PAYLOAD)]},
            "names code to import (--task 'os:system')",
        ),
        (
            {"name": "A1_s0", "flags": ["--reward_fn", "os:system", "--task", "jsonl:x.jsonl"]},
            "names code to import (--reward_fn 'os:system')",
        ),
        ({"name": "A1_s0", "flags": ["--outdir", "/tmp/elsewhere"]}, "sets --outdir, which only the runner sets"),
        ({"name": "A1_s0", "flags": ["--config", "c.yaml"]}, "sets --config, which only the runner sets"),
        ({"name": "../A1_s0", "flags": []}, "is not a run directory name inside the suite"),
        ({"name": "A1_s0", "flags": ["--no_such_flag"]}, "lists flags that are not run flags"),
    ],
)
def test_replicate_does_not_run_what_a_foreign_suite_json_says(tmp_path, capsys, run, message):
    """`replicate` re-runs a committed suite's runs from its suite.json: a file from someone else."""
    from noma_prorl_bench.suite import replicate_main

    src = tmp_path / "theirs"
    src.mkdir()
    (src / "summary.json").write_text(json.dumps({"comparisons": [], "provenance": {"preset": "smoke"}}))
    (src / "suite.json").write_text(json.dumps({"preset": "smoke", "runs": [{"arm": "A1", "pair": 0, **run}]}))
    before = _snapshot(tmp_path)
    with pytest.raises(SystemExit) as e:
        replicate_main([str(src), "--outdir", str(tmp_path / "new")])
    err = capsys.readouterr().err
    assert e.value.code == 2 and message in err and "suite.json" in err
    assert _snapshot(tmp_path) == before and not (tmp_path / "new").exists() and not _pwned(tmp_path)
