"""Unit tests for grpo.py, the course-assignment API: names, shapes and hand-worked values."""

import math
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from noma_prorl_bench import grpo as G
from noma_prorl_bench.algorithms import losses as L

torch.set_num_threads(1)


@pytest.mark.unit
def test_compute_group_normalized_rewards_with_r1_zero():
    ok, bad = "a </think> <answer> 4 </answer>", "a </think> <answer> 5 </answer>"
    responses = [ok, bad, bad, ok, ok, ok]
    adv, raw, meta = G.compute_group_normalized_rewards(
        G.r1_zero_reward_fn, responses, ["4"] * 6, group_size=3, advantage_eps=1e-6, normalize_by_std=True
    )
    # group 0 rewards (1,0,0): mean 1/3, unbiased std = sqrt(((2/3)^2 + 2 (1/3)^2) / 2) = sqrt(1/3)
    s = math.sqrt(1 / 3)
    assert raw.tolist() == [1.0, 0.0, 0.0, 1.0, 1.0, 1.0]
    assert adv[:3].tolist() == pytest.approx([(2 / 3) / (s + 1e-6), -(1 / 3) / (s + 1e-6), -(1 / 3) / (s + 1e-6)])
    assert meta["format_reward_mean"] == 1.0 and meta["answer_reward_mean"] == pytest.approx(4 / 6)
    assert adv[3:].tolist() == [0.0, 0.0, 0.0]  # group 1 is all correct: no signal
    adv2, _, _ = G.compute_group_normalized_rewards(
        G.r1_zero_reward_fn, responses, ["4"] * 6, 3, 1e-6, normalize_by_std=False
    )
    assert adv2[:3].tolist() == pytest.approx([2 / 3, -1 / 3, -1 / 3])


@pytest.mark.unit
def test_naive_and_clip_losses_match_library():
    logp = torch.log(torch.tensor([[1.5, 0.5], [1.1, 1.0]]))
    old = torch.zeros(2, 2)
    a = torch.tensor([[1.0], [-2.0]])
    # naive: -A * logp
    assert torch.allclose(G.compute_naive_policy_gradient_loss(a, logp), -a * logp)
    loss, meta = G.compute_grpo_clip_loss(a, logp, old, cliprange=0.2)
    ref, _ = L.grpo_clip_loss(logp, old, a.flatten(), torch.ones(2, 2), eps_low=0.2, eps_high=0.2)
    assert torch.allclose(loss, ref)
    # only token [0,0] (A>0, r=1.5 > 1.2) takes the clipped branch
    assert meta["clipped"].tolist() == [[True, False], [False, False]]


@pytest.mark.unit
def test_compute_policy_gradient_loss_dispatch():
    logp = torch.log(torch.tensor([[0.5, 0.25]]))
    raw, adv = torch.tensor([[2.0]]), torch.tensor([[-1.0]])
    l1, _ = G.compute_policy_gradient_loss(logp, "no_baseline", raw_rewards=raw)
    l2, _ = G.compute_policy_gradient_loss(logp, "reinforce_with_baseline", advantages=adv)
    l3, m3 = G.compute_policy_gradient_loss(logp, "grpo_clip", advantages=adv, old_log_probs=logp, cliprange=0.2)
    assert torch.allclose(l1, -2 * logp) and torch.allclose(l2, logp)
    assert torch.allclose(l3, torch.ones(1, 2))  # ratio 1, A=-1 -> -min(-1, -1) = 1
    with pytest.raises(ValueError):
        G.compute_policy_gradient_loss(logp, "grpo_clip", advantages=adv)
    with pytest.raises(ValueError):
        G.compute_policy_gradient_loss(logp, "ppo")


@pytest.mark.unit
def test_grpo_microbatch_train_step_value_and_accumulation():
    logp = torch.tensor([[-1.0, -2.0, -3.0], [-1.0, -1.0, -1.0]], requires_grad=True)
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    adv = torch.tensor([[1.0], [2.0]])
    loss, _ = G.grpo_microbatch_train_step(logp, mask, 2, "reinforce_with_baseline", advantages=adv)
    # per token -A logp: row0 [1, 2, (3)] -> masked mean 1.5; row1 [2, ...] -> 2; batch mean 1.75; / 2
    assert loss.item() == pytest.approx(0.875)
    g1 = logp.grad.clone()
    # d/dlogp: row0 -A/(2 tokens)/(2 seqs)/(2 accum) = -.125; row1 -2/1/2/2 = -.5
    assert torch.allclose(g1, torch.tensor([[-0.125, -0.125, 0.0], [-0.5, 0.0, 0.0]]))
    G.grpo_microbatch_train_step(logp, mask, 2, "reinforce_with_baseline", advantages=adv)
    assert torch.allclose(logp.grad, 2 * g1)  # gradients accumulate across calls


@pytest.mark.unit
def test_sft_microbatch_train_step():
    logp = torch.tensor([[-1.0, -2.0], [-4.0, -8.0]], requires_grad=True)
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    loss, meta = G.sft_microbatch_train_step(logp, mask, gradient_accumulation_steps=2, normalize_constant=2.0)
    # per-seq sums -3, -4; /2 -> -1.5, -2; mean -1.75; negate, / 2 accum -> .875
    assert loss.item() == pytest.approx(0.875)
    assert meta["masked_log_prob_sum"].tolist() == [-1.5, -2.0]
    assert torch.allclose(logp.grad, torch.tensor([[-0.125, -0.125], [-0.125, 0.0]]))


class _Tiny(nn.Module):
    def __init__(self, hf_style):
        super().__init__()
        self.emb, self.hf_style = nn.Embedding(6, 4), hf_style

    def forward(self, ids):
        logits = self.emb(ids)  # [B,T,V=4]
        return SimpleNamespace(logits=logits) if self.hf_style else logits


@pytest.mark.unit
@pytest.mark.parametrize("hf_style", [False, True])
def test_get_response_log_probs(hf_style):
    torch.manual_seed(0)
    model = _Tiny(hf_style)
    ids, labels = torch.tensor([[1, 2, 3]]), torch.tensor([[0, 3, 1]])
    out = G.get_response_log_probs(model, ids, labels, return_token_entropy=True)
    logits = model.emb(ids)
    want = torch.log_softmax(logits, -1).gather(-1, labels[..., None]).squeeze(-1)
    assert torch.allclose(out["log_probs"], want)
    assert torch.allclose(out["token_entropy"], G.compute_entropy(logits))
    assert "token_entropy" not in G.get_response_log_probs(model, ids, labels)


class _CharTok:
    """Fake tokenizer: one id per character (ord - 96), pad id 0."""

    pad_token_id = 0

    def encode(self, text, add_special_tokens=True):
        return [ord(c) - 96 for c in text]


@pytest.mark.unit
def test_tokenize_prompt_and_output():
    out = G.tokenize_prompt_and_output(["ab", "a"], ["cde", "b"], _CharTok())
    # row 0 ids a b c d e (1..5); row 1 ids a b pad pad pad; L = 5 -> shapes [2, 4]
    assert out["input_ids"].tolist() == [[1, 2, 3, 4], [1, 2, 0, 0]]
    assert out["labels"].tolist() == [[2, 3, 4, 5], [2, 0, 0, 0]]
    # labels that are output tokens: row 0 c,d,e (label idx 1..3); row 1 b (label idx 0)
    assert out["response_mask"].tolist() == [[False, True, True, True], [True, False, False, False]]


@pytest.mark.unit
def test_masked_mean_follows_the_handout():
    t = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
    # dim=1: row 0 (1 + 2) / 2 = 1.5; row 1 is all-masked: 0 / 0 = NaN (the handout's definition)
    row = G.masked_mean(t, mask, dim=1)
    assert row[0].item() == 1.5 and torch.isnan(row[1])
    # dim=0: columns (1)/1, (2)/1, 0/0 -> [1, 2, NaN]; dim=None: (1 + 2) / 2 = 1.5
    col = G.masked_mean(t, mask, dim=0)
    assert col[:2].tolist() == [1.0, 2.0] and torch.isnan(col[2])
    assert G.masked_mean(t, mask).item() == 1.5
    assert torch.isnan(G.masked_mean(t, torch.zeros_like(mask)))
    # a bool mask works as the handout's response_mask does
    assert G.masked_mean(t, mask.bool(), dim=1)[0].item() == 1.5
    # the trainer's own helper stays guarded: an empty slice gives 0
    assert L.masked_mean_or_zero(t, mask, dim=1).tolist() == [1.5, 0.0]
