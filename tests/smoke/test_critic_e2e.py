"""PPO with a critic (--adv gae) end to end: exact forward counts, exact resume, the reset switch,
toy and tiny HF policies (LoRA included), and the one-line errors of its flags."""

from __future__ import annotations

import json
import os
import shutil

import pytest
import torch

from noma_prorl_bench.config import make_config
from noma_prorl_bench.io import checkpoint
from noma_prorl_bench.run import main
from noma_prorl_bench.training.trainer import Trainer

pytestmark = pytest.mark.smoke

VOLATILE = ("time/", "perf/")
TINY = {
    "outdir": "/tmp/unused",
    "batch_size": 4,
    "group_size": 4,
    "warmstart_steps": 2,
    "n_val": 16,
    "eval_every": 1,
    "quiet": True,
    "hidden": 32,
    "adv": "gae",
}


def _records(d, name="metrics.jsonl"):
    with open(os.path.join(d, name)) as f:
        return [json.loads(line) for line in f]


def _stable(d):
    return [{k: v for k, v in r.items() if not k.startswith(VOLATILE)} for r in _records(d)]


def _run(argv):
    try:
        return main(argv)
    except SystemExit as e:
        return e.code


@pytest.mark.parametrize("micro,per_mb", [(0, 1), (4, 2)])
def test_critic_forwards_are_counted_exactly(tmp_path, fast_flags, micro, per_mb):
    """count/critic_fwd = 1 (values before the update) + E x M x micro-batches; its tokens are
    (1 + E) x the batch's (each epoch visits every row once)."""
    d = str(tmp_path / "run")
    flags = ["--adv", "gae", "--ppo_epochs", "2", "--minibatches", "2", "--micro_batch", str(micro)]
    assert main(["--outdir", d, *fast_flags, *flags]) == 0
    rows = [r for r in _records(d) if r["step"] > 0]
    assert len(rows) == 3
    for r in rows:
        assert r["count/critic_fwd"] == 1 + 2 * 2 * per_mb
        assert r["count/tokens_critic"] == 3 * r["count/tokens_ref"]  # cached reference: one batch forward
        assert r["count/ref_fwd"] == 1 and "critic/vf_loss" in r and "critic/explained_var" in r
    assert json.loads(open(os.path.join(d, "config.json")).read())["derived"]["critic_lr"] == 1e-3  # -1: --lr
    grpo = str(tmp_path / "grpo")
    assert main(["--outdir", grpo, *fast_flags]) == 0
    assert not any(k.startswith(("count/critic", "critic/")) for r in _records(grpo) for k in r)
    assert "critic_lr" not in json.loads(open(os.path.join(grpo, "config.json")).read())["derived"]


SCENARIOS = {
    "follow_soft": ["--reset_every", "4", "--opt_reset", "soft", "--critic_reset", "follow"],
    "reinit_kl_in_reward": ["--reset_every", "4", "--critic_reset", "reinit", "--kl_in", "reward"],
    "follow_cosine_restart": [
        *("--reset_every", "4", "--critic_reset", "follow", "--lr_schedule", "cosine"),
        *("--warmup_steps", "3", "--reset_lr_schedule", "1"),
    ],
}


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_interrupted_gae_run_resumes_to_identical_metrics(tmp_path, fast_flags, name):
    """A run stopped after step 10 with its last checkpoint at step 6 resumes to the metrics and
    events of an uninterrupted run (critic weights and its Adam state in the checkpoint tree)."""
    flags = ["--adv", "gae", *SCENARIOS[name]]
    full = str(tmp_path / "full")
    assert main(["--outdir", full, *fast_flags, *flags, "--steps", "10"]) == 0
    d = str(tmp_path / "killed")
    assert (
        main(["--outdir", d, *fast_flags, *flags, "--steps", "10", "--save_every", "3", "--keep_checkpoints", "4"]) == 0
    )
    ck = checkpoint.read(os.path.join(d, "checkpoints", "step_000006"))
    critic = ck.state["components"]["critic"]
    assert set(critic) == {"model", "optimizer", "scheduler"} and critic["optimizer"]["state"]  # Adam moments saved
    assert any(k.startswith("head.") for k in critic["model"])
    for s in (9, 10):
        shutil.rmtree(os.path.join(d, "checkpoints", f"step_{s:06d}"))
    os.remove(os.path.join(d, "summary.json"))
    assert main(["--outdir", d, "--resume"]) == 0
    assert _stable(d) == _stable(full)
    events = [e for e in _records(d, "events.jsonl") if e["event"] == "critic_reset"]
    assert [e["step"] for e in events] == [4, 8]


def test_critic_reset_switch():
    t = Trainer.from_config(make_config({**TINY, "reset_every": 1, "critic_reset": "reinit"})).start()
    t.train_step()  # reset after step 1: the critic back to the policy, head zero, Adam cleared
    c = t.critic
    assert c is not None and not any(c.optimizer.state.values())
    assert float(c.model.head.weight.detach().abs().sum()) == 0.0
    for (n, p), (_, q) in zip(t.policy.state_dict().items(), c.model.trunk.state_dict().items()):
        assert torch.equal(p, q), n
    t2 = Trainer.from_config(
        make_config({**TINY, "reset_every": 1, "critic_reset": "follow", "opt_reset": "hard"})
    ).start()
    t2.train_step()
    assert t2.critic is not None and not any(t2.critic.optimizer.state.values())  # hard: cleared
    assert float(t2.critic.model.head.weight.abs().sum()) > 0  # weights kept
    t3 = Trainer.from_config(make_config({**TINY, "reset_every": 1})).start()  # keep
    t3.train_step()
    assert t3.critic is not None and all(t3.critic.optimizer.state.values())


def test_critic_lr_follows_the_policy_schedule_and_restarts_with_it():
    """--lr_schedule cosine --warmup_steps 3 with --critic_lr half of --lr: after every update the critic's
    LR is half the policy's (one scheduler step each); a reset with --reset_lr_schedule 1 and
    --critic_reset follow (or reinit) restarts both warmups; keep leaves the critic's schedule running."""
    base = {**TINY, "lr": 1e-3, "critic_lr": 5e-4, "lr_schedule": "cosine", "warmup_steps": 3, "steps": 8}
    for mode in ("follow", "reinit", "keep"):
        t = Trainer.from_config(
            make_config({**base, "reset_every": 3, "reset_lr_schedule": 1, "critic_reset": mode})
        ).start()
        c = t.critic
        assert c is not None and c.optimizer.param_groups[0]["lr"] == pytest.approx(5e-4 / 3)  # warmup step 1
        lrs = []
        for _ in range(4):
            t.train_step()
            lrs.append((t.optimizer.param_groups[0]["lr"], c.optimizer.param_groups[0]["lr"]))
        policy = [p for p, _ in lrs]
        assert policy[2] == pytest.approx(1e-3 / 3)  # the reset after step 3 restarted the policy's warmup
        if mode == "keep":
            assert lrs[2][1] > 1.5 * policy[2] / 2  # not restarted: still past its warmup
        else:
            assert all(cl == pytest.approx(pl / 2) for pl, cl in lrs), (mode, lrs)


def test_critic_is_a_separate_model_and_learns_on_the_toy_policy():
    t = Trainer.from_config(make_config(TINY)).start()
    c = t.critic
    assert c is not None
    policy_ids = {id(p) for p in t.policy.parameters()}
    assert not policy_ids & {id(p) for p in c.model.parameters()}  # no shared trainable tensor
    before = [p.detach().clone() for p in t.policy.parameters()]
    m = t.train_step()
    assert float(c.model.head.weight.abs().sum()) > 0  # the value head moved
    assert any(not torch.equal(a, b) for a, b in zip(before, t.policy.parameters()))
    assert m["critic/skipped"] == 0.0 and m["count/critic_fwd"] == 5


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory):
    pytest.importorskip("transformers")
    from noma_prorl_bench.models.tiny_hf import build_tiny_hf_model

    return build_tiny_hf_model(tmp_path_factory.mktemp("hf") / "llama", "llama", hidden=32, layers=2, heads=4)


HF = {
    "outdir": "/tmp/unused",
    "batch_size": 2,
    "group_size": 4,
    "max_new_tokens": 12,
    "n_val": 4,
    "eval_every": 2,
    "task": "keyword_inclusion",
    "quiet": True,
    "adv": "gae",
}


@pytest.mark.hf
@pytest.mark.parametrize("lora", [False, True])
def test_gae_on_a_tiny_hf_model(tiny_llama, lora):
    lora_flags = {"enable_growth": 1, "grow_on": "stall", "adapter_targets": "q_proj,v_proj", "initial_rank": 2}
    extra = {**lora_flags, "max_rank": 2} if lora else {}  # fixed-rank LoRA, as the smollm2_demo preset
    t = Trainer.from_config(make_config({**HF, "model": f"hf:{tiny_llama}", **extra})).start()
    c = t.critic
    assert c is not None
    with torch.no_grad():
        c.model.head.bias.fill_(1.0)  # a random model earns no reward: V = 1 makes the value loss non-zero
    trainable = c.model.trainable()
    before = [p.detach().clone() for p in trainable]
    assert any(p is c.model.head.weight for p in trainable)  # the value head trains (with LoRA too)
    if lora:
        frozen = {id(p) for p in t.policy.parameters() if not p.requires_grad}
        assert frozen and frozen <= {id(p) for p in c.model.parameters()}  # the base is aliased, not copied
        assert not frozen & {id(p) for p in trainable}
    m = t.train_step()
    assert m["count/critic_fwd"] == 1 + 2 * 2 and m["critic/vf_loss"] > 0
    moved = [not torch.equal(a, b) for a, b in zip(before, trainable)]
    assert moved[-2] and moved[-1]  # the value head (weight, bias)
    assert any(moved[:-2])  # and the trunk's trainable part (all weights, or the LoRA adapters)
    assert torch.isfinite(torch.tensor(m["critic/vf_loss"]))


BAD = [
    (["--gamma", "0.9"], "--gamma"),  # a critic flag without --adv gae
    (["--critic_reset", "reinit"], "--critic_reset"),
    (["--adv", "gae", "--lam", "1.5"], "--lam"),
    (["--adv", "gae", "--gamma", "-0.1"], "--gamma"),
    (["--adv", "gae", "--vf_coef", "0"], "--vf_coef"),
    (["--adv", "gae", "--cliprange_value", "-1"], "--cliprange_value"),
    (["--adv", "gae", "--critic_lr", "0"], "--critic_lr"),
    (["--adv", "gae", "--whiten_adv", "2"], "--whiten_adv"),
    (["--adv", "gae", "--critic_reset", "bogus"], "--critic_reset"),
    (["--adv", "gae", "--engine", "ray_colocated"], "--adv"),
    (["--adv", "gae", "--variant", "B", "--critic_reset", "follow"], "--critic_reset"),
    (["--adv", "gae", "--enable_growth", "1", "--grow_every", "2"], "--adv"),  # growing adapters
]


@pytest.mark.parametrize("extra,flag", BAD, ids=[" ".join(x) for x, _ in BAD])
def test_bad_critic_flags_exit_2_with_one_line(tmp_path, fast_flags, capsys, extra, flag):
    outdir = tmp_path / "run"
    assert _run(["--outdir", str(outdir), *fast_flags, *extra]) == 2
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if "error:" in ln]
    assert len(lines) == 1 and flag in lines[0], err
    assert "Traceback" not in err and not outdir.exists()
