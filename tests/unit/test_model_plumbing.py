"""Plumbing between the policies and the trainer: --device / --dtype resolution, the
warm-start default, the transformer's derived max_len, response-only logits (keep_last) and
the KV-cache capacity that rollouts request."""

import pytest
import torch

from noma_prorl_bench.config import ConfigError, RunConfig, make_config
from noma_prorl_bench.models.base import policy_device, response_logits, slices_logits
from noma_prorl_bench.models.build import MIN_MAX_LEN, build_policy, resolve_device
from noma_prorl_bench.models.transformer import TransformerPolicy
from noma_prorl_bench.rollout.sampling import generate

pytestmark = pytest.mark.unit


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU fallback of --device auto")
def test_device_auto_resolves_to_cpu_without_cuda():
    assert resolve_device("auto") == torch.device("cpu")
    with pytest.raises(ValueError, match="--device cuda"):
        resolve_device("cuda")
    policy, _ = build_policy(RunConfig(outdir="x", device="auto"))
    assert policy_device(policy) == torch.device("cpu")


def test_warmstart_auto_is_per_model_and_0_for_hf():
    assert RunConfig().warmstart_steps == -1
    assert RunConfig(model="gru").warmstart_steps_resolved == 50
    assert RunConfig(model="transformer").warmstart_steps_resolved == 100
    assert RunConfig(model="hf:/some/dir").warmstart_steps_resolved == 0
    assert RunConfig(model="hf:/some/dir", warmstart_steps=7).warmstart_steps_resolved == 7
    assert RunConfig(model="gru", warmstart_steps=0).warmstart_steps_resolved == 0
    with pytest.raises(ConfigError, match="--warmstart_steps"):
        make_config({"outdir": "x", "warmstart_steps": -2})


def test_transformer_max_len_is_derived_with_a_floor():
    cfg = RunConfig(outdir="x", model="transformer")
    assert build_policy(cfg, max_len=200)[0].max_len == 200  # long P + T: the table grows
    assert build_policy(cfg, max_len=15)[0].max_len == MIN_MAX_LEN  # short: the old 64, same init


def test_toy_dtype_bfloat16_gives_float32_logprobs():
    policy, tok = build_policy(RunConfig(outdir="x", model="transformer", dtype="bfloat16"), max_len=32)
    assert next(policy.parameters()).dtype == torch.bfloat16
    tokens = torch.randint(4, tok.vocab_size, (3, 12))
    assert response_logits(policy, tokens, 8).dtype == torch.float32


class _SlicingSpy(torch.nn.Module):
    """A policy that records the keep_last it was asked for."""

    slice_logits = True

    def __init__(self, inner):
        super().__init__()
        self.inner, self.calls = inner, []

    def forward(self, tokens, keep_last=0):
        self.calls.append(keep_last)
        return self.inner(tokens, keep_last=keep_last)


def test_response_logits_asks_slicing_policies_for_the_last_T_plus_1_positions():
    torch.manual_seed(0)
    inner = TransformerPolicy(20, d_model=16, n_layers=1, n_heads=2, max_len=32)
    spy = _SlicingSpy(inner)
    tokens = torch.randint(0, 20, (3, 11))  # P = 7, T = 4
    full = inner(tokens)[:, 6:-1]  # [N, T, V] the slow way
    got = response_logits(spy, tokens, 7)
    assert spy.calls == [5] and got.shape == (3, 4, 20)
    torch.testing.assert_close(got, full, rtol=1e-5, atol=1e-6)
    assert not slices_logits(inner)  # toy policies: full forward


def test_generate_sizes_the_kv_cache_to_the_rollout_and_stays_on_the_prompts_device():
    torch.manual_seed(0)
    policy = TransformerPolicy(20, d_model=16, n_layers=1, n_heads=2, max_len=64)
    seen = {}
    prefill = policy.prefill

    def spy(tokens, capacity=None):
        seen["capacity"] = capacity
        return prefill(tokens, capacity=capacity)

    policy.prefill = spy
    prompts = torch.randint(4, 20, (2, 5))
    gen = torch.Generator().manual_seed(0)
    resp, logp, mask, trunc, _ = generate(policy, prompts, 6, 1.0, eos_id=3, pad_id=0, generator=gen)
    assert seen["capacity"] == 5 + 6 - 1  # P + T - 1 positions written
    for t in (resp, logp, mask, trunc):
        assert t.device == prompts.device
