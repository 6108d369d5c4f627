"""Unit tests for growth.py: layouts, migration modes, exactness of the next step, stale state."""

import copy

import pytest
import torch
from torch import nn

from noma_prorl_bench.models.lora import adapter_parameters, attach_lora
from noma_prorl_bench.training.growth import (
    MODES,
    check_no_stale_state,
    grow_adapters,
    grow_block,
    grow_flat_prefix,
    make_init,
    realloc_param,
    realloc_params,
)

torch.set_num_threads(1)

OPTIMIZERS = {
    "adam": lambda ps: torch.optim.Adam(ps, lr=1e-2),
    "adam_amsgrad": lambda ps: torch.optim.Adam(ps, lr=1e-2, amsgrad=True),
    "adamw": lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.1),
    "sgd_momentum": lambda ps: torch.optim.SGD(ps, lr=1e-2, momentum=0.9),
    "rmsprop": lambda ps: torch.optim.RMSprop(ps, lr=1e-3, momentum=0.5, centered=True),
    "adagrad": lambda ps: torch.optim.Adagrad(ps, lr=1e-2),
}


class Policy(nn.Module):
    """x[N, 4] -> logits[N, 3] with a Linear named ``head`` (like the GRU policy)."""

    def __init__(self):
        super().__init__()
        self.body, self.head = nn.Linear(4, 5), nn.Linear(5, 3)

    def forward(self, x):
        return self.head(torch.tanh(self.body(x)))


def _trained(opt_name="adam", rank=2, steps=3, seed=0):
    """A policy with a rank-``rank`` adapter on ``head``, trained ``steps`` steps (B non-zero)."""
    torch.manual_seed(seed)
    m = Policy()
    attach_lora(m, ["head"], rank=rank, alpha=2.0, seed=seed)
    opt = OPTIMIZERS[opt_name](adapter_parameters(m))
    x, y = torch.randn(16, 4), torch.randint(0, 3, (16,))
    for _ in range(steps):
        opt.zero_grad()
        nn.functional.cross_entropy(m(x), y).backward()
        opt.step()
    return m, opt, x


def _state_by_name(m, opt):
    names = {id(p): n for n, p in m.named_parameters()}
    return {
        names[id(p)]: {k: (v.clone() if torch.is_tensor(v) else v) for k, v in s.items()} for p, s in opt.state.items()
    }


@pytest.mark.unit
def test_layouts_exact_positions():
    old = torch.arange(6.0).reshape(2, 3)  # [[0,1,2],[3,4,5]]
    cols = grow_block(old, (2, 5))
    assert cols.tolist() == [[0, 1, 2, 0, 0], [3, 4, 5, 0, 0]]
    flat = grow_flat_prefix(old, (2, 5))  # NOMA: row 1 slides into row 0
    assert flat.tolist() == [[0, 1, 2, 3, 4], [5, 0, 0, 0, 0]]
    rows_b, rows_f = grow_block(old, (4, 3)), grow_flat_prefix(old, (4, 3))
    assert torch.equal(rows_b, rows_f)  # first axis: the layouts agree
    both = grow_block(old, (3, 4), fill=torch.full((3, 4), 9.0))
    assert both.tolist() == [[0, 1, 2, 9], [3, 4, 5, 9], [9, 9, 9, 9]]
    with pytest.raises(ValueError):
        grow_block(old, (1, 3))
    with pytest.raises(ValueError):
        grow_block(old, (2, 3, 1))


@pytest.mark.unit
def test_make_init_is_seeded():
    g1, g2 = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    a = make_init("kaiming", fan_in=4, generator=g1)(torch.Size([3, 4]), torch.float32, "cpu")
    b = make_init("kaiming", fan_in=4, generator=g2)(torch.Size([3, 4]), torch.float32, "cpu")
    assert torch.equal(a, b) and a.abs().max() <= 0.5
    assert torch.count_nonzero(make_init("zeros")(torch.Size([2]), torch.float32, "cpu")) == 0


@pytest.mark.unit
@pytest.mark.parametrize("mode", ["preserve", "reset", "naive"])
def test_output_unchanged_at_growth(mode):
    m, opt, x = _trained()
    before = m(x).detach()
    opt2 = grow_adapters(m, opt, new_rank=6, mode=mode)
    assert m.head.rank == 6
    torch.testing.assert_close(m(x), before, rtol=1e-6, atol=1e-6)
    assert check_no_stale_state(m, opt2) == []


@pytest.mark.unit
@pytest.mark.parametrize("opt_name", list(OPTIMIZERS))
def test_preserve_migrates_every_state_tensor(opt_name):
    m, opt, _ = _trained(opt_name)
    old = _state_by_name(m, opt)
    assert old, "the optimizer must have state before growth"
    new_opt = grow_adapters(m, opt, new_rank=5, mode="preserve")
    assert new_opt is opt
    new = _state_by_name(m, opt)
    assert set(new) == set(old) == {"head.lora_A", "head.lora_B"}
    adam = opt_name.startswith("adam")
    for name, axis in (("head.lora_A", 0), ("head.lora_B", 1)):
        # Adam/AdamW: the new entries also get a cohort with its own step count (adam_cohorts)
        assert set(new[name]) == set(old[name]) | ({"entry_cohort", "cohort_steps"} if adam else set())
        if adam:
            cohort = new[name]["entry_cohort"]
            assert new[name]["cohort_steps"] == [0]
            assert torch.count_nonzero(cohort[:2] if axis == 0 else cohort[:, :2]) == 0
            assert bool(((cohort[2:] if axis == 0 else cohort[:, 2:]) == 1).all())
        for key, val in old[name].items():
            got = new[name][key]
            if torch.is_tensor(val) and val.dim() > 0:
                old_block = got[:2] if axis == 0 else got[:, :2]
                new_block = got[2:] if axis == 0 else got[:, 2:]
                assert torch.equal(old_block, val), (name, key)  # bit-identical
                assert torch.count_nonzero(new_block) == 0, (name, key)  # fresh
            elif torch.is_tensor(val):
                assert torch.equal(got, val), (name, key)  # step kept
            else:
                assert got == val
    assert check_no_stale_state(m, opt) == []


@pytest.mark.unit
@pytest.mark.parametrize("opt_name", list(OPTIMIZERS))
def test_next_steps_on_old_slice_equal_ungrown(opt_name):
    """A grown and an ungrown copy, trained on a loss of the old slice only (elementwise, so no
    summation-order differences): the old slice evolves bit-identically under ``preserve``."""
    m, opt, _ = _trained(opt_name)
    m_ref = copy.deepcopy(m)
    opt_ref = OPTIMIZERS[opt_name](adapter_parameters(m_ref))
    opt_ref.load_state_dict(copy.deepcopy(opt.state_dict()))  # load_state_dict aliases tensors
    grow_adapters(m, opt, new_rank=7, mode="preserve")
    c_a, c_b = torch.linspace(-1, 1, 2 * 5).reshape(2, 5), torch.linspace(1, 2, 3 * 2).reshape(3, 2)

    def loss(mod):
        a, b = mod.head.lora_A[:2], mod.head.lora_B[:, :2]
        return ((a - c_a) ** 2).sum() + (b * c_b).pow(2).sum()

    for _ in range(4):
        for mm, oo in ((m, opt), (m_ref, opt_ref)):
            oo.zero_grad()
            loss(mm).backward()
            oo.step()
        assert torch.equal(m.head.lora_A[:2], m_ref.head.lora_A)
        assert torch.equal(m.head.lora_B[:, :2], m_ref.head.lora_B)


@pytest.mark.unit
def test_naive_loses_state_and_restarts_step():
    m, opt, x = _trained("adam", steps=3)
    new_opt = grow_adapters(m, opt, new_rank=4, mode="naive")
    assert new_opt is not opt and type(new_opt) is type(opt)
    assert len(new_opt.state) == 0
    assert new_opt.param_groups[0]["lr"] == opt.param_groups[0]["lr"]
    assert check_no_stale_state(m, new_opt) == []
    assert len(check_no_stale_state(m, opt)) >= 2  # the old optimizer is stale
    new_opt.zero_grad()
    m(x).sum().backward()
    new_opt.step()
    assert all(float(s["step"]) == 1.0 for s in new_opt.state.values())


@pytest.mark.unit
def test_reset_clears_all_state_for_whole_model():
    torch.manual_seed(0)
    m = Policy()
    attach_lora(m, ["head"], rank=2, freeze_base=False)
    opt = torch.optim.Adam(m.parameters(), lr=1e-2)
    x = torch.randn(8, 4)
    for _ in range(2):
        opt.zero_grad()
        m(x).pow(2).mean().backward()
        opt.step()
    assert len(opt.state) == 6
    assert grow_adapters(m, opt, new_rank=3, mode="reset") is opt
    assert len(opt.state) == 0 and check_no_stale_state(m, opt) == []
    opt.zero_grad()
    m(x).pow(2).mean().backward()
    opt.step()
    assert len(opt.state) == 6 and all(float(s["step"]) == 1.0 for s in opt.state.values())


@pytest.mark.unit
def test_noma_flat_reproduces_flat_prefix_layout():
    m, opt, x = _trained("adam")
    a0, b0 = m.head.lora_A.detach().clone(), m.head.lora_B.detach().clone()  # [2,5], [3,2]
    st = {k: v.clone() for k, v in opt.state[m.head.lora_B].items()}
    before = m(x).detach()
    grow_adapters(m, opt, new_rank=4, mode="noma_flat")
    b1 = m.head.lora_B.detach()  # [3, 4]
    assert torch.equal(b1.flatten()[:6], b0.flatten())  # flat prefix ...
    assert torch.count_nonzero(b1.flatten()[6:]) == 0  # ... zero tail
    assert torch.equal(b1[0], torch.cat([b0[0], b0[1]]))  # row 1 slid into row 0
    assert not torch.equal(b1[:, :2], b0)  # so the old block is scrambled
    for key in ("exp_avg", "exp_avg_sq"):
        got = opt.state[m.head.lora_B][key]
        assert torch.equal(got.flatten()[:6], st[key].flatten()) and got.shape == (3, 4)
    assert torch.equal(opt.state[m.head.lora_B]["step"], st["step"])
    assert torch.equal(m.head.lora_A[:2], a0)  # rows (axis 0): prefix == block
    assert (m(x) - before).abs().max() > 1e-3  # the policy changed at growth
    assert check_no_stale_state(m, opt) == []


@pytest.mark.unit
def test_gradient_is_grown_or_zeroed():
    m, opt, x = _trained("adam")
    m(x).sum().backward()
    g = m.head.lora_B.grad.clone()
    grow_adapters(m, opt, new_rank=3, mode="preserve")
    assert torch.equal(m.head.lora_B.grad[:, :2], g) and m.head.lora_B.grad[:, 2].abs().sum() == 0
    m2, opt2, x2 = _trained("adam")
    m2(x2).sum().backward()
    grow_adapters(m2, opt2, new_rank=3, mode="noma_flat")
    assert m2.head.lora_B.grad.shape == (3, 3) and m2.head.lora_B.grad.abs().sum() == 0


@pytest.mark.unit
def test_stale_state_detected_for_broken_migrations():
    m, opt, _ = _trained("adam")
    # broken 1: swap the module's parameter, forget the optimizer (the classic silent bug)
    m.head.lora_B = nn.Parameter(torch.zeros(3, 4))
    probs = check_no_stale_state(m, opt)
    assert any("not a model parameter" in p for p in probs)
    assert any("head.lora_B is in no param group" in p for p in probs)
    # broken 2: re-key and re-point but do not resize the moments
    m2, opt2, _ = _trained("adam")
    old = m2.head.lora_A
    new = nn.Parameter(torch.zeros(4, 5))
    m2.head.lora_A = new
    opt2.state[new] = opt2.state.pop(old)
    opt2.param_groups[0]["params"][0] = new
    probs2 = check_no_stale_state(m2, opt2)
    assert sorted(probs2) == [
        "state[head.lora_A][exp_avg] shape (2, 5) != param (4, 5)",
        "state[head.lora_A][exp_avg_sq] shape (2, 5) != param (4, 5)",
    ]


@pytest.mark.unit
def test_realloc_param_generic_axes_and_tied_weights():
    lin = nn.Linear(3, 2)
    opt = torch.optim.Adam(lin.parameters())
    lin(torch.randn(4, 3)).sum().backward()
    opt.step()
    w_old = lin.weight.detach().clone()
    new = realloc_param(lin, "weight", (4, 5), make_init("normal", std=1.0), opt, "preserve")
    assert lin.weight is new and torch.equal(new[:2, :3], w_old)
    assert torch.count_nonzero(opt.state[new]["exp_avg"][2:]) == 0
    assert torch.count_nonzero(opt.state[new]["exp_avg"][:, 3:]) == 0
    with pytest.raises(ValueError):
        realloc_param(lin, "weight", (4, 5), mode="bogus")
    tied = nn.Module()
    tied.a, tied.b = nn.Linear(2, 2), nn.Linear(2, 2)
    tied.b.weight = tied.a.weight
    with pytest.raises(RuntimeError):
        realloc_params(tied, None, {"a.weight": ((3, 2), None)})


@pytest.mark.unit
@pytest.mark.parametrize("mode", MODES)
def test_every_mode_leaves_no_stale_state(mode):
    m, opt, _ = _trained("adam")
    opt = grow_adapters(m, opt, new_rank=3, mode=mode)
    assert check_no_stale_state(m, opt) == []
    assert {id(p) for g in opt.param_groups for p in g["params"]} == {id(m.head.lora_A), id(m.head.lora_B)}


@pytest.mark.unit
def test_next_step_through_the_policy_loss_matches_ungrown():
    """The real loss (cross-entropy through the policy) right after growth: new B columns are zero,
    so the old-slice gradients and hence the Adam step equal the ungrown model's (exact on CPU in
    practice; asserted to float32 rounding because BLAS may pick shape-dependent kernels)."""
    m, opt, x = _trained("adam")
    m_ref = copy.deepcopy(m)
    opt_ref = torch.optim.Adam(adapter_parameters(m_ref), lr=1e-2)
    opt_ref.load_state_dict(copy.deepcopy(opt.state_dict()))
    grow_adapters(m, opt, new_rank=6, mode="preserve")
    y = torch.arange(16) % 3
    for mm, oo in ((m, opt), (m_ref, opt_ref)):
        oo.zero_grad()
        nn.functional.cross_entropy(mm(x), y).backward()
        oo.step()
    torch.testing.assert_close(m.head.lora_A[:2], m_ref.head.lora_A, rtol=1.2e-7, atol=1e-9)
    torch.testing.assert_close(m.head.lora_B[:, :2], m_ref.head.lora_B, rtol=1.2e-7, atol=1e-9)
    assert float(opt.state[m.head.lora_A]["step"]) == float(opt_ref.state[m_ref.head.lora_A]["step"]) == 4.0
