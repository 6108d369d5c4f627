"""Moving KL anchors, by hand: the moving reference (--ref_update ema), Elastic Reset's EMA and its
two assignments (--reset_to elastic), the one mixing rule they share, and --kl_clip's values,
gradients and clamp fraction."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from noma_prorl_bench.algorithms import kl as kl_lib
from noma_prorl_bench.algorithms.kl_term import KLTerm
from noma_prorl_bench.config.errors import ConfigError
from noma_prorl_bench.config.specs import KLSpec, ResetSpec
from noma_prorl_bench.io.metrics import StageTimer, StepSignals
from noma_prorl_bench.models.averaging import mix_states_
from noma_prorl_bench.rollout.reference import ReferenceHolder
from noma_prorl_bench.training.elastic import ElasticReset
from noma_prorl_bench.training.optim_state import OptimSide
from noma_prorl_bench.training.reset_loop import ResetManager

pytestmark = pytest.mark.unit
torch.set_num_threads(1)


def _two(w: float, b: float) -> nn.Linear:
    """A 2-parameter model: weight [[w]] and bias [b]."""
    m = nn.Linear(1, 1)
    with torch.no_grad():
        m.weight.fill_(w)
        m.bias.fill_(b)
    return m


def _wb(m: nn.Module | dict) -> tuple[float, float]:
    sd = m.state_dict() if isinstance(m, nn.Module) else m
    return float(sd["weight"]), float(sd["bias"])


# ---------------------------------------------------------------- the moving reference


def test_ema_reference_update_by_hand():
    """ref <- tau ref + (1 - tau) pi on both parameters (values exact in binary)."""
    ref = ReferenceHolder(_two(1.0, 2.0), "cached")
    rec = ref.reset_to(_two(3.0, -2.0), "ema", 0.75)
    assert rec == {"ref_update": "ema", "ref_ema_tau": 0.75}
    assert _wb(ref.model) == (0.75 * 1.0 + 0.25 * 3.0, 0.75 * 2.0 + 0.25 * -2.0) == (1.5, 1.0)
    ref.reset_to(_two(3.0, -2.0), "ema", 0.75)  # a second update moves a quarter of the rest of the way
    assert _wb(ref.model) == (1.875, 0.25)


def test_ema_default_tau_is_the_same_arithmetic_as_the_polyak_mix():
    """tau 0.95 (the default) is dst.mul_(tau).add_(pi, alpha=1 - tau), float32 per element."""
    pi = _two(3.0, -2.0)
    ref = ReferenceHolder(_two(1.0, 2.0), "cached")
    ref.reset_to(pi, "ema", 0.95)
    want = torch.tensor([1.0, 2.0]).mul_(0.95).add_(torch.tensor([3.0, -2.0]), alpha=1.0 - 0.95)
    assert torch.equal(torch.tensor(_wb(ref.model)), want)
    assert ResetSpec().ref_ema_tau == 0.95 and ResetSpec().ref_ema_every == 10


def test_polyak_reset_unchanged_by_the_shared_rule():
    ref = ReferenceHolder(_two(1.0, 2.0), "cached")
    assert ref.reset_to(_two(3.0, -2.0), "polyak", 0.25) == {"ref_update": "polyak", "ref_mix_alpha": 0.25}
    assert _wb(ref.model) == (1.5, 1.0)  # 0.25 pi + 0.75 ref


def test_tied_weights_are_mixed_once():
    w = torch.tensor([1.0])
    dst = {"embed": w, "head": w}  # one tensor under two names
    n = mix_states_(dst, {"embed": torch.tensor([3.0]), "head": torch.tensor([3.0])}, 0.5, 0.5)
    assert n == 1 and float(w) == 2.0  # mixed twice it would be 2.5


def test_mix_skips_shared_and_copies_integer_buffers():
    dst = {"a": torch.tensor([1.0]), "base": torch.tensor([7.0]), "n": torch.tensor([1])}
    mix_states_(
        dst, {"a": torch.tensor([3.0]), "base": torch.tensor([0.0]), "n": torch.tensor([5])}, 0.5, 0.5, {"base"}
    )
    assert float(dst["a"]) == 2.0 and float(dst["base"]) == 7.0 and int(dst["n"]) == 5
    with pytest.raises(KeyError):
        mix_states_(dst, {"a": torch.tensor([3.0])}, 0.5, 0.5)


def _manager(spec: ResetSpec, policy: nn.Module, ref, timer=None) -> tuple[ResetManager, list]:
    events: list = []
    opt = torch.optim.Adam(policy.parameters(), lr=0.1)
    side = OptimSide(opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0), None)
    return ResetManager(spec, policy, ref, side, events.append, timer=timer), events


def test_manager_moves_the_reference_every_n_steps_and_times_it():
    policy = _two(1.0, 2.0)
    ref = ReferenceHolder(policy, "cached")
    timer = StageTimer()
    mgr, events = _manager(ResetSpec(ref_update="ema", ref_ema_tau=0.5, ref_ema_every=3), policy, ref, timer)
    seen = []
    for step in range(1, 8):
        with torch.no_grad():
            policy.weight.fill_(float(step))  # the policy after step `step`
        mgr.after_step(step, StepSignals(reward_mean=0.0))
        seen.append(_wb(ref.model)[0])
    # updates after steps 3 and 6 only: 0.5 * 1 + 0.5 * 3 = 2, then 0.5 * 2 + 0.5 * 6 = 4
    assert seen == [1.0, 1.0, 2.0, 2.0, 2.0, 4.0, 4.0]
    assert events == [] and mgr.n_resets == 0  # a moving reference is not a reset
    assert timer.pop()["time/ref"] > 0


# ---------------------------------------------------------------- Elastic Reset


def test_elastic_ema_and_its_two_assignments_by_hand():
    policy = _two(1.0, 0.0)
    el = ElasticReset(policy, 0.5)
    w, b = policy.weight, policy.bias
    for wv, bv in ((3.0, 2.0), (5.0, 4.0)):
        with torch.no_grad():
            policy.weight.fill_(wv)
            policy.bias.fill_(bv)
        el.update(policy)
    assert _wb(el.ema) == (3.5, 2.5)  # 0.5 (0.5 * 1 + 0.5 * 3) + 0.5 * 5; 0.5 (0.5 * 0 + 0.5 * 2) + 0.5 * 4
    rec = el.reset(policy)
    assert rec == {"policy_from": "ema", "ema_from": "init", "elastic_decay": 0.5}
    assert _wb(policy) == (3.5, 2.5)  # policy <- EMA
    assert _wb(el.ema) == (1.0, 0.0) == _wb(el.init)  # EMA <- initial weights
    assert policy.weight is w and policy.bias is b  # in place: the optimizer still holds them
    el.update(policy)
    assert _wb(el.ema) == (2.25, 1.25)  # the EMA restarts from the initial weights


def test_elastic_reset_in_the_manager_keeps_the_reference_and_adam():
    policy = _two(1.0, 0.0)
    ref = ReferenceHolder(policy, "cached")
    mgr, events = _manager(ResetSpec(reset_every=2, reset_to="elastic", elastic_decay=0.5), policy, ref)
    opt = mgr.optim.optimizer
    policy.weight.grad = torch.ones_like(policy.weight)
    policy.bias.grad = torch.ones_like(policy.bias)
    opt.step()  # Adam state exists
    m_before = opt.state[policy.weight]["exp_avg"].clone()
    for step, wv in ((1, 3.0), (2, 5.0)):
        with torch.no_grad():
            policy.weight.fill_(wv)
        mgr.after_step(step, StepSignals(reward_mean=0.0))
    assert _wb(policy)[0] == 3.5 and _wb(mgr.elastic.ema)[0] == 1.0
    assert _wb(ref.model) == (1.0, 0.0)  # the KL reference stays the initial policy
    assert torch.equal(opt.state[policy.weight]["exp_avg"], m_before)  # opt_reset keep: Adam untouched
    ref_ev = next(e for e in events if e["event"] == "ref_reset")
    assert ref_ev["reset_to"] == "elastic" and ref_ev["ref_update"] is None and ref_ev["policy_from"] == "ema"
    assert len(mgr.snapshots()) == 3  # best (None), init, ema: growth migrates them


def test_elastic_state_roundtrip_continues_the_same_ema():
    a, b = _two(1.0, 0.0), _two(1.0, 0.0)
    ea, eb = ElasticReset(a, 0.9), ElasticReset(b, 0.9)
    with torch.no_grad():
        a.weight.fill_(2.0)
    ea.update(a)
    eb.load_state_dict(ea.state_dict())
    with torch.no_grad():
        a.weight.fill_(4.0)
        b.weight.fill_(4.0)
    ea.update(a)
    eb.update(b)
    assert torch.equal(ea.ema["weight"], eb.ema["weight"]) and torch.equal(ea.init["weight"], eb.init["weight"])
    assert ea.ema["weight"] is not ea.init["weight"]


def test_elastic_flags_refused_where_they_make_no_sense():
    assert ResetSpec().elastic_decay == 0.995
    for kw, flag in (
        ({"reset_to": "elastic"}, "reset_to"),  # no trigger: never resets
        ({"reset_to": "elastic", "reset_every": 5, "ref_update": "polyak"}, "ref_update"),
        ({"reset_to": "elastic", "reset_every": 5, "elastic_decay": 1.0}, "elastic_decay"),
        ({"elastic_decay": 0.9}, "elastic_decay"),  # without --reset_to elastic
        ({"ref_update": "ema", "reset_every": 5}, "reset_every"),
        ({"ref_update": "ema", "ref_ema_tau": 0.0}, "ref_ema_tau"),
        ({"ref_ema_every": 3}, "ref_ema_every"),
    ):
        with pytest.raises(ConfigError) as e:
            ResetSpec(**kw)
        assert e.value.flag == flag


# ---------------------------------------------------------------- --kl_clip


def test_clamp_values_and_zero_gradient_where_clamped():
    logp = torch.zeros(1, 3, requires_grad=True)
    anchor = torch.tensor([[-3.0, 0.5, 2.5]])  # log r = anchor - logp: the first and last are clamped to -1, +1
    kl = kl_lib.kl_terms(logp, anchor, clamp=1.0)
    assert kl["k1"].tolist() == [[1.0, -0.5, -1.0]]
    assert kl["k2"].tolist() == [[0.5, 0.125, 0.5]]
    want_k3 = [math.exp(-1) - 1 + 1, math.exp(0.5) - 1.5, math.exp(1) - 2]
    assert torch.allclose(kl["k3"], torch.tensor([want_k3]), atol=1e-6)
    for name, mid in (("k1", 1.0), ("k2", -0.5), ("k3", 1 - math.exp(0.5))):
        (g,) = torch.autograd.grad(kl[name].sum(), logp, retain_graph=True)
        assert g[0, 0] == 0 and g[0, 2] == 0, name  # clamped: no gradient
        assert abs(float(g[0, 1]) - mid) < 1e-6, name
    assert kl_lib.clipped(logp, anchor, 1.0).tolist() == [[1.0, 0.0, 1.0]]


def test_k3_ratio_and_full_clamp_only_the_log_ratio():
    logp = torch.zeros(1, 2, requires_grad=True)
    anchor = torch.tensor([[-3.0, 0.5]])
    val = kl_lib.k3_ratio(logp, anchor, logp.detach(), clamp=1.0)
    (g,) = torch.autograd.grad(val.sum(), logp)
    assert abs(float(g[0, 0]) - math.exp(-1)) < 1e-6  # rho's gradient: k3(-1) * d rho / d logp, rho = 1
    # full: p = (0.5, 0.5), q = (0.9, 0.1): log p - log q = (log 5/9, log 5) -> (log 5/9, 1) under clamp 1
    lp, lq = torch.zeros(2), torch.log(torch.tensor([0.9, 0.1]))
    got = float(kl_lib.kl_full(lp, lq, clamp=1.0))
    assert abs(got - (0.5 * math.log(5 / 9) + 0.5 * 1.0)) < 1e-6
    assert float(kl_lib.kl_full(lp, lq, clamp=100.0)) == float(kl_lib.kl_full(lp, lq))


def test_kl_clip_off_is_bit_identical_and_logs_nothing():
    torch.manual_seed(0)
    logp, anchor, old = torch.randn(4, 6), torch.randn(4, 6) * 3, torch.randn(4, 6)
    off = KLTerm.from_spec(KLSpec(kl_estimator="k3_ratio"))
    assert off.clip is None and KLSpec().kl_clip == 0.0
    a = off.estimates(logp, anchor, old)
    b = {**kl_lib.kl_terms(logp, anchor), "k3_ratio": kl_lib.k3_ratio(logp, anchor, old)}
    assert set(a) == set(b) and all(torch.equal(a[k], b[k]) for k in a)
    on = KLTerm.from_spec(KLSpec(kl_estimator="k3_ratio", kl_clip=0.5)).estimates(logp, anchor, old)
    frac = float(on["clip_frac"].mean())
    assert frac == float(((logp - anchor).abs() > 0.5).float().mean()) and 0 < frac < 1
    assert float(on["k1"].abs().max()) <= 0.5


def test_kl_clip_reaches_the_reward_and_ref_over_old():
    logp_old, logp_ref = torch.zeros(1, 2), torch.tensor([[4.0, 0.25]])
    term = KLTerm(estimator="k1", placement="reward", clip=1.0)
    assert term.reward_kl(logp_old, logp_ref).tolist() == [[-1.0, -0.25]]  # k1 = -clamp(log r), log r = 4 -> 1
    blog = KLTerm(estimator="k2", k2_mode="ref_over_old", clip=2.0)
    assert blog.chosen({}, logp_old, torch.tensor([[12.0, 0.0]])).tolist() == [[2.0, 0.0]]  # 0.5 * min(10, 2)^2


def test_kl_clip_bad_values():
    for v in (-1.0, float("inf"), float("nan")):
        with pytest.raises(ConfigError) as e:
            KLSpec(kl_clip=v)
        assert e.value.flag == "kl_clip"
