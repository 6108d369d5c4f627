"""Unit tests for kl.py: estimator arithmetic, Monte-Carlo bias checks, exact KL, adaptive beta."""

import math

import pytest
import torch

from noma_prorl_bench.algorithms import kl as K

torch.set_num_threads(1)

# Policy p (samples come from it) and anchor q on 3 outcomes.
P = torch.tensor([0.5, 0.3, 0.2])
Q = torch.tensor([0.2, 0.3, 0.5])
# exact KL(p||q) = .5 ln 2.5 + .3 ln 1 + .2 ln .4 = .5 (.916291) - .2 (.916291) = .274887
KL_EXACT = 0.3 * math.log(2.5)


@pytest.mark.unit
def test_hand_worked_estimators():
    t = K.kl_terms(torch.log(torch.tensor([0.5])), torch.log(torch.tensor([0.25])))
    # log r = ln(.25/.5) = -ln 2: k1 = ln 2, k2 = .5 ln^2 2, k3 = .5 - 1 + ln 2
    ln2 = math.log(2)
    assert t["k1"].item() == pytest.approx(ln2)
    assert t["k2"].item() == pytest.approx(0.5 * ln2**2)
    assert t["k3"].item() == pytest.approx(ln2 - 0.5)


@pytest.mark.unit
def test_exact_expectations_show_bias_of_k2_only():
    t = K.kl_terms(torch.log(P), torch.log(Q))
    e = {k: (P * v).sum().item() for k, v in t.items()}
    assert e["k1"] == pytest.approx(KL_EXACT, abs=1e-6)
    assert e["k3"] == pytest.approx(KL_EXACT, abs=1e-6)
    # E[k2] = .5 * (.5 + .2) * ln^2 2.5 = .293858 vs .274887: bias .01897
    assert e["k2"] - KL_EXACT == pytest.approx(0.35 * math.log(2.5) ** 2 - KL_EXACT, abs=1e-6)


@pytest.mark.unit
def test_monte_carlo_k1_k3_unbiased_k2_biased():
    g = torch.Generator().manual_seed(1234)
    x = torch.multinomial(P, 100_000, replacement=True, generator=g)  # samples from the policy
    t = K.kl_terms(torch.log(P)[x], torch.log(Q)[x])
    for name in ("k1", "k3"):
        v = t[name]
        se = v.std().item() / math.sqrt(v.numel())
        assert abs(v.mean().item() - KL_EXACT) < 4 * se, name
    k2 = t["k2"]
    se2 = k2.std().item() / math.sqrt(k2.numel())  # ~ .0006; the bias .019 is > 20 standard errors
    assert k2.mean().item() - KL_EXACT > 10 * se2


@pytest.mark.unit
def test_k3_nonnegative_and_gradient():
    log_r = torch.linspace(-20, 20, 401)
    logp = torch.zeros_like(log_r).requires_grad_(True)
    t = K.kl_terms(logp, log_r)
    assert torch.all(t["k3"] >= 0) and torch.all(t["k2"] >= 0)
    t["k3"].sum().backward()
    # k3 = e^(a - l) - 1 - (a - l); d/dl = 1 - e^(a - l) = 1 - r
    assert torch.allclose(logp.grad, 1 - torch.exp(log_r), rtol=1e-5)


@pytest.mark.unit
def test_clamp():
    t = K.kl_terms(torch.tensor([0.0]), torch.tensor([30.0]), clamp=5.0)
    assert t["k1"].item() == -5.0 and t["k3"].item() == pytest.approx(math.exp(5) - 6)


@pytest.mark.unit
def test_kl_full_exact():
    lp, lq = torch.log(P), torch.log(Q)
    assert K.kl_full(lp, lq).item() == pytest.approx(KL_EXACT, abs=1e-6)
    logits = torch.randn(2, 3, 7, generator=torch.Generator().manual_seed(0))
    assert torch.allclose(K.kl_full(logits, logits), torch.zeros(2, 3), atol=1e-6)
    assert K.kl_full(logits, logits.flip(-1)).shape == (2, 3)


@pytest.mark.unit
def test_kl_reward_penalty():
    kl_tok = torch.tensor([[0.1, 0.2, 0.3], [0.5, 0.5, 0.5]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    shaped, m = K.kl_reward_penalty(torch.tensor([1.0, 0.0]), kl_tok, mask, beta=0.5)
    # per-sequence sums .3 and 1.5 -> 1 - .15 = .85 and 0 - .75
    assert shaped.tolist() == pytest.approx([0.85, -0.75])
    assert m["kl/seq_sum_mean"] == pytest.approx(0.9)


@pytest.mark.unit
def test_adaptive_controller_update_and_state():
    c = K.AdaptiveKLController(init_beta=0.1, target=6.0, horizon=10_000)
    # kl=12: error = clip(12/6 - 1, -.2, .2) = .2 -> beta = .1 * (1 + .2 * 100 / 10000) = .1002
    assert c.update(12.0, n_samples=100) == pytest.approx(0.1002)
    # kl=3: error = clip(-.5) = -.2 -> .1002 * (1 - .002) = .0999996
    c.update(3.0, n_samples=100)
    assert c.value == pytest.approx(0.0999996)
    d = K.AdaptiveKLController(1.0, 1.0, 1.0)
    d.load_state_dict(c.state_dict())
    assert d.state_dict() == c.state_dict()


@pytest.mark.unit
@pytest.mark.parametrize("kl,direction", [(100.0, 1), (0.01, -1), (1.0, 0)])
def test_adaptive_controller_moves_with_n_samples(kl, direction):
    # target 1, horizon 1000 samples, a batch of N = 16*8 = 128 samples per step:
    # far above: (1 + .2 * 128/1000)^30 = 1.0256^30 = 2.135 (>= +10%); far below: .9744^30 = .459;
    # at the target: error 0, beta unchanged
    c = K.AdaptiveKLController(init_beta=0.05, target=1.0, horizon=1000)
    for _ in range(30):
        c.update(kl, n_samples=128)
    expected = 0.05 * (1 + direction * 0.2 * 128 / 1000) ** 30
    assert c.value == pytest.approx(expected, rel=1e-9)
    if direction > 0:
        assert c.value >= 1.10 * 0.05
    elif direction < 0:
        assert c.value <= 0.5 * 0.05
    else:
        assert c.value == 0.05


@pytest.mark.unit
def test_k3_ratio_value_and_gradient_hand_worked():
    # logp = ln .5, anchor = ln .25 (log r = -ln 2, k3 = ln 2 - .5), logp_old = ln .4:
    # rho = .5/.4 = 1.25, value = 1.25 (ln 2 - .5) = .241434
    logp = torch.log(torch.tensor([0.5])).requires_grad_(True)
    v = K.k3_ratio(logp, torch.log(torch.tensor([0.25])), torch.log(torch.tensor([0.4])))
    ln2 = math.log(2)
    assert v.item() == pytest.approx(1.25 * (ln2 - 0.5))
    v.sum().backward()
    # d/dlogp [rho k3] = rho k3 + rho (1 - r) = 1.25 (ln2 - .5) + 1.25 (1 - .5) = 1.25 ln 2 = .866434
    assert logp.grad.item() == pytest.approx(1.25 * ln2)
    # on-policy (logp_old = logp) the value is plain k3
    same = K.k3_ratio(logp.detach(), torch.log(torch.tensor([0.25])), logp.detach())
    assert same.item() == pytest.approx(ln2 - 0.5)


@pytest.mark.unit
def test_kl_return_to_go_hand_worked():
    kl_tok = torch.tensor([[0.1, 0.2, 0.3, 9.0], [0.5, -0.1, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0]])
    rtg = K.kl_return_to_go(kl_tok, mask)
    # row 0: sums from t to the end over masked tokens: .6, .5, .3, 0 (the 9 is masked out)
    # row 1: .4, -.1, 0, 0
    assert torch.allclose(rtg, torch.tensor([[0.6, 0.5, 0.3, 0.0], [0.4, -0.1, 0.0, 0.0]]))
