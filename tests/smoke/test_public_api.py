"""The public API: `from noma_prorl_bench import Config, train` runs the same
training job as the CLI. Same seed and flags -> the same metrics.jsonl rows (timing keys aside),
the same event sequence and the same config.json apart from --outdir."""

import json
import os
import subprocess
import sys

import pytest

from noma_prorl_bench import Config, train

pytestmark = pytest.mark.smoke

VOLATILE = ("time/", "perf/")
FLAGS = {
    "steps": 3,
    "batch_size": 4,
    "group_size": 4,
    "warmstart_steps": 5,
    "n_val": 16,
    "eval_every": 2,
    "ppo_epochs": 2,
    "minibatches": 2,
    "seed": 3,
    "quiet": True,
    "threads": 1,
}


def _rows(d, name):
    with open(os.path.join(d, name)) as f:
        return [json.loads(line) for line in f]


def _stable(rec):
    return {k: v for k, v in rec.items() if not k.startswith(VOLATILE)}


def test_python_train_matches_the_cli(tmp_path):
    api_dir, cli_dir = str(tmp_path / "api"), str(tmp_path / "cli")
    assert train(Config(outdir=api_dir, **FLAGS)) == api_dir
    argv = [a for k, v in FLAGS.items() for a in ((f"--{k}",) if v is True else (f"--{k}", str(v)))]
    env = {**os.environ, "PYTHONHASHSEED": "0", "OMP_NUM_THREADS": "1"}
    subprocess.run([sys.executable, "-m", "noma_prorl_bench.run", "--outdir", cli_dir, *argv], env=env, check=True)
    api, cli = _rows(api_dir, "metrics.jsonl"), _rows(cli_dir, "metrics.jsonl")
    assert [r["step"] for r in api] == [0, 1, 2, 3]  # 0: the evaluation before RL
    assert [_stable(r) for r in api] == [_stable(r) for r in cli]  # floats compared exactly
    assert "reward/val" in api[2] and api[1]["count/policy_fwd_train"] == 4  # E*M = 2*2
    events = [(e["step"], e["event"]) for e in _rows(api_dir, "events.jsonl")]
    assert events == [(e["step"], e["event"]) for e in _rows(cli_dir, "events.jsonl")]
    cfg_api, cfg_cli = (json.load(open(os.path.join(d, "config.json"))) for d in (api_dir, cli_dir))
    for c in (cfg_api, cfg_cli):  # the subprocess was given OMP_NUM_THREADS=1, which machine.env records
        c["machine"] = {k: v for k, v in c["machine"].items() if k != "env"}
    assert cfg_cli.get("machine") and cfg_api["machine"] == cfg_cli["machine"]
    assert {k: v for k, v in cfg_api.items() if k not in ("outdir", "argv", "run_id")} == {
        k: v for k, v in cfg_cli.items() if k not in ("outdir", "argv", "run_id")
    }


def test_python_train_refuses_a_bad_outdir_and_writes_nothing(tmp_path):
    from noma_prorl_bench import ConfigError

    out = tmp_path / "taken"
    out.mkdir()
    (out / "metrics.jsonl").write_text("{}\n")
    with pytest.raises(ConfigError, match="outdir"):
        train(Config(outdir=str(out), **FLAGS))
    assert sorted(os.listdir(out)) == ["metrics.jsonl"]
