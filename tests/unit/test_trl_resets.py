"""integrations.trl: this project's reset semantics inside the real, pinned TRL GRPOTrainer (CPU, tiny Llama).

Each run is a 1-layer random Llama (tiny_hf), 4 prompts x 4 completions of 6 tokens, 2-4 optimizer steps.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import re

import pytest

pytest.importorskip("trl", reason="the hf extra (trl) is not installed")
pytest.importorskip("peft", reason="the hf extra (peft) is not installed")

import torch

from noma_prorl_bench.config import RunConfig
from noma_prorl_bench.config.presets import PRESETS, RESET_FIELDS
from noma_prorl_bench.config.specs import ResetSpec
from noma_prorl_bench.integrations.trl import REF_FILE, STATE_FILE, ResetConfig, ResetGRPOTrainer
from noma_prorl_bench.integrations.trl_parts import torch_optimizer
from noma_prorl_bench.training.optim_state import apply_reset_semantics, state_census, verify_reset
from noma_prorl_bench.training.resets import Decision

pytestmark = [pytest.mark.unit, pytest.mark.hf]

# wall-clock keys, and the run summary's train_loss: transformers averages it over the steps this process ran
TIME_KEYS = (
    "step_time",
    "ref/forward_s",
    "reset/seconds",
    "train_runtime",
    "train_samples_per_second",
    "train_steps_per_second",
    "train_loss",
    "eval_runtime",
    "eval_samples_per_second",
    "eval_steps_per_second",
)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from noma_prorl_bench.models.tiny_hf import build_tiny_hf_model

    return str(build_tiny_hf_model(tmp_path_factory.mktemp("tiny") / "m", hidden=32, layers=1, heads=2))


def reward(completions, **_):
    """A dense, deterministic reward of the completion's characters (groups rarely tie)."""
    return [(sum(map(ord, c)) % 17) / 17 for c in completions]


def grpo_args(out, **kw):
    from trl import GRPOConfig

    base = dict(
        output_dir=str(out),
        use_cpu=True,
        bf16=False,
        report_to="none",
        save_strategy="no",
        logging_steps=1,
        disable_tqdm=True,
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=6,
        max_steps=3,
        learning_rate=1e-2,
        beta=0.1,
        seed=0,
        lr_scheduler_type="constant",
        dataloader_num_workers=0,
    )
    base.update(kw)
    return GRPOConfig(**base)


def dataset(n=32):
    from datasets import Dataset

    return Dataset.from_dict({"prompt": ["ab", "cd", "ef", "gh"] * (n // 4)})


def trainer(model_dir, out, cfg=None, peft=False, cls=ResetGRPOTrainer, callbacks=None, eval_ds=None, **kw):
    torch.set_num_threads(1)
    peft_config = None
    if peft:
        from peft import LoraConfig

        peft_config = LoraConfig(
            r=4, lora_alpha=8, lora_dropout=0.0, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"
        )
    return cls(
        model=model_dir,
        reward_funcs=reward,
        args=grpo_args(out, **kw),
        train_dataset=dataset(),
        eval_dataset=eval_ds,
        peft_config=peft_config,
        callbacks=callbacks,
        reset_config=cfg,
    )


def logs(tr):
    return [{k: v for k, v in h.items() if k not in TIME_KEYS} for h in tr.state.log_history]


# ---------------------------------------------------------------- ResetConfig


def test_reset_config_uses_the_cli_names_defaults_and_presets():
    run = RunConfig()
    assert {f.name for f in dataclasses.fields(ResetConfig)} == set(RESET_FIELDS)
    for name in RESET_FIELDS:
        assert getattr(ResetConfig(), name) == getattr(run, name), name
    for name, values in PRESETS.items():
        cfg = ResetConfig.from_preset(name)
        assert all(getattr(cfg, k) == v for k, v in values.items()), name
    assert ResetConfig.from_preset("trl_sync", reset_every=64).reset_every == 64
    assert ResetConfig.from_preset("trl_sync").ref_update == "polyak"
    for bad, msg in [
        ({"opt_reset": "adam"}, "--opt_reset: invalid choice: 'adam' (choose from keep, hard, soft, asym)"),
        ({"reset_to": "init"}, "--reset_to: invalid choice: 'init' (choose from current, best)"),
        ({"soft_factor": 1.5}, "--soft_factor: must be in [0, 1]"),
        ({"reset_every": -1}, "--reset_every: must be >= 0"),
        ({"reset_every": 2.5}, "--reset_every: must be an integer"),
        ({"reset_kl_above": float("nan")}, "--reset_kl_above: must be a finite number"),
    ]:
        with pytest.raises(ValueError, match=re.escape(msg)):  # ResetConfig is the CLI's ResetSpec: its checks
            ResetConfig(**bad)
    assert ResetConfig is ResetSpec
    with pytest.raises(ValueError, match="--preset: must be one of prorl_v1"):
        ResetConfig.from_preset("smollm2_demo")


# ---------------------------------------------------------------- refusals (before any model is loaded)


@pytest.mark.parametrize(
    "kw,cfg,msg",
    [
        ({"beta": 0.0}, None, "beta=0.0"),
        ({"sync_ref_model": True}, None, "sync_ref_model=True"),
        ({"optim": "adafactor"}, None, "optim='adafactor'"),
        ({"optim": "adamw_bnb_8bit"}, None, "optim='adamw_bnb_8bit'"),
        ({"optim": "sgd"}, None, "optim='sgd'"),
        ({}, ResetConfig(reset_on_stall=2), "eval_dataset"),
        ({}, ResetConfig(reset_to="best"), "eval_dataset"),
    ],
)
def test_refused_at_construction_with_one_line(tmp_path, kw, cfg, msg):
    with pytest.raises(ValueError, match="^ResetGRPOTrainer: ") as e:
        trainer("/nonexistent-model", tmp_path, cfg, **kw)
    assert msg in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize(
    "attr,value,msg",
    [
        ("fp16", True, "fp16=True"),
        ("deepspeed", "ds.json", "DeepSpeed/FSDP"),
        ("fsdp", "full_shard", "DeepSpeed/FSDP"),
        ("use_liger_kernel", True, "use_liger_kernel"),
    ],
)
def test_refused_setups_the_cpu_cannot_construct(tmp_path, attr, value, msg):
    """fp16 / DeepSpeed / FSDP / Liger cannot be configured on this CPU, so the flag is set after GRPOConfig."""
    args = grpo_args(tmp_path)
    object.__setattr__(args, attr, value)
    with pytest.raises(ValueError, match=msg):
        ResetGRPOTrainer(model="/nonexistent-model", reward_funcs=reward, args=args, train_dataset=dataset())


def test_refused_explicit_optimizers(tmp_path):
    p = [torch.nn.Parameter(torch.zeros(2))]
    for opt in (torch.optim.SGD(p, lr=0.1, momentum=0.9), torch.optim.Adagrad(p)):
        with pytest.raises(ValueError, match=f"optimizer {type(opt).__name__}: only torch.optim.Adam/AdamW"):
            ResetGRPOTrainer(
                model="/nonexistent-model",
                reward_funcs=reward,
                args=grpo_args(tmp_path),
                train_dataset=dataset(),
                optimizers=(opt, None),
            )
    group_step = torch.optim.AdamW(p)
    group_step.param_groups[0]["step"] = 3  # a fused optimizer that keeps t per param group
    with pytest.raises(ValueError, match="per-parameter step"):
        ResetGRPOTrainer(
            model="/nonexistent-model",
            reward_funcs=reward,
            args=grpo_args(tmp_path),
            train_dataset=dataset(),
            optimizers=(group_step, None),
        )


def test_read_back_check_refuses_state_it_cannot_reach():
    p = torch.nn.Parameter(torch.ones(3))
    opt = torch.optim.AdamW([p], lr=0.1)
    with pytest.raises(RuntimeError, match="walked 0 parameters and 0 state entries"):
        verify_reset(opt, state_census(opt), "soft", 0.5, False)
    p.grad = torch.ones(3)
    opt.step()
    opt.param_groups[0]["step"] = 1
    with pytest.raises(RuntimeError, match="1 param groups with a `step`"):
        verify_reset(opt, state_census(opt), "hard", 0.5, True)
    del opt.param_groups[0]["step"]
    before = state_census(opt)
    opt.state[p]["exp_avg"].mul_(0.5)  # the transform claims "keep" but the state moved
    with pytest.raises(RuntimeError, match="optimizer reset 'keep'"):
        verify_reset(opt, before, "keep", 0.5, False)


# ---------------------------------------------------------------- the transforms are the harness's, bit for bit


@pytest.mark.parametrize("optim", ["adamw_torch_fused", "adamw_torch"])
def test_plugin_transforms_equal_the_harness_on_a_trl_optimizer(model_dir, tmp_path, optim):
    tr = trainer(model_dir, tmp_path, ResetConfig(), optim=optim, max_steps=2)
    tr.train()
    opt = torch_optimizer(tr.optimizer)
    modes = [
        dict(opt_reset="keep", reset_opt_step=1),
        dict(opt_reset="soft", soft_factor=0.3),
        dict(opt_reset="asym", soft_factor=0.7, reset_lr_schedule=1),
        dict(opt_reset="hard"),
    ]
    for mode in modes:
        mine = copy.deepcopy(opt)  # the same state, on copies of the parameters
        apply_reset_semantics(
            mine,
            None,
            None,
            opt_reset=mode["opt_reset"],
            soft_factor=mode.get("soft_factor", 0.2),
            reset_opt_step=bool(mode.get("reset_opt_step")),
            reset_lr_schedule=False,
            reset_kl_coef=False,
        )
        tr.reset_config = ResetConfig(**mode)
        ev = tr._apply(Decision(step=2, reason="periodic", reasons=("periodic",)), 2)
        assert ev["params_walked"] >= 1 and ev["entries_walked"] >= 1
        theirs = list(opt.state.values())
        ours = list(mine.state.values())
        assert len(theirs) == len(ours)
        for a, b in zip(theirs, ours):
            assert a.keys() == b.keys()
            for k in a:
                assert torch.equal(a[k], b[k]), (mode, k)
    assert all(not s for s in opt.state.values())  # hard left fresh state
    assert tr.lr_scheduler.last_epoch == 0 and opt.param_groups[0]["lr"] == 1e-2


# ---------------------------------------------------------------- hard reset: reference = policy, KL 0 next step


def _ref_and_policy_logps(tr):
    from trl.trainer.utils import use_adapter

    x = tr._last_inputs
    ids = torch.cat([x["prompt_ids"], x["completion_ids"]], 1)
    att = torch.cat([x["prompt_mask"], x["completion_mask"]], 1)
    keep = x["completion_ids"].size(1)
    with torch.no_grad():
        pol = tr._get_per_token_logps_and_entropies(tr.model, ids, att, keep)[0]
        if tr.ref_model is not None:
            ref = tr._get_per_token_logps_and_entropies(tr.ref_model, ids, att, keep)[0]
        else:
            with use_adapter(tr.accelerator.unwrap_model(tr.model), adapter_name="ref"):
                ref = tr._get_per_token_logps_and_entropies(tr.model, ids, att, keep)[0]
    return pol, ref


class AfterReset(ResetGRPOTrainer):
    """Keeps the policy's and the reference's log-probs on the last micro-batch right after each reset."""

    def _apply(self, decision, step):
        ev = super()._apply(decision, step)
        self.after.append(_ref_and_policy_logps(self))
        return ev


@pytest.mark.parametrize("peft", [False, True], ids=["full", "peft"])
def test_hard_reset_makes_the_reference_the_policy(model_dir, tmp_path, peft):
    tr = trainer(
        model_dir, tmp_path, ResetConfig(reset_every=2, opt_reset="hard"), peft=peft, cls=AfterReset, max_steps=3
    )
    tr.after = []
    tr.train()
    (ev,) = tr.reset_events
    assert ev["step"] == 2 and ev["decided_step"] == 2 and ev["kl_before"] > 1e-7 and ev["kl_after"] == 0.0
    assert ev["ref_kind"] == ("peft_ref_adapter" if peft else "full_model") and ev["params_cleared"] >= 1
    ((pol, ref),) = tr.after
    assert torch.equal(pol, ref)
    rows = {h["step"]: h for h in tr.state.log_history if "kl" in h}
    assert rows[2]["kl"] > 1e-7 and rows[3]["kl"] == 0.0  # TRL's own KL at the first step after the reset
    assert rows[2]["reset/step"] == 2 and rows[2]["reset/count"] == 1 and "reset/step" not in rows[3]


def test_peft_reference_adapter_is_frozen_and_polyak_mixes_its_factors(model_dir, tmp_path):
    tr = trainer(model_dir, tmp_path, ResetConfig(ref_update="polyak", ref_mix_alpha=0.25), peft=True, max_steps=2)
    policy = tr.accelerator.unwrap_model(tr.model)
    assert "ref" in policy.peft_config and policy.active_adapter == "default"
    named = dict(policy.named_parameters())
    ref_names = [n for n in named if ".ref." in n]
    assert ref_names and not any(named[n].requires_grad for n in ref_names)
    assert all(torch.equal(named[n], named[n.replace(".ref.", ".default.")]) for n in ref_names)
    tr.train()
    opt = torch_optimizer(tr.optimizer)
    in_opt = {id(p) for g in opt.param_groups for p in g["params"]}
    assert not any(id(named[n]) in in_opt for n in ref_names)
    old = {n: named[n].detach().clone() for n in ref_names}
    assert any(not torch.equal(old[n], named[n.replace(".ref.", ".default.")]) for n in ref_names)
    tr._apply(Decision(step=2, reason="periodic"), 2)
    for n in ref_names:
        want = old[n] * 0.75 + named[n.replace(".ref.", ".default.")].detach() * 0.25
        torch.testing.assert_close(named[n].detach(), want, rtol=1e-6, atol=1e-8)


def test_full_model_polyak_is_the_mix_of_every_tensor(model_dir, tmp_path):
    tr = trainer(model_dir, tmp_path, ResetConfig(ref_update="polyak", ref_mix_alpha=0.6), max_steps=2)
    tr.train()
    old = {k: v.clone() for k, v in tr.ref_model.state_dict().items()}
    pol = tr.accelerator.unwrap_model(tr.model).state_dict()
    tr._apply(Decision(step=2, reason="periodic"), 2)
    for k, v in tr.ref_model.state_dict().items():
        want = old[k] * 0.4 + pol[k] * 0.6 if v.is_floating_point() else pol[k]
        torch.testing.assert_close(v, want, rtol=1e-6, atol=1e-8)
        assert not torch.equal(v, old[k]) or torch.equal(old[k], pol[k]), k


# ---------------------------------------------------------------- generation boundaries (num_iterations 2)


class Recording(ResetGRPOTrainer):
    """Records the reference checksum at each generation and at each loss computation."""

    def _generate_and_score_completions(self, *a, **k):
        from noma_prorl_bench.integrations.trl_parts import reference_checksum

        self.trace.append(("gen", self._step, reference_checksum(self._ref_tensors())))
        return super()._generate_and_score_completions(*a, **k)

    def _compute_loss(self, model, inputs):
        from noma_prorl_bench.integrations.trl_parts import reference_checksum

        self.trace.append(("loss", self._step, reference_checksum(self._ref_tensors())))
        return super()._compute_loss(model, inputs)


def _stale_losses(trace):
    """Loss computations whose buffered reference log-probs came from another reference."""
    gen_ref, stale = None, 0
    for kind, _, ref in trace:
        if kind == "gen":
            gen_ref = ref
        elif ref != gen_ref:
            stale += 1
    return stale


def test_resets_land_on_generation_boundaries(model_dir, tmp_path, monkeypatch):
    tr = trainer(model_dir, tmp_path, ResetConfig(reset_every=1), cls=Recording, num_iterations=2, max_steps=4)
    tr.trace = []
    tr.train()
    assert [(e["decided_step"], e["step"]) for e in tr.reset_events] == [(1, 2), (3, 4)]
    assert [e["merged_decisions"] for e in tr.reset_events] == [1, 1]
    assert [k for k, _, _ in tr.trace] == ["gen", "loss", "loss", "gen", "loss", "loss"]
    assert _stale_losses(tr.trace) == 0
    fwd = [h["ref/forward_seqs"] for h in tr.state.log_history if "ref/forward_seqs" in h]
    assert fwd == [4.0, 0.0, 4.0, 0.0]  # one reference pass per generation
    # gradient accumulation 2 and a generation every 4 micro-steps: a generation every 2 optimizer steps
    ga = trainer(
        model_dir,
        tmp_path / "ga",
        ResetConfig(reset_every=1),
        cls=Recording,
        gradient_accumulation_steps=2,
        steps_per_generation=4,
        max_steps=4,
    )
    ga.trace = []
    ga.train()
    assert [(e["decided_step"], e["step"]) for e in ga.reset_events] == [(1, 2), (3, 4)]
    assert [k for k, _, _ in ga.trace] == ["gen", "loss", "loss", "loss", "loss"] * 2 and _stale_losses(ga.trace) == 0
    # the check can fail: resetting mid-generation uses the old reference's buffered log-probs
    monkeypatch.setattr(ResetGRPOTrainer, "_at_generation_boundary", lambda self: True)
    tr2 = trainer(model_dir, tmp_path / "b", ResetConfig(reset_every=1), cls=Recording, num_iterations=2, max_steps=4)
    tr2.trace = []
    tr2.train()
    assert _stale_losses(tr2.trace) == 2


# ---------------------------------------------------------------- checkpoint / resume across a reset


class StopAt:
    def __new__(cls, step):
        from transformers import TrainerCallback

        class _Stop(TrainerCallback):
            def on_step_end(self, args, state, control, **kw):
                if state.global_step == step:
                    control.should_training_stop = True
                return control

        return _Stop()


@pytest.mark.parametrize("peft", [False, True], ids=["full", "peft"])
def test_resume_after_a_reset_logs_the_same_as_an_unbroken_run(model_dir, tmp_path, peft):
    cfg = ResetConfig(reset_every=2, opt_reset="soft", soft_factor=0.5, reset_opt_step=1)
    kw = dict(max_steps=4, save_strategy="steps", save_steps=2, peft=peft)
    full = trainer(model_dir, tmp_path / "a", cfg, **kw)
    full.train()
    stopped = trainer(model_dir, tmp_path / "b", cfg, callbacks=[StopAt(2)], **kw)
    stopped.train()
    assert stopped.state.global_step == 2 and len(stopped.reset_events) == 1
    ckpt = tmp_path / "b" / "checkpoint-2"
    state = json.loads((ckpt / STATE_FILE).read_text())
    assert state["n_resets"] == 1 and state["optimizer_step"] == 0 and (ckpt / REF_FILE).exists()
    resumed = trainer(model_dir, tmp_path / "b", cfg, **kw)
    resumed.train(resume_from_checkpoint=str(ckpt))
    assert [e["step"] for e in full.reset_events] == [2, 4]
    strip = [{k: v for k, v in e.items() if k != "seconds"} for e in full.reset_events]
    assert [{k: v for k, v in e.items() if k != "seconds"} for e in resumed.reset_events] == strip
    assert logs(resumed) == logs(full)


def test_resume_with_the_best_target_and_the_stall_trigger(model_dir, tmp_path):
    cfg = ResetConfig(reset_on_stall=1, stall_min_delta=1e9, reset_to="best", opt_reset="hard")
    kw = dict(
        max_steps=4,
        save_strategy="steps",
        save_steps=2,
        eval_ds=dataset(4),
        eval_strategy="steps",
        eval_steps=1,
        per_device_eval_batch_size=4,
    )
    full = trainer(model_dir, tmp_path / "a", cfg, **kw)
    full.train()
    stopped = trainer(model_dir, tmp_path / "b", cfg, callbacks=[StopAt(2)], **kw)
    stopped.train()
    ckpt = tmp_path / "b" / "checkpoint-2"
    assert (ckpt / "reset_best.safetensors").exists() and json.loads((ckpt / STATE_FILE).read_text())["best"]["step"]
    resumed = trainer(model_dir, tmp_path / "b", cfg, **kw)
    resumed.train(resume_from_checkpoint=str(ckpt))
    assert [e["reason"] for e in full.reset_events] == ["stall"] * 3  # steps 2, 3, 4: patience 1
    strip = [{k: v for k, v in e.items() if k != "seconds"} for e in full.reset_events]
    assert [{k: v for k, v in e.items() if k != "seconds"} for e in resumed.reset_events] == strip
    assert logs(resumed) == logs(full)


def test_resume_checks_the_reference_and_the_config(model_dir, tmp_path):
    from safetensors.torch import load_file, save_file

    cfg = ResetConfig(reset_every=1, opt_reset="hard")
    kw = dict(max_steps=2, save_strategy="steps", save_steps=1)
    trainer(model_dir, tmp_path, cfg, callbacks=[StopAt(1)], **kw).train()
    ckpt = tmp_path / "checkpoint-1"
    with pytest.raises(ValueError, match="different ResetConfig \\(opt_reset\\)"):
        trainer(model_dir, tmp_path, ResetConfig(reset_every=1), **kw).train(resume_from_checkpoint=str(ckpt))
    ref = load_file(ckpt / REF_FILE)
    name = sorted(ref)[0]
    ref[name] = ref[name] + 1.0
    save_file(ref, ckpt / REF_FILE)
    with pytest.raises(ValueError, match="fails its checksum"):
        trainer(model_dir, tmp_path, cfg, **kw).train(resume_from_checkpoint=str(ckpt))
    os.remove(ckpt / STATE_FILE)
    with pytest.raises(ValueError, match=f"has no {STATE_FILE}"):
        trainer(model_dir, tmp_path, cfg, **kw).train(resume_from_checkpoint=str(ckpt))


# ---------------------------------------------------------------- stall trigger and the best target


def test_stall_trigger_restores_the_best_evaluated_policy(model_dir, tmp_path):
    cfg = ResetConfig(reset_on_stall=1, stall_min_delta=1e9, reset_to="best", opt_reset="hard")
    tr = trainer(
        model_dir,
        tmp_path,
        cfg,
        eval_ds=dataset(4),
        eval_strategy="steps",
        eval_steps=1,
        per_device_eval_batch_size=4,
        max_steps=2,
    )
    tr.train()
    (ev,) = tr.reset_events
    vals = {h["step"]: h["eval_reward"] for h in tr.state.log_history if "eval_reward" in h}
    best_step = 2 if vals[2] > vals[1] else 1
    assert ev["reason"] == "stall" and ev["step"] == 2 and ev["restored_step"] == best_step
    assert ev["best_val"] == pytest.approx(vals[best_step])
    policy = tr.accelerator.unwrap_model(tr.model).state_dict()
    assert all(torch.equal(policy[k], v) for k, v in tr._best.params.items())
    assert all(torch.equal(policy[k], v) for k, v in tr.ref_model.state_dict().items())


def test_kl_spike_trigger_reads_trls_kl_of_the_step(model_dir, tmp_path):
    tr = trainer(
        model_dir, tmp_path, ResetConfig(reset_kl_above=1e-9, reset_kl_min_gap=2, opt_reset="keep"), max_steps=4
    )
    tr.train()
    kl = {h["step"]: h["kl"] for h in tr.state.log_history if "kl" in h}
    # step 1: KL 0 (reference = policy); step 2: KL > 0 and 2 steps since the start; step 3: KL 0 after the
    # hard copy; step 4: KL > 0 and 2 steps since the reset
    assert kl[1] == 0.0 and kl[2] > 1e-9 and kl[3] == 0.0 and kl[4] > 1e-9
    assert [(e["step"], e["reason"]) for e in tr.reset_events] == [(2, "kl_spike"), (4, "kl_spike")]
    assert [e["kl"] for e in tr.reset_events] == [kl[2], kl[4]]
    assert all(e["steps_since_reset"] == 2 and e["threshold"] == 1e-9 for e in tr.reset_events)


def test_read_back_check_catches_a_silent_no_op_inside_trl(model_dir, tmp_path, monkeypatch):
    import noma_prorl_bench.integrations.trl as plug

    tr = trainer(model_dir, tmp_path, ResetConfig(opt_reset="soft", soft_factor=0.5), max_steps=2)
    tr.train()
    real = plug.apply_reset_semantics
    monkeypatch.setattr(
        plug,
        "apply_reset_semantics",
        lambda opt, *a, **k: real(torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))]), *a, **k),
    )  # transforms an optimizer that is not TRL's
    with pytest.raises(RuntimeError, match="optimizer reset 'soft' \\(f=0.5\\) read back"):
        tr._apply(Decision(step=2, reason="periodic"), 2)
    monkeypatch.setattr(plug, "apply_reset_semantics", real)
    empty = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))])
    monkeypatch.setattr(plug, "torch_optimizer", lambda opt: empty)  # a wrapper whose state is elsewhere
    ref = {k: v.clone() for k, v in tr.ref_model.state_dict().items()}
    with pytest.raises(RuntimeError, match="walked 0 parameters and 0 state entries"):
        tr._apply(Decision(step=2, reason="periodic"), 2)
    assert all(torch.equal(v, ref[k]) for k, v in tr.ref_model.state_dict().items())  # refused before any change
