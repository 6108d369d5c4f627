"""Unit tests for objective.py (reward shaping, loss mask, dynamic-sampling assembly) and the
reference holder's logits path used by --kl_estimator full."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from noma_prorl_bench.algorithms import objective as O
from noma_prorl_bench.rollout import collector as C
from noma_prorl_bench.rollout.reference import ReferenceHolder
from noma_prorl_bench.rollout.sampling import RolloutBatch

torch.set_num_threads(1)
PAD = 0


def _batch(rewards, P, T, G=2, fill=1):
    """A fake rollout round: B = len(rewards)//G groups, tokens = `fill`, every token generated."""
    n = len(rewards)
    return RolloutBatch(
        tokens=torch.full((n, P + T), fill),
        mask=torch.ones(n, T),
        logp_old=torch.full((n, T), -0.5),
        rewards=torch.tensor(rewards, dtype=torch.float32),
        truncated=torch.zeros(n, dtype=torch.bool),
        group=torch.arange(n // G).repeat_interleave(G),
        prompt_len=P,
        prompts=[f"p{fill}{i}" for i in range(n)],
        answers=["a"] * n,
        responses=["r"] * n,
    )


def test_assemble_keeps_informative_groups_in_order_and_pads():
    # round 0 groups: [1,1] flat, [0,1] informative; round 1 (longer P and T): [0,0] flat, [1,0] informative
    r0 = _batch([1, 1, 0, 1], P=2, T=3, fill=1)
    r1 = _batch([0, 0, 1, 0], P=3, T=4, fill=2)
    b, m = C.assemble_groups([r0, r1], B=2, G=2, pad_id=PAD)
    assert b.rewards.tolist() == [0, 1, 1, 0] and b.prompts == ["p12", "p13", "p22", "p23"]
    assert b.tokens.shape == (4, 3 + 4) and b.prompt_len == 3 and b.T == 4
    assert b.tokens[0].tolist() == [PAD, 1, 1, 1, 1, 1, PAD]  # left-padded prompt, right-padded response
    assert b.mask[0].tolist() == [1, 1, 1, 0] and b.logp_old[0, 3] == 0
    assert b.group.tolist() == [0, 0, 1, 1]
    assert m == {
        "dapo/dropped_groups": 2.0,
        "dapo/filler_groups": 0.0,
        "dapo/extra_rounds": 1.0,
        "dapo/reward_mean_sampled": 0.5,
    }


def test_assemble_fills_short_batch_with_dropped_groups():
    r0 = _batch([1, 1, 0, 1, 0, 0], P=2, T=2)  # one informative group of three
    b, m = C.assemble_groups([r0], B=3, G=2, pad_id=PAD)
    assert b.rewards.tolist() == [0, 1, 1, 1, 0, 0]  # informative first, then fillers in order
    assert m["dapo/filler_groups"] == 2.0 and m["dapo/dropped_groups"] == 0.0


def test_shape_rewards_overlong_and_kl_penalty():
    rewards = torch.tensor([1.0, 0.0])
    mask = torch.tensor([[1.0, 1, 0, 0, 0, 0, 0, 0], [1.0] * 8])  # lengths 2 and 8 (truncated), T_max = 8
    # cache_len = 8 // 4 = 2, expected = 6: length 2 -> 0, length 8 -> (6 - 8)/2 = -1
    shaped, m = O.shape_rewards(rewards, mask, overlong="shape", T_max=8)
    assert shaped.tolist() == [1.0, -1.0] and m["dapo/overlong_penalty_mean"] == -0.5
    # KL in the reward: beta 0.5, per-token KL 0.1 summed over 2 and 8 tokens -> 0.1 and 0.4
    kl_tok = torch.full((2, 8), 0.1)
    shaped, m = O.shape_rewards(rewards, mask, overlong="none", T_max=8, kl_tok=kl_tok, beta=0.5)
    assert shaped.tolist() == pytest.approx([0.9, -0.4])
    assert m["reward/kl_penalty_mean"] == pytest.approx(0.25)
    assert O.shape_rewards(rewards, mask, overlong="none", T_max=8) == (rewards, {})


def test_loss_mask_filter_zeroes_truncated_rows():
    mask = torch.ones(3, 2)
    out, m = O.loss_mask(mask, torch.tensor([False, True, False]), "filter")
    assert out.tolist() == [[1, 1], [0, 0], [1, 1]] and m["dapo/filtered_rows"] == 1.0
    assert O.loss_mask(mask, torch.tensor([True, True, True]), "none")[0] is mask


class _Toy(nn.Module):
    vocab_size = 5

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(5, 5)

    def forward(self, tokens):
        return self.emb(tokens).cumsum(1)  # [N, L, V], causal


def test_reference_logits_same_in_every_mode_and_counted_once():
    torch.manual_seed(0)
    pol, P = _Toy(), 2
    tokens = torch.randint(0, 5, (6, P + 3))
    sl = slice(2, 4)
    got = {}
    for mode in ("naive_epoch", "cached", "ring"):
        ref = ReferenceHolder(pol, mode, temperature=1.0, max_seqs=8, max_resp_len=4, keep_logits=True)
        ref.prepare(tokens, P)
        ref.minibatch(tokens[sl], P, sl)
        got[mode] = ref.minibatch_logits(tokens[sl], P, sl).clone()  # [2, 3, V]
        assert ref.pop_counts()["count/ref_fwd"] == 1  # naive: the minibatch's forward
    assert torch.equal(got["naive_epoch"], got["cached"]) and torch.equal(got["cached"], got["ring"])
    assert got["cached"].shape == (2, 3, 5)
    with pytest.raises(RuntimeError):
        ReferenceHolder(pol, "cached").minibatch_logits(tokens[sl], P, sl)


# ------------------------------------------------------------------------ the Objective seam
def _objective(T_max: int = 4, **flags):
    from noma_prorl_bench.algorithms.kl_term import KLTerm
    from noma_prorl_bench.config import make_config
    from noma_prorl_bench.config.specs import RunSpecs

    spec = RunSpecs.from_config(make_config({"outdir": "x", "batch_size": 2, "group_size": 2, **flags})).objective
    return O.Objective(spec, KLTerm.from_spec(spec.kl), T_max)


@pytest.mark.unit
def test_objective_advantages_hand_worked_grpo_and_overlong_shape():
    rewards = torch.tensor([1.0, 0.0, 0.5, 0.5])  # B=2 groups of G=2
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0], [1, 1, 1, 0]], dtype=torch.float32)
    adv, m, shape = _objective().advantages(rewards, mask, beta=0.05)
    s = 1 / (2**0.5 + 1e-6)  # (r - mean) / (unbiased std + eps)
    assert adv.tolist() == pytest.approx([s, -s, 0.0, 0.0]) and shape == {}
    # --overlong shape, T_max 4, cache 1: a 4-token (truncated) response gets -1 before the estimator
    adv2, _, shape2 = _objective(overlong="shape").advantages(rewards, mask, beta=0.05)
    shaped = torch.tensor([1.0, -1.0, 0.5, 0.5])
    assert shape2["reward/shaped_mean"] == pytest.approx(float(shaped.mean()))
    assert adv2.tolist() == pytest.approx([s, -s, 0.0, 0.0])  # same spread, same sign


@pytest.mark.unit
def test_objective_token_loss_is_policy_loss_plus_beta_kl_term():
    torch.manual_seed(0)
    logp = (-torch.rand(3, 4)).requires_grad_(True)
    logp_old, anchor = logp.detach() - 0.1, logp.detach() + 0.2
    adv, mask = torch.tensor([1.0, -1.0, 0.5]), torch.ones(3, 4)
    obj = _objective(loss="reinforce", beta=0.5)
    tok, pg, kl_tok, kl, _ = obj.token_loss(logp, logp_old, adv, mask, anchor=anchor, logp_sampler=logp_old, beta=0.5)
    assert torch.allclose(pg, -adv[:, None] * logp)  # REINFORCE: -A logp
    d = anchor - logp  # k3 = e^d - 1 - d
    assert torch.allclose(kl_tok, d.exp() - 1 - d) and torch.equal(kl["k3"], kl_tok)
    assert torch.allclose(tok, pg + 0.5 * kl_tok)
    tok.sum().backward()  # d/dlogp: -A + 0.5 * (1 - e^d) per token
    assert torch.allclose(logp.grad, -adv[:, None] + 0.5 * (1 - d.detach().exp()))
    in_reward = _objective(loss="reinforce", kl_in="reward")
    tok2, pg2, kl2, _, _ = in_reward.token_loss(
        logp, logp_old, adv, mask, anchor=anchor, logp_sampler=logp_old, beta=0.5
    )
    assert torch.equal(kl2, torch.zeros_like(kl2)) and torch.allclose(tok2, pg2)  # the KL went to the reward


@pytest.mark.unit
def test_objective_reduce_is_the_runs_aggregation():
    from noma_prorl_bench.algorithms import losses

    x, mask = torch.arange(8.0).view(2, 4), torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1]], dtype=torch.float32)
    assert _objective().agg == "token-mean" and _objective().reduce(x, mask).item() == pytest.approx(
        (0 + 1 + 4 + 5 + 6 + 7) / 6
    )
    gspo = _objective(loss="gspo")
    assert gspo.agg == "seq-mean-token-mean"
    assert gspo.reduce(x, mask).item() == pytest.approx(losses.aggregate(x, mask, "seq-mean-token-mean").item())
    assert gspo.reduce(x, mask).item() == pytest.approx((0.5 + 5.5) / 2)
