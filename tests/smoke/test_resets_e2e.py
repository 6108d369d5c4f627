"""Resets end to end: triggers fire at the exact steps, reset_to best is bit for bit,
Polyak is exact, presets run and write their events, drift-monitor forwards have their own counter.

Every run uses FAST (tests/conftest.py): 4 prompts x 4 samples, eval every 2 steps, a few steps.
"""

import shutil

import pytest
import torch
from runhelp import read_jsonl, run_cli  # noqa: E402

from noma_prorl_bench.config import make_config
from noma_prorl_bench.io.metrics import MemorySink
from noma_prorl_bench.run import main
from noma_prorl_bench.training.resets import clone_state_dict
from noma_prorl_bench.training.trainer import Trainer

pytestmark = pytest.mark.smoke

VOLATILE = ("time/", "perf/")


_read, _run = read_jsonl, run_cli


def _resets(events):
    return [e for e in events if e["event"] == "ref_reset"]


def _trainer(tmp_path, **overrides):
    values = {
        "outdir": str(tmp_path / "t"),
        "batch_size": 4,
        "group_size": 4,
        "warmstart_steps": 5,
        "n_val": 16,
        "eval_every": 2,
        "quiet": True,
        **overrides,
    }
    events = MemorySink()
    return Trainer.from_config(make_config(values), events_sink=events).start(), events


def _same_params(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


# ---------------------------------------------------------------- A2 ring == A1 cached


def test_ring_matches_cached_end_to_end(tmp_path, fast_flags):
    common = ["--steps", "4", "--reset_every", "2", "--ppo_epochs", "2", "--minibatches", "2"]
    m_ring, e_ring = _run(tmp_path, fast_flags, "--ref_compute", "ring", *common, name="ring")
    m_cached, e_cached = _run(tmp_path, fast_flags, "--ref_compute", "cached", *common, name="cached")
    stable = [{k: v for k, v in r.items() if not k.startswith(VOLATILE)} for r in m_ring]
    assert stable == [{k: v for k, v in r.items() if not k.startswith(VOLATILE)} for r in m_cached]
    drop = ("seconds",)
    assert [{k: v for k, v in e.items() if k not in drop} for e in e_ring] == [
        {k: v for k, v in e.items() if k not in drop} for e in e_cached
    ]


# ---------------------------------------------------------------- triggers at the exact steps


def test_periodic_fires_at_multiples_and_steps_since_counts(tmp_path, fast_flags):
    metrics, events = _run(tmp_path, fast_flags, "--steps", "6", "--reset_every", "2")
    resets = _resets(events)
    assert [e["step"] for e in resets] == [2, 4, 6]
    assert all(e["reason"] == "periodic" and e["reasons"] == ["periodic"] and e["every"] == 2 for e in resets)
    assert [e["step"] for e in events if e["event"] == "opt_reset"] == [2, 4, 6]
    assert [m["reset/steps_since"] for m in metrics] == [1, 0, 1, 0, 1, 0]


def test_kl_spike_fires_after_min_gap(tmp_path, fast_flags):
    # k3 >= 0 and > 0 once the policy moved, so a tiny threshold is crossed every step;
    # the gap of 3 steps (counted from the start, then from each reset) decides: 3, 6.
    metrics, events = _run(
        tmp_path,
        fast_flags,
        "--steps",
        "7",
        "--kl_estimator",
        "k3",
        "--reset_kl_above",
        "1e-12",
        "--reset_kl_min_gap",
        "3",
    )
    resets = _resets(events)
    assert [e["step"] for e in resets] == [3, 6]
    by_step = {m["step"]: m for m in metrics}
    for e in resets:
        assert e["reason"] == "kl_spike" and e["threshold"] == 1e-12 and e["min_gap"] == 3
        assert e["steps_since_reset"] == 3
        assert e["kl"] == by_step[e["step"]]["kl/k3"] > 1e-12


def test_stall_fires_on_expected_eval_steps(tmp_path, fast_flags):
    # evals at 2, 4, 6 and 7 (the last step); the first sets the best, a min_delta of 100
    # means no later one improves, patience 1 fires on each of them.
    metrics, events = _run(tmp_path, fast_flags, "--steps", "7", "--reset_on_stall", "1", "--stall_min_delta", "100")
    resets = _resets(events)
    assert [e["step"] for e in resets] == [4, 6, 7]
    vals = {m["step"]: m["reward/val"] for m in metrics if "reward/val" in m}
    for e in resets:
        assert e["reason"] == "stall" and e["patience"] == 1 and e["min_delta"] == 100
        assert e["val_reward"] == vals[e["step"]] and e["best"] == vals[2]


def test_triggers_combine_into_one_reset(tmp_path, fast_flags):
    _, events = _run(
        tmp_path, fast_flags, "--steps", "4", "--reset_every", "2", "--reset_on_stall", "1", "--stall_min_delta", "100"
    )
    resets = _resets(events)
    assert [(e["step"], e["reason"], e["reasons"]) for e in resets] == [
        (2, "periodic", ["periodic"]),
        (4, "stall", ["stall", "periodic"]),
    ]


# ---------------------------------------------------------------- target and reference rule


def test_reset_to_best_restores_policy_and_reference_bit_for_bit(tmp_path):
    trainer, events = _trainer(tmp_path, steps=6, reset_to="best", reset_on_stall=1, opt_reset="keep")
    scripted = iter([0.9, 0.1, 0.2])  # validations at steps 2, 4, 6: step 2 stays the best
    snaps = {}
    orig = trainer.run_eval

    def run_eval(batch):
        out = orig(batch)
        out["reward/val"] = next(scripted)
        snaps[trainer.step_idx] = clone_state_dict(trainer.policy)  # post-update, pre-reset
        return out

    trainer.run_eval = run_eval
    for _ in range(6):
        trainer.train_step()
        step = trainer.step_idx
        if step in (4, 6):  # stall resets: back to step 2's parameters
            policy, ref = trainer.policy.state_dict(), trainer.ref.model.state_dict()
            assert _same_params(policy, snaps[2]) and _same_params(ref, snaps[2])
            assert not _same_params(snaps[step], snaps[2])
    resets = [e for e in events.records if e["event"] == "ref_reset"]
    assert [(e["step"], e["restored_step"], e["best_val"]) for e in resets] == [(4, 2, 0.9), (6, 2, 0.9)]


def test_polyak_reference_update_is_exact(tmp_path):
    alpha = 0.3
    trainer, events = _trainer(tmp_path, steps=4, reset_every=2, ref_update="polyak", ref_mix_alpha=alpha)
    seen = []
    orig = trainer.resets.reset

    def reset(decision):
        ref0 = clone_state_dict(trainer.ref.model)
        pi = clone_state_dict(trainer.policy)
        rec = orig(decision)
        seen.append(decision.step)
        for k, r in trainer.ref.model.state_dict().items():
            expected = ref0[k].mul(1 - alpha).add(pi[k], alpha=alpha) if r.is_floating_point() else pi[k]
            assert torch.equal(r, expected), k
        return rec

    trainer.resets.reset = reset
    for _ in range(4):
        trainer.train_step()
    assert seen == [2, 4]
    resets = [e for e in events.records if e["event"] == "ref_reset"]
    assert all(e["ref_update"] == "polyak" and e["ref_mix_alpha"] == alpha for e in resets)


def test_hard_opt_reset_implies_step_schedule_and_kl_coef(tmp_path, fast_flags):
    _, events = _run(
        tmp_path,
        fast_flags,
        "--steps",
        "2",
        "--reset_every",
        "2",
        "--opt_reset",
        "hard",
        "--target_kl",
        "0.01",
        "--warmup_steps",
        "4",
        "--lr",
        "0.002",
    )
    (opt,) = [e for e in events if e["event"] == "opt_reset"]
    assert opt["mode"] == "hard" and opt["params_cleared"] > 0 and opt["optim_step_before"] == 8
    assert opt["opt_step_reset"] and opt["lr_schedule_reset"] and opt["kl_coef_reset"]
    assert opt["lr_after"] == pytest.approx(0.002 / 4)  # warmup restarted at its first step
    assert opt["kl_coef_after"] == 0.05


# ---------------------------------------------------------------- presets end to end


@pytest.mark.parametrize(
    "preset,flags,expect",
    [
        (
            "prorl_v1",
            ["--reset_on_stall", "1", "--stall_min_delta", "100"],
            {"reason": "stall", "reset_to": "current", "ref_update": "hard", "mode": "hard", "steps": [4]},
        ),
        (
            "prorl_v2",
            ["--reset_every", "2"],
            {"reason": "periodic", "reset_to": "current", "ref_update": "hard", "mode": "keep", "steps": [2, 4]},
        ),
        (
            "trl_sync",
            ["--reset_every", "2"],
            {"reason": "periodic", "reset_to": "current", "ref_update": "polyak", "mode": "keep", "steps": [2, 4]},
        ),
        (
            "noma_soft",
            ["--reset_every", "2"],
            {"reason": "periodic", "reset_to": "current", "ref_update": "hard", "mode": "soft", "steps": [2, 4]},
        ),
    ],
)
def test_each_preset_runs_and_writes_its_events(tmp_path, fast_flags, preset, flags, expect):
    _, events = _run(tmp_path, fast_flags, "--steps", "4", "--preset", preset, *flags)
    resets, opts = _resets(events), [e for e in events if e["event"] == "opt_reset"]
    assert [e["step"] for e in resets] == expect["steps"] == [e["step"] for e in opts]
    for e in resets:
        assert (e["reason"], e["reset_to"], e["ref_update"]) == (
            expect["reason"],
            expect["reset_to"],
            expect["ref_update"],
        )
    assert all(o["mode"] == expect["mode"] for o in opts)
    if preset == "trl_sync":
        assert all(e["ref_mix_alpha"] == 0.6 for e in resets)
    if preset == "noma_soft":
        assert all(o["soft_factor"] == 0.2 and o["m_scaled"] > 0 and o["v_scaled"] > 0 for o in opts)


def test_explicit_flags_override_the_preset(tmp_path, fast_flags):
    _, events = _run(
        tmp_path,
        fast_flags,
        "--steps",
        "2",
        "--preset",
        "trl_sync",
        "--reset_every",
        "2",
        "--ref_mix_alpha",
        "0.25",
        "--opt_reset",
        "asym",
    )
    (r,) = _resets(events)
    (o,) = [e for e in events if e["event"] == "opt_reset"]
    assert r["ref_update"] == "polyak" and r["ref_mix_alpha"] == 0.25 and o["mode"] == "asym"


# ---------------------------------------------------------------- monitors and counters


@pytest.mark.parametrize(
    "flags,ref_fwd", [(["--ref_compute", "cached"], 1), (["--ref_compute", "naive_epoch"], 4), (["--variant", "B"], 0)]
)
def test_monitor_forwards_have_their_own_counter(tmp_path, fast_flags, flags, ref_fwd):
    metrics, events = _run(tmp_path, fast_flags, "--steps", "3", *flags)
    (setup,) = [e for e in events if e["event"] == "monitor_setup"]
    n_fixed = setup["sequences"]  # fixed batch: n x L tokens
    for m in metrics:
        assert m["count/ref_fwd"] == ref_fwd  # monitors never counted here
        evaluated = "reward/val" in m
        assert evaluated == (m["step"] in (2, 3))
        # 3 forwards on the fixed batch (current, init, previous) + 1 on the rollout batch
        assert m["count/monitor_fwd"] == (4 if evaluated else 0)
        assert ("kl/to_init" in m) == ("kl/to_prev" in m) == ("policy/delta_logp" in m) == evaluated
        if evaluated:
            assert m["kl/to_init"] >= 0 and m["kl/to_prev"] >= 0 and m["policy/delta_logp"] >= 0
            assert m["count/tokens_monitor"] > 3 * n_fixed
        else:
            assert m["count/tokens_monitor"] == 0


def test_recovery_events_follow_resets(tmp_path, fast_flags):
    _, events = _run(tmp_path, fast_flags, "--steps", "6", "--reset_every", "2")
    reset_steps = [e["step"] for e in _resets(events)]
    recoveries = [e for e in events if e["event"] == "recovery"]
    for r in recoveries:
        assert r["reset_step"] in reset_steps and r["step"] > r["reset_step"]
        if r["recovered"]:
            assert r["steps_to_recover"] == r["step"] - r["reset_step"] and r["step"] < 6
    # each reset is closed at most once (recovered, or superseded by the next reset)
    assert len({r["reset_step"] for r in recoveries}) == len(recoveries)


def test_reset_state_round_trips(tmp_path):
    a, _ = _trainer(tmp_path, steps=4, reset_every=3, reset_on_stall=2, reset_to="best")
    for _ in range(4):
        a.train_step()
    b, _ = _trainer(tmp_path, steps=4, reset_every=3, reset_on_stall=2, reset_to="best")
    b.resets.load_state_dict(a.resets.state_dict())
    b.monitors.load_state_dict(a.monitors.state_dict())
    sa, sb = a.resets.state_dict(), b.resets.state_dict()
    assert sa["trigger"] == sb["trigger"] and sa["recovery"] == sb["recovery"]
    assert sa["best"]["step"] == sb["best"]["step"] and _same_params(sa["best"]["params"], sb["best"]["params"])
    ma, mb = a.monitors.state_dict(), b.monitors.state_dict()
    assert torch.equal(ma["tokens"], mb["tokens"]) and _same_params(
        ma["drift"]["init_params"], mb["drift"]["init_params"]
    )


def test_resume_keeps_trigger_best_and_recovery_state(tmp_path, fast_flags):
    """Stall + KL-spike + best target across a checkpoint: the resumed run makes the same
    resets (same reasons, same restored step) and the same metrics as an uninterrupted one."""
    flags = [
        "--steps",
        "9",
        "--eval_every",
        "3",
        "--kl_estimator",
        "k3",
        "--reset_to",
        "best",
        "--reset_on_stall",
        "1",
        "--stall_min_delta",
        "100",
        "--reset_kl_above",
        "1e-12",
        "--reset_kl_min_gap",
        "4",
    ]
    full = tmp_path / "full"
    assert main(["--outdir", str(full), *fast_flags, *flags]) == 0
    part = tmp_path / "part"
    assert main(["--outdir", str(part), *fast_flags, *flags, "--save_every", "5"]) == 0
    ckpts = sorted((part / "checkpoints").iterdir())
    for c in ckpts:
        if c.name != "step_000005":
            shutil.rmtree(c)
    (part / "summary.json").unlink()
    assert main(["--outdir", str(part), "--resume"]) == 0
    drop = ("seconds",)

    def resets(d):
        return [
            {k: v for k, v in e.items() if k not in drop}
            for e in _read(d / "events.jsonl")
            if e["event"] in ("ref_reset", "opt_reset", "recovery")
        ]

    assert resets(part) == resets(full)
    # evals at 3, 6, 9: stall at 6 and 9; KL spike needs 4 steps since the start or the last
    # reset of any reason: 4, then not before 10 (the stall reset at 6 re-starts the gap)
    full_resets = _resets(_read(full / "events.jsonl"))
    assert [(e["step"], e["reason"]) for e in full_resets] == [(4, "kl_spike"), (6, "stall"), (9, "stall")]
    assert full_resets[0]["restored_step"] == 3
    assert all(e["restored_step"] in (3, 6, 9) and e["restored_step"] <= e["step"] for e in full_resets)
    stable = [{k: v for k, v in r.items() if not k.startswith(VOLATILE)} for r in _read(part / "metrics.jsonl")]
    assert stable == [{k: v for k, v in r.items() if not k.startswith(VOLATILE)} for r in _read(full / "metrics.jsonl")]
