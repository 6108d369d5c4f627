"""--config files choose settings, never destinations: `outdir`, `overwrite` and `resume` in a file are
refused naming the key and the file (a run's own config.json records them and is still a valid file);
a relative jsonl:PATH is read from the file's folder, and an error about a value the file set names the
key and the file; a FIFO or a device as --config or as the task file is refused before it is read."""

import json
import os

import pytest

from noma_prorl_bench.config import ConfigError
from noma_prorl_bench.config.files import load_config_file
from noma_prorl_bench.run import resolve_config

pytestmark = pytest.mark.unit


def _refused(capsys, argv):
    with pytest.raises(SystemExit) as e:
        resolve_config(argv, "prog")
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2
    return err[-1]


@pytest.mark.parametrize(
    "name, text, key",
    [
        ("c.yaml", "outdir: runs/A1\nsteps: 3\n", "outdir"),
        ("c.json", '{"overwrite": true, "steps": 3}', "overwrite"),
        ("c.toml", "overwrite = false\n", "overwrite"),
        ("c.yaml", "resume: true\n", "resume"),
    ],
)
def test_a_config_file_may_not_choose_a_destination(tmp_path, capsys, name, text, key):
    (tmp_path / name).write_text(text)
    line = _refused(capsys, ["--config", str(tmp_path / name), "--outdir", str(tmp_path / "out")])
    assert f"key {key!r} in {tmp_path / name}" in line and "only the command line" in line, line
    assert not (tmp_path / "out").exists()


def test_a_downloaded_run_record_cannot_replace_a_run(tmp_path, capsys):
    """A run's config.json naming another outdir and overwrite: true: both are skipped, so the
    destination comes from the command line (here: none, refused) and nothing is replaced."""
    victim = tmp_path / "A1"
    victim.mkdir()
    (victim / "keep.txt").write_text("mine")
    record = {"outdir": str(victim), "overwrite": True, "steps": 3, "versions": {"noma_prorl_bench": "0"}}
    (tmp_path / "config.json").write_text(json.dumps(record))
    assert load_config_file(str(tmp_path / "config.json")) == {"steps": 3}
    line = _refused(capsys, ["--config", str(tmp_path / "config.json")])
    assert "argument --outdir: is required" in line
    cfg, _ = resolve_config(["--config", str(tmp_path / "config.json"), "--outdir", str(tmp_path / "B")], "p")
    assert (cfg.outdir, cfg.overwrite, cfg.steps) == (str(tmp_path / "B"), False, 3)
    assert (victim / "keep.txt").read_text() == "mine"


def test_a_relative_jsonl_task_is_read_beside_the_yaml(tmp_path, monkeypatch):
    own = tmp_path / "own"
    own.mkdir()
    (own / "sub.jsonl").write_text(
        "".join(json.dumps({"prompt": f"{i}+1=", "answer": str(i + 1)}) + "\n" for i in range(12))
    )
    (own / "run.yaml").write_text("task: jsonl:sub.jsonl\nsteps: 3\n")
    monkeypatch.chdir(tmp_path)
    cfg, _ = resolve_config(["--config", "own/run.yaml", "--outdir", "o"], "prog")
    assert cfg.task == "jsonl:" + os.path.join("own", "sub.jsonl") and cfg.n_val == 2


def test_an_error_about_a_value_from_the_yaml_names_the_key_and_the_file(tmp_path, capsys, monkeypatch):
    own = tmp_path / "own"
    own.mkdir()
    (own / "run.yaml").write_text("task: jsonl:missing.jsonl\n")
    monkeypatch.chdir(tmp_path)
    line = _refused(capsys, ["--config", "own/run.yaml", "--outdir", "o"])
    assert "argument --task: cannot read 'own/missing.jsonl'" in line, line
    assert "[the value of key 'task' in the config file 'own/run.yaml'" in line, line
    (own / "steps.yaml").write_text("steps: 0\n")
    line = _refused(capsys, ["--config", "own/steps.yaml", "--outdir", "o"])
    assert "argument --steps: must be a positive integer" in line and "'own/steps.yaml'" in line, line
    line = _refused(capsys, ["--config", "own/steps.yaml", "--outdir", "o", "--steps", "-1"])
    assert "own/steps.yaml" not in line  # the command line's own value


def test_a_fifo_or_a_device_as_config_is_refused_without_reading(tmp_path, capsys):
    os.mkfifo(tmp_path / "c.yaml")  # no writer: reading it would block forever
    line = _refused(capsys, ["--config", str(tmp_path / "c.yaml"), "--outdir", str(tmp_path / "o")])
    assert "argument --config:" in line and "FIFO" in line, line
    os.symlink("/dev/zero", tmp_path / "z.yaml")
    line = _refused(capsys, ["--config", str(tmp_path / "z.yaml"), "--outdir", str(tmp_path / "o")])
    assert "argument --config:" in line and "character device" in line, line


def test_a_fifo_as_the_jsonl_task_is_refused_without_reading(tmp_path, capsys):
    os.mkfifo(tmp_path / "t.jsonl")
    line = _refused(capsys, ["--task", f"jsonl:{tmp_path / 't.jsonl'}", "--outdir", str(tmp_path / "o")])
    assert "argument --task:" in line and "FIFO" in line, line


def test_a_yaml_alias_bomb_is_refused_before_it_expands(tmp_path):
    levels = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"] + [
        f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 9)
    ]
    (tmp_path / "bomb.yaml").write_text("task_kwargs:\n" + "".join(f"  {ln}\n" for ln in levels))
    with pytest.raises(ConfigError, match=r"aliases|alias"):
        load_config_file(str(tmp_path / "bomb.yaml"))
    (tmp_path / "deep.yaml").write_text("task_kwargs: " + "[" * 5000 + "]" * 5000 + "\n")
    with pytest.raises(ConfigError, match="deep"):
        load_config_file(str(tmp_path / "deep.yaml"))


@pytest.mark.parametrize(
    "text, what",
    [
        ("task_kwargs: {when: 2024-01-01}\n", "task_kwargs.when is a date"),
        ("task_kwargs: {b: !!binary aGVsbG8=}\n", "task_kwargs.b is a bytes"),
        ("task_kwargs: {s: !!set {a: null}}\n", "task_kwargs.s is a set"),
        ("task_kwargs: &r {a: *r}\n", "recursive alias"),
    ],
)
def test_task_kwargs_values_must_be_json_values(tmp_path, text, what):
    (tmp_path / "k.yaml").write_text(text)
    with pytest.raises(ConfigError, match=what) as e:
        load_config_file(str(tmp_path / "k.yaml"))
    assert e.value.flag == "config" and "k.yaml" in str(e.value)
