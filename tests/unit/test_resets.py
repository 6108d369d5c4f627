"""Unit tests for resets.py: trigger steps on synthetic streams, best restore, recovery counts."""

from __future__ import annotations

import io
import json

import pytest
import torch
from torch import nn

from noma_prorl_bench.training.resets import (
    BestTracker,
    RecoveryTracker,
    ResetTrigger,
    clone_state_dict,
)

torch.set_num_threads(1)


def _fires(trig: ResetTrigger, n_steps: int, kl=None, val=None):
    """Run steps 1..n_steps; kl/val are dicts step -> value (missing = None)."""
    kl, val = kl or {}, val or {}
    out = []
    for k in range(1, n_steps + 1):
        d = trig.check(k, kl.get(k), val.get(k))
        if d is not None:
            out.append(d)
    return out


@pytest.mark.unit
def test_periodic_fires_at_multiples_of_every():
    fired = _fires(ResetTrigger(every=3), 10)
    assert [d.step for d in fired] == [3, 6, 9]
    assert all(d.reason == "periodic" and d.values == {"every": 3} for d in fired)
    assert _fires(ResetTrigger(every=0), 10) == []


@pytest.mark.unit
def test_kl_spike_respects_min_gap_from_start_and_last_reset():
    # threshold 0.2, gap 3: step 2 is above but only 2 steps from the start; step 3 fires;
    # 4 is too close; 6 fires (gap 3); 7, 8 too close; 9 below; 10 fires (gap 4).
    kl = dict(zip(range(1, 11), [0.1, 0.3, 0.3, 0.5, 0.1, 0.3, 0.3, 0.3, 0.1, 0.25]))
    fired = _fires(ResetTrigger(kl_above=0.2, kl_min_gap=3), 10, kl=kl)
    assert [d.step for d in fired] == [3, 6, 10]
    assert fired[0].reason == "kl_spike"
    assert fired[0].values == {"kl": 0.3, "threshold": 0.2, "min_gap": 3, "steps_since_reset": 3}
    assert fired[2].values["steps_since_reset"] == 4
    # equal to the threshold is not a spike: with threshold 0.3 only step 4 (0.5) fires
    assert [d.step for d in _fires(ResetTrigger(kl_above=0.3, kl_min_gap=0), 10, kl=kl)] == [4]
    assert [d.step for d in _fires(ResetTrigger(kl_above=0.5, kl_min_gap=0), 10, kl=kl)] == []


@pytest.mark.unit
def test_kl_gap_counts_from_resets_of_any_reason():
    kl = {k: 0.5 for k in range(1, 16)}
    fired = _fires(ResetTrigger(every=5, kl_above=0.2, kl_min_gap=3), 15, kl=kl)
    assert [(d.step, d.reason) for d in fired] == [
        (3, "kl_spike"),
        (5, "periodic"),
        (8, "kl_spike"),
        (10, "periodic"),
        (13, "kl_spike"),
        (15, "periodic"),
    ]


@pytest.mark.unit
def test_stall_counts_validations_fires_after_patience_and_rearms():
    # patience 2, min_delta 0.05, validations every 2 steps:
    # 0.1 best | 0.2 best (> 0.15) | 0.22 bad1 | 0.24 bad2 -> fire @8, re-arm |
    # 0.3 best (> 0.25) | 0.3 bad1 | 0.31 bad2 -> fire @14 | 0.5 best
    vals = dict(zip(range(2, 17, 2), [0.1, 0.2, 0.22, 0.24, 0.3, 0.3, 0.31, 0.5]))
    trig = ResetTrigger(stall_patience=2, stall_min_delta=0.05)
    fired = _fires(trig, 16, val=vals)
    assert [d.step for d in fired] == [8, 14]
    assert fired[0].reason == "stall"
    assert fired[0].values == {"val_reward": 0.24, "best": 0.2, "patience": 2, "min_delta": 0.05}
    assert fired[1].values["best"] == 0.3
    assert trig.best_val == 0.5 and trig.bad_vals == 0 and trig.n_resets == 2


@pytest.mark.unit
def test_simultaneous_triggers_one_decision_with_priority():
    trig = ResetTrigger(every=2, kl_above=0.1, kl_min_gap=0, stall_patience=1)
    assert trig.check(1, 0.0, 0.5) is None  # first validation sets best
    d = trig.check(2, 0.9, 0.4)  # stall + kl + periodic together
    assert d.reason == "stall" and d.reasons == ("stall", "kl_spike", "periodic")
    assert d.values["kl"] == 0.9 and d.values["every"] == 2 and d.values["best"] == 0.5
    ev = d.to_event()
    assert ev["step"] == 2 and ev["reason"] == "stall" and ev["reasons"] == ["stall", "kl_spike", "periodic"]
    assert json.loads(json.dumps(ev)) == ev
    assert trig.n_resets == 1 and trig.last_reset == 2


@pytest.mark.unit
def test_steps_since_reset():
    trig = ResetTrigger(every=4)
    since = []
    for k in range(1, 10):
        trig.check(k)
        since.append(trig.steps_since_reset(k))
    assert since == [1, 2, 3, 0, 1, 2, 3, 0, 1]


@pytest.mark.unit
def test_trigger_state_dict_resume_gives_same_fires():
    kl = {k: (0.5 if k % 3 else 0.0) for k in range(1, 31)}
    vals = {k: [0.1, 0.1, 0.3, 0.3, 0.3, 0.6][(k // 5) % 6] for k in range(5, 31, 5)}
    args = dict(every=7, kl_above=0.2, kl_min_gap=4, stall_patience=2, stall_min_delta=0.0)
    full = [(d.step, d.reason) for d in _fires(ResetTrigger(**args), 30, kl, vals)]
    first = ResetTrigger(**args)
    part1 = [(d.step, d.reason) for d in _fires(first, 15, kl, vals)]
    state = json.loads(json.dumps(first.state_dict()))
    second = ResetTrigger(**args)
    second.load_state_dict(state)
    part2 = []
    for k in range(16, 31):
        d = second.check(k, kl.get(k), vals.get(k))
        if d is not None:
            part2.append((d.step, d.reason))
    assert part1 + part2 == full
    assert len(full) >= 4


class _Tied(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(5, 3)
        self.head = nn.Linear(3, 5, bias=False)
        self.head.weight = self.emb.weight  # tied
        self.norm = nn.BatchNorm1d(3)  # has buffers (incl. an int64 counter)


@pytest.mark.unit
def test_best_tracker_restores_bit_for_bit():
    torch.manual_seed(0)
    model = _Tied()
    best = BestTracker()
    assert best.update(3, 0.5, model) is True
    snapshot = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p))
        model.norm.num_batches_tracked += 7
    assert best.update(4, 0.5, model) is False  # not strictly better
    assert best.update(5, 0.4, model) is False
    assert best.restore(model) == 3
    for k, v in model.state_dict().items():
        assert torch.equal(v, snapshot[k]), k
    assert model.head.weight is model.emb.weight  # tie survives restore


@pytest.mark.unit
def test_clone_state_dict_keeps_aliasing_and_detaches():
    model = _Tied()
    sd = clone_state_dict(model)
    assert sd["emb.weight"] is sd["head.weight"]
    assert sd["emb.weight"].untyped_storage().data_ptr() != model.emb.weight.untyped_storage().data_ptr()
    assert not sd["emb.weight"].requires_grad


@pytest.mark.unit
def test_best_tracker_state_dict_roundtrip():
    torch.manual_seed(1)
    model = nn.Linear(4, 2)
    best = BestTracker()
    best.update(7, 0.75, model)
    buf = io.BytesIO()
    torch.save(best.state_dict(), buf)
    buf.seek(0)
    other = BestTracker()
    other.load_state_dict(torch.load(buf))
    assert other.best == 0.75 and other.step == 7
    fresh = nn.Linear(4, 2)
    other.restore(fresh)
    assert torch.equal(fresh.weight, model.weight) and torch.equal(fresh.bias, model.bias)
    with pytest.raises(RuntimeError):
        BestTracker().restore(fresh)


@pytest.mark.unit
def test_recovery_count_exact():
    # window 2: reset after step 5, pre-level = mean(r4, r5) = (1.0 + 0.5) / 2 = 0.75;
    # r6 = 0.25, r7 = 0.5, r8 = 0.75 >= 0.75 -> recovered after 8 - 5 = 3 steps, reported once.
    rec = RecoveryTracker(window=2)
    for k, r in enumerate([0.25, 0.5, 0.75, 1.0, 0.5], start=1):
        assert rec.observe(k, r) is None
    assert rec.on_reset(5) is None
    assert rec.pre_level == 0.75
    out = [rec.observe(k, r) for k, r in zip(range(6, 10), [0.25, 0.5, 0.75, 1.0])]
    assert out[:2] == [None, None] and out[3] is None
    assert out[2] == {"reset_step": 5, "pre_level": 0.75, "recovered": True, "steps_to_recover": 3, "steps_observed": 3}


@pytest.mark.unit
def test_recovery_pending_closed_by_next_reset_and_resume():
    rec = RecoveryTracker(window=3)
    for k, r in enumerate([1.0, 1.0, 1.0], start=1):
        rec.observe(k, r)
    rec.on_reset(3)
    rec.observe(4, 0.0)
    state = json.loads(json.dumps(rec.state_dict()))
    rec2 = RecoveryTracker(window=1)
    rec2.load_state_dict(state)
    rec2.observe(5, 0.5)
    pending = rec2.on_reset(5)
    assert pending == {
        "reset_step": 3,
        "pre_level": 1.0,
        "recovered": False,
        "steps_to_recover": None,
        "steps_observed": 2,
    }
    assert rec2.pre_level == pytest.approx((1.0 + 0.0 + 0.5) / 3)
    assert RecoveryTracker(window=2).on_reset(1) is None  # nothing observed: nothing tracked


@pytest.mark.unit
def test_trigger_from_spec_zero_means_off():
    from types import SimpleNamespace

    from noma_prorl_bench.training.resets import trigger_from_spec

    cfg = SimpleNamespace(reset_every=0, reset_kl_above=0.0, reset_kl_min_gap=20, reset_on_stall=0, stall_min_delta=0.0)
    trig = trigger_from_spec(cfg)
    assert trig.kl_above is None and trig.stall_patience is None and trig.every == 0
    assert _fires(trig, 50, kl={k: 9.0 for k in range(1, 51)}, val={k: 0.0 for k in range(1, 51)}) == []
    cfg.reset_kl_above, cfg.reset_on_stall, cfg.reset_every = 0.5, 2, 10
    trig = trigger_from_spec(cfg)
    assert (trig.kl_above, trig.stall_patience, trig.kl_min_gap, trig.every) == (0.5, 2, 20, 10)


# ---------------------------------------------------------------- the triggers' metric seam


@pytest.mark.unit
def test_step_signals_read_a_real_steps_metrics():
    """The keys `StepSignals.of` reads are the ones a Trainer step writes: on an eval step with
    each KL estimator, every signal is present and is the metrics' own value."""
    from noma_prorl_bench.config import make_config
    from noma_prorl_bench.io.metrics import REWARD_MEAN, REWARD_VAL, StepSignals
    from noma_prorl_bench.training.trainer import Trainer

    for est, key in (("simple", "kl/k1"), ("k3", "kl/k3"), ("full", "kl/full")):
        cfg = dict(outdir="/tmp/unused", batch_size=2, group_size=2, warmstart_steps=1, n_val=4, hidden=16)
        tr = Trainer.from_config(make_config({**cfg, "eval_every": 1, "quiet": True, "kl_estimator": est})).start()
        m = tr.train_step()
        sig = StepSignals.of(m, tr.kl.metric_key)
        assert tr.kl.metric_key == key
        assert (sig.reward_mean, sig.reward_val, sig.kl) == (m[REWARD_MEAN], m[REWARD_VAL], m[key])
        assert None not in (sig.reward_val, sig.kl)
    assert StepSignals.of({REWARD_MEAN: 0.5}, "kl/k3") == StepSignals(0.5, None, None)  # no eval, no KL


@pytest.mark.unit
def test_triggers_spell_no_metric_key():
    """The reset and growth triggers read a step through `StepSignals`: their code (docstrings
    aside) holds none of the keys `StepSignals.of` reads."""
    import ast
    import inspect

    from noma_prorl_bench.config import choices, kl_metric_key
    from noma_prorl_bench.io.metrics import REWARD_MEAN, REWARD_VAL
    from noma_prorl_bench.training import growth_loop, reset_loop, resets

    keys = {REWARD_MEAN, REWARD_VAL, *map(kl_metric_key, choices.KL_ESTIMATOR_CHOICES)}
    for mod in (resets, reset_loop, growth_loop):
        tree = ast.parse(inspect.getsource(mod))
        docs = {
            id(n.body[0].value)
            for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef))
            and n.body
            and isinstance(n.body[0], ast.Expr)
            and isinstance(n.body[0].value, ast.Constant)
        }
        spelled = {
            n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and n.value in keys and id(n) not in docs
        }
        assert not spelled, f"{mod.__name__} spells {spelled}"
