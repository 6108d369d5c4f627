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
    return RolloutBatch(tokens=torch.full((n, P + T), fill), mask=torch.ones(n, T), logp_old=torch.full((n, T), -0.5),
                        rewards=torch.tensor(rewards, dtype=torch.float32), truncated=torch.zeros(n, dtype=torch.bool),
                        group=torch.arange(n // G).repeat_interleave(G), prompt_len=P,
                        prompts=[f"p{fill}{i}" for i in range(n)], answers=["a"] * n, responses=["r"] * n)


def test_assemble_keeps_informative_groups_in_order_and_pads():
    # round 0 groups: [1,1] flat, [0,1] informative; round 1 (longer P and T): [0,0] flat, [1,0] informative
    r0 = _batch([1, 1, 0, 1], P=2, T=3, fill=1)
    r1 = _batch([0, 0, 1, 0], P=3, T=4, fill=2)
    b, m = C.assemble_groups([r0, r1], B=2, G=2, pad_id=PAD)
    assert b.rewards.tolist() == [0, 1, 1, 0] and b.prompts == ["p12", "p13", "p22", "p23"]
    assert b.tokens.shape == (4, 3 + 4) and b.prompt_len == 3 and b.T == 4
    assert b.tokens[0].tolist() == [PAD, 1, 1, 1, 1, 1, PAD]     # left-padded prompt, right-padded response
    assert b.mask[0].tolist() == [1, 1, 1, 0] and b.logp_old[0, 3] == 0
    assert b.group.tolist() == [0, 0, 1, 1]
    assert m == {"dapo/dropped_groups": 2.0, "dapo/filler_groups": 0.0, "dapo/extra_rounds": 1.0,
                 "dapo/reward_mean_sampled": 0.5}


def test_assemble_fills_short_batch_with_dropped_groups():
    r0 = _batch([1, 1, 0, 1, 0, 0], P=2, T=2)                    # one informative group of three
    b, m = C.assemble_groups([r0], B=3, G=2, pad_id=PAD)
    assert b.rewards.tolist() == [0, 1, 1, 1, 0, 0]              # informative first, then fillers in order
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
        return self.emb(tokens).cumsum(1)                               # [N, L, V], causal


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
        got[mode] = ref.minibatch_logits(tokens[sl], P, sl).clone()     # [2, 3, V]
        assert ref.pop_counts()["count/ref_fwd"] == 1                    # naive: the minibatch's forward
    assert torch.equal(got["naive_epoch"], got["cached"]) and torch.equal(got["cached"], got["ring"])
    assert got["cached"].shape == (2, 3, 5)
    with pytest.raises(RuntimeError):
        ReferenceHolder(pol, "cached").minibatch_logits(tokens[sl], P, sl)
