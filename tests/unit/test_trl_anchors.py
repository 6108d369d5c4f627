"""integrations.trl: the moving reference (ref_update="ema") and Elastic Reset (reset_to="elastic") in the
real TRL GRPOTrainer, through the harness's own functions (models.averaging.mix_states_,
training.elastic.ElasticReset). A 1-layer random Llama, 4 prompts x 4 completions of 6 tokens, 2-4 steps."""

from __future__ import annotations

import pytest

pytest.importorskip("trl", reason="the hf extra (trl) is not installed")
pytest.importorskip("peft", reason="the hf extra (peft) is not installed")

import torch
from test_trl_resets import StopAt, logs, model_dir, trainer  # noqa: E402, F401  (model_dir: its fixture)
from transformers import TrainerCallback

from noma_prorl_bench.integrations.trl import ResetConfig
from noma_prorl_bench.training.elastic import ElasticReset

pytestmark = [pytest.mark.unit, pytest.mark.hf]


class Snapshots(TrainerCallback):
    """The trained tensors after each optimizer step, before the plug-in acts on it (it is registered
    first: TRL calls the callbacks in order)."""

    def __init__(self):
        self.after: list[dict[str, torch.Tensor]] = []
        self.model = None

    def on_step_end(self, args, state, control, model=None, **kw):
        self.after.append({n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad})
        return control


def _trained(tr) -> dict[str, torch.Tensor]:
    return {n: p for n, p in tr.accelerator.unwrap_model(tr.model).named_parameters() if p.requires_grad}


def _mix(old: torch.Tensor, new: torch.Tensor, keep: float) -> torch.Tensor:
    return old.clone().mul_(keep).add_(new, alpha=1.0 - keep)


@pytest.mark.parametrize("peft", [False, True], ids=["full", "peft"])
def test_ema_reference_moves_every_n_optimizer_steps(model_dir, tmp_path, peft):  # noqa: F811
    snaps = Snapshots()
    cfg = ResetConfig(ref_update="ema", ref_ema_tau=0.5, ref_ema_every=2)
    tr = trainer(model_dir, tmp_path, cfg, peft=peft, callbacks=[snaps], max_steps=4)
    init = {n: p.detach().clone() for n, p in _trained(tr).items()}
    tr.train()
    assert tr.reset_events == [] and len(snaps.after) == 4
    ref = tr._ref_tensors()
    for name, p0 in init.items():
        want = _mix(_mix(p0, snaps.after[1][name], 0.5), snaps.after[3][name], 0.5)  # after steps 2 and 4
        key = name.replace(".default.", ".ref.") if peft else name
        assert torch.equal(ref[key].detach(), want), name
    rows = [h for h in tr.state.log_history if "ref/ema_updates" in h]
    assert [r["ref/ema_updates"] for r in rows] == [0.0, 1.0, 1.0, 2.0]


@pytest.mark.parametrize("peft", [False, True], ids=["full", "peft"])
def test_elastic_reset_assigns_the_ema_then_the_initial_weights(model_dir, tmp_path, peft):  # noqa: F811
    snaps = Snapshots()
    cfg = ResetConfig(reset_every=2, reset_to="elastic", elastic_decay=0.5)
    tr = trainer(model_dir, tmp_path, cfg, peft=peft, callbacks=[snaps], max_steps=2)
    assert isinstance(tr._elastic, ElasticReset)
    init = {n: p.detach().clone() for n, p in _trained(tr).items()}
    ref0 = {k: v.detach().clone() for k, v in tr._ref_tensors().items()}
    tr.train()
    (ev,) = tr.reset_events
    assert ev["reset_to"] == "elastic" and ev["policy_from"] == "ema" and ev["ref_update"] is None
    for name, p in _trained(tr).items():
        ema = _mix(_mix(init[name], snaps.after[0][name], 0.5), snaps.after[1][name], 0.5)
        assert torch.equal(p.detach(), ema), name  # policy <- EMA
        assert torch.equal(tr._elastic.ema[name], init[name]), name  # EMA <- the initial weights
    assert all(torch.equal(v, ref0[k]) for k, v in tr._ref_tensors().items())  # the reference stays initial
    assert ev["params_cleared"] == 0 and ev["m_scaled"] == 0  # opt_reset keep: Adam's state untouched


def test_elastic_resume_between_resets_equals_an_unbroken_run(model_dir, tmp_path):  # noqa: F811
    cfg = ResetConfig(reset_every=3, reset_to="elastic", elastic_decay=0.6)
    kw = dict(max_steps=4, save_strategy="steps", save_steps=2)
    full = trainer(model_dir, tmp_path / "a", cfg, **kw)
    full.train()
    stopped = trainer(model_dir, tmp_path / "b", cfg, callbacks=[StopAt(2)], **kw)
    stopped.train()
    assert stopped.state.global_step == 2 and stopped.reset_events == []
    resumed = trainer(model_dir, tmp_path / "b", cfg, **kw)
    resumed.train(resume_from_checkpoint=str(tmp_path / "b" / "checkpoint-2"))
    assert [e["step"] for e in resumed.reset_events] == [3] == [e["step"] for e in full.reset_events]
    assert logs(resumed) == logs(full)
    for name, p in _trained(full).items():
        assert torch.equal(p, _trained(resumed)[name]), name


def test_ema_reference_resume_equals_an_unbroken_run(model_dir, tmp_path):  # noqa: F811
    cfg = ResetConfig(ref_update="ema", ref_ema_tau=0.8, ref_ema_every=1)
    kw = dict(max_steps=4, save_strategy="steps", save_steps=2)
    full = trainer(model_dir, tmp_path / "a", cfg, **kw)
    full.train()
    stopped = trainer(model_dir, tmp_path / "b", cfg, callbacks=[StopAt(2)], **kw)
    stopped.train()
    resumed = trainer(model_dir, tmp_path / "b", cfg, **kw)
    resumed.train(resume_from_checkpoint=str(tmp_path / "b" / "checkpoint-2"))
    assert logs(resumed) == logs(full)
    ref_full, ref_res = full._ref_tensors(), resumed._ref_tensors()
    assert all(torch.equal(ref_full[k], ref_res[k]) for k in ref_full)
