"""Unit tests for losses.py: hand-worked losses, gradients, reductions and masked-reduction properties."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from noma_prorl_bench.algorithms import losses as L

torch.set_num_threads(1)

# Shared hand-worked batch: logp_old = 0, ratios r = [1.5, 0.5, 1.1] for both rows, A = [+1, -1].
RATIOS = torch.tensor([1.5, 0.5, 1.1])


def _batch(requires_grad=True):
    logp = torch.log(RATIOS).repeat(2, 1).clone().requires_grad_(requires_grad)  # [2,3]
    return logp, torch.zeros(2, 3), torch.tensor([1.0, -1.0]), torch.ones(2, 3)


@pytest.mark.unit
def test_registry_keys_and_metric_contract():
    assert set(L.LOSSES) == {"reinforce", "noclip", "grpo_clip", "dapo", "cispo", "gspo"}
    logp, old, adv, mask = _batch()
    for fn in L.LOSSES.values():
        loss, m = fn(logp, old, adv, mask, eps_low=0.2, eps_high=0.2)
        assert loss.shape == (2, 3)
        assert {"clip/frac", "policy/ratio_mean"} <= set(m) and all(isinstance(v, float) for v in m.values())


@pytest.mark.unit
def test_grpo_clip_hand_worked():
    logp, old, adv, mask = _batch()
    loss, m = L.grpo_clip_loss(logp, old, adv, mask, eps_low=0.2, eps_high=0.2)
    # A=+1: -min(r, clip(r,.8,1.2)) -> r=1.5: -1.2 (clipped high), r=.5: -.5, r=1.1: -1.1
    # A=-1: -min(-r, -clip(r)) = max(r, clip(r)) -> 1.5, .8 (clipped low), 1.1
    expected = torch.tensor([[-1.2, -0.5, -1.1], [1.5, 0.8, 1.1]])
    assert torch.allclose(loss, expected, atol=1e-6)
    assert m["clip/frac"] == pytest.approx(2 / 6)
    assert m["clip/frac_high"] == pytest.approx(1 / 6) and m["clip/frac_low"] == pytest.approx(1 / 6)
    assert m["policy/ratio_mean"] == pytest.approx((1.5 + 0.5 + 1.1) / 3, rel=1e-6)


@pytest.mark.unit
def test_clip_higher_dapo_asymmetric():
    logp, old, adv, mask = _batch()
    loss, m = L.dapo_loss(logp, old, adv, mask, eps_low=0.2, eps_high=0.28)
    # upper bound 1.28: A=+1, r=1.5 -> -1.28; lower bound .8 unchanged: A=-1, r=.5 -> .8
    assert loss[0, 0].item() == pytest.approx(-1.28)
    assert loss[1, 1].item() == pytest.approx(0.8)
    assert m["clip/frac"] == pytest.approx(2 / 6)


@pytest.mark.unit
def test_dual_clip_caps_negative_advantage_loss():
    logp, old, adv, mask = _batch()
    loss, m = L.grpo_clip_loss(logp, old, adv, mask, eps_low=0.2, eps_high=0.2, dual_clip_c=1.4)
    # A=-1, r=1.5: PPO loss 1.5 > c*|A| = 1.4 -> min(1.5, -c*A) = 1.4; r=1.1 stays 1.1
    assert loss[1, 0].item() == pytest.approx(1.4)
    assert loss[1, 2].item() == pytest.approx(1.1)
    assert loss[0, 0].item() == pytest.approx(-1.2)  # A>0 untouched by the dual clip
    assert m["clip/frac_dual"] == pytest.approx(1 / 6) and m["clip/frac"] == pytest.approx(3 / 6)
    loss.sum().backward()
    assert logp.grad[1, 0].item() == 0.0  # the dual-clipped token has a constant loss
    with pytest.raises(ValueError):
        L.grpo_clip_loss(logp, old, adv, mask, eps_low=0.2, eps_high=0.2, dual_clip_c=1.0)


@pytest.mark.unit
def test_ppo_clipped_tokens_have_zero_gradient():
    logp, old, adv, mask = _batch()
    loss, _ = L.grpo_clip_loss(logp, old, adv, mask, eps_low=0.2, eps_high=0.2)
    loss.sum().backward()
    # d(-r A)/d logp = -r A on unclipped tokens; 0 on the two clipped ones ([0,0], [1,1])
    expected = torch.tensor([[0.0, -0.5, -1.1], [0.0, 0.0, 1.1]])
    expected[1, 0] = 1.5
    assert torch.allclose(logp.grad, expected, atol=1e-6)


@pytest.mark.unit
def test_reinforce_value_and_gradient():
    logp, old, adv, mask = _batch()
    loss, m = L.reinforce_loss(logp, old, adv, mask)
    # -A * logp: row 0 = -log r, row 1 = +log r; gradient = -A per token
    assert torch.allclose(loss[0], -torch.log(RATIOS)) and torch.allclose(loss[1], torch.log(RATIOS))
    loss.sum().backward()
    assert torch.allclose(logp.grad, torch.tensor([[-1.0] * 3, [1.0] * 3]))
    assert m["clip/frac"] == 0.0


@pytest.mark.unit
def test_cispo_gradient_is_clipped_weight_times_advantage():
    logp, old, adv, mask = _batch()
    loss, m = L.cispo_loss(logp, old, adv, mask, eps_low=0.2, eps_high=0.2)
    # MiniMax-M1 truncates from above only: w = sg(min(r, 1.2)) = [1.2, .5, 1.1] (r = .5 is NOT
    # raised to .8); loss = -w A logp; d/dlogp = -w A (never zero)
    w = torch.tensor([1.2, 0.5, 1.1])
    assert torch.allclose(loss[0], -w * torch.log(RATIOS), atol=1e-6)
    loss.sum().backward()
    assert torch.allclose(logp.grad, torch.stack([-w, w]), atol=1e-6)
    assert m["clip/frac"] == pytest.approx(2 / 6)  # only r=1.5, in both rows
    assert m["clip/frac_low"] == 0.0


@pytest.mark.unit
def test_gspo_sequence_ratio_shared_and_gradient():
    # row 0: log ratios [.3, -.1, (masked 5.0)] -> s = exp(mean(.3, -.1)) = exp(.1)
    logp = torch.tensor([[0.3, -0.1, 5.0], [0.0, 0.0, 0.0]], requires_grad=True)
    old, adv = torch.zeros(2, 3), torch.tensor([2.0, 1.0])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    loss, m = L.gspo_loss(logp, old, adv, mask, eps_low=0.5, eps_high=0.5)
    s = math.exp(0.1)
    assert loss[0, 0].item() == pytest.approx(-2 * s) and loss[0, 1].item() == pytest.approx(-2 * s)
    assert loss[0, 2].item() == 0.0  # masked position holds 0
    L.aggregate(loss, mask, "seq-mean-token-mean").backward()
    # seq loss_0 = -A s; d s/d logp_t = s / |y| = s/2 on the 2 tokens; mean over 2 sequences -> /2
    assert logp.grad[0, 0].item() == pytest.approx(-2 * s / 2 / 2, rel=1e-5)
    assert logp.grad[0, 1].item() == pytest.approx(logp.grad[0, 0].item())
    assert logp.grad[0, 2].item() == 0.0
    # repeat_masked: the masked position holds the row's value; the aggregate and its gradient are unchanged
    rep, _ = L.gspo_loss(logp, old, adv, mask, eps_low=0.5, eps_high=0.5, repeat_masked=True)
    assert rep[0, 2].item() == pytest.approx(-2 * s) and torch.equal(rep * mask, loss * mask)


@pytest.mark.unit
def test_noclip_is_the_unclipped_importance_weighted_gradient():
    logp, old, adv, mask = _batch()
    mask[1, 2] = 0.0
    loss, m = L.noclip_loss(logp, old, adv, mask)
    # -r A with r = [1.5, .5, 1.1], A = [+1, -1]; the masked position holds 0; nothing is clipped
    assert loss.tolist() == [pytest.approx([-1.5, -0.5, -1.1]), pytest.approx([1.5, 0.5, 0.0])]
    assert m["clip/frac"] == 0.0 and m["policy/ratio_mean"] == pytest.approx((1.5 + 0.5 + 1.1 + 1.5 + 0.5) / 5)
    loss.sum().backward()
    assert logp.grad.tolist() == [pytest.approx([-1.5, -0.5, -1.1]), pytest.approx([1.5, 0.5, 0.0])]  # -r A


@pytest.mark.unit
def test_gspo_matches_token_form_gradient_under_token_mean():
    # GSPO-token form (Zheng et al. 2025 sec. 4.3): ratio_t = sg(s) * pi_t / sg(pi_t); equal grads.
    g = torch.Generator().manual_seed(0)
    base = torch.randn(3, 4, generator=g) * 0.05
    old, adv = torch.zeros(3, 4), torch.tensor([1.0, -0.5, 2.0])
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1]], dtype=torch.float32)
    a = base.clone().requires_grad_(True)
    L.aggregate(L.gspo_loss(a, old, adv, mask, eps_low=0.3, eps_high=0.3)[0], mask, "token-mean").backward()
    b = base.clone().requires_grad_(True)
    seq = ((b - old) * mask).sum(-1, keepdim=True) / mask.sum(-1, keepdim=True)
    ratio_tok = torch.exp(seq.detach() + b - b.detach())
    ref = -adv[:, None] * ratio_tok  # no clipping active: |log s| << 0.3
    (ref * mask).sum().div(mask.sum()).backward()
    assert torch.allclose(a.grad, b.grad, atol=1e-6)


@pytest.mark.unit
def test_gspo_clipped_sequence_gets_zero_gradient():
    logp = torch.tensor([[0.5, 0.5]], requires_grad=True)  # s = e^.5 = 1.65 > 1.2, A > 0
    loss, m = L.gspo_loss(logp, torch.zeros(1, 2), torch.tensor([1.0]), torch.ones(1, 2), eps_low=0.2, eps_high=0.2)
    loss.sum().backward()
    assert torch.all(logp.grad == 0) and m["clip/frac"] == 1.0


@pytest.mark.unit
def test_tis_weights_and_application():
    learner = torch.log(torch.tensor([[3.0, 0.5]]))
    sampler = torch.zeros(1, 2)
    w = L.tis_weights(learner, sampler, cap=2.0)
    # exp(diff) = [3, .5] -> min(., 2) = [2, .5]; detached
    assert torch.allclose(w, torch.tensor([[2.0, 0.5]])) and not w.requires_grad
    logp = torch.log(torch.tensor([[1.0, 1.0]])).requires_grad_(True)
    base, _ = L.reinforce_loss(logp, logp.detach(), torch.tensor([1.0]), torch.ones(1, 2))
    weighted, m = L.reinforce_loss(logp, logp.detach(), torch.tensor([1.0]), torch.ones(1, 2), tis_weight=w)
    assert torch.allclose(weighted, base * w) and m["tis/weight_mean"] == pytest.approx(1.25)


@pytest.mark.unit
def test_garbage_under_mask_does_not_leak():
    logp = torch.tensor([[-0.1, float("-inf")], [-0.2, float("nan")]], requires_grad=True)
    old = torch.tensor([[-0.1, 0.0], [-0.3, 0.0]])
    mask = torch.tensor([[1.0, 0.0], [1.0, 0.0]])
    for name, fn in L.LOSSES.items():
        loss, m = fn(logp, old, torch.tensor([1.0, -1.0]), mask, eps_low=0.2, eps_high=0.2)
        for agg in (*L.AGGREGATIONS, "token-sum-norm"):  # the flag's rules and the course's constant
            val = L.aggregate(loss, mask, agg)
            assert torch.isfinite(val), (name, agg)
        assert all(math.isfinite(v) for v in m.values()), name


@pytest.mark.unit
def test_aggregations_hand_worked():
    loss = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0], [9.0, 9.0, 9.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    # token-mean: (1+2+3+4)/4 = 2.5
    assert L.aggregate(loss, mask, "token-mean").item() == pytest.approx(2.5)
    # seq-mean-token-mean: mean(6/3, 4/1) over the 2 non-empty sequences = 3
    assert L.aggregate(loss, mask, "seq-mean-token-mean").item() == pytest.approx(3.0)
    # seq-mean-token-sum: (6 + 4 + 0) / N=3
    assert L.aggregate(loss, mask, "seq-mean-token-sum").item() == pytest.approx(10 / 3)
    # seq-mean-token-sum-norm: 10 / (N=3 * T=3), or 10 / (3 * 5) with norm_const=5
    assert L.aggregate(loss, mask, "seq-mean-token-sum-norm").item() == pytest.approx(10 / 9)
    assert L.aggregate(loss, mask, "seq-mean-token-sum-norm", 5.0).item() == pytest.approx(10 / 15)
    # token-sum-norm: 10 / norm_const, default N * T = 9
    assert L.aggregate(loss, mask, "token-sum-norm", 4.0).item() == pytest.approx(10 / 4)
    assert L.aggregate(loss, mask, "token-sum-norm").item() == pytest.approx(10 / 9)
    with pytest.raises(ValueError):
        L.aggregate(loss, mask, "sum")


@pytest.mark.unit
def test_entropy_from_logits():
    # uniform over V=4 -> log 4; a near-one-hot distribution -> ~0
    assert L.entropy_from_logits(torch.zeros(2, 4)).tolist() == pytest.approx([math.log(4)] * 2)
    assert L.entropy_from_logits(torch.tensor([100.0, 0.0, 0.0])).item() == pytest.approx(0.0, abs=1e-6)


# ---------------------------------------------------------------- properties (hypothesis)

_shape = st.tuples(st.integers(1, 4), st.integers(1, 5))


def _draw(data, shape):
    vals = data.draw(st.lists(st.floats(-10, 10), min_size=shape[0] * shape[1], max_size=shape[0] * shape[1]))
    bits = data.draw(st.lists(st.booleans(), min_size=shape[0] * shape[1], max_size=shape[0] * shape[1]))
    return torch.tensor(vals).view(shape), torch.tensor(bits, dtype=torch.float32).view(shape)


def _loop_mean(x, m, rows):
    out = []
    for i in range(x.shape[0]) if rows else [None]:
        xs = (
            [x[i, j].item() for j in range(x.shape[1]) if m[i, j]]
            if rows
            else [x[i, j].item() for i in range(x.shape[0]) for j in range(x.shape[1]) if m[i, j]]
        )
        out.append(sum(xs) / len(xs) if xs else 0.0)
    return out


@pytest.mark.unit
@settings(max_examples=40, deadline=None)
@given(st.data(), _shape)
def test_masked_mean_or_zero_matches_loop_and_ignores_masked_values(data, shape):
    x, m = _draw(data, shape)
    assert L.masked_mean_or_zero(x, m).item() == pytest.approx(_loop_mean(x, m, False)[0], abs=1e-5)
    assert L.masked_mean_or_zero(x, m, dim=1).tolist() == pytest.approx(_loop_mean(x, m, True), abs=1e-5)
    junk = torch.where(m > 0, x, torch.full_like(x, float("nan")))
    assert torch.equal(L.masked_mean_or_zero(junk, m, dim=1), L.masked_mean_or_zero(x, m, dim=1))


@pytest.mark.unit
def test_the_two_masked_means_differ_by_name_on_an_empty_slice():
    from noma_prorl_bench import grpo

    x, m = torch.tensor([[2.0, 4.0], [1.0, 3.0]]), torch.tensor([[1.0, 1.0], [0.0, 0.0]])
    assert L.masked_mean_or_zero(x, m, dim=1).tolist() == [3.0, 0.0]  # guarded: empty row -> 0
    handout = grpo.masked_mean(x, m, dim=1)  # the handout's: 0/0
    assert handout[0].item() == 3.0 and math.isnan(handout[1].item())
    assert not hasattr(L, "masked_mean")


@pytest.mark.unit
@settings(max_examples=40, deadline=None)
@given(st.data(), _shape, st.floats(0.5, 8.0))
def test_masked_normalize_matches_loop(data, shape, c):
    x, m = _draw(data, shape)
    sums = [sum(x[i, j].item() for j in range(shape[1]) if m[i, j]) / c for i in range(shape[0])]
    assert L.masked_normalize(x, m, c, dim=1).tolist() == pytest.approx(sums, abs=1e-4)
    assert L.masked_normalize(x, m, c).item() == pytest.approx(sum(sums), abs=1e-4)


@pytest.mark.unit
@settings(max_examples=40, deadline=None)
@given(st.data(), _shape)
def test_aggregate_matches_looped_reference(data, shape):
    x, m = _draw(data, shape)
    n, t = shape
    rows = [[x[i, j].item() for j in range(t) if m[i, j]] for i in range(n)]
    flat = [v for r in rows for v in r]
    nonempty = [sum(r) / len(r) for r in rows if r]
    ref = {
        "token-mean": sum(flat) / len(flat) if flat else 0.0,
        "seq-mean-token-mean": sum(nonempty) / len(nonempty) if nonempty else 0.0,
        "seq-mean-token-sum": sum(flat) / n,
        "seq-mean-token-sum-norm": sum(flat) / (n * t),
    }
    junk = torch.where(m > 0, x, torch.full_like(x, float("inf")))
    for agg, want in ref.items():
        assert L.aggregate(junk, m, agg).item() == pytest.approx(want, abs=1e-4), agg


@pytest.mark.unit
@pytest.mark.parametrize("name", sorted(L.LOSSES))
def test_per_token_advantages_broadcast_equals_per_sequence(name):
    # adv [N] and the same values repeated along T as [N, T] give the same loss matrix
    logp, old, adv, mask = _batch()
    seq, _ = L.LOSSES[name](logp, old, adv, mask, eps_low=0.2, eps_high=0.2)
    tok, _ = L.LOSSES[name](logp, old, adv[:, None].expand(2, 3).clone(), mask, eps_low=0.2, eps_high=0.2)
    assert torch.allclose(seq, tok)


@pytest.mark.unit
def test_grpo_clip_with_per_token_advantages_hand_worked():
    # the REINFORCE++ token form gives each token its own A: row 0 A = [1, -1, 2], ratios [1.5, .5, 1.1]
    logp = torch.log(RATIOS).unsqueeze(0).clone().requires_grad_(True)  # [1, 3]
    adv = torch.tensor([[1.0, -1.0, 2.0]])
    loss, _ = L.grpo_clip_loss(logp, torch.zeros(1, 3), adv, torch.ones(1, 3), eps_low=0.2, eps_high=0.2)
    # t0: A=1, r=1.5 -> -min(1.5, 1.2) = -1.2 (clipped); t1: A=-1, r=.5 -> max(.5, .8) = .8 (clipped);
    # t2: A=2, r=1.1 -> -min(2.2, 2.2) = -2.2
    assert torch.allclose(loss, torch.tensor([[-1.2, 0.8, -2.2]]), atol=1e-6)
    loss.sum().backward()
    # only t2 has a gradient: d(-A r)/dlogp = -A r = -2.2
    assert torch.allclose(logp.grad, torch.tensor([[0.0, 0.0, -2.2]]), atol=1e-6)
