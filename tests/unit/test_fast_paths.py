"""Fast paths, each against its slow reference (CPU, float32 unless said otherwise):
sampler (sync every k tokens, shared prefill, HF static cache) vs the plain loop and the learner;
chunked log-probs, gradient checkpointing and micro-batching vs the plain forward/backward;
SDPA attention vs the explicit softmax(QK^T / sqrt(D)) math; bf16_mixed keeps small updates."""

import math
import tempfile

import pytest
import torch
import torch.nn.functional as F

from noma_prorl_bench.models.base import chunked_response_logprobs, response_logprobs
from noma_prorl_bench.models.gru import GRUPolicy
from noma_prorl_bench.models.transformer import TransformerPolicy
from noma_prorl_bench.rollout.sampling import generate
from noma_prorl_bench.tasks.base import EOS, PAD, CharTokenizer

pytestmark = pytest.mark.unit
V = CharTokenizer().vocab_size


def _transformer(seed=0, **kw):
    torch.manual_seed(seed)
    return TransformerPolicy(V, d_model=32, n_layers=2, n_heads=4, max_len=48, **kw)


@pytest.fixture(scope="module")
def hf_policy():
    pytest.importorskip("transformers")
    from noma_prorl_bench.models.hf import load_hf_policy
    from noma_prorl_bench.models.tiny_hf import build_tiny_hf_model

    with tempfile.TemporaryDirectory() as tmp:
        path = build_tiny_hf_model(f"{tmp}/q", "qwen2", hidden=32, layers=2, heads=4, seed=0)
        policy, tok = load_hf_policy(path)
    return policy, tok


def _hf_prompts(tok, G=1):
    # three prompts of different lengths -> left padding with PADs in front of the short ones
    return tok.encode_prompts([p for p in ("ab", "a longer prompt", "xyz 12") for _ in range(G)])


def _sample(policy, prompts, eos=EOS, pad=PAD, **kw):
    g = torch.Generator().manual_seed(3)
    return generate(policy, prompts, 12, 1.0, eos, pad, g, **kw)


# ----------------------------------------------------------------------------- sampler
@pytest.mark.parametrize("k", [2, 5, 64])
def test_sync_every_k_changes_nothing_but_the_decode_count(k):
    pol = _transformer()
    prompts = torch.randint(4, V, (6, 5), generator=torch.Generator().manual_seed(1))
    base = _sample(pol, prompts, sync_every=1)
    fast = _sample(pol, prompts, sync_every=k)
    for a, b in zip(base[:4], fast[:4]):  # response, logp_old, mask, truncated
        assert torch.equal(a, b)
    # at most k - 1 extra decodes after everyone finished, never more than T - 1 in all
    assert base[4].fwd_calls <= fast[4].fwd_calls <= min(base[4].fwd_calls + k - 1, 12)


@pytest.mark.parametrize("make", [_transformer, lambda: (torch.manual_seed(0), GRUPolicy(V, hidden=16))[1]])
def test_shared_prefill_equals_per_row_prefill(make):
    pol = make()
    uniq = torch.randint(4, V, (3, 7), generator=torch.Generator().manual_seed(2))
    prompts = uniq.repeat_interleave(4, 0)  # B=3 prompts x G=4 copies
    plain = _sample(pol, prompts)
    shared = _sample(pol, prompts, group_size=4)
    for a, b in zip(plain[:4], shared[:4]):  # tokens equal; logp to rounding (a
        assert torch.allclose(a.float(), b.float(), atol=1e-6)  # matmul of 3 rows vs 12 rows)
    T = plain[0].shape[1]
    assert plain[4].tokens == 12 * 7 + 12 * (T - 1)  # N*P prefill + N per decode
    assert shared[4].tokens == 3 * 7 + 12 * (T - 1)  # B*P prefill: each prompt once


def test_shared_prefill_is_not_used_when_rows_differ():
    pol = _transformer()
    prompts = torch.randint(4, V, (8, 5), generator=torch.Generator().manual_seed(4))  # 8 distinct rows
    assert _sample(pol, prompts, group_size=4)[4].tokens == _sample(pol, prompts)[4].tokens


def test_transformer_sampler_logprobs_equal_learner_logprobs():
    pol = _transformer()
    prompts = torch.randint(4, V, (5, 6), generator=torch.Generator().manual_seed(5))
    resp, logp_old, mask, _, _ = _sample(pol, prompts)
    logp, _, _ = response_logprobs(pol, torch.cat([prompts, resp], 1), 6)
    assert torch.allclose(logp * mask, logp_old, atol=1e-5)


def test_hf_static_cache_equals_dynamic_cache_with_left_padding(hf_policy):
    pol, tok = hf_policy
    ids = _hf_prompts(tok)
    assert (ids == tok.pad_id).any()  # the short prompts really are padded
    with torch.no_grad():
        ld, sd = pol.prefill(ids)
        ls, ss = pol.prefill(ids, capacity=ids.shape[1] + 6)
        for _ in range(6):
            assert torch.allclose(ld, ls, atol=1e-5)
            nxt = ld.argmax(-1)
            ld, sd = pol.decode(nxt, sd)
            ls, ss = pol.decode(nxt, ss)
        with pytest.raises(ValueError, match="KV cache full"):
            pol.decode(nxt, ss)


def test_hf_sampler_logprobs_equal_learner_logprobs_shared_and_static(hf_policy):
    pol, tok = hf_policy
    ids = _hf_prompts(tok, G=3)
    resp, logp_old, mask, _, stats = _sample(pol, ids, eos=tok.eos_id, pad=tok.pad_id, group_size=3)
    assert stats.tokens == 3 * ids.shape[1] + 9 * (resp.shape[1] - 1)
    logp, _, _ = response_logprobs(pol, torch.cat([ids, resp], 1), ids.shape[1])
    assert torch.allclose(logp * mask, logp_old, atol=1e-5)


# ----------------------------------------------------------------------------- memory paths
def _loss_and_grads(pol, fn, tokens, P):
    pol.zero_grad(set_to_none=True)
    logp, ent, _ = fn(pol, tokens, P)
    (logp * torch.linspace(-1, 1, logp.numel()).view_as(logp)).sum().backward()
    return logp.detach(), ent, {n: p.grad.clone() for n, p in pol.named_parameters()}


def _check_same(a, b, atol=1e-6):
    assert torch.allclose(a[0], b[0], atol=atol)
    if a[1] is not None:
        assert torch.allclose(a[1], b[1], atol=atol)
    for n in a[2]:
        assert torch.allclose(a[2][n], b[2][n], atol=atol, rtol=1e-4), n


@pytest.mark.parametrize("chunk", [1, 7, 1000])
def test_chunked_logprobs_and_grads_equal_unchunked_transformer(chunk):
    pol = _transformer()
    tokens = torch.randint(4, V, (4, 14), generator=torch.Generator().manual_seed(6))  # P=6, T=8
    ref = _loss_and_grads(pol, lambda m, t, P: response_logprobs(m, t, P, 0.7, with_entropy=True), tokens, 6)
    got = _loss_and_grads(pol, lambda m, t, P: chunked_response_logprobs(m, t, P, 0.7, True, chunk), tokens, 6)
    _check_same(ref, got)


def test_chunked_logprobs_and_grads_equal_unchunked_hf(hf_policy):
    pol, tok = hf_policy
    ids = _hf_prompts(tok)
    tokens = torch.cat([ids, torch.randint(4, 200, (3, 5), generator=torch.Generator().manual_seed(7))], 1)
    P = ids.shape[1]
    ref = _loss_and_grads(pol, lambda m, t, P: response_logprobs(m, t, P, 1.0, with_entropy=True), tokens, P)
    got = _loss_and_grads(pol, lambda m, t, P: chunked_response_logprobs(m, t, P, 1.0, True, 4), tokens, P)
    _check_same(ref, got, atol=1e-5)


def test_grad_checkpoint_equals_plain_grads_transformer():
    tokens = torch.randint(4, V, (4, 14), generator=torch.Generator().manual_seed(8))
    fn = lambda m, t, P: response_logprobs(m, t, P, 1.0)  # noqa: E731
    plain = _loss_and_grads(_transformer(), fn, tokens, 6)
    pol = _transformer()
    pol.grad_checkpoint = True
    ckpt = _loss_and_grads(pol, fn, tokens, 6)
    _check_same(plain, ckpt)
    with torch.no_grad():  # sampling ignores the switch
        assert torch.equal(pol.prefill(tokens[:, :6])[0], _transformer().prefill(tokens[:, :6])[0])


def test_grad_checkpoint_equals_plain_grads_hf(hf_policy):
    pol, tok = hf_policy
    ids = _hf_prompts(tok)
    tokens = torch.cat([ids, torch.randint(4, 200, (3, 4), generator=torch.Generator().manual_seed(9))], 1)
    fn = lambda m, t, P: response_logprobs(m, t, P, 1.0)  # noqa: E731
    pol.train()
    plain = _loss_and_grads(pol, fn, tokens, ids.shape[1])
    pol.set_grad_checkpoint(True)
    try:
        assert any(getattr(m, "gradient_checkpointing", False) for m in pol.model.modules())
        ckpt = _loss_and_grads(pol, fn, tokens, ids.shape[1])
        resp, logp_old, mask, _, _ = _sample(pol, ids, eos=tok.eos_id, pad=tok.pad_id)  # cache still used
        assert pol.model.training  # the mode is restored
        logp, _, _ = response_logprobs(pol, torch.cat([ids, resp], 1), ids.shape[1])
        assert torch.allclose(logp * mask, logp_old, atol=1e-5)
    finally:
        pol.set_grad_checkpoint(False)
        pol.eval()
    _check_same(plain, ckpt, atol=1e-6)


def test_sdpa_attention_equals_explicit_math():
    pol = _transformer().eval()
    attn = pol.blocks[0].attn
    x = torch.randn(3, 9, 32, generator=torch.Generator().manual_seed(10))
    q, k, v = attn._heads(attn.q_proj(x)), attn._heads(attn.k_proj(x)), attn._heads(attn.v_proj(x))
    scores = q @ k.transpose(-1, -2) / math.sqrt(attn.d_head)  # [N, H, S, S]
    causal = torch.ones(9, 9, dtype=torch.bool).tril()
    y = F.softmax(scores.masked_fill(~causal, float("-inf")), -1) @ v  # [N, H, S, D]
    ref = attn.o_proj(y.transpose(1, 2).reshape(3, 9, 32))
    assert torch.allclose(attn(x), ref, atol=1e-6)


# ----------------------------------------------------------------------------- bf16_mixed
def _one_adam_step(pol, lr=1e-6):
    opt = torch.optim.Adam(pol.parameters(), lr=lr)
    before = {n: p.detach().clone() for n, p in pol.named_parameters()}
    tokens = torch.randint(4, V, (4, 14), generator=torch.Generator().manual_seed(11))
    logp, _, _ = response_logprobs(pol, tokens, 6)
    (-logp.mean()).backward()
    opt.step()
    changed = sum(int((p.detach() != before[n]).sum()) for n, p in pol.named_parameters())
    return changed / sum(p.numel() for p in pol.parameters()), opt


def test_bf16_mixed_keeps_a_1e6_update_that_pure_bf16_rounds_away():
    mixed = _transformer()
    mixed.compute_dtype = torch.bfloat16
    seen = []
    mixed.blocks[0].mlp.up.register_forward_hook(lambda m, i, o: seen.append(o.dtype))
    frac_mixed, opt = _one_adam_step(mixed)
    assert seen == [torch.bfloat16]  # the matmuls ran in bf16
    assert all(p.dtype == torch.float32 for p in mixed.parameters())  # master weights
    assert all(s["exp_avg"].dtype == torch.float32 for s in opt.state.values())
    # Adam's first step moves every weight with a nonzero gradient by ~lr = 1e-6: float32 keeps it
    # (ulp of a 0.02 weight is ~2e-9); bfloat16 (8 mantissa bits, ulp of 0.02 ~ 1.2e-4) cannot
    assert frac_mixed > 0.9
    pure = _transformer().to(torch.bfloat16)
    frac_pure, _ = _one_adam_step(pure)
    assert frac_pure < 0.1


# ----------------------------------------------------------------------------- buffer reuse
def test_rollout_buffers_are_reused_by_shape_and_results_unchanged(monkeypatch):
    from noma_prorl_bench.rollout import sampling

    pol = _transformer()
    prompts = torch.randint(4, V, (3, 5), generator=torch.Generator().manual_seed(12)).repeat_interleave(2, 0)
    fresh = [_sample(pol, prompts, group_size=2) for _ in range(2)]
    monkeypatch.setattr(sampling, "REUSE_BUFFERS_ON", {"cpu"})  # what CUDA runs do
    monkeypatch.setattr(sampling, "POOL", sampling.BufferPool())
    pol.reuse_kv_on = {"cpu"}
    pooled = [_sample(pol, prompts, group_size=2) for _ in range(2)]
    for a, b in zip(fresh, pooled):
        for x, y in zip(a[:4], b[:4]):
            assert torch.equal(x, y)
    assert len(sampling.POOL.buffers) == 3  # response, logp_old, mask
    assert len(pol._kv_pool) == 4  # k, v x (prefill B rows, N rows)
    with torch.no_grad():
        ptr = pol.prefill(prompts[::2], capacity=20)[1].k[0].data_ptr()
        assert pol.prefill(prompts[::2], capacity=20)[1].k[0].data_ptr() == ptr  # same (N, cap): same memory


def test_response_logprobs_shares_one_log_softmax_with_the_same_bits():
    """The gather and the entropy read one log-softmax: logp, entropy and the gradients are the
    same bits as logprobs_from_logits and entropy_from_logits on the same logits (two passes)."""
    from noma_prorl_bench.models.base import entropy_from_logits, logprobs_from_logits, response_logits

    pol = _transformer()
    tokens = torch.randint(4, V, (4, 14), generator=torch.Generator().manual_seed(8))  # P=6, T=8
    logp, ent, _ = response_logprobs(pol, tokens, 6, 0.7, with_entropy=True)
    logp.sum().backward()
    got_grads = {n: p.grad.clone() for n, p in pol.named_parameters()}
    pol.zero_grad()
    logits = response_logits(pol, tokens, 6)
    ref_logp = logprobs_from_logits(logits, tokens[:, 6:], 0.7)
    ref_ent = entropy_from_logits(logits.detach(), 0.7)
    ref_logp.sum().backward()
    assert torch.equal(logp, ref_logp) and torch.equal(ent, ref_ent)
    for n, p in pol.named_parameters():
        assert torch.equal(got_grads[n], p.grad), n


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_log_softmax_in_place_steps_are_the_plain_expressions_bit_for_bit(dtype, temperature):
    """models/base.scaled_float / entropy_of_logp reuse a buffer: same values, same gradient."""
    from noma_prorl_bench.models.base import entropy_of_logp, scaled_float

    g = torch.Generator().manual_seed(0)
    h = torch.randn(3, 5, 16, generator=g).to(dtype).requires_grad_(True)
    W = torch.randn(300, 16, generator=g).to(dtype)
    y = torch.randint(0, 300, (3, 5), generator=g)
    grads, outs = [], []
    for fast in (False, True):
        logits = h @ W.T  # [3, 5, 300]
        z = scaled_float(logits, temperature) if fast else logits.float() / temperature
        lp = F.log_softmax(z, -1)
        ent = entropy_of_logp(lp) if fast else -(lp.exp() * lp).sum(-1).detach()
        logp = lp.gather(-1, y[..., None]).squeeze(-1)
        (g_,) = torch.autograd.grad((logp * torch.arange(15.0).view(3, 5)).sum(), h)
        outs.append((logp.detach(), ent))
        grads.append(g_)
        assert torch.equal(logits.float(), (h @ W.T).float())  # the logits themselves untouched
    assert torch.equal(outs[0][0], outs[1][0]) and torch.equal(outs[0][1], outs[1][1])
    assert torch.equal(grads[0], grads[1])
