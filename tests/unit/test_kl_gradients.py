"""Monte-Carlo check of what each in-loss KL estimator's gradient really is.

A toy policy: one categorical over V outcomes with logits theta, pi = softmax(theta); a fixed
anchor q. Tokens x ~ pi (on-policy, pi_old = pi); each estimator goes through `KLTerm` exactly as
the trainer calls it (estimates -> loss_term), its mean over the samples is back-propagated, and
the expected gradient E_x~pi[grad k(x)] is compared with the exact gradient of the KL it claims:
    k1        0                    (E_pi[grad log pi] = 0)
    k2        grad KL(pi || q)
    k3        grad KL(q || pi)     (the reverse KL)
    k3_ratio  grad KL(pi || q)     (rho * k3, rho = pi / sg(pi_old))
    full      grad KL(pi || q)     (exact KL from logits)
Samples come in K chunks; the spread of the chunk gradients gives the standard error, and the
test asks |MC - exact| <= 5 SE per coordinate. It also checks that the claim is sharp: k3's and
k1's gradients are many SEs away from grad KL(pi || q).
"""

import pytest
import torch

from noma_prorl_bench.algorithms.kl_term import KLTerm

torch.set_num_threads(1)

V, K, CHUNK = 5, 20, 10_000
THETA0 = torch.tensor([0.8, -0.3, 0.1, -1.2, 0.5])  # policy logits
Q_LOGITS = torch.tensor([-0.5, 0.9, 0.0, 0.4, -1.0])  # anchor logits


def _exact_grads() -> dict[str, torch.Tensor]:
    """Exact gradients w.r.t. theta of KL(pi || q) and KL(q || pi) at THETA0 (closed-form KLs)."""
    out = {}
    for name in ("forward", "reverse"):
        th = THETA0.clone().requires_grad_(True)
        lp, lq = torch.log_softmax(th, -1), torch.log_softmax(Q_LOGITS, -1)
        kl = (lp.exp() * (lp - lq)).sum() if name == "forward" else (lq.exp() * (lq - lp)).sum()
        kl.backward()
        out[name] = th.grad.clone()
    return out


def _mc_gradient(term: KLTerm, old_logits: torch.Tensor = THETA0) -> tuple[torch.Tensor, torch.Tensor]:
    """(mean, standard error) over K chunks of grad_theta mean_x loss_term(x), x ~ pi_old
    (= pi unless old_logits differ from THETA0: then the samples are off-policy)."""
    gen = torch.Generator().manual_seed(7)
    lp_old = torch.log_softmax(old_logits, -1)  # [V]
    grads = []
    for _ in range(K):
        th = THETA0.clone().requires_grad_(True)
        logp_all = torch.log_softmax(th, -1)  # [V]
        x = torch.multinomial(lp_old.exp(), CHUNK, replacement=True, generator=gen)  # [n]
        logp = logp_all[x].unsqueeze(-1)  # [n, 1] (T = 1)
        logp_old = lp_old[x].unsqueeze(-1)  # [n, 1]
        anchor = torch.log_softmax(Q_LOGITS, -1)[x].unsqueeze(-1)  # [n, 1]
        logits = th.expand(CHUNK, 1, V)  # [n, 1, V]
        logits_q = Q_LOGITS.expand(CHUNK, 1, V)
        kl = term.estimates(logp, anchor, logp_old, logits=logits, logits_anchor=logits_q)
        term.loss_term(kl, logp_old, anchor).mean().backward()
        grads.append(th.grad.clone())
    g = torch.stack(grads)  # [K, V]
    return g.mean(0), g.std(0) / K**0.5


EXACT = _exact_grads()
CLAIMS = {
    "k1": torch.zeros(V),
    "k2": EXACT["forward"],
    "k3": EXACT["reverse"],
    "k3_ratio": EXACT["forward"],
    "full": EXACT["forward"],
}


@pytest.mark.unit
@pytest.mark.parametrize("estimator", sorted(CLAIMS))
def test_expected_in_loss_gradient_matches_the_claimed_kl(estimator):
    mean, se = _mc_gradient(KLTerm(estimator=estimator))
    tol = 5 * se + 1e-7
    assert torch.all((mean - CLAIMS[estimator]).abs() <= tol), (estimator, mean, CLAIMS[estimator], se)


@pytest.mark.unit
@pytest.mark.parametrize("estimator", ["k1", "k3"])
def test_k1_and_k3_do_not_follow_grad_kl_pi_ref(estimator):
    # the claims above are sharp: these two are far (> 10 SE in some coordinate) from grad KL(pi || q)
    mean, se = _mc_gradient(KLTerm(estimator=estimator))
    assert torch.any((mean - EXACT["forward"]).abs() > 10 * se + 1e-3)


@pytest.mark.unit
def test_forward_and_reverse_gradients_differ_here():
    # the toy is not degenerate: grad KL(pi||q) and grad KL(q||pi) differ by > 0.05 in some coordinate
    assert (EXACT["forward"] - EXACT["reverse"]).abs().max() > 0.05


@pytest.mark.unit
def test_k2_ref_over_old_has_no_gradient():
    # the blog's k2 (x = pi_ref / pi_old) is constant in theta: exactly zero gradient
    th = THETA0.clone().requires_grad_(True)
    logp = torch.log_softmax(th, -1)[torch.arange(V)].unsqueeze(-1)  # [V, 1]
    anchor = torch.log_softmax(Q_LOGITS, -1).unsqueeze(-1)
    term = KLTerm(estimator="k2", k2_mode="ref_over_old")
    out = term.loss_term(term.estimates(logp, anchor, logp.detach()), logp.detach(), anchor)
    assert not out.requires_grad and out.sum().item() > 0


@pytest.mark.unit
def test_k3_ratio_stays_on_grad_kl_pi_ref_off_policy_where_k2_does_not():
    # samples from pi_old != pi_theta (a later PPO epoch): rho = pi/pi_old reweights them, so
    # E_pi_old[grad(rho k3)] = grad KL(pi_theta || q) still; k2 (equal to k3_ratio on-policy:
    # d/dlogp of rho*k3 at rho = 1 is k3 + 1 - r = -log r = d k2/dlogp) has no such correction.
    old = THETA0 + torch.tensor([0.6, -0.4, 0.3, 0.5, -0.7])
    mean, se = _mc_gradient(KLTerm(estimator="k3_ratio"), old)
    assert torch.all((mean - EXACT["forward"]).abs() <= 5 * se + 1e-7)
    mean2, se2 = _mc_gradient(KLTerm(estimator="k2"), old)
    assert torch.any((mean2 - EXACT["forward"]).abs() > 10 * se2)
