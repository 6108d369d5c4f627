"""checkpoint.py, resume.py and guards.py on small objects: the state tree, atomic files,
validation of foreign/corrupt checkpoints, JSONL truncation, resume config rules, NaN guard."""

import json
import math
import os
import random
import shutil
import signal

import numpy as np
import pytest
import torch

from noma_prorl_bench.config import RESUME_SAFE_FIELDS, ConfigError, RunConfig
from noma_prorl_bench.io import checkpoint as ck
from noma_prorl_bench.io import state_tree as st
from noma_prorl_bench.io.resume import resume_config, truncate_jsonl
from noma_prorl_bench.training import guards
from noma_prorl_bench.training.optim_state import make_lr_scheduler

pytestmark = pytest.mark.unit


# ------------------------------------------------------------------------ state tree
def _same(a, b):
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and math.isnan(a):
        return isinstance(b, float) and math.isnan(b)
    return a == b and type(a) is type(b)


def _roundtrip(obj):
    tensors = {}
    tree = json.loads(json.dumps(st.encode(obj, "", tensors, {})))
    return st.decode(tree, tensors), tensors


def test_state_tree_roundtrip_keeps_types_and_values():
    big = torch.arange(12.0).reshape(3, 4)
    obj = {
        "state": {0: {"step": torch.tensor(3.0), "exp_avg": torch.randn(2, 2)}},
        "groups": [{"betas": (0.9, 0.999), "params": [0, 1], "fused": None, "lr": 1e-3}],
        "rng": random.getstate(),
        "np": np.arange(5, dtype=np.uint32),
        "npscalar": np.float64(0.25),
        "bf16": torch.randn(3, dtype=torch.bfloat16),
        "view": big[:, 1],
        "nan": float("nan"),
        "__weird": 1,
        "big_int": 2**100,
        "text": "x/y",
    }
    back, tensors = _roundtrip(obj)
    expected = dict(obj, npscalar=0.25, view=big[:, 1].contiguous())
    assert _same(expected, back)
    assert "state/0/exp_avg" in tensors and "groups/0/params/0" not in tensors


def test_aliased_tensors_are_stored_once():
    w = torch.randn(4, 4)
    back, tensors = _roundtrip({"a": w, "b": w})
    assert len(tensors) == 1 and torch.equal(back["a"], w) and back["a"] is back["b"]


def test_unsupported_type_is_a_checkpoint_error():
    with pytest.raises(ck.CheckpointError, match="bad"):
        st.encode({"bad": object()}, "", {}, {})


# ------------------------------------------------------------------------ a tiny trainer
class Tiny:
    """The parts of a Trainer that checkpoint.py looks at."""

    def __init__(self, outdir, seed=0):
        torch.manual_seed(seed)
        self.cfg = RunConfig(outdir=str(outdir), steps=10)
        self.policy = torch.nn.Linear(3, 2)
        self.optimizer = torch.optim.Adam(self.policy.parameters(), lr=0.1)
        self.scheduler = make_lr_scheduler(self.optimizer, "cosine", 2, 20)
        self.data_rng = np.random.default_rng([seed, 1])
        self.sample_gen = torch.Generator().manual_seed(seed + 2)
        self.step_idx = 0
        self.info = {"seconds": 1.5}

    def step(self):
        self.step_idx += 1
        x = torch.randn(4, 3, generator=self.sample_gen) + float(self.data_rng.normal())
        self.optimizer.zero_grad()
        self.policy(x).pow(2).sum().backward()
        self.optimizer.step()
        self.scheduler.step()
        return (
            float(self.policy.weight.detach().sum()),
            float(torch.rand(1)),
            float(np.random.rand()),
            random.random(),
        )

    def _parts(self):
        return {"policy": self.policy, "optimizer": self.optimizer, "scheduler": self.scheduler}

    def _gens(self):
        return {n: getattr(self, n) for n in ("data_rng", "sample_gen", "extra_gen") if hasattr(self, n)}

    def state_dict(self):
        return st.state_tree(self.step_idx, self._parts(), self._gens(), {"step_idx": self.step_idx, "info": self.info})

    def load_state_dict(self, state):
        self.info = st.load_state_tree(state, self._parts, self._gens())["info"]
        self.step_idx = int(state["step"])


def test_save_load_continues_bit_for_bit(tmp_path):
    a = Tiny(tmp_path)
    for _ in range(3):
        a.step()
    path = ck.save(a, str(tmp_path), keep=2)
    expected = [a.step() for _ in range(3)]
    b = Tiny(tmp_path, seed=7)  # different init and RNG streams
    b.load_state_dict(ck.read(path).state)
    assert b.step_idx == 3 and b.info == {"seconds": 1.5}
    assert [b.step() for _ in range(3)] == expected  # params, Adam, schedule, all RNGs


def test_atomic_layout_and_keep_last(tmp_path):
    t = Tiny(tmp_path)
    for _ in range(4):
        t.step()
        ck.save(t, str(tmp_path), keep=2)
    os.makedirs(tmp_path / "checkpoints" / ".tmp_step_000009_123")  # a killed save
    ck.prune(str(tmp_path), keep=2)
    names = sorted(os.listdir(tmp_path / "checkpoints"))
    assert names == ["step_000003", "step_000004"]
    d = tmp_path / "checkpoints" / "step_000004"
    assert sorted(os.listdir(d)) == ["COMPLETE", "state.json", "tensors.safetensors"]
    meta = json.loads((d / "state.json").read_text())
    assert meta["format"] == ck.FORMAT and meta["step"] == 4 and meta["config"]["steps"] == 10
    from safetensors.torch import load_file

    names = set(load_file(str(d / "tensors.safetensors")))
    assert {
        "components/policy/weight",
        "components/optimizer/state/0/exp_avg",
        "generators/sample_gen/torch",
        "global_rng/torch",
    } <= names
    assert [s for s, _ in ck.list_checkpoints(str(tmp_path))] == [3, 4]


def _saved(tmp_path):
    t = Tiny(tmp_path)
    t.step()
    return ck.save(t, str(tmp_path), keep=1)


@pytest.mark.parametrize(
    "damage,match",
    [
        (lambda d: os.remove(os.path.join(d, "COMPLETE")), "incomplete"),
        (lambda d: open(os.path.join(d, "state.json"), "w").write("{not json"), "unreadable"),
        (lambda d: open(os.path.join(d, "state.json"), "w").write('{"format": "other"}'), "not a noma_prorl_bench"),
        (lambda d: _edit_meta(d, lambda m: m["config"].update(lr=9.0)), "config_hash"),
        (lambda d: _edit_meta(d, lambda m: m.update(format_version=99)), "format 99"),
        (lambda d: _truncate(os.path.join(d, "tensors.safetensors")), "unreadable"),
        (lambda d: _edit_meta(d, lambda m: m.update(n_tensors=1)), "holds"),
    ],
)
def test_corrupt_or_foreign_checkpoints_are_named(tmp_path, damage, match):
    path = _saved(tmp_path)
    damage(path)
    with pytest.raises(ck.CheckpointError, match=match):
        ck.read(path)


def _edit_meta(d, fn):
    p = os.path.join(d, "state.json")
    meta = json.load(open(p))
    fn(meta)
    json.dump(meta, open(p, "w"))


def _truncate(p):
    with open(p, "r+b") as f:
        f.truncate(os.path.getsize(p) // 2)


def test_load_into_a_different_model_is_a_checkpoint_error(tmp_path):
    state = ck.read(_saved(tmp_path)).state
    other = Tiny(tmp_path)
    other.policy = torch.nn.Linear(3, 5)
    with pytest.raises(ck.CheckpointError, match="policy"):
        other.load_state_dict(state)
    other = Tiny(tmp_path)
    other.extra_gen = torch.Generator()
    del other.sample_gen
    with pytest.raises(ck.CheckpointError, match="sample_gen"):
        other.load_state_dict(state)


# ------------------------------------------------------------------------ JSONL truncation
def test_truncate_jsonl_drops_later_steps_partial_and_garbage(tmp_path):
    p = tmp_path / "m.jsonl"
    lines = [{"step": 0, "event": "warmstart"}, {"step": 1}, {"step": 2}, {"step": 3}, {"no_step": 1}]
    p.write_text("".join(json.dumps(x) + "\n" for x in lines) + "garbage\n" + '{"step": 4, "rew')
    out = truncate_jsonl(str(p), 2)
    assert out == {"kept": 4, "dropped": 2, "partial": 1}
    assert [json.loads(x) for x in p.read_text().splitlines()] == [lines[0], lines[1], lines[2], lines[4]]
    assert p.read_text().endswith("\n")


# ------------------------------------------------------------------------ resume config
def _config_json(t, run_id="run-a"):
    """config.json as a run writes it before its first checkpoint."""
    with open(os.path.join(t.cfg.outdir, "config.json"), "w") as f:
        json.dump({**t.cfg.to_dict(), "versions": {"noma_prorl_bench": "x"}, "run_id": run_id}, f)


def test_resume_config_rules(tmp_path):
    t = Tiny(tmp_path)
    t.step()
    _config_json(t)
    ck.save(t, str(tmp_path), keep=1)
    cfg, c = resume_config({"outdir": str(tmp_path), "resume": True, "steps": 12, "quiet": True})
    assert cfg.steps == 12 and cfg.resume and c.step == 1 and cfg.lr == RunConfig().lr
    with pytest.raises(ConfigError, match=r"--lr \(checkpoint 0.001, now 0.5\).*--loss"):
        resume_config({"outdir": str(tmp_path), "resume": True, "lr": 0.5, "loss": "cispo"})
    with pytest.raises(ConfigError, match="--overwrite"):
        resume_config({"outdir": str(tmp_path), "resume": True, "overwrite": True})
    with pytest.raises(ConfigError, match="--steps"):
        t.step_idx = 11
        ck.save(t, str(tmp_path), keep=1)
        resume_config({"outdir": str(tmp_path), "resume": True})
    assert {"steps", "quiet", "save_every", "keep_checkpoints", "outdir"} <= set(RESUME_SAFE_FIELDS)


def test_a_checkpoint_resumes_only_the_run_that_wrote_it(tmp_path):
    a, b = Tiny(tmp_path / "a"), Tiny(tmp_path / "b", seed=1)
    for t, rid in ((a, "run-a"), (b, "run-b")):
        os.makedirs(t.cfg.outdir)
        _config_json(t, rid)
        t.step()
        ck.save(t, t.cfg.outdir, keep=2)
    assert ck.read(ck.list_checkpoints(a.cfg.outdir)[-1][1]).run_id == "run-a"
    b.step()
    foreign = ck.save(b, b.cfg.outdir, keep=2)  # b's step 2: newer than a's step 1
    shutil.copytree(foreign, os.path.join(a.cfg.outdir, "checkpoints", os.path.basename(foreign)))
    with pytest.raises(
        ConfigError,
        match=r"checkpoints/step_000002 belongs to another run \(its run_id run-b.*remove "
        r"checkpoints/step_000002 to resume from an older checkpoint",
    ):
        resume_config({"outdir": a.cfg.outdir, "resume": True})
    shutil.rmtree(os.path.join(a.cfg.outdir, "checkpoints", "step_000002"))
    assert resume_config({"outdir": a.cfg.outdir, "resume": True})[1].step == 1  # its own, after the advice
    with open(os.path.join(a.cfg.outdir, "config.json")) as f:  # settings edited after the fact
        rec = json.load(f)
    with open(os.path.join(a.cfg.outdir, "config.json"), "w") as f:
        json.dump({**rec, "seed": 7}, f)
    with pytest.raises(
        ConfigError,
        match=r"other settings than this run's config.json: --seed \(checkpoint 0, "
        r"config.json 7\)",
    ):
        resume_config({"outdir": a.cfg.outdir, "resume": True})
    os.remove(os.path.join(a.cfg.outdir, "config.json"))
    with pytest.raises(ConfigError, match="config.json is missing"):
        resume_config({"outdir": a.cfg.outdir, "resume": True})


def test_a_checkpoint_without_a_run_id_is_tied_by_its_settings(tmp_path):
    """Checkpoints written before run ids were recorded: the settings decide (a copy from another seed is refused)."""
    a, b = Tiny(tmp_path / "a"), Tiny(tmp_path / "b")
    b.cfg = RunConfig(outdir=b.cfg.outdir, steps=10, seed=3)
    for t in (a, b):
        os.makedirs(t.cfg.outdir)
        t.step()
        ck.save(t, t.cfg.outdir, keep=1)  # no config.json yet: no run_id recorded
        _config_json(t, None)
    assert ck.read(ck.list_checkpoints(a.cfg.outdir)[-1][1]).run_id is None
    assert resume_config({"outdir": a.cfg.outdir, "resume": True})[1].step == 1
    shutil.rmtree(os.path.join(a.cfg.outdir, "checkpoints"))
    shutil.copytree(os.path.join(b.cfg.outdir, "checkpoints"), os.path.join(a.cfg.outdir, "checkpoints"))
    with pytest.raises(ConfigError, match=r"--seed \(checkpoint 3, config.json 0\)"):
        resume_config({"outdir": a.cfg.outdir, "resume": True})


@pytest.mark.parametrize(
    "setup,match",
    [
        (lambda d: None, "does not exist"),
        (lambda d: os.makedirs(d), "not a run directory"),
        (lambda d: (os.makedirs(d), open(os.path.join(d, "config.json"), "w").write("{}")), "no complete checkpoint"),
    ],
)
def test_resume_without_a_checkpoint_says_why(tmp_path, setup, match):
    d = str(tmp_path / "run")
    setup(d)
    with pytest.raises(ConfigError, match=match) as e:
        resume_config({"outdir": d, "resume": True})
    assert str(e.value).startswith("argument --resume:")


# ------------------------------------------------------------------------ NaN guard and signals
def _finite_inputs():
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    return dict(
        loss=torch.tensor(0.5),
        grad_norm=torch.tensor(1.0),
        logp=torch.full((1, 3), -1.0),
        kl=torch.zeros(1, 3),
        mask=mask,
    )


@pytest.mark.parametrize(
    "key,value",
    [
        ("loss", torch.tensor(float("nan"))),
        ("grad_norm", torch.tensor(float("inf"))),
        ("logp", torch.tensor([[-1.0, float("-inf"), -1.0]])),
        ("kl", torch.tensor([[float("nan"), 0.0, 0.0]])),
    ],
)
def test_nonfinite_report_names_the_quantity(key, value):
    assert guards.nonfinite_report(**_finite_inputs()) == {}
    report = guards.nonfinite_report(**{**_finite_inputs(), key: value})
    assert list(report) == [key] and report[key]["nonfinite"] == 1


def test_nonfinite_outside_the_response_mask_is_ignored():
    inp = _finite_inputs()
    inp["logp"][0, 2] = float("nan")  # a padded position: not a loss input
    assert guards.nonfinite_report(**inp) == {}


def test_injection_hook_reads_the_environment(monkeypatch):
    x = torch.tensor(1.0)
    monkeypatch.delenv(guards.INJECT_NAN_ENV, raising=False)
    assert guards.inject_nan(x, 2) is x
    monkeypatch.setenv(guards.INJECT_NAN_ENV, "2")
    assert torch.isnan(guards.inject_nan(x, 2)) and guards.inject_nan(x, 3) is x


def test_graceful_stop_flags_first_signal_aborts_on_second():
    before = signal.getsignal(signal.SIGTERM)
    with guards.GracefulStop() as stop:
        signal.raise_signal(signal.SIGTERM)
        assert stop.signum == signal.SIGTERM and stop.exit_code == 143 and stop.name == "SIGTERM"
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGINT)
    assert signal.getsignal(signal.SIGTERM) is before
