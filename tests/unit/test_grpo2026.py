"""Unit tests for grpo2026.py, the current edition of the course API: each function and mode against values
worked by hand or with a plain loop in the test, gradient accumulation, and a full train step on a tiny HF model."""

import copy
import math

import pytest
import torch

from noma_prorl_bench import grpo2026 as G

torch.set_num_threads(1)


def _fake_reward(response, truth):
    ok = float(truth in response)
    return {
        "reward": ok + 0.5 * float(response.startswith("<")),
        "format_reward": float(response.startswith("<")),
        "answer_reward": ok,
    }


# ---------------------------------------------------------------- rewards and advantages


@pytest.mark.unit
def test_compute_rollout_rewards_raw_rewards_and_parts():
    raw, meta = G.compute_rollout_rewards(_fake_reward, ["<4", "5", "<5", "4"], ["4", "4", "4", "4"])
    assert raw.dtype == torch.float32 and raw.tolist() == [1.5, 0.0, 0.5, 1.0]
    assert meta["reward_mean"] == pytest.approx(3.0 / 4)
    assert meta["format_reward_mean"] == 0.5 and meta["answer_reward_mean"] == 0.5
    assert meta["reward_max"] == 1.5 and meta["reward_min"] == 0.0
    with pytest.raises(ValueError):
        G.compute_rollout_rewards(_fake_reward, ["a", "b"], ["4"])


def _loop_advantages(rewards, group_size, baseline, normalizer, eps):
    """The definition, one group at a time in plain Python (unbiased std, eps added to the divisor)."""
    out = []
    for g in range(0, len(rewards), group_size):
        grp = rewards[g : g + group_size]
        mean = sum(grp) / len(grp)
        std = math.sqrt(sum((x - mean) ** 2 for x in grp) / (len(grp) - 1))
        for x in grp:
            a = x - mean if baseline == "mean" else x
            a = a / (std + eps) if normalizer == "std" else a / (mean + eps) if normalizer == "mean" else a
            out.append(a)
    return out


REWARDS = [1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 2.0, 1.0, 0.5, 0.5, 0.5, 0.5]


@pytest.mark.unit
@pytest.mark.parametrize("baseline", ["mean", "none"])
@pytest.mark.parametrize("normalizer", ["std", "none", "mean"])
def test_group_normalized_rewards_every_baseline_and_normalizer(baseline, normalizer):
    adv, meta = G.compute_group_normalized_rewards(
        torch.tensor(REWARDS), 4, baseline=baseline, advantage_eps=0.01, advantage_normalizer=normalizer
    )
    assert adv.shape == (12,)
    assert adv.tolist() == pytest.approx(_loop_advantages(REWARDS, 4, baseline, normalizer, 0.01), rel=1e-6)
    assert all(math.isfinite(v) for v in meta.values())


@pytest.mark.unit
def test_group_normalized_rewards_hand_worked():
    r = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0])
    # GRPO: group 0 mean .5, unbiased var (4 * .25) / 3 -> std 1/sqrt(3); A = +-.5 / (std + eps)
    grpo, _ = G.compute_group_normalized_rewards(r, 4)
    w = 0.5 / (3**-0.5 + 1e-6)
    assert grpo.tolist() == pytest.approx([w, -w, -w, w, 0, 0, 0, 0], rel=1e-6)
    # MaxRL: (r - mean) / (mean + eps) = +-.5 / .5 = +-1 (eps 1e-6 in the divisor), group 1: 0 / 1 = 0
    maxrl, _ = G.compute_group_normalized_rewards(r, 4, advantage_normalizer="mean")
    m = 0.5 / (0.5 + 1e-6)
    assert maxrl.tolist() == pytest.approx([m, -m, -m, m, 0, 0, 0, 0], rel=1e-7)
    # Dr. GRPO: r - mean; RFT: the raw rewards exactly
    dr, _ = G.compute_group_normalized_rewards(r, 4, advantage_normalizer="none")
    assert dr.tolist() == [0.5, -0.5, -0.5, 0.5, 0, 0, 0, 0]
    rft, _ = G.compute_group_normalized_rewards(r, 4, baseline="none", advantage_normalizer="none")
    assert torch.equal(rft, r)
    # MaxRL on a group that never succeeds: numerator 0 -> 0, not 0/0
    zero, _ = G.compute_group_normalized_rewards(torch.zeros(4), 4, advantage_normalizer="mean")
    assert zero.tolist() == [0.0] * 4


@pytest.mark.unit
def test_group_normalized_rewards_rejects_unknown_modes():
    with pytest.raises(ValueError, match="baseline"):
        G.compute_group_normalized_rewards(torch.zeros(4), 2, baseline="median")
    with pytest.raises(ValueError, match="normalizer"):
        G.compute_group_normalized_rewards(torch.zeros(4), 2, advantage_normalizer="max")
    with pytest.raises(ValueError, match="group_size"):
        G.compute_group_normalized_rewards(torch.zeros(5), 2)


# ---------------------------------------------------------------- per-token losses

# two rows of 3 positions; row 0 has response tokens at 0,1, row 1 at 1,2; ratios chosen around the clip
LOGP = [[math.log(0.5), math.log(0.2), math.log(0.9)], [math.log(0.3), math.log(0.48), math.log(0.09)]]
OLD = [[math.log(0.4), math.log(0.2), math.log(0.1)], [math.log(0.3), math.log(0.8), math.log(0.1)]]
MASK = [[1, 1, 0], [0, 1, 1]]
ADV = [2.0, -1.0]
CLIP = 0.2


def _inputs():
    return (
        torch.tensor(ADV),
        torch.tensor(LOGP, requires_grad=True),
        torch.tensor(OLD),
        torch.tensor(MASK, dtype=torch.bool),
    )


def _loop_loss(method):
    """Per-token loss in plain Python: the formula at every position; gspo's row value everywhere."""
    out = []
    for i in range(2):
        a, row = ADV[i], []
        if method == "gspo":
            logs = [LOGP[i][t] - OLD[i][t] for t in range(3) if MASK[i][t]]
            s = math.exp(sum(logs) / len(logs))
            val = -min(s * a, min(max(s, 1 - CLIP), 1 + CLIP) * a)
            out.append([val] * 3)
            continue
        for t in range(3):
            r = math.exp(LOGP[i][t] - OLD[i][t])
            if method == "none":
                row.append(-a * LOGP[i][t])
            elif method == "noclip":
                row.append(-r * a)
            else:
                row.append(-min(r * a, min(max(r, 1 - CLIP), 1 + CLIP) * a))
        out.append(row)
    return out


@pytest.mark.unit
@pytest.mark.parametrize("method", ["none", "noclip", "grpo", "gspo"])
def test_policy_gradient_loss_every_reweighting(method):
    adv, logp, old, mask = _inputs()
    loss, meta = G.compute_policy_gradient_loss(
        adv, logp, method, old_log_probs=old, cliprange=CLIP, response_mask=mask
    )
    assert loss.shape == (2, 3)
    want = _loop_loss(method)
    for i in range(2):
        assert loss[i].tolist() == pytest.approx(want[i], rel=1e-6), (method, i)
    assert set(meta) >= {"clip_fraction", "ratio_mean"} and all(torch.is_tensor(v) for v in meta.values())


@pytest.mark.unit
def test_policy_gradient_loss_advantage_shapes_and_on_policy_default():
    adv, logp, _, _ = _inputs()
    a, _ = G.compute_policy_gradient_loss(adv, logp)
    b, _ = G.compute_policy_gradient_loss(adv[:, None], logp)
    assert torch.equal(a, b)
    assert a[1].tolist() == pytest.approx([v for v in LOGP[1]])  # A = -1: loss = logp


@pytest.mark.unit
def test_grpo_clip_fraction_counts_response_tokens_on_the_flat_side():
    adv, logp, old, mask = _inputs()
    # response-token ratios: row 0 (A=2): 1.25 (> 1.2, clipped), 1.0; row 1 (A=-1): .6 (< .8, clipped), .9
    _, meta = G.compute_policy_gradient_loss(adv, logp, "grpo", old, CLIP, mask)
    assert float(meta["clip_fraction"]) == pytest.approx(2 / 4)
    _, meta = G.compute_policy_gradient_loss(adv, logp, "noclip", old, CLIP, mask)
    assert float(meta["clip_fraction"]) == 0.0
    assert float(meta["ratio_mean"]) == pytest.approx((1.25 + 1.0 + 0.6 + 0.9) / 4)


@pytest.mark.unit
def test_gspo_clip_fraction_and_masked_positions_repeat_the_sequence_value():
    adv, logp, old, mask = _inputs()
    loss, meta = G.compute_policy_gradient_loss(adv, logp, "gspo", old, CLIP, mask)
    assert loss[0, 2].item() == loss[0, 0].item() and loss[1, 0].item() == loss[1, 1].item()
    # s_0 = sqrt(1.25 * 1) = 1.118 (inside the clip), s_1 = sqrt(.6 * .9) = .735 < .8 with A < 0: clipped
    assert float(meta["clip_fraction"]) == pytest.approx(2 / 4)  # row 1's two response tokens of four


@pytest.mark.unit
def test_noclip_and_grpo_gradients_by_hand():
    adv, logp, old, mask = _inputs()
    loss, _ = G.compute_policy_gradient_loss(adv, logp, "noclip", old, CLIP, mask)
    (loss * mask).sum().backward()
    # d(-r A)/dlogp = -r A on response tokens: row 0 (A=2): -1.25*2, -1*2; row 1 (A=-1): +.6, +.9
    want = [[-2.5, -2.0, 0.0], [0.0, 0.6, 0.9]]
    assert logp.grad.tolist() == [pytest.approx(w) for w in want]
    adv, logp, old, mask = _inputs()
    loss, _ = G.compute_policy_gradient_loss(adv, logp, "grpo", old, CLIP, mask)
    (loss * mask).sum().backward()
    # clipped tokens ([0,0] r=1.25 A>0, [1,1] r=.6 A<0) get no gradient; the others -r A
    assert logp.grad.tolist() == [pytest.approx(w) for w in [[0.0, -2.0, 0.0], [0.0, 0.0, 0.9]]]


@pytest.mark.unit
def test_policy_gradient_loss_rejects_missing_inputs():
    adv, logp, old, mask = _inputs()
    with pytest.raises(ValueError, match="old_log_probs"):
        G.compute_policy_gradient_loss(adv, logp, "noclip")
    with pytest.raises(ValueError, match="cliprange"):
        G.compute_policy_gradient_loss(adv, logp, "grpo", old)
    with pytest.raises(ValueError, match="importance_reweighting_method"):
        G.compute_policy_gradient_loss(adv, logp, "ppo", old, CLIP)


# ---------------------------------------------------------------- aggregation and accumulation


@pytest.mark.unit
def test_aggregate_sequence_and_constant_by_hand():
    loss = torch.tensor([[1.0, 2.0, 3.0], [4.0, float("nan"), float("inf")]])
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]], dtype=torch.bool)
    # sequence: mean(6/3, 4/1) = 3; constant: (6 + 4) / 5 = 2; values under mask 0 never read
    assert G.aggregate_loss_across_microbatch(loss, mask).item() == pytest.approx(3.0)
    assert G.aggregate_loss_across_microbatch(loss, mask, "constant", 5).item() == pytest.approx(2.0)
    with pytest.raises(ValueError, match="normalization_constant"):
        G.aggregate_loss_across_microbatch(loss, mask, "constant")
    with pytest.raises(ValueError, match="loss_normalization"):
        G.aggregate_loss_across_microbatch(loss, mask, "token")


@pytest.mark.unit
@pytest.mark.parametrize("norm", ["sequence", "constant"])
def test_microbatch_shares_add_up_to_the_full_batch_gradient(norm):
    torch.manual_seed(0)
    logp = torch.randn(6, 5, requires_grad=True)
    mask = torch.rand(6, 5) > 0.3
    mask[:, 0] = True
    adv = torch.randn(6)

    def agg(rows):
        tok, _ = G.compute_policy_gradient_loss(adv[rows], logp[rows])
        return G.aggregate_loss_across_microbatch(tok, mask[rows], norm, 30)

    agg(slice(0, 6)).backward()
    full = logp.grad.clone()
    logp.grad = None
    for a in range(0, 6, 2):  # three microbatches: sequence -> each mean weighs 2/6; constant -> as is
        (agg(slice(a, a + 2)) * (2 / 6 if norm == "sequence" else 1.0)).backward()
    assert torch.allclose(logp.grad, full, atol=1e-7)


# ---------------------------------------------------------------- the full train step on a tiny HF model

PROMPTS = ["1+1=", "1+1=", "2+2=", "2+2="]
RESPONSES = ["<2", "3", "<4", "41"]
TRUTHS = ["2", "2", "4", "4"]


@pytest.fixture
def tiny():
    pytest.importorskip("transformers")
    from transformers import AutoModelForCausalLM

    from noma_prorl_bench.models.tiny_hf import build_char_tokenizer, tiny_config

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(tiny_config("qwen2", 260, 16, 1, 2))
    return model, build_char_tokenizer(add_bos=False)


def _by_hand(model, tokenizer, adv, old_shift=0.0):
    """Full-batch loss of the none/noclip step written out: ids, logp, per-sequence mean, batch mean.

    old_shift: old log-probs = current - old_shift on response tokens, i.e. a ratio of e^old_shift."""
    seqs = [
        tokenizer.encode(p, add_special_tokens=False) + tokenizer.encode(r, add_special_tokens=False)
        for p, r in zip(PROMPTS, RESPONSES)
    ]
    starts = [len(tokenizer.encode(p, add_special_tokens=False)) for p in PROMPTS]
    L = max(len(s) for s in seqs)
    ids = torch.tensor([s + [tokenizer.pad_token_id] * (L - len(s)) for s in seqs])
    logits = model(ids[:, :-1]).logits.float()
    logp = torch.log_softmax(logits, -1).gather(-1, ids[:, 1:, None]).squeeze(-1)
    ent = -(logits.softmax(-1) * torch.log_softmax(logits, -1)).sum(-1)
    total, ent_sum, n_tok = 0.0, 0.0, 0
    for i, s in enumerate(seqs):
        pos = range(starts[i] - 1, len(s) - 1)  # label positions of the response tokens
        if old_shift:
            terms = [-adv[i] * torch.exp(logp[i, t] - (logp[i, t].detach() - old_shift)) for t in pos]
        else:
            terms = [-adv[i] * logp[i, t] for t in pos]
        total = total + sum(terms) / len(terms) / len(seqs)
        ent_sum += sum(float(ent[i, t].detach()) for t in pos)
        n_tok += len(pos)
    return total, ent_sum / n_tok, logp.detach()


def _advantages():
    raw = [_fake_reward(r, g)["reward"] for r, g in zip(RESPONSES, TRUTHS)]  # 1.5, 0, 1.5, 0.5
    return _loop_advantages(raw, 2, "mean", "std", 1e-6)


@pytest.mark.hf
def test_grpo_train_step_one_clipped_sgd_step(tiny):
    model, tok = tiny
    ref = copy.deepcopy(model)
    loss_ref, ent_ref, _ = _by_hand(ref, tok, _advantages())
    loss_ref.backward()
    grads = {n: p.grad.clone() for n, p in ref.named_parameters() if p.grad is not None}
    norm = math.sqrt(sum(float(g.pow(2).sum()) for g in grads.values()))
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    max_norm = norm / 4  # the clip is active
    loss, meta = G.grpo_train_step(model, tok, opt, 2, max_norm, _fake_reward, PROMPTS, RESPONSES, TRUTHS, 2)
    assert loss.item() == pytest.approx(float(loss_ref.detach()), rel=1e-4, abs=1e-6)
    assert float(meta["grad_norm"]) == pytest.approx(norm, rel=1e-4)  # before clipping
    scale = max_norm / (norm + 1e-6)  # torch's clip_grad_norm_ factor
    for n, p in model.named_parameters():
        want = before[n] - 0.5 * scale * grads.get(n, torch.zeros_like(p))
        assert torch.allclose(p.detach(), want, atol=1e-6), n
        assert p.grad is None or not p.grad.any(), n
    assert meta["token_entropy"] == pytest.approx(ent_ref, rel=1e-4)
    assert meta["clip_fraction"] == 0.0
    for key in ("loss", "clip_fraction", "grad_norm", "token_entropy", "reward_mean", "format_reward_mean"):
        assert math.isfinite(float(meta[key])), key


@pytest.mark.hf
@pytest.mark.parametrize("norm", ["sequence", "constant"])
def test_grpo_train_step_accumulation_equals_full_batch(tiny, norm):
    model, tok = tiny
    deltas = [_step_delta(model, tok, k=k, loss_normalization=norm, normalization_constant=7)[0] for k in (1, 2, 4)]
    for other in deltas[1:]:
        for d0, d in zip(deltas[0], other):
            assert torch.allclose(d0, d, atol=1e-6)
    assert any(d.abs().sum() > 0 for d in deltas[0])


def _step_delta(model, tok, **kw):
    """One SGD step at lr 1 on a copy of model, no clip: the parameters' change (= minus the gradient) and meta."""
    m = copy.deepcopy(model)
    before = [p.detach().clone() for p in m.parameters()]
    _, meta = G.grpo_train_step(
        m,
        tok,
        torch.optim.SGD(m.parameters(), lr=1.0),
        kw.pop("k", 2),
        None,
        _fake_reward,
        PROMPTS,
        RESPONSES,
        TRUTHS,
        2,
        **kw,
    )
    return [b - p.detach() for b, p in zip(before, m.parameters())], meta


@pytest.mark.hf
def test_grpo_train_step_uses_old_log_probs(tiny):
    model, tok = tiny
    raw = [_fake_reward(r, g)["reward"] for r, g in zip(RESPONSES, TRUTHS)]  # 1.5, 0, 1.5, .5
    _, _, logp = _by_hand(copy.deepcopy(model), tok, raw)
    c = 0.3  # old log-probs c below the current ones: every ratio is e^c
    old = logp - c
    rft = dict(baseline="none", advantage_normalizer="none")  # A = the raw rewards
    on, _ = _step_delta(model, tok, **rft)
    off, meta = _step_delta(model, tok, importance_reweighting_method="noclip", old_log_probs=old, **rft)
    # noclip: loss -r A per token, here -e^c A for every token -> mean over sequences -e^c mean(A)
    assert meta["loss"] == pytest.approx(-math.exp(c) * sum(raw) / 4, rel=1e-5)
    assert meta["ratio_mean"] == pytest.approx(math.exp(c), rel=1e-5)
    # its gradient -A r grad logp is e^c times the on-policy one
    for d_on, d_off in zip(on, off):
        assert torch.allclose(d_off, math.exp(c) * d_on, atol=1e-6)
    assert any(d.abs().sum() > 0 for d in on)
    # grpo with cliprange .2: e^.3 = 1.35 > 1.2, every token with A > 0 is on the flat side, those with A < 0 not
    _, meta = _step_delta(model, tok, importance_reweighting_method="grpo", old_log_probs=old, cliprange=0.2)
    adv = _advantages()
    n_pos = sum(len(r) for r, a in zip(RESPONSES, adv) if a > 0)
    assert meta["clip_fraction"] == pytest.approx(n_pos / sum(len(r) for r in RESPONSES))
    with pytest.raises(ValueError, match="old_log_probs must have shape"):
        _step_delta(model, tok, importance_reweighting_method="noclip", old_log_probs=old[:, :-1])
