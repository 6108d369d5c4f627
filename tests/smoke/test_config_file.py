"""`--config FILE` (YAML, TOML, JSON): keys are flag names, explicit flags win, unknown keys exit 2
with a suggestion, and a run's own config.json repeats the run bit for bit (subprocesses)."""

import json
import re
import subprocess
import sys

import pytest
from runhelp import read_jsonl

pytestmark = pytest.mark.smoke
TIMING = re.compile(r"^(time/|perf/)")
SMALL = [
    "--steps",
    "4",
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


def _run(cwd, *args):
    return subprocess.run(
        [sys.executable, "-m", "noma_prorl_bench.run", *args], cwd=cwd, capture_output=True, text=True, timeout=600
    )


def _metrics(d):
    return [{k: v for k, v in r.items() if not TIMING.match(k)} for r in read_jsonl(d / "metrics.jsonl")]


def test_a_runs_config_json_reproduces_it_bit_for_bit(tmp_path):
    r = _run(
        tmp_path,
        "--outdir",
        "A1",
        *SMALL,
        "--variant",
        "A",
        "--ref_compute",
        "cached",
        "--seed",
        "3",
        "--lr",
        "0.002",
        "--loss",
        "dapo",
    )
    assert r.returncode == 0, r.stderr
    r = _run(tmp_path, "--config", "A1/config.json", "--outdir", "A1_again")
    assert r.returncode == 0, r.stderr
    first, again = _metrics(tmp_path / "A1"), _metrics(tmp_path / "A1_again")
    assert len(first) == 5 and first == again  # step 0 (before RL), 1..4
    a, b = (json.loads((tmp_path / d / "config.json").read_text()) for d in ("A1", "A1_again"))
    assert {k: v for k, v in a.items() if k not in ("outdir", "argv", "versions", "run_id")} == {
        k: v for k, v in b.items() if k not in ("outdir", "argv", "versions", "run_id")
    }


@pytest.mark.parametrize(
    "name, text",
    [
        ("c.yaml", "steps: 2\nseed: 5\nlr: 0.002\nloss: dapo\nquiet: true\nbatch_size: 4\ngroup_size: 2\nn_val: 8\n"),
        (
            "c.toml",
            'steps = 2\nseed = 5\nlr = 0.002\nloss = "dapo"\nquiet = true\nbatch_size = 4\ngroup_size = 2\nn_val = 8\n',
        ),
        (
            "c.json",
            '{"steps": 2, "seed": 5, "lr": 0.002, "loss": "dapo", "quiet": true, "batch_size": 4, '
            '"group_size": 2, "n_val": 8}',
        ),
    ],
)
def test_yaml_toml_json_set_flags_and_explicit_flags_win(tmp_path, name, text):
    (tmp_path / name).write_text(text)
    r = _run(tmp_path, "--config", name, "--outdir", "out", "--seed", "7", "--warmstart_steps", "2")
    assert r.returncode == 0, r.stderr
    cfg = json.loads((tmp_path / "out" / "config.json").read_text())
    assert (cfg["steps"], cfg["lr"], cfg["loss"], cfg["batch_size"]) == (2, 0.002, "dapo", 4)
    assert (cfg["seed"], cfg["warmstart_steps"]) == (7, 2)  # the flags override the file
    assert len(read_jsonl(tmp_path / "out" / "metrics.jsonl")) == 3  # step 0 (before RL), 1, 2


@pytest.mark.parametrize(
    "name, text, message",
    [
        ("u.yaml", "stpes: 3\n", "unknown key 'stpes' in u.yaml (did you mean steps?)"),
        ("t.yaml", "steps: '3'\n", "key 'steps': expected int, got '3'"),
        ("l.toml", 'loss = "dapoo"\n', "key 'loss': invalid choice 'dapoo' (did you mean dapo?)"),
        ("r.json", '{"resume": true}', "resume is not a setting"),
        ("x.ini", "steps=3\n", "unknown extension '.ini'"),
        ("s.yaml", "- steps\n", "must hold a mapping"),
        ("v.yaml", "steps: 0\n", "argument --steps: must be a positive integer"),
    ],
)
def test_bad_config_files_exit_2_and_write_nothing(tmp_path, name, text, message):
    (tmp_path / name).write_text(text)
    r = _run(tmp_path, "--config", name, "--outdir", "out")
    assert r.returncode == 2 and message in r.stderr, r.stderr
    assert not (tmp_path / "out").exists()


def test_config_with_resume_is_refused(tmp_path):
    (tmp_path / "c.yaml").write_text("steps: 3\n")
    r = _run(tmp_path, "--config", "c.yaml", "--outdir", "out", "--resume")
    assert r.returncode == 2 and "cannot be combined with --resume" in r.stderr
