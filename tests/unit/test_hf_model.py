"""Hugging Face policies on tiny random Llama / Qwen2 models built offline: KV-cached decoding
against the full recompute with left padding, reproducible sampling, the tokenizer adapter,
dropout disabled, and clear load errors."""

import json

import pytest
import torch

pytest.importorskip("transformers")

from noma_prorl_bench.models.hf import (  # noqa: E402
    HFPolicy,
    left_pad_mask,
    load_hf_policy,
    positions_from_mask,
)
from noma_prorl_bench.models.tiny_hf import build_tiny_hf_model, char_vocab  # noqa: E402
from noma_prorl_bench.models.transformer import NoCachePolicy  # noqa: E402
from noma_prorl_bench.rollout.sampling import generate  # noqa: E402

pytestmark = pytest.mark.hf
PROMPTS = ["Write a sentence that includes the word: apple", "hi", "1 + 2 ="]


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny_hf")
    return {
        arch: build_tiny_hf_model(root / arch, arch, hidden=32, layers=2, heads=4, seed=0, init_std=0.1)
        for arch in ("llama", "qwen2")
    }


@pytest.fixture(scope="module", params=["llama", "qwen2"])
def loaded(request, model_dirs):
    return load_hf_policy(model_dirs[request.param], device="cpu", dtype="float32")


@pytest.mark.unit
def test_mask_and_positions_cover_only_leading_pads():
    tokens = torch.tensor([[0, 0, 5, 6, 0, 2], [7, 0, 5, 6, 2, 0]])
    mask = left_pad_mask(tokens, pad_id=0)
    assert mask.tolist() == [[0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1]]
    assert positions_from_mask(mask).tolist() == [[0, 0, 0, 1, 2, 3], [0, 1, 2, 3, 4, 5]]


@pytest.mark.unit
def test_cached_decoding_equals_full_recompute_with_left_padding(loaded):
    policy, tok = loaded
    prompts = tok.encode_prompts(PROMPTS)  # [3, P], rows 1 and 2 left-padded
    N, P = prompts.shape
    assert (prompts[1:, 0] == tok.pad_id).all() and (prompts[:, -1] != tok.pad_id).all()
    g = torch.Generator().manual_seed(0)
    resp = torch.randint(4, 100, (N, 9), generator=g)
    resp[0, 4] = tok.eos_id  # EOS then PAD inside a response: ordinary attended tokens
    resp[0, 5:] = tok.pad_id
    tokens = torch.cat([prompts, resp], 1)  # [N, L]
    with torch.no_grad():
        full = policy(tokens)  # [N, L, V]
        assert full.dtype == torch.float32 and full.isfinite().all() and full.std() > 0.1
        logits, state = policy.prefill(prompts)
        torch.testing.assert_close(logits, full[:, P - 1], atol=1e-5, rtol=0)
        for t in range(P, tokens.shape[1]):
            logits, state = policy.decode(tokens[:, t], state)
            torch.testing.assert_close(logits, full[:, t], atol=1e-5, rtol=0)
        torch.testing.assert_close(policy(tokens, keep_last=3), full[:, -3:])


@pytest.mark.unit
def test_left_padding_does_not_change_a_prompts_logits(loaded):
    policy, tok = loaded
    alone = tok.encode_prompts(PROMPTS[1:2])  # no padding
    batch = tok.encode_prompts(PROMPTS)  # same prompt, left-padded
    with torch.no_grad():
        torch.testing.assert_close(policy.prefill(alone)[0][0], policy.prefill(batch)[0][1], atol=1e-5, rtol=0)


@pytest.mark.unit
def test_sampling_is_reproducible_and_cache_matches_recompute(loaded):
    policy, tok = loaded
    prompts = tok.encode_prompts(PROMPTS)

    def sample(p, seed):
        return generate(p, prompts, 10, 1.0, tok.eos_id, tok.pad_id, generator=torch.Generator().manual_seed(seed))

    r1, lp1, m1, _, _ = sample(policy, 3)
    r2, lp2, _, _, _ = sample(policy, 3)
    r3, lp3, m3, _, _ = sample(NoCachePolicy(policy), 3)
    assert torch.equal(r1, r2) and torch.equal(lp1, lp2)
    assert torch.equal(r1, r3) and torch.equal(m1, m3)
    torch.testing.assert_close(lp1, lp3, atol=1e-5, rtol=0)


@pytest.mark.unit
def test_tokenizer_adapter_round_trip(loaded):
    _, tok = loaded
    vocab = char_vocab()
    assert tok.vocab_size == len(vocab) == 260 and tok.pad_id == vocab["<pad>"] and tok.eos_id == vocab["</s>"]
    text = "2 + 3 = 5 </think> <answer>5</answer>"
    ids = tok.prompt_ids(text)
    assert len(ids) == len(text) + (1 if ids[0] == vocab["<s>"] else 0)  # one token per character
    body = ids[1:] if ids[0] == vocab["<s>"] else ids
    assert tok.decode(body + [tok.eos_id] + body) == text  # stops at EOS
    assert tok.decode([vocab["<s>"]] + body + [tok.pad_id, 9999]) == text  # specials, OOV skipped
    assert tok.encode_answer("5</answer>") == body[-10:] + [tok.eos_id]  # no BOS, EOS appended
    enc = tok.encode_prompts(["ab", "abcd"], P=6)
    assert enc.shape == (2, 6) and enc[0, : 6 - len(tok.prompt_ids("ab"))].eq(tok.pad_id).all()
    with pytest.raises(ValueError, match="longer than P"):
        tok.encode_prompts(["abcdefgh"], P=4)


@pytest.mark.unit
def test_tiny_model_is_deterministic_in_seed(tmp_path, model_dirs):
    again = build_tiny_hf_model(tmp_path / "again", "llama", hidden=32, layers=2, heads=4, seed=0, init_std=0.1)
    a = (model_dirs["llama"] / "model.safetensors").read_bytes()
    assert a == (again / "model.safetensors").read_bytes()
    other = build_tiny_hf_model(tmp_path / "other", "llama", hidden=32, layers=2, heads=4, seed=1, init_std=0.1)
    assert a != (other / "model.safetensors").read_bytes()


@pytest.mark.unit
def test_dropout_is_disabled_even_in_train_mode(tmp_path, model_dirs):
    src = model_dirs["qwen2"]
    dst = tmp_path / "dropout"
    dst.mkdir()
    for f in src.iterdir():
        (dst / f.name).write_bytes(f.read_bytes())
    cfg = json.loads((dst / "config.json").read_text())
    cfg["attention_dropout"] = 0.5
    (dst / "config.json").write_text(json.dumps(cfg))
    policy, tok = load_hf_policy(dst)
    assert policy.model.config.attention_dropout == 0.0
    tokens = tok.encode_prompts(PROMPTS)
    policy.train()
    a, b = policy(tokens), policy(tokens)
    policy.eval()
    torch.testing.assert_close(a, b, atol=0, rtol=0)
    torch.testing.assert_close(a, policy(tokens), atol=1e-6, rtol=0)


@pytest.mark.unit
def test_bfloat16_weights_give_float32_logits(model_dirs):
    policy, tok = load_hf_policy(model_dirs["llama"], device="auto", dtype="bfloat16")
    assert next(policy.parameters()).dtype == torch.bfloat16
    with torch.no_grad():
        logits, state = policy.prefill(tok.encode_prompts(PROMPTS))
        assert logits.dtype == torch.float32 and logits.shape == (3, policy.vocab_size)
        logits, _ = policy.decode(logits.argmax(-1), state)
    assert logits.dtype == torch.float32 and logits.isfinite().all()


@pytest.mark.unit
def test_load_errors_are_clear(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        load_hf_policy(tmp_path / "missing")
    with pytest.raises(ValueError, match="no config.json"):
        load_hf_policy(tmp_path)
    from transformers import DistilBertConfig

    DistilBertConfig(vocab_size=50, dim=32, n_layers=1, n_heads=2, hidden_dim=64).save_pretrained(tmp_path / "enc")
    with pytest.raises(ValueError, match="not a causal LM"):
        load_hf_policy(tmp_path / "enc")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "config.json").write_text('{"model_type": "no_such_model"}')
    with pytest.raises(ValueError, match="cannot read the model config"):
        load_hf_policy(tmp_path / "bad")
    with pytest.raises(ValueError, match="dtype"):
        load_hf_policy(tmp_path / "enc", dtype="int8")


@pytest.mark.unit
def test_hf_policy_is_a_module_with_the_protocol(loaded):
    policy, _ = loaded
    assert isinstance(policy, HFPolicy) and policy.vocab_size == 260
    names = {n for n, _ in policy.named_modules()}
    assert {"model.model.layers.0.self_attn.q_proj", "model.model.layers.1.mlp.down_proj"} <= names


@pytest.mark.unit
def test_backward_through_left_padded_forward_is_finite(loaded):
    from noma_prorl_bench.models.base import response_logprobs

    policy, tok = loaded
    prompts = tok.encode_prompts(PROMPTS)  # fully masked query rows at the leading PADs
    tokens = torch.cat([prompts, prompts[:, -4:]], 1)
    policy.zero_grad()
    logp, _, _ = response_logprobs(policy, tokens, prompts.shape[1])  # [N, 4] float32
    assert logp.dtype == torch.float32 and logp.shape == (3, 4)
    logp.sum().backward()
    grads = [p.grad for p in policy.parameters() if p.grad is not None]
    assert len(grads) == sum(1 for _ in policy.parameters()) and all(g.isfinite().all() for g in grads)
    policy.zero_grad()
