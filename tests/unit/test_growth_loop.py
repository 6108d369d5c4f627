"""Growth wired into the Trainer (growth_loop.py): config validation, function-preserving growth
of policy, reference and snapshots, the scheduler under `naive`, the stall trigger, checkpoints.

Trainers here are tiny (4 prompts x 4 samples, 2 warm-start steps, 16 validation prompts).
"""

import pytest
import torch

from noma_prorl_bench.config import ConfigError, make_config
from noma_prorl_bench.io.metrics import StepSignals
from noma_prorl_bench.models.lora import adapter_parameters, adapter_rank
from noma_prorl_bench.training.growth import check_no_stale_state
from noma_prorl_bench.training.growth_loop import (
    GrowthManager,
    migrate_snapshot,
    parse_targets,
)
from noma_prorl_bench.training.resets import clone_state_dict
from noma_prorl_bench.training.trainer import Trainer

pytestmark = pytest.mark.unit

TINY = {
    "outdir": "/tmp/unused",
    "batch_size": 4,
    "group_size": 4,
    "warmstart_steps": 2,
    "n_val": 16,
    "eval_every": 1,
    "quiet": True,
    "hidden": 32,
}


def _trainer(**overrides) -> Trainer:
    return Trainer.from_config(make_config({**TINY, "enable_growth": 1, "grow_every": 2, **overrides})).start()


def _logits(model, tokens):
    model.eval()
    with torch.no_grad():
        return model(tokens)


def _tokens(tr: Trainer) -> torch.Tensor:
    return tr.monitors.drift.tokens  # [n, L] fixed greedy batch


# ---------------------------------------------------------------- config


@pytest.mark.parametrize(
    "values,flag",
    [
        ({"grow_every": 5}, "grow_every"),  # growth flag without --enable_growth
        ({"rank_step": 2}, "rank_step"),
        ({"enable_growth": 1}, "grow_every"),  # schedule needs grow_every > 0
        ({"enable_growth": 1, "grow_every": 2, "initial_rank": 0}, "initial_rank"),
        ({"enable_growth": 1, "grow_every": 2, "rank_step": 0}, "rank_step"),
        ({"enable_growth": 1, "grow_every": 2, "initial_rank": 8, "max_rank": 4}, "max_rank"),
        ({"enable_growth": 1, "grow_on": "reset"}, "grow_on"),  # no reset trigger
        ({"enable_growth": 1, "grow_on": "reset", "reset_every": 5, "grow_every": 5}, "grow_every"),
        ({"enable_growth": 1, "grow_on": "reset", "reset_every": 5, "variant": "B"}, "reset_every"),
        ({"enable_growth": 1, "grow_every": 2, "grow_patience": 5}, "grow_patience"),
        ({"enable_growth": 1, "grow_every": 2, "lora_alpha": 0.0}, "lora_alpha"),
        ({"enable_growth": 1, "grow_every": 2, "adapter_targets": " , "}, "adapter_targets"),
    ],
)
def test_config_rejects(values, flag):
    with pytest.raises(ConfigError) as e:
        make_config({"outdir": "x", **values})
    assert e.value.flag == flag


@pytest.mark.parametrize(
    "values",
    [
        {"enable_growth": 1, "grow_every": 300, "rank_step": 4, "steps": 1200},  # the seed's command
        {"enable_growth": 1, "grow_on": "reset", "reset_every": 50},
        {"enable_growth": 1, "grow_on": "reset", "preset": "prorl_v2"},
        {"enable_growth": 1, "grow_on": "stall", "grow_patience": 2},
        {"enable_growth": 1, "grow_every": 10, "max_rank": 4},  # fixed-rank adapters
    ],
)
def test_config_accepts(values):
    assert make_config({"outdir": "x", **values}).enable_growth == 1


def test_parse_targets():
    assert parse_targets(" head, *proj ,") == ["head", "*proj"]


# ---------------------------------------------------------------- set-up


def test_base_frozen_and_optimizer_holds_only_adapters():
    tr = _trainer(initial_rank=3)
    assert adapter_rank(tr.policy) == adapter_rank(tr.ref.model) == 3
    trainable = [p for p in tr.policy.parameters() if p.requires_grad]
    assert {id(p) for p in trainable} == {id(p) for p in adapter_parameters(tr.policy)}
    assert {id(p) for g in tr.optimizer.param_groups for p in g["params"]} == {id(p) for p in trainable}
    assert not any(p.requires_grad for p in tr.ref.model.parameters())


# ---------------------------------------------------------------- growth is function-preserving


@pytest.mark.parametrize("mode", ["preserve", "reset", "naive", "noma_flat"])
def test_policy_reference_and_monitors_at_growth(mode):
    tr = _trainer(growth_migration=mode, grow_every=100)
    for _ in range(3):
        tr.train_step()  # adapters trained, Adam state present
    tokens = _tokens(tr)
    pol, ref = _logits(tr.policy, tokens), _logits(tr.ref.model, tokens)
    tr.monitors.before_step()
    drift = tr.monitors.drift.measure(tr.policy)
    old_opt = tr.optimizer
    rec = tr.growth.grow(tr.step_idx, "test")
    assert (rec["old_rank"], rec["new_rank"], rec["migration"]) == (4, 8, mode)
    assert rec["stale_state_problems"] == [] and rec["snapshots_migrated"] == 4  # init + prev: A, B each
    assert adapter_rank(tr.policy) == adapter_rank(tr.ref.model) == 8
    torch.testing.assert_close(_logits(tr.ref.model, tokens), ref, rtol=0, atol=1e-6)  # pi_ref unchanged
    if mode == "noma_flat":
        assert not torch.allclose(_logits(tr.policy, tokens), pol, atol=1e-3)  # B scrambled
    else:
        torch.testing.assert_close(_logits(tr.policy, tokens), pol, rtol=0, atol=1e-6)
        after = tr.monitors.drift.measure(tr.policy)  # grown snapshots: same KLs as before
        for k in drift:
            assert after[k] == pytest.approx(drift[k], abs=1e-6)
    assert (tr.optimizer is old_opt) == (mode != "naive")
    assert tr.scheduler.optimizer is tr.optimizer
    tr.train_step()  # the grown model trains
    assert check_no_stale_state(tr.policy, tr.optimizer) == []


def test_preserve_keeps_adam_step_and_old_moments():
    tr = _trainer(grow_every=100)
    for _ in range(2):
        tr.train_step()
    A = tr.policy.head.lora_A
    st = {k: v.clone() for k, v in tr.optimizer.state[A].items()}
    tr.growth.grow(tr.step_idx, "test")
    A2 = tr.policy.head.lora_A
    new = tr.optimizer.state[A2]
    assert A not in tr.optimizer.state and torch.equal(new["step"], st["step"])
    assert torch.equal(new["exp_avg"][:4], st["exp_avg"]) and not new["exp_avg"][4:].any()
    assert torch.equal(new["exp_avg_sq"][:4], st["exp_avg_sq"]) and not new["exp_avg_sq"][4:].any()


def test_naive_rebuilds_scheduler_at_the_same_step():
    kw = {"lr_schedule": "cosine", "warmup_steps": 3, "steps": 6}
    grown, plain = _trainer(growth_migration="naive", grow_every=100, **kw), _trainer(grow_every=100, **kw)
    for _ in range(2):
        grown.train_step(), plain.train_step()
    old_sched = grown.scheduler
    grown.growth.grow(grown.step_idx, "test")
    assert grown.scheduler is not old_sched and grown.scheduler.optimizer is grown.optimizer
    assert grown.scheduler.last_epoch == plain.scheduler.last_epoch == 8
    for _ in range(5):  # same LR trajectory as without growth
        grown.scheduler.step(), plain.scheduler.step()
        assert grown.optimizer.param_groups[0]["lr"] == plain.optimizer.param_groups[0]["lr"]


def test_migrate_snapshot_pads_a_with_new_rows_and_b_with_zeros():
    tr = _trainer()
    snap = clone_state_dict(tr.policy)
    tr.growth.grow(0, "test")
    assert migrate_snapshot(snap, tr.policy) == 2
    A, B = snap["head.lora_A"], snap["head.lora_B"]
    assert A.shape == tr.policy.head.lora_A.shape and B.shape == tr.policy.head.lora_B.shape
    assert torch.equal(A[4:], tr.policy.head.lora_A.detach()[4:]) and not B[:, 4:].any()
    assert migrate_snapshot(snap, tr.policy) == 0 and migrate_snapshot(None, tr.policy) == 0


def test_best_snapshot_migrated_and_restorable():
    tr = _trainer(reset_to="best", reset_every=2, grow_every=3, steps=5)
    for _ in range(3):  # reset at 2 (best restored), growth at 3
        tr.train_step()
    assert tr.resets.best.params["head.lora_B"].shape == tr.policy.head.lora_B.shape
    for _ in range(2):
        tr.train_step()  # reset at 4 restores the grown best
    assert adapter_rank(tr.policy) == 8


# ---------------------------------------------------------------- triggers


def test_no_growth_on_last_step_or_past_max_rank():
    tr = _trainer(grow_every=1, steps=4, rank_step=3, max_rank=9)
    ranks = [tr.train_step()["adapter/rank"] for _ in range(4)]
    assert ranks == [4, 7, 9, 9] and adapter_rank(tr.policy) == 9


def test_stall_trigger_counts_validations():
    tr = _trainer(grow_on="stall", grow_every=0, grow_patience=2)
    g = tr.growth
    seq = [(1, 0.5), (2, 0.5), (3, 0.4), (4, 0.6), (5, 0.6), (6, 0.6), (7, None)]
    assert [g.due(s, StepSignals(reward_mean=0.0, reward_val=v)) for s, v in seq] == [
        None,
        None,
        "stall",
        None,
        None,
        "stall",
        None,
    ]


def test_reset_trigger_follows_reference_resets():
    tr = _trainer(grow_on="reset", grow_every=0, reset_every=2, steps=5)
    ranks = [tr.train_step()["adapter/rank"] for _ in range(5)]
    assert ranks == [4, 4, 8, 8, 12]
    assert adapter_rank(tr.ref.model) == 12


# ---------------------------------------------------------------- checkpoints


def test_state_dict_round_trip_grows_a_fresh_trainer():
    tr = _trainer(steps=5)
    for _ in range(5):
        tr.train_step()  # growth at 2 and 4: rank 12
    state, sd, ref_sd = tr.growth.state_dict(), tr.policy.state_dict(), tr.ref.model.state_dict()
    assert state["rank"] == 12 and state["n_growths"] == 2 and state["grow_counts"] == [2]
    fresh = _trainer(steps=5)
    fresh.growth.load_state_dict(state)
    fresh.policy.load_state_dict(sd)
    fresh.ref.model.load_state_dict(ref_sd)
    assert fresh.growth.state_dict() == state
    assert check_no_stale_state(fresh.policy, fresh.optimizer) == []
    tokens = _tokens(tr)
    assert torch.equal(_logits(fresh.policy, tokens), _logits(tr.policy, tokens))
    tr.growth.grow(5, "test"), fresh.growth.grow(5, "test")  # the next growth draws the same rows
    assert torch.equal(tr.policy.head.lora_A, fresh.policy.head.lora_A)


def test_disabled_is_a_no_op():
    tr = Trainer.from_config(make_config({**TINY})).start()
    assert isinstance(tr.growth, GrowthManager) and not tr.growth.enabled and tr.growth.rank == 0
    assert "adapter/rank" not in tr.train_step()
    assert not any(n.endswith("lora_A") for n, _ in tr.policy.named_parameters())
