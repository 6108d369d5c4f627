"""--shared_prompt: the teacher-forced passes of an HF policy encode each distinct prompt once and
share its keys and values with every row that carries it.

The same function as the whole forward: in float64 the logits and hidden states of the response
positions equal the whole forward's (here to the last bit) and the adapters' gradients agree to
1e-6 relative (transformers' RMSNorm computes in float32 whatever the model's dtype, and the shared
path adds the G rows' gradients before that norm's backward, the whole forward after it); with
left padding, rows in any order, Llama and Qwen2, the chunked path too. Rows that share no prompt
run the whole forward (bit for bit); the switch is refused where it cannot hold."""

import pytest
import torch

from noma_prorl_bench.config import ConfigError, make_config
from noma_prorl_bench.models.base import policy_logprobs

pytestmark = pytest.mark.unit
pytest.importorskip("transformers")

PROMPTS = ("ab", "a longer prompt", "xyz 12")  # different lengths: left padding in front of the short ones


def _policy(tmp_path, arch: str, dtype=torch.float64):
    from noma_prorl_bench.models.hf import load_hf_policy
    from noma_prorl_bench.models.lora import attach_lora
    from noma_prorl_bench.models.tiny_hf import build_tiny_hf_model

    path = build_tiny_hf_model(tmp_path / arch, arch, hidden=32, layers=2, heads=4, seed=0, init_std=0.05)
    policy, tok = load_hf_policy(path)
    policy.to(dtype)
    attach_lora(policy.model, ["q_proj", "k_proj", "v_proj", "o_proj"], 4, 8.0, seed=1)
    gen = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for n, p in policy.named_parameters():
            if n.endswith("lora_B"):  # B = 0 at init would hide the adapters' gradients w.r.t. A
                p.copy_(torch.randn(p.shape, generator=gen, dtype=p.dtype) * 0.05)
    return policy, tok


def _batch(tok, G: int = 3, T: int = 5, seed: int = 0):
    """B prompts x G rows with random responses, rows shuffled (groups need not be contiguous)."""
    gen = torch.Generator().manual_seed(seed)
    prompts = tok.encode_prompts(list(PROMPTS)).repeat_interleave(G, 0)
    tokens = torch.cat([prompts, torch.randint(5, 200, (prompts.shape[0], T), generator=gen)], 1)
    return tokens[torch.randperm(tokens.shape[0], generator=gen)], prompts.shape[1]


def _pass(policy, tokens, P, shared: bool, chunk: int = 0):
    policy.shared_prompt = shared
    policy.zero_grad()
    logp, ent, _ = policy_logprobs(policy, tokens, P, 0.7, with_entropy=True, chunk=chunk)
    w = torch.linspace(0.1, 1.0, logp.numel(), dtype=logp.dtype).view_as(logp)
    ((logp * w).sum() + ent.sum()).backward()
    grads = {n: p.grad.clone() for n, p in policy.named_parameters() if p.grad is not None}
    return logp.detach(), ent.detach(), grads


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_shared_prompt_same_function_float64(tmp_path, arch):
    policy, tok = _policy(tmp_path, arch)
    tokens, P = _batch(tok)
    T = tokens.shape[1] - P
    h = {}
    for shared in (False, True):  # the raw outputs of the response positions, float64
        policy.shared_prompt = shared
        with torch.no_grad():
            h[shared] = policy.hidden_states(tokens, keep_last=T + 1, prompt_len=P)
    assert torch.allclose(h[True], h[False], rtol=1e-12, atol=1e-12), (h[True] - h[False]).abs().max()
    assert policy._shared_prompt_cache(tokens, P, T + 1) is not None  # the shared path really ran
    for chunk in (0, 4):
        lp0, ent0, g0 = _pass(policy, tokens, P, False, chunk)
        lp1, ent1, g1 = _pass(policy, tokens, P, True, chunk)
        assert torch.allclose(lp0, lp1, rtol=0, atol=1e-6) and torch.allclose(ent0, ent1, rtol=0, atol=1e-6)
        assert g0.keys() == g1.keys() and len(g0) == 2 * 4 * 2  # A and B of q/k/v/o in 2 layers
        for n in g0:
            scale = g0[n].abs().max()
            assert scale > 0, n
            assert (g0[n] - g1[n]).abs().max() <= 1e-6 * scale, (n, (g0[n] - g1[n]).abs().max(), scale)


def test_shared_prompt_float32_close_and_distinct_prompts_untouched(tmp_path):
    policy, tok = _policy(tmp_path, "llama", torch.float32)
    tokens, P = _batch(tok, G=4, T=6, seed=3)
    lp0, ent0, g0 = _pass(policy, tokens, P, False)
    lp1, ent1, g1 = _pass(policy, tokens, P, True)
    assert torch.allclose(lp0, lp1, rtol=0, atol=1e-4), (lp0 - lp1).abs().max()
    for n in g0:
        assert torch.allclose(g0[n], g1[n], rtol=1e-3, atol=1e-3 * g0[n].abs().max()), n
    # every prompt distinct (one row each): the whole forward runs, the same bits as off
    distinct, Pd = _batch(tok, G=1, T=6, seed=4)
    policy.shared_prompt = True
    assert policy._shared_prompt_cache(distinct, Pd, distinct.shape[1] - Pd + 1) is None
    a = _pass(policy, distinct, Pd, False)
    b = _pass(policy, distinct, Pd, True)
    assert torch.equal(a[0], b[0]) and all(torch.equal(a[2][n], b[2][n]) for n in a[2])
    # outputs from inside the prompt are asked for: the whole forward (None)
    assert policy._shared_prompt_cache(tokens, P, tokens.shape[1]) is None
    assert policy._shared_prompt_cache(tokens, P, 0) is None


def test_fed_tokens_counts_what_the_pass_runs(tmp_path):
    from noma_prorl_bench.models.base import fed_tokens

    policy, tok = _policy(tmp_path, "llama", torch.float32)
    tokens, P = _batch(tok, G=4, T=6)  # 3 prompts x 4 rows
    N, L = tokens.shape
    policy.shared_prompt = False
    assert fed_tokens(policy, tokens, P) == N * L
    policy.shared_prompt = True
    assert fed_tokens(policy, tokens, P) == 3 * (P - 1) + N * (L - P + 1)
    assert fed_tokens(policy, tokens[:3], P) == tokens[:3].numel() or len(set(map(tuple, tokens[:3, :P].tolist()))) < 3
    distinct, Pd = _batch(tok, G=1, T=6)
    assert fed_tokens(policy, distinct, Pd) == distinct.numel()
    assert fed_tokens(lambda t: t, tokens, P) == N * L  # a callable without the switch (a monitor's)


def test_shared_prompt_refused_where_it_cannot_hold(tmp_path):
    for bad, flag in (
        ({"model": "transformer", "shared_prompt": True}, "shared_prompt"),
        ({"model": "hf:/x", "shared_prompt": True, "grad_checkpoint": True}, "shared_prompt"),
    ):
        with pytest.raises(ConfigError) as e:
            make_config({"outdir": str(tmp_path / "o"), **bad})
        assert e.value.flag == flag, e.value
    policy, _ = _policy(tmp_path, "llama", torch.float32)
    policy.model.config.sliding_window = 8  # a sliding-window model keeps a window, not the prompt
    with pytest.raises(ValueError, match="sliding-window"):
        policy.set_shared_prompt(True)
    assert policy.shared_prompt is False
    policy.model.config.sliding_window = None
    policy.set_shared_prompt(True)
    assert policy.shared_prompt is True


def test_trainer_shared_prompt_reaches_learner_and_reference(tmp_path):
    """Through the trainer: the learner's pre-update log-probs and the reference's equal off's
    within float32 rounding, and both passes took the shared path."""
    from noma_prorl_bench.models.hf import HFPolicy
    from noma_prorl_bench.models.tiny_hf import build_tiny_hf_model
    from noma_prorl_bench.training.trainer import Trainer

    path = build_tiny_hf_model(tmp_path / "q", "llama", hidden=32, layers=2, heads=4, seed=0)
    base = {
        "outdir": str(tmp_path / "run"),
        "model": f"hf:{path}",
        "task": "keyword_inclusion",
        "warmstart_steps": 0,
        "max_new_tokens": 6,
        "batch_size": 3,
        "group_size": 4,
        "n_val": 8,
        "eval_every": 100,
        "steps": 2,
        "quiet": True,
        "variant": "A",
        "beta": 0.1,
    }
    out = {}
    calls = []
    orig = HFPolicy._shared_prompt_cache

    def spy(self, tokens, P, keep_last):
        r = orig(self, tokens, P, keep_last)
        calls.append(r is not None)
        return r

    HFPolicy._shared_prompt_cache = spy
    try:
        for shared in (False, True):
            calls.clear()
            tr = Trainer.from_config(make_config({**base, "shared_prompt": shared})).start()
            assert tr.policy.shared_prompt is shared
            batch = tr.collector.collect()[0]
            tr.ref.prepare(batch.tokens, batch.prompt_len)
            ref = tr.ref.minibatch(batch.tokens, batch.prompt_len, slice(None)).clone()
            n_ref = len(calls)
            m = tr.train_step()  # reference forward + the learner's forward and backward
            out[shared] = (batch.tokens, ref, m)
            assert (n_ref >= 1 and len(calls) >= n_ref + 2 and all(calls)) if shared else not any(calls), calls
    finally:
        HFPolicy._shared_prompt_cache = orig
    assert torch.equal(out[False][0], out[True][0])  # the rollout is untouched: same tokens
    assert torch.allclose(out[False][1], out[True][1], atol=1e-5, rtol=0), (out[False][1] - out[True][1]).abs().max()
    # exact counters: the shared passes feed (N - U) x (P - 1) fewer token positions per pass
    saved_ref = out[False][2]["count/tokens_ref"] - out[True][2]["count/tokens_ref"]
    saved_policy = out[False][2]["count/tokens_policy"] - out[True][2]["count/tokens_policy"]
    N, U = 3 * 4, 3
    assert saved_ref > 0 and saved_ref % (N - U) == 0, saved_ref
    # the learner's minibatches share prompts within each minibatch: a multiple of P - 1
    assert saved_policy > 0 and saved_policy % (saved_ref // (N - U)) == 0, (saved_policy, saved_ref)
    keys = [k for k in out[False][2] if k.startswith(("loss", "kl/")) and isinstance(out[False][2][k], float)]
    assert any(k.startswith("loss") for k in keys) and any(k.startswith("kl/") for k in keys), keys
    for k in keys:
        assert out[False][2][k] == pytest.approx(out[True][2][k], rel=1e-4, abs=1e-6), k
