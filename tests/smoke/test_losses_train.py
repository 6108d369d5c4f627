"""Every loss, advantage, reduction, KL and DAPO flag trains the default task end to end (CLI, 3 steps).

Each test runs `run.main` in-process with the FAST flags (B=4, G=4, E=2, M=2: N=16, 4 train
forwards per step) and reads metrics.jsonl; bad flag combinations must exit 2 and write nothing.
"""

import json
import math
import os

import pytest

import noma_prorl_bench.algorithms.losses as loss_lib
from noma_prorl_bench.run import main

pytestmark = pytest.mark.smoke

N, EM = 16, 4  # FAST: 4 prompts x 4 samples; 2 epochs x 2 minibatches


def _train(tmp_path, fast_flags, *flags, name="run"):
    out = tmp_path / name
    assert main(["--outdir", str(out), *fast_flags, *flags]) == 0
    with open(out / "metrics.jsonl") as f:
        recs = [json.loads(line) for line in f]
    assert [r["step"] for r in recs] == [0, 1, 2, 3]  # 0: the evaluation before RL
    return recs[1:]


def _assert_trained(recs):
    for r in recs:
        for k in ("loss/total", "loss/pg", "loss/kl", "kl/k1", "kl/k2", "kl/k3", "policy/entropy"):
            assert r[k] is not None and math.isfinite(r[k]), k
        assert r["optim/grad_norm"] > 0
    assert recs[-1]["kl/k3"] > 0  # the policy moved away from pi_ref = the initial policy


@pytest.mark.parametrize("loss", ["grpo_clip", "dapo", "cispo", "gspo", "reinforce", "noclip"])
def test_every_loss_trains(tmp_path, fast_flags, loss):
    recs = _train(tmp_path, fast_flags, "--loss", loss)
    _assert_trained(recs)
    assert all(0.0 <= r["clip/frac"] <= 1.0 for r in recs)
    if loss in ("reinforce", "noclip"):  # no clip: nothing clipped, none recorded
        assert all(r["clip/frac"] == 0.0 for r in recs)
        with open(tmp_path / "run" / "config.json") as f:
            derived = json.load(f)["derived"]
        assert (derived["eps_low"], derived["eps_high"]) == (None, None)


@pytest.mark.parametrize("adv", ["grpo", "dr_grpo", "rloo", "reinforce_pp", "maxrl", "rft"])
def test_every_advantage_trains(tmp_path, fast_flags, adv):
    recs = _train(tmp_path, fast_flags, "--adv", adv)
    _assert_trained(recs)
    if adv not in ("reinforce_pp", "rft"):  # group baselines: advantages sum to 0 per group
        assert all(abs(r["adv/mean"]) < 1e-5 for r in recs)
    if adv == "rft":  # no baseline, no normaliser: the rewards themselves
        assert all(r["adv/mean"] == pytest.approx(r["reward/mean"], abs=1e-6) for r in recs)


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"])
def test_every_reduction_trains_and_dr_grpo_divides_by_t_max(tmp_path, fast_flags, monkeypatch, agg):
    seen = []
    real = loss_lib.aggregate

    def spy(loss, mask, agg_name, norm_const=None):
        seen.append((agg_name, norm_const))
        return real(loss, mask, agg_name, norm_const=norm_const)

    monkeypatch.setattr(loss_lib, "aggregate", spy)
    _assert_trained(_train(tmp_path, fast_flags, "--loss_agg", agg, "--max_new_tokens", "9"))
    assert {a for a, _ in seen} == {agg} and {c for _, c in seen} == {9}  # norm_const = T_max


def test_clip_flags_reach_the_loss(tmp_path, fast_flags, monkeypatch):
    seen = []
    real = loss_lib.LOSSES["dapo"]

    def spy(*args, **kw):
        seen.append(kw)
        return real(*args, **kw)

    monkeypatch.setitem(loss_lib.LOSSES, "dapo", spy)
    _train(tmp_path, fast_flags, "--loss", "dapo", "--eps_low", "0.2", "--eps_high", "0.28", "--dual_clip_c", "3")
    assert len(seen) == 3 * EM
    assert all(
        kw["eps_low"] == 0.2 and kw["eps_high"] == 0.28 and kw["dual_clip_c"] == 3.0 and kw["tis_weight"] is None
        for kw in seen
    )


@pytest.mark.parametrize("form", ["token", "sequence"])
def test_kl_in_reward_shapes_rewards_not_the_loss(tmp_path, fast_flags, form):
    recs = _train(tmp_path, fast_flags, "--kl_in", "reward", "--kl_estimator", "k3", "--kl_reward_form", form)
    _assert_trained(recs)
    assert recs[0]["reward/kl_penalty_mean"] < 1e-5  # step 1: pi_old = pi_ref
    assert recs[-1]["reward/kl_penalty_mean"] > 0  # the policy moved: penalty bites
    for r in recs:
        assert r["loss/kl"] == 0.0  # no KL term in the loss
        # reward/mean stays the raw task reward; the advantages saw reward - beta * sum_t k3
        assert r["reward/shaped_mean"] == pytest.approx(r["reward/mean"] - r["reward/kl_penalty_mean"], abs=1e-6)


@pytest.mark.parametrize(
    "flags,ref_fwd,train_fwd",
    [
        (["--ref_compute", "cached"], 1, EM),
        (["--ref_compute", "naive_epoch"], EM, EM),  # the minibatch's one forward gives logits too
        (["--ref_compute", "ring"], 1, EM),
        (["--variant", "B"], 0, EM + 1),  # one no_grad forward of the pre-update policy
    ],
)
def test_full_kl_is_logged_and_in_the_loss(tmp_path, fast_flags, flags, ref_fwd, train_fwd):
    recs = _train(tmp_path, fast_flags, "--kl_estimator", "full", *flags)
    _assert_trained(recs)
    for r in recs:
        assert r["kl/full"] >= 0
        assert r["loss/kl"] == pytest.approx(r["kl/full"], rel=1e-5, abs=1e-8)  # token-mean of the exact KL
        assert r["count/ref_fwd"] == ref_fwd and r["count/policy_fwd_train"] == train_fwd
    assert recs[-1]["kl/full"] > 0


def test_tis_weights_logged_and_one_extra_forward(tmp_path, fast_flags):
    base = _train(tmp_path, fast_flags, name="base")
    tis = _train(tmp_path, fast_flags, "--tis_cap", "2", name="tis")
    _assert_trained(tis)
    for r in tis:
        assert r["tis/weight_mean"] == pytest.approx(1.0, abs=1e-4)  # sampler and learner share weights
        assert r["count/policy_fwd_train"] == EM + 1
    # step 1 samples the same batch in both runs: the extra forward costs exactly N*L tokens
    assert tis[0]["count/tokens_policy"] - base[0]["count/tokens_policy"] == tis[0]["count/tokens_ref"]


def test_dynamic_sampling_drops_flat_groups_on_parity(tmp_path, fast_flags):
    recs = _train(tmp_path, fast_flags, "--task", "parity", "--dynamic_sampling", "1")
    assert sum(r["dapo/dropped_groups"] for r in recs) > 0
    for r in recs:
        rounds = 1 + r["dapo/extra_rounds"]
        assert 0 <= r["dapo/extra_rounds"] <= 3
        assert rounds <= r["count/policy_fwd_rollout"] <= 2 * rounds  # parity: T = 2 (bit + EOS)
        # the batch keeps its shape; only filler groups (when 3 extra rounds were not enough) are flat
        assert r["count/policy_fwd_train"] == EM and r["count/tokens_ref"] % N == 0
        assert r["reward/frac_zero_std"] * 4 == r["dapo/filler_groups"]
        assert r["dapo/filler_groups"] == 0 or r["dapo/extra_rounds"] == 3


def test_overlong_filter_masks_truncated_rows(tmp_path, fast_flags):
    recs = _train(tmp_path, fast_flags, "--overlong", "filter")
    assert any(r["dapo/filtered_rows"] > 0 for r in recs)
    for r in recs:
        assert r["dapo/filtered_rows"] == round(r["response/truncated_frac"] * N)
        assert math.isfinite(r["loss/total"])


def test_overlong_shape_penalises_long_responses(tmp_path, fast_flags):
    recs = _train(tmp_path, fast_flags, "--overlong", "shape")
    _assert_trained(recs)
    for r in recs:
        assert -1.0 <= r["dapo/overlong_penalty_mean"] <= 0.0
        assert r["reward/shaped_mean"] == pytest.approx(r["reward/mean"] + r["dapo/overlong_penalty_mean"], abs=1e-6)
    assert min(r["dapo/overlong_penalty_mean"] for r in recs) < 0


def test_target_kl_adapts_beta_from_the_chosen_estimator(tmp_path, fast_flags):
    recs = _train(tmp_path, fast_flags, "--target_kl", "0.001", "--kl_horizon", "10", "--kl_estimator", "k3")
    assert recs[0]["kl/beta"] == 0.05  # the value used in step 1
    for prev, cur in zip(recs, recs[1:]):
        # Ziegler et al. 2019: n = the N = 16 samples of the step, horizon in samples
        err = min(max(prev["kl/k3"] / 0.001 - 1.0, -0.2), 0.2)
        assert cur["kl/beta"] == pytest.approx(prev["kl/beta"] * (1 + err * N / 10))
    assert recs[-1]["kl/beta"] > 0.05  # KL above target: beta grew


@pytest.mark.parametrize(
    "flags,flag",
    [
        (["--kl_in", "reward", "--variant", "B"], "--kl_in"),
        (["--kl_in", "reward", "--ref_compute", "naive_epoch"], "--kl_in"),
        (["--kl_in", "reward", "--kl_estimator", "full"], "--kl_estimator"),
        (["--loss", "cispo", "--dual_clip_c", "3"], "--dual_clip_c"),
        (["--loss", "reinforce", "--eps_high", "0.28"], "--eps_high"),
        (["--loss", "noclip", "--clip_eps", "0.2"], "--clip_eps"),
        (["--loss", "noclip", "--dual_clip_c", "3"], "--dual_clip_c"),
        (["--kl_estimator", "k3", "--k2_mode", "ref_over_old"], "--k2_mode"),
        (["--tis_cap", "0.5"], "--tis_cap"),
        (["--dual_clip_c", "1"], "--dual_clip_c"),
        (["--dynamic_sampling", "2"], "--dynamic_sampling"),
        (["--group_size", "1", "--adv", "dr_grpo"], "--group_size"),
    ],
)
def test_bad_combinations_exit_2_and_write_nothing(tmp_path, fast_flags, capsys, flags, flag):
    out = tmp_path / "bad"
    with pytest.raises(SystemExit) as e:
        main(["--outdir", str(out), *fast_flags, *flags])
    assert e.value.code == 2
    assert f"argument {flag}:" in capsys.readouterr().err
    assert not os.path.exists(out)


def test_k3_ratio_trains_and_logs_its_value(tmp_path, fast_flags):
    recs = _train(tmp_path, fast_flags, "--kl_estimator", "k3_ratio")
    _assert_trained(recs)
    for r in recs:
        assert r["kl/k3_ratio"] >= 0 and r["loss/kl"] == pytest.approx(r["kl/k3_ratio"], rel=1e-5, abs=1e-8)


def test_gspo_config_records_the_clip_actually_used(tmp_path, fast_flags):
    _train(tmp_path, fast_flags, "--loss", "gspo")
    with open(tmp_path / "run" / "config.json") as f:
        derived = json.load(f)["derived"]
    assert (derived["eps_low"], derived["eps_high"], derived["loss_agg"]) == (3e-4, 4e-4, "seq-mean-token-mean")
