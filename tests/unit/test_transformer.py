"""Tiny transformer policy: KV-cached incremental decoding against the full forward (the slow
reference), reproducible sampling, module names the LoRA adapter targets, and no dropout."""

import pytest
import torch

from noma_prorl_bench.models.transformer import NoCachePolicy, TransformerPolicy
from noma_prorl_bench.rollout.sampling import generate

V, PAD, EOS = 20, 0, 3


def make_policy(seed: int = 0, max_len: int = 48) -> TransformerPolicy:
    torch.manual_seed(seed)
    policy = TransformerPolicy(V, d_model=32, n_layers=2, n_heads=4, max_len=max_len)
    for p in policy.parameters():  # larger weights than the 0.02 init: logits far from uniform
        p.data.normal_(0.0, 0.3)
    return policy.eval()


def left_padded_tokens(N: int = 3, P: int = 7, L: int = 19) -> torch.Tensor:
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(4, V, (N, L), generator=g)
    tokens[0, :3] = PAD  # row 0: three leading PADs, row 1: one, row 2: none
    tokens[1, :1] = PAD
    return tokens


@pytest.mark.unit
def test_cached_decoding_equals_full_forward_at_every_position():
    policy, tokens, P = make_policy(), left_padded_tokens(), 7
    with torch.no_grad():
        full = policy(tokens)  # [N, L, V]
        assert full.std() > 0.5  # a non-trivial function, so equality means something
        logits, state = policy.prefill(tokens[:, :P])
        torch.testing.assert_close(logits, full[:, P - 1], atol=1e-5, rtol=0)
        for t in range(P, tokens.shape[1]):
            logits, state = policy.decode(tokens[:, t], state)
            torch.testing.assert_close(logits, full[:, t], atol=1e-5, rtol=0)
    assert state.pos == tokens.shape[1]


@pytest.mark.unit
def test_prefill_capacity_and_buffers_are_preallocated_once():
    policy, tokens, P = make_policy(), left_padded_tokens(), 7
    with torch.no_grad():
        _, state = policy.prefill(tokens[:, :P], capacity=P + 4)
        ptrs = [k.data_ptr() for k in state.k]
        assert state.k[0].shape == (3, 4, P + 4, 8)  # [N, H, capacity, D]
        for t in range(P, P + 4):
            _, state = policy.decode(tokens[:, t], state)
        assert [k.data_ptr() for k in state.k] == ptrs  # written in place, never reallocated
        with pytest.raises(ValueError, match="KV cache full"):
            policy.decode(tokens[:, 0], state)
        with pytest.raises(ValueError, match="capacity"):
            policy.prefill(tokens[:, :P], capacity=P - 1)


@pytest.mark.unit
def test_chunk_after_prefix_matches_full_forward():
    policy, tokens, P = make_policy(), left_padded_tokens(), 7
    with torch.no_grad():
        full = policy(tokens)
        _, state = policy.prefill(tokens[:, :P])
        chunk = policy._run(tokens[:, P : P + 5], P, state)  # 5 tokens at positions P..P+4
    torch.testing.assert_close(chunk, full[:, P : P + 5], atol=1e-5, rtol=0)


@pytest.mark.unit
def test_keep_last_and_max_len():
    policy, tokens = make_policy(max_len=19), left_padded_tokens()
    with torch.no_grad():
        torch.testing.assert_close(policy(tokens, keep_last=4), policy(tokens)[:, -4:])
        with pytest.raises(ValueError, match="max_len"):
            policy(torch.cat([tokens, tokens[:, :1]], 1))


@pytest.mark.unit
def test_sampling_is_reproducible_and_cache_matches_recompute():
    policy, prompts = make_policy(), left_padded_tokens()[:, :7]

    def sample(p, seed):
        g = torch.Generator().manual_seed(seed)
        return generate(p, prompts, 12, 1.0, EOS, PAD, generator=g)

    r1, lp1, m1, _, _ = sample(policy, 5)
    r2, lp2, _, _, _ = sample(policy, 5)
    r3, lp3, m3, _, _ = sample(NoCachePolicy(policy), 5)
    assert torch.equal(r1, r2) and torch.equal(lp1, lp2)
    assert torch.equal(r1, r3) and torch.equal(m1, m3)  # same tokens with and without the cache
    torch.testing.assert_close(lp1, lp3, atol=1e-5, rtol=0)
    r4, _, _, _, _ = sample(policy, 6)
    assert not torch.equal(r1, r4)  # the seed matters


@pytest.mark.unit
def test_module_names_and_no_dropout():
    policy = make_policy()
    names = dict(policy.named_modules())
    for i in range(2):
        for n in ("attn.q_proj", "attn.k_proj", "attn.v_proj", "attn.o_proj", "mlp.up", "mlp.down"):
            assert isinstance(names[f"blocks.{i}.{n}"], torch.nn.Linear)
    assert isinstance(names["head"], torch.nn.Linear) and names["head"].out_features == V
    assert not any(isinstance(m, torch.nn.Dropout) for m in policy.modules())
    tokens = left_padded_tokens()
    policy.train()
    out_train = policy(tokens)
    out_train.logsumexp(-1).sum().backward()  # the teacher-forced forward is differentiable
    assert all(p.grad is not None for p in policy.parameters())
    policy.eval()
    torch.testing.assert_close(out_train.detach(), policy(tokens), atol=0, rtol=0)
