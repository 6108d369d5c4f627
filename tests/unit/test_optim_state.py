"""Unit tests for optim_state.py: moment/step/schedule/KL-coef transforms on real torch Adam(W).

Every comparison with an uninterrupted or freshly built optimizer is bit for bit
(torch.equal); the hand-computed Adam step after a step-count reset is to float tolerance.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from noma_prorl_bench.training.optim_state import (
    WarmupSchedule,
    apply_moment_reset,
    apply_reset_semantics,
    make_lr_scheduler,
    optimizer_step_count,
    reset_grad_scaler,
    reset_kl_coef,
    reset_step_count,
    restart_schedule,
)

torch.set_num_threads(1)

OPTIMIZERS = {
    "adam": lambda ps: torch.optim.Adam(ps, lr=0.01, betas=(0.9, 0.99)),
    "adamw": lambda ps: torch.optim.AdamW(ps, lr=0.01, betas=(0.8, 0.95), weight_decay=0.1),
    "adam_amsgrad": lambda ps: torch.optim.Adam(ps, lr=0.01, amsgrad=True),
}


def _params(seed: int = 0) -> list[torch.nn.Parameter]:
    g = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(3, 4, generator=g)), torch.nn.Parameter(torch.randn(5, generator=g))]


def _grads(n_steps: int, seed: int = 1) -> list[list[torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    return [[torch.randn(3, 4, generator=g), torch.randn(5, generator=g)] for _ in range(n_steps)]


def _step(opt: torch.optim.Optimizer, params, grads) -> None:
    for p, gr in zip(params, grads):
        p.grad = gr.clone()
    opt.step()


def _clone(params) -> list[torch.nn.Parameter]:
    return [torch.nn.Parameter(p.detach().clone()) for p in params]


@pytest.mark.unit
@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_keep_next_update_equals_uninterrupted_run(name):
    grads = _grads(4)
    pa, pb = _params(), _params()
    oa, ob = OPTIMIZERS[name](pa), OPTIMIZERS[name](pb)
    for k in range(3):
        _step(oa, pa, grads[k])
        _step(ob, pb, grads[k])
    rec = apply_moment_reset(oa, "keep")
    assert rec == {"opt_reset": "keep", "m_scaled": 0, "v_scaled": 0, "params_cleared": 0}
    _step(oa, pa, grads[3])
    _step(ob, pb, grads[3])
    for a, b in zip(pa, pb):
        assert torch.equal(a, b)
    for a, b in zip(pa, pb):
        for key in oa.state[a]:
            assert torch.equal(oa.state[a][key], ob.state[b][key])


@pytest.mark.unit
@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_hard_next_update_equals_fresh_optimizer(name):
    grads = _grads(4)
    pa = _params()
    oa = OPTIMIZERS[name](pa)
    for k in range(3):
        _step(oa, pa, grads[k])
    pf = _clone(pa)  # same weights, brand-new optimizer
    of = OPTIMIZERS[name](pf)
    rec = apply_moment_reset(oa, "hard")
    assert rec["params_cleared"] == 2
    assert all(len(s) == 0 for s in oa.state.values())
    assert optimizer_step_count(oa) is None
    _step(oa, pa, grads[3])
    _step(of, pf, grads[3])
    for a, f in zip(pa, pf):
        assert torch.equal(a, f)
        assert set(oa.state[a]) == set(of.state[f])
        for key in oa.state[a]:
            assert torch.equal(oa.state[a][key], of.state[f][key])
    assert optimizer_step_count(oa) == 1


@pytest.mark.unit
@pytest.mark.parametrize("name", list(OPTIMIZERS))
@pytest.mark.parametrize("mode", ["soft", "asym"])
def test_soft_and_asym_scale_moments_exactly(name, mode):
    params = _params()
    opt = OPTIMIZERS[name](params)
    for gr in _grads(3):
        _step(opt, params, gr)
    before = {id(p): {k: v.clone() for k, v in opt.state[p].items()} for p in params}
    f = 0.2
    rec = apply_moment_reset(opt, mode, f)
    amsgrad = name == "adam_amsgrad"
    assert rec["m_scaled"] == 2
    assert rec["v_scaled"] == (0 if mode == "asym" else (4 if amsgrad else 2))
    for p in params:
        st, b = opt.state[p], before[id(p)]
        assert torch.equal(st["exp_avg"], b["exp_avg"] * f)
        v_expected = b["exp_avg_sq"] * f if mode == "soft" else b["exp_avg_sq"]
        assert torch.equal(st["exp_avg_sq"], v_expected)
        if amsgrad:
            m_expected = b["max_exp_avg_sq"] * f if mode == "soft" else b["max_exp_avg_sq"]
            assert torch.equal(st["max_exp_avg_sq"], m_expected)
        assert torch.equal(st["step"], b["step"])  # step untouched
        assert float(st["step"]) == 3.0


@pytest.mark.unit
def test_soft_factor_out_of_range_and_unknown_mode_raise():
    opt = OPTIMIZERS["adam"](_params())
    with pytest.raises(ValueError):
        apply_moment_reset(opt, "soft", 1.5)
    with pytest.raises(ValueError):
        apply_moment_reset(opt, "wipe", 0.5)


@pytest.mark.unit
def test_reset_step_count_tensor_and_float():
    params = _params()
    opt = OPTIMIZERS["adam"](params)
    for gr in _grads(3):
        _step(opt, params, gr)
    step_t = opt.state[params[0]]["step"]
    dtype, device = step_t.dtype, step_t.device
    opt.state[params[1]]["step"] = 3.0  # float form (older torch / other optimizers)
    assert reset_step_count(opt) == 2
    assert opt.state[params[0]]["step"] is step_t  # zeroed in place
    assert step_t.dtype == dtype and step_t.device == device and float(step_t) == 0.0
    assert opt.state[params[1]]["step"] == 0.0 and isinstance(opt.state[params[1]]["step"], float)


@pytest.mark.unit
def test_step_reset_restarts_bias_correction_as_hand_computed_adam():
    # Hand-computed Adam update with moments kept and t reset to 0 (next t = 1):
    #   m' = b1 m + (1-b1) g,  v' = b2 v + (1-b2) g^2
    #   p' = p - lr * (m' / (1 - b1^1)) / (sqrt(v' / (1 - b2^1)) + eps)
    lr, b1, b2, eps = 0.01, 0.9, 0.99, 1e-8
    params = _params()
    opt = torch.optim.Adam(params, lr=lr, betas=(b1, b2), eps=eps)
    grads = _grads(4)
    for gr in grads[:3]:
        _step(opt, params, gr)
    m0 = [opt.state[p]["exp_avg"].double().clone() for p in params]
    v0 = [opt.state[p]["exp_avg_sq"].double().clone() for p in params]
    p0 = [p.detach().double().clone() for p in params]
    reset_step_count(opt)
    _step(opt, params, grads[3])
    for p, m, v, w, g in zip(params, m0, v0, p0, grads[3]):
        g = g.double()
        m1 = b1 * m + (1 - b1) * g
        v1 = b2 * v + (1 - b2) * g * g
        expected = w - lr * (m1 / (1 - b1)) / ((v1 / (1 - b2)).sqrt() + eps)
        torch.testing.assert_close(p.detach().double(), expected, rtol=1e-6, atol=1e-7)
        assert float(opt.state[p]["step"]) == 1.0


@pytest.mark.unit
def test_warmup_schedule_values():
    # warmup 4: (s+1)/4 for s = 0..3, then 1 (constant) or cosine to min at s = total.
    const = WarmupSchedule("constant", warmup_steps=4, total_steps=10)
    assert [const(s) for s in range(6)] == [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]
    cos = WarmupSchedule("cosine", warmup_steps=2, total_steps=6, min_lr_ratio=0.1)
    assert cos(0) == 0.5 and cos(1) == 1.0 and cos(2) == 1.0
    assert cos(4) == pytest.approx(0.1 + 0.9 * 0.5)  # halfway: cos(pi/2) = 0
    assert cos(6) == pytest.approx(0.1) and cos(50) == pytest.approx(0.1)
    assert WarmupSchedule("cosine", 0, 4)(0) == 1.0


@pytest.mark.unit
@pytest.mark.parametrize("kind", ["constant", "cosine"])
def test_restart_schedule_equals_fresh_scheduler(kind):
    params = _params()
    opt = torch.optim.AdamW(params, lr=0.5)
    sched = make_lr_scheduler(opt, kind, warmup_steps=3, total_steps=8, min_lr_ratio=0.2)
    assert opt.param_groups[0]["lr"] == pytest.approx(0.5 / 3)
    for gr in _grads(5):
        _step(opt, params, gr)
        sched.step()
    assert sched.last_epoch == 5
    first_lr = restart_schedule(sched)
    fresh_opt = torch.optim.AdamW(_clone(params), lr=0.5)
    fresh = make_lr_scheduler(fresh_opt, kind, warmup_steps=3, total_steps=8, min_lr_ratio=0.2)
    assert first_lr == fresh_opt.param_groups[0]["lr"] == 0.5 / 3
    assert sched.state_dict() == fresh.state_dict()
    assert sched.base_lrs == [0.5]
    lrs, fresh_lrs = [], []
    for gr in _grads(4):
        _step(opt, params, gr)
        sched.step()
        lrs.append(opt.param_groups[0]["lr"])
        fresh_opt.step()
        fresh.step()
        fresh_lrs.append(fresh_opt.param_groups[0]["lr"])
    assert lrs == fresh_lrs


@pytest.mark.unit
def test_restart_schedule_chainable_scheduler_back_to_base_lr():
    params = _params()
    opt = torch.optim.Adam(params, lr=0.1)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    for gr in _grads(3):
        _step(opt, params, gr)
        sched.step()
    assert opt.param_groups[0]["lr"] == pytest.approx(0.0125)
    assert restart_schedule(sched) == 0.1
    assert sched.last_epoch == 0


@pytest.mark.unit
def test_reset_kl_coef_duck_typed():
    ctrl = SimpleNamespace(value=0.37, init_beta=0.05)
    assert reset_kl_coef(ctrl) == {"kl_coef_before": 0.37, "kl_coef_after": 0.05}
    assert ctrl.value == 0.05
    assert reset_kl_coef(None) is None
    with pytest.raises(AttributeError):
        reset_kl_coef(SimpleNamespace(value=0.1))


@pytest.mark.unit
def test_reset_grad_scaler_matches_fresh_scaler():
    p = torch.nn.Parameter(torch.ones(2))
    scaler = torch.amp.GradScaler("cpu", init_scale=8.0)
    scaler.scale((p * 2).sum()).backward()
    scaler._scale.fill_(2.0)  # as if it had backed off after overflows
    assert reset_grad_scaler(scaler) is True
    assert scaler.get_scale() == 8.0
    assert reset_grad_scaler(None) is False
    assert reset_grad_scaler(torch.amp.GradScaler("cpu", enabled=False)) is False


@pytest.mark.unit
def test_apply_reset_semantics_hard_makes_everything_fresh():
    params = _params()
    opt = torch.optim.AdamW(params, lr=0.5)
    sched = make_lr_scheduler(opt, "constant", warmup_steps=2, total_steps=10)
    ctrl = SimpleNamespace(value=0.3, init_beta=0.1)
    for gr in _grads(4):
        _step(opt, params, gr)
        sched.step()
    rec = apply_reset_semantics(
        opt,
        sched,
        ctrl,
        opt_reset="hard",
        soft_factor=0.5,
        reset_opt_step=False,
        reset_lr_schedule=False,
        reset_kl_coef=False,
    )
    assert rec["opt_reset"] == "hard" and rec["params_cleared"] == 2
    assert rec["optim_step_before"] == 4
    assert rec["opt_step_reset"] and rec["lr_schedule_reset"] and rec["kl_coef_reset"]
    assert rec["lr_before"] == 0.5 and rec["lr_after"] == 0.25
    assert rec["kl_coef_before"] == 0.3 and rec["kl_coef_after"] == 0.1 and ctrl.value == 0.1
    assert all(len(s) == 0 for s in opt.state.values())
    assert sched.last_epoch == 0


@pytest.mark.unit
def test_apply_reset_semantics_soft_with_step_reset_only():
    params = _params()
    opt = torch.optim.Adam(params, lr=0.5)
    sched = make_lr_scheduler(opt, "cosine", warmup_steps=1, total_steps=10)
    ctrl = SimpleNamespace(value=0.3, init_beta=0.1)
    for gr in _grads(3):
        _step(opt, params, gr)
        sched.step()
    m = opt.state[params[0]]["exp_avg"].clone()
    lr = opt.param_groups[0]["lr"]
    rec = apply_reset_semantics(
        opt,
        sched,
        ctrl,
        opt_reset="soft",
        soft_factor=0.25,
        reset_opt_step=True,
        reset_lr_schedule=False,
        reset_kl_coef=False,
    )
    assert rec["m_scaled"] == 2 and rec["v_scaled"] == 2 and rec["soft_factor"] == 0.25
    assert rec["opt_step_reset"] and not rec["lr_schedule_reset"] and not rec["kl_coef_reset"]
    assert torch.equal(opt.state[params[0]]["exp_avg"], m * 0.25)
    assert float(opt.state[params[0]]["step"]) == 0.0
    assert opt.param_groups[0]["lr"] == lr == rec["lr_after"] and ctrl.value == 0.3
    assert sched.last_epoch == 3
