"""Checkpoint, resume, interruption and the NaN guard, end to end through the run CLI (in-process).

The central check: a run stopped at step k and resumed writes a metrics.jsonl identical to an
uninterrupted run's, apart from time/* and perf/* keys, including across a reference reset and a
LoRA rank growth.
"""

import json
import os
import shutil
import signal

import pytest
import torch

from noma_prorl_bench.config import make_config
from noma_prorl_bench.io.metrics import MemorySink
from noma_prorl_bench.run import main
from noma_prorl_bench.training import trainer as trainer_mod
from noma_prorl_bench.training.guards import INJECT_NAN_ENV

pytestmark = pytest.mark.smoke

VOLATILE = ("time/", "perf/")


def _records(d, name="metrics.jsonl"):
    with open(os.path.join(d, name)) as f:
        return [json.loads(line) for line in f]


def _stable(d):
    return [{k: v for k, v in r.items() if not k.startswith(VOLATILE)} for r in _records(d)]


def _full(tmp_path, fast, flags, steps=10):
    d = str(tmp_path / "full")
    assert main(["--outdir", d, *fast, *flags, "--steps", str(steps)]) == 0
    return d


SCENARIOS = {
    "plain": [],
    "reset_soft": ["--reset_every", "4", "--opt_reset", "soft"],
    "growth": ["--enable_growth", "1", "--grow_every", "4", "--reset_every", "3"],
    "adaptive_kl_ring": ["--target_kl", "0.01", "--ref_compute", "ring", "--reset_every", "4", "--reset_kl_coef", "1"],
    # a moving reference updated at steps 2, 4, ...: the checkpoint at 6 holds it mid-way
    "ema_reference": ["--ref_update", "ema", "--ref_ema_every", "2", "--ref_ema_tau", "0.8", "--kl_clip", "0.05"],
    # Elastic Reset at steps 4 and 8: the EMA saved at step 6 is half-way through a cycle
    "elastic": ["--reset_every", "4", "--reset_to", "elastic", "--elastic_decay", "0.9"],
    "elastic_growth": ["--enable_growth", "1", "--grow_every", "4", "--reset_every", "3", "--reset_to", "elastic"],
}


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_killed_run_resumes_to_identical_metrics(tmp_path, fast_flags, name):
    """Checkpoints every 3 steps; the process 'dies' after step 10's metrics line was written
    but before checkpoints 9 and 10, mid-way through a line: resume continues from step 6."""
    flags = SCENARIOS[name]
    full = _full(tmp_path, fast_flags, flags)
    d = str(tmp_path / "killed")
    assert (
        main(["--outdir", d, *fast_flags, *flags, "--steps", "10", "--save_every", "3", "--keep_checkpoints", "4"]) == 0
    )
    for s in (9, 10):
        shutil.rmtree(os.path.join(d, "checkpoints", f"step_{s:06d}"))
    os.remove(os.path.join(d, "summary.json"))
    with open(os.path.join(d, "metrics.jsonl"), "a") as f:
        f.write('{"step": 11, "reward/me')  # a partial last line
    assert main(["--outdir", d, "--resume"]) == 0
    assert _stable(d) == _stable(full)
    resume = [e for e in _records(d, "events.jsonl") if e["event"] == "resume"]
    assert len(resume) == 1 and resume[0]["step"] == 6 and resume[0]["dropped_lines"]["metrics.jsonl"] == 5
    assert json.loads(open(os.path.join(d, "summary.json")).read())["resumed_from_step"] == 6
    if name == "growth":
        ranks = [r["adapter/rank"] for r in _records(d) if r["step"] > 0]
        assert ranks[4] < ranks[-1]  # grew at step 4 and 8, across the resume


def test_stopped_run_extended_with_more_steps(tmp_path, fast_flags):
    flags = ["--reset_every", "4", "--opt_reset", "soft"]
    full = _full(tmp_path, fast_flags, flags)
    d = str(tmp_path / "short")
    assert main(["--outdir", d, *fast_flags, *flags, "--steps", "6", "--save_every", "3"]) == 0
    assert main(["--outdir", d, "--resume", "--steps", "10"]) == 0
    assert _stable(d) == _stable(full)
    cfg = json.loads(open(os.path.join(d, "config.json")).read())
    assert cfg["steps"] == 10 and cfg["resumes"][0]["changed"] == {"steps": [6, 10]}


def test_sigterm_checkpoints_and_exits_143(tmp_path, fast_flags, monkeypatch, capsys):
    full = _full(tmp_path, fast_flags, [])
    real_step = trainer_mod.Trainer.train_step

    def step_then_signal(self):
        m = real_step(self)
        if self.step_idx == 4:
            signal.raise_signal(signal.SIGTERM)  # arrives mid-run
        return m

    monkeypatch.setattr(trainer_mod.Trainer, "train_step", step_then_signal)
    handler_before = signal.getsignal(signal.SIGTERM)
    d = str(tmp_path / "term")
    assert main(["--outdir", d, *fast_flags, "--steps", "10"]) == 143
    assert "interrupted by SIGTERM after step 4" in capsys.readouterr().err
    assert os.listdir(os.path.join(d, "checkpoints")) == ["step_000004"]
    assert not os.path.exists(os.path.join(d, "summary.json")) and [r["step"] for r in _records(d)] == [0, 1, 2, 3, 4]
    assert signal.getsignal(signal.SIGTERM) == handler_before  # handlers restored
    monkeypatch.setattr(trainer_mod.Trainer, "train_step", real_step)
    assert main(["--outdir", d, "--resume"]) == 0
    assert _stable(d) == _stable(full)


def test_keep_checkpoints_and_layout(tmp_path, fast_flags):
    d = str(tmp_path / "r")
    assert main(["--outdir", d, *fast_flags, "--steps", "7", "--save_every", "2", "--keep_checkpoints", "2"]) == 0
    root = os.path.join(d, "checkpoints")
    assert sorted(os.listdir(root)) == ["step_000006", "step_000007"]
    from safetensors.torch import load_file

    names = set(load_file(os.path.join(root, "step_000007", "tensors.safetensors")))
    assert any(n.startswith("components/policy/") for n in names)
    assert any(n.startswith("components/ref/model/") for n in names)
    assert any(n.startswith("components/optimizer/state/0/exp_avg") for n in names)
    ev = [e for e in _records(d, "events.jsonl") if e["event"] == "checkpoint"]
    assert [(e["step"], e["reason"]) for e in ev] == [(2, "periodic"), (4, "periodic"), (6, "periodic"), (7, "final")]


def test_resume_of_a_finished_run_only_rewrites_the_summary(tmp_path, fast_flags):
    d = str(tmp_path / "done")
    assert main(["--outdir", d, *fast_flags]) == 0
    before = _records(d)
    assert main(["--outdir", d, "--resume"]) == 0
    assert _records(d) == before and os.path.isfile(os.path.join(d, "summary.json"))


# ------------------------------------------------------------------------ refusals (exit 2, files untouched)
def _exit_code(argv):
    try:
        return main(argv)
    except SystemExit as e:
        return e.code


@pytest.mark.parametrize(
    "extra,flag",
    [
        (["--lr", "0.01"], "--lr"),
        (["--loss", "cispo", "--seed", "3"], "--seed"),
        (["--steps", "2"], "--steps"),
        (["--overwrite"], "--overwrite"),
    ],
)
def test_resume_refusals_name_the_flags(tmp_path, fast_flags, capsys, extra, flag):
    d = str(tmp_path / "r")
    assert main(["--outdir", d, *fast_flags, "--save_every", "2"]) == 0
    snapshot = {f: open(os.path.join(d, f), "rb").read() for f in ("metrics.jsonl", "events.jsonl")}
    capsys.readouterr()
    assert _exit_code(["--outdir", d, "--resume", *extra]) == 2
    err = capsys.readouterr().err
    assert flag in err and "Traceback" not in err
    assert snapshot == {f: open(os.path.join(d, f), "rb").read() for f in snapshot}


@pytest.mark.parametrize(
    "damage,needle",
    [
        ("state_json", "unreadable"),
        ("tensors", "unreadable"),
        ("foreign", "not a noma_prorl_bench checkpoint"),
        ("other_model", "belongs to another run"),
        ("other_model_relabelled", "does not fit"),
    ],
)
def test_corrupt_or_foreign_checkpoint_is_a_clear_error(tmp_path, fast_flags, capsys, damage, needle):
    d = str(tmp_path / "r")
    assert main(["--outdir", d, *fast_flags]) == 0
    ck = os.path.join(d, "checkpoints", "step_000003")
    if damage == "state_json":
        open(os.path.join(ck, "state.json"), "w").write('{"format": ')
    elif damage == "tensors":
        with open(os.path.join(ck, "tensors.safetensors"), "r+b") as f:
            f.truncate(100)
    elif damage == "foreign":
        open(os.path.join(ck, "state.json"), "w").write('{"hello": "world"}')
    else:  # a checkpoint of a different model size
        other = str(tmp_path / "o")
        assert main(["--outdir", other, *fast_flags, "--hidden", "32"]) == 0
        meta = json.load(open(os.path.join(other, "checkpoints", "step_000003", "state.json")))
        meta_here = json.load(open(os.path.join(ck, "state.json")))
        meta["config"], meta["config_hash"] = meta_here["config"], meta_here["config_hash"]
        shutil.rmtree(ck)
        shutil.copytree(os.path.join(other, "checkpoints", "step_000003"), ck)
        if damage == "other_model_relabelled":  # its identity and digests made this run's: the
            meta["run_id"] = meta_here["run_id"]  # state itself must still be refused
        with open(os.path.join(ck, "state.json"), "w") as f:
            json.dump(meta, f)
        if damage == "other_model_relabelled":
            from noma_prorl_bench.io.checkpoint import sha256_file

            digests = {n: sha256_file(os.path.join(ck, n)) for n in ("tensors.safetensors", "state.json")}
            with open(os.path.join(ck, "COMPLETE"), "w") as f:
                f.write(json.dumps({"step": 3, "sha256": digests}) + "\n")
    capsys.readouterr()
    assert _exit_code(["--outdir", d, "--resume"]) == 2
    err = capsys.readouterr().err
    assert needle in err and "--resume" in err and "Traceback" not in err


# ------------------------------------------------------------------------ NaN guard
def test_injected_nan_skips_the_update_and_leaves_parameters_untouched(tmp_path, monkeypatch):
    cfg = make_config(
        {
            "outdir": str(tmp_path),
            "steps": 4,
            "batch_size": 4,
            "group_size": 4,
            "warmstart_steps": 5,
            "n_val": 16,
            "eval_every": 2,
            "quiet": True,
        }
    )
    sink = MemorySink()
    events = sink.records
    tr = trainer_mod.Trainer.from_config(cfg, events_sink=sink).start()
    tr.train_step()
    params = {k: v.clone() for k, v in tr.policy.state_dict().items()}
    opt = {i: {k: v.clone() for k, v in s.items()} for i, s in tr.optimizer.state_dict()["state"].items()}
    lr = tr.optimizer.param_groups[0]["lr"]
    monkeypatch.setenv(INJECT_NAN_ENV, "2")
    m = tr.train_step()
    assert all(torch.equal(v, tr.policy.state_dict()[k]) for k, v in params.items())
    after = tr.optimizer.state_dict()["state"]
    assert all(torch.equal(v, after[i][k]) for i, s in opt.items() for k, v in s.items())
    assert tr.optimizer.param_groups[0]["lr"] == lr
    assert m["guard/nan_skip_frac"] == 1.0
    guard = [e for e in events if e["event"] == "nan_guard"]
    assert len(guard) == cfg.ppo_epochs * cfg.minibatches and all(e["step"] == 2 for e in guard)
    assert guard[0]["action"] == "skip" and guard[0]["loss"]["value"] == "nan" and "grads" in guard[0]
    monkeypatch.delenv(INJECT_NAN_ENV)
    assert tr.train_step()["guard/nan_skip_frac"] == 0.0
    assert not all(torch.equal(v, tr.policy.state_dict()[k]) for k, v in params.items())


def test_on_nan_stop_exits_3_with_outputs_flushed(tmp_path, fast_flags, monkeypatch, capsys):
    monkeypatch.setenv(INJECT_NAN_ENV, "2")
    d = str(tmp_path / "n")
    assert main(["--outdir", d, *fast_flags, "--on_nan", "stop"]) == 3
    assert "stopped (--on_nan stop)" in capsys.readouterr().err
    assert [r["step"] for r in _records(d)] == [0, 1]
    last = _records(d, "events.jsonl")[-1]
    assert last["event"] == "nan_guard" and last["action"] == "stop" and last["step"] == 2


@pytest.mark.hf
def test_hf_model_with_growing_adapters_resumes_exactly(tmp_path):
    pytest.importorskip("transformers")
    from noma_prorl_bench.models.tiny_hf import build_tiny_hf_model

    model = build_tiny_hf_model(tmp_path / "model", "qwen2", hidden=32, layers=2, heads=4, seed=0, init_std=0.1)
    flags = [
        "--model",
        f"hf:{model}",
        "--batch_size",
        "2",
        "--group_size",
        "2",
        "--warmstart_steps",
        "2",
        "--n_val",
        "4",
        "--eval_every",
        "2",
        "--quiet",
        "--max_new_tokens",
        "6",
        "--steps",
        "6",
        "--enable_growth",
        "1",
        "--grow_every",
        "2",
        "--adapter_targets",
        "*proj",
        "--reset_every",
        "3",
    ]
    full, d = str(tmp_path / "full"), str(tmp_path / "killed")
    assert main(["--outdir", full, *flags]) == 0
    assert main(["--outdir", d, *flags, "--save_every", "3", "--keep_checkpoints", "3"]) == 0
    shutil.rmtree(os.path.join(d, "checkpoints", "step_000006"))
    assert main(["--outdir", d, "--resume"]) == 0
    assert _stable(d) == _stable(full)
