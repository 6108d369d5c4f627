"""--shared_prompt with the GRU: each distinct prompt's first P - 1 tokens run once and the rows
that carry it start from that hidden state.

The same function as the whole pass: log-probs and entropies equal it to 1e-12 in float64 and
1e-5 in float32, gradients to 1e-9 relative in float64; the token counters count exactly the
positions the GRU ran; off, the forward is the module's own (bit for bit)."""

from __future__ import annotations

import pytest
import torch

from noma_prorl_bench.config import make_config
from noma_prorl_bench.models.base import fed_tokens, policy_logprobs
from noma_prorl_bench.models.gru import GRUPolicy

pytestmark = pytest.mark.unit

V, B, G, P, T = 20, 3, 4, 6, 5


def _policy(dtype=torch.float32) -> GRUPolicy:
    torch.manual_seed(0)
    return GRUPolicy(V, hidden=16).to(dtype)


def _batch(seed: int = 0) -> torch.Tensor:
    """B prompts x G rows with random responses, rows shuffled (groups need not be contiguous)."""
    gen = torch.Generator().manual_seed(seed)
    prompts = torch.randint(1, V, (B, P), generator=gen).repeat_interleave(G, 0)
    tokens = torch.cat([prompts, torch.randint(1, V, (B * G, T), generator=gen)], 1)
    return tokens[torch.randperm(B * G, generator=gen)]


def _pass(policy, tokens, shared: bool):
    policy.shared_prompt = shared
    policy.zero_grad()
    logp, ent, _ = policy_logprobs(policy, tokens, P, 0.7, with_entropy=True)
    w = torch.linspace(0.1, 1.0, logp.numel(), dtype=logp.dtype).view_as(logp)
    ((logp * w).sum() + ent.sum()).backward()
    return logp.detach(), ent.detach(), {n: p.grad.clone() for n, p in policy.named_parameters()}


@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-12), (torch.float32, 1e-5)])
def test_same_function_as_the_whole_pass(dtype, tol):
    policy, tokens = _policy(dtype), _batch()
    lp0, ent0, g0 = _pass(policy, tokens, False)
    lp1, ent1, g1 = _pass(policy, tokens, True)
    assert lp0.shape == lp1.shape == (B * G, T)
    assert (lp0 - lp1).abs().max() <= tol and (ent0 - ent1).abs().max() <= tol * 10
    if dtype == torch.float64:
        for n in g0:
            assert torch.allclose(g0[n], g1[n], rtol=1e-9, atol=1e-12), n
    # float32 may round differently (another summation order) or not, by CPU type: only the tolerance holds


def test_the_counters_count_the_positions_the_gru_ran():
    policy, tokens = _policy(), _batch()
    ran = []
    hook = policy.gru.register_forward_hook(lambda m, inp, out: ran.append(inp[0].shape[0] * inp[0].shape[1]))
    N, L = tokens.shape
    for shared, expected in ((False, N * L), (True, B * (P - 1) + N * (L - P + 1))):
        policy.shared_prompt = shared
        ran.clear()
        with torch.no_grad():
            policy_logprobs(policy, tokens, P)
        assert sum(ran) == expected == fed_tokens(policy, tokens, P), (shared, ran)
    hook.remove()
    distinct = torch.randint(1, V, (4, P + T), generator=torch.Generator().manual_seed(1))
    assert fed_tokens(policy, distinct, P) == distinct.numel()  # no prompt shared: the whole pass


def test_off_is_the_modules_own_forward_bit_for_bit():
    policy, tokens = _policy(), _batch()
    h, _ = policy.gru(policy.embed(tokens))
    assert torch.equal(policy(tokens), policy.head(h))
    policy.shared_prompt = True  # only a log-prob pass (keep_last and prompt_len) shares
    assert torch.equal(policy(tokens), policy.head(h))
    assert torch.equal(policy.hidden_states(tokens, keep_last=T + 1), h[:, -T - 1 :])


def test_trainer_counters_exact_and_reference_close(tmp_path):
    """Through the trainer at B 4 x G 4: the rollout is untouched, the reference's log-probs equal
    off's within 1e-5, and the counters drop by exactly (rows - distinct prompts) x (P - 1) per pass."""
    from noma_prorl_bench.training.trainer import Trainer

    base = {
        "outdir": str(tmp_path / "run"),
        "warmstart_steps": 2,
        "batch_size": 4,
        "group_size": 4,
        "n_val": 8,
        "eval_every": 100,
        "steps": 2,
        "quiet": True,
        "variant": "A",
        "ref_compute": "cached",
        "beta": 0.05,
    }
    out = {}
    for shared in (False, True):
        tr = Trainer.from_config(make_config({**base, "shared_prompt": shared})).start()
        assert tr.policy.shared_prompt is shared and tr.ref.model.shared_prompt is shared
        seen = []
        collect = tr.collector.collect
        tr.collector.collect = lambda: seen.append(collect()) or seen[-1]  # the step's own batch
        m = tr.train_step()
        batch = seen[0][0]
        out[shared] = (batch.tokens, batch.prompt_len, tr.ref.minibatch(batch.tokens, batch.prompt_len, slice(None)), m)
    assert torch.equal(out[False][0], out[True][0])
    assert (out[False][2] - out[True][2]).abs().max() <= 1e-5
    tokens, Pb = out[False][0], out[False][1]
    N, U = tokens.shape[0], len({tuple(r) for r in tokens[:, : Pb - 1].tolist()})
    m0, m1 = out[False][3], out[True][3]
    assert m0["count/tokens_ref"] == tokens.numel()
    assert m0["count/tokens_ref"] - m1["count/tokens_ref"] == (N - U) * (Pb - 1)
    E, M = tr.learner.opt_spec.ppo_epochs, tr.learner.opt_spec.minibatches
    bounds = torch.linspace(0, N, M + 1).long().tolist()  # the learner's contiguous minibatches
    per_epoch = sum(
        (b - a - len({tuple(r) for r in tokens[a:b, : Pb - 1].tolist()})) * (Pb - 1) for a, b in zip(bounds, bounds[1:])
    )
    assert m0["count/tokens_policy"] - m1["count/tokens_policy"] == E * per_epoch > 0
    for k in ("loss/total", "kl/k3", "policy/entropy"):
        assert m0[k] == pytest.approx(m1[k], rel=1e-4, abs=1e-6), k
