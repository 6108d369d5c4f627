"""PPO with a critic, the pure parts (algorithms/critic.py and the Objective's GAE path): GAE against a
plain Python loop and hand-worked values, masking, whitening, and the clipped value loss's gradient
(torch.autograd.gradcheck in float64, both branches)."""

from __future__ import annotations

import math

import pytest
import torch

from noma_prorl_bench.algorithms import critic as C
from noma_prorl_bench.algorithms import objective as O
from noma_prorl_bench.algorithms.kl_term import KLTerm
from noma_prorl_bench.config import make_config
from noma_prorl_bench.config.specs import RunSpecs

pytestmark = pytest.mark.unit


def loop_gae(r, v, lengths, gamma, lam):
    """GAE written as a plain loop over Python floats, one row at a time (the definition)."""
    adv, ret = [], []
    for row_r, row_v, n in zip(r, v, lengths):
        a = [0.0] * len(row_r)
        last = 0.0
        for t in reversed(range(n)):
            nv = row_v[t + 1] if t + 1 < n else 0.0
            delta = row_r[t] + gamma * nv - row_v[t]
            last = delta + gamma * lam * last
            a[t] = last
        adv.append(a)
        ret.append([a[t] + row_v[t] if t < n else 0.0 for t in range(len(row_r))])
    return adv, ret


R1 = torch.tensor([[0.0, 0.0, 1.0]])
V1 = torch.tensor([[0.5, 0.2, 0.8]])
M1 = torch.ones(1, 3)


def test_gae_hand_worked_values():
    # deltas with gamma 0.9: t0 0 + 0.9*0.2 - 0.5 = -0.32; t1 0 + 0.9*0.8 - 0.2 = 0.52; t2 1 - 0.8 = 0.2
    adv, ret = C.gae(R1, V1, M1, gamma=0.9, lam=0.5)
    # A2 = 0.2; A1 = 0.52 + 0.45 * 0.2 = 0.61; A0 = -0.32 + 0.45 * 0.61 = -0.0455
    assert adv[0].tolist() == pytest.approx([-0.0455, 0.61, 0.2], abs=1e-6)
    assert ret[0].tolist() == pytest.approx([0.4545, 0.81, 1.0], abs=1e-6)


def test_gae_gamma1_lambda1_is_returns_to_go_minus_values():
    adv, ret = C.gae(R1, V1, M1, gamma=1.0, lam=1.0)
    assert adv[0].tolist() == pytest.approx([0.5, 0.8, 0.2], abs=1e-6)  # 1 - V_t
    assert ret[0].tolist() == pytest.approx([1.0, 1.0, 1.0], abs=1e-6)  # the returns-to-go


def test_gae_lambda0_is_the_td_residual():
    adv, _ = C.gae(R1, V1, M1, gamma=0.9, lam=0.0)
    assert adv[0].tolist() == pytest.approx([-0.32, 0.52, 0.2], abs=1e-6)


@pytest.mark.parametrize("gamma,lam", [(1.0, 0.95), (0.9, 0.5), (0.99, 0.0), (0.5, 1.0)])
def test_gae_matches_the_plain_loop_with_ragged_rows(gamma, lam):
    g = torch.Generator().manual_seed(3)
    N, T = 5, 7
    lengths = [7, 1, 4, 6, 2]
    mask = torch.tensor([[1.0 if t < n else 0.0 for t in range(T)] for n in lengths])
    r = torch.randn(N, T, generator=g) * mask
    v = torch.randn(N, T, generator=g)
    adv, ret = C.gae(r, v, mask, gamma, lam)
    want_a, want_r = loop_gae(r.tolist(), v.tolist(), lengths, gamma, lam)
    assert torch.allclose(adv, torch.tensor(want_a), atol=1e-5)
    assert torch.allclose(ret, torch.tensor(want_r), atol=1e-5)


def test_padded_tokens_get_nothing_and_change_nothing():
    mask = torch.tensor([[1.0, 1.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0]])
    rewards = torch.tensor([1.0, 0.5])
    r = C.token_rewards(rewards, mask)
    assert r.tolist() == [[0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.5]]  # on the last response token
    v = torch.tensor([[0.1, 0.2, 0.3, 0.4], [0.5, 0.6, 0.7, 0.8]])
    adv, ret = C.gae(r, v, mask, 1.0, 0.95)
    junk = v.clone()
    junk[0, 2:] = torch.tensor([1e6, float("nan")])
    adv2, ret2 = C.gae(r, junk, mask, 1.0, 0.95)
    assert torch.equal(adv, adv2) and torch.equal(ret, ret2)
    assert adv[0, 2:].tolist() == [0.0, 0.0] and ret[0, 2:].tolist() == [0.0, 0.0]
    assert adv[0, :2].tolist() == pytest.approx([0.1 + 0.95 * 0.8, 1.0 - 0.2])  # V after the end is 0
    # the value loss: padded positions hold 0, and garbage there changes nothing
    vf, _ = C.value_loss(v, v, ret, mask, 0.2)
    vf2, _ = C.value_loss(junk, junk, ret, mask, 0.2)
    assert torch.equal(vf, vf2) and vf[0, 2:].tolist() == [0.0, 0.0]
    w = C.whiten(adv, mask)
    sel = w[mask != 0]
    assert float(sel.mean()) == pytest.approx(0.0, abs=1e-6) and float(sel.std()) == pytest.approx(1.0, abs=1e-5)
    assert w[0, 2:].tolist() == [0.0, 0.0]


def test_token_rewards_add_per_token_terms_and_skip_empty_rows():
    mask = torch.tensor([[1.0, 1.0, 1.0], [0.0, 0.0, 0.0]])
    per = torch.full((2, 3), -0.1)
    r = C.token_rewards(torch.tensor([1.0, 7.0]), mask, per)
    assert r.flatten().tolist() == pytest.approx([-0.1, -0.1, 0.9, 0.0, 0.0, 0.0])


def test_value_loss_hand_worked_and_clip_branch():
    v_old = torch.tensor([[0.0, 0.0]])
    ret = torch.tensor([[1.0, -1.0]])
    v = torch.tensor([[0.5, 0.5]], requires_grad=True)
    loss, m = C.value_loss(v, v_old, ret, torch.ones(1, 2), 0.2)
    # token 0: unclipped (0.5-1)^2 = 0.25, clipped (0.2-1)^2 = 0.64 -> 0.5*0.64 = 0.32 (clipped wins)
    # token 1: unclipped (0.5+1)^2 = 2.25, clipped (0.2+1)^2 = 1.44 -> 0.5*2.25 = 1.125
    assert loss[0].tolist() == pytest.approx([0.32, 1.125])
    assert m["critic/vf_clipfrac"] == pytest.approx(0.5)
    loss.sum().backward()
    assert v.grad is not None
    assert v.grad[0].tolist() == pytest.approx([0.0, 1.5])  # the clipped branch is flat in V
    unclipped, _ = C.value_loss(v.detach(), v_old, ret, torch.ones(1, 2), 0.0)
    assert unclipped[0].tolist() == pytest.approx([0.125, 1.125])


@pytest.mark.parametrize("clip", [0.0, 0.2])
def test_value_loss_gradcheck_float64(clip):
    g = torch.Generator().manual_seed(0)
    N, T = 3, 4
    mask = torch.tensor([[1.0, 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0]], dtype=torch.float64)
    v_old = torch.randn(N, T, generator=g, dtype=torch.float64)
    ret = torch.randn(N, T, generator=g, dtype=torch.float64)
    # V moved up to 0.5 away from V_old: some tokens sit on the clipped branch (|V - V_old| > 0.2)
    v = (v_old + (torch.rand(N, T, generator=g, dtype=torch.float64) - 0.5)).requires_grad_(True)
    if clip:
        _, m = C.value_loss(v.detach(), v_old, ret, mask, clip)
        assert 0 < m["critic/vf_clipfrac"] < 1  # both branches are exercised
    assert torch.autograd.gradcheck(lambda x: C.value_loss(x, v_old, ret, mask, clip)[0], (v,))


def test_gae_rejects_out_of_range():
    with pytest.raises(ValueError):
        C.gae(R1, V1, M1, gamma=1.5, lam=0.5)


def _objective(**flags):
    cfg = make_config({"outdir": "x", "adv": "gae", "batch_size": 1, "group_size": 2, **flags})
    specs = RunSpecs.from_config(cfg)
    return O.Objective(specs.objective, KLTerm.from_spec(specs.objective.kl), 3, specs.critic)


def test_objective_gae_path_and_value_term():
    obj = _objective(whiten_adv=0, gamma=1.0, lam=1.0, vf_coef=0.5, cliprange_value=0.0)
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    values = torch.tensor([[0.5, 0.2, 0.8], [0.3, 9.0, 9.0]])
    adv, ret, m, _ = obj.gae_advantages(torch.tensor([1.0, 0.0]), mask, values, beta=0.0)
    assert adv.flatten().tolist() == pytest.approx([0.5, 0.8, 0.2, -0.3, 0.0, 0.0])
    assert ret.flatten().tolist() == pytest.approx([1.0, 1.0, 1.0, 0.0, 0.0, 0.0])
    assert "critic/explained_var" in m and math.isfinite(m["adv/std"])
    with pytest.raises(ValueError, match="gae"):
        obj.advantages(torch.tensor([1.0, 0.0]), mask, beta=0.0)
    logp = torch.full((2, 3), -1.0)
    kw = dict(anchor=logp, logp_sampler=logp, beta=0.0)
    plain, *_ = obj.token_loss(logp, logp, adv, mask, **kw)
    v = torch.zeros(2, 3)
    with_v, _, _, _, vm = obj.token_loss(logp, logp, adv, mask, **kw, values=v, values_old=v, returns=ret)
    assert torch.allclose(with_v - plain, 0.5 * 0.5 * ret.pow(2) * mask)  # + vf_coef * 0.5 (V - R)^2
    assert vm["critic/vf_loss"] == pytest.approx(float((0.5 * ret.pow(2)).sum() / 4))


def test_objective_gae_whitens_by_default():
    obj = _objective()
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    adv, _, m, _ = obj.gae_advantages(torch.tensor([1.0, 0.0]), mask, torch.zeros(2, 3), beta=0.0)
    sel = adv[mask != 0]
    assert float(sel.mean()) == pytest.approx(0.0, abs=1e-6) and m["adv/std"] == pytest.approx(1.0, abs=1e-5)
    assert adv[1, 2] == 0.0


def test_memory_estimate_counts_the_critic_only_with_gae():
    from noma_prorl_bench.io import memory

    grpo = memory.build_estimate(*_estimate_args({}))
    gae = memory.build_estimate(*_estimate_args({"adv": "gae"}))
    assert "critic" not in grpo.held and "critic" not in grpo.flags  # other runs' records unchanged
    assert gae.held["critic"] == gae.held["weights"] + gae.held["grads_adam"]  # a full copy + grads + Adam
    assert gae.flags["critic"] == "adv" and gae.total > grpo.total


def _estimate_args(flags):
    from noma_prorl_bench.io.memory_shape import model_shape, prompt_response_tokens

    sp = RunSpecs.from_config(make_config({"outdir": "x", **flags}))
    P, T = prompt_response_tokens(sp)
    return sp, model_shape(sp, P + T), P, T


def test_mc_returns_are_discounted_rewards_to_go_without_values():
    r = torch.tensor([[0.0, 0.0, 1.0], [2.0, 0.0, 5.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])  # row 1's last reward is under the mask
    assert C.mc_returns(r, mask, 0.5).tolist() == [[0.25, 0.5, 1.0], [2.0, 0.0, 0.0]]


def test_group_loo_mean_averages_the_other_samples():
    assert C.group_loo_mean(torch.tensor([1.0, 2.0, 6.0, 0.0, 4.0, 8.0]), 3).tolist() == [4.0, 3.5, 1.5, 6.0, 4.0, 2.0]
    assert C.group_loo_mean(torch.tensor([1.0, 2.0]), 1) is None


def test_ev_against_mc_returns_hand_worked():
    # gamma 0.5, lambda 0.95: the GAE returns bootstrap on V, the MC returns do not.
    # r_tok: row 0 [0, 0, 1], row 1 [0, 0] (reward 0 on its 2nd and last token)
    # G = [0.25, 0.5, 1 | 0, 0]; V = [0.25, 0.5, 0.5 | 0, 0.5]; G - V = [0, 0, 0.5 | 0, -0.5]
    # Var(G) = 0.7 / 4 = 0.175, Var(G - V) = 0.5 / 4 = 0.125 -> ev_mc = 1 - 0.125 / 0.175 = 2/7
    # group baseline: row 0's mate has total return 0, row 1's 0.25 -> b = [0, 0, 0 | 0.25, 0.25]
    # G - b = [0.25, 0.5, 1 | -0.25, -0.25], Var = 1.125 / 4 = 0.28125 -> 1 - 0.28125 / 0.175 = -17/28
    obj = _objective(whiten_adv=0, gamma=0.5, lam=0.95)
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    values = torch.tensor([[0.25, 0.5, 0.5], [0.0, 0.5, 7.0]])
    _, ret, m, _ = obj.gae_advantages(torch.tensor([1.0, 0.0]), mask, values, beta=0.0)
    assert m["critic/ev_mc"] == pytest.approx(2 / 7, abs=1e-12)
    assert m["critic/ev_mc_group_mean"] == pytest.approx(-17 / 28, abs=1e-12)
    assert m["critic/explained_var"] == pytest.approx(C.explained_variance(values, ret, mask))
    assert m["critic/explained_var"] != pytest.approx(m["critic/ev_mc"])  # the bootstrapped target differs
