"""--compile_decode: the transformer's static-shape decode step (models/static_decode.py)
against the eager `TransformerPolicy.decode`, compiled once per rollout shape, not per token.

The fast tests compile with dynamo and the "eager" backend (dynamo traces the whole step into one
graph, so its shape guards and recompilations are the real ones; only inductor's code generation is
skipped) and count compilations with a counting backend. tests/slow/test_compile_decode_inductor.py
runs inductor itself (`torch.compile` default mode, tens of seconds to compile on a CPU)."""

import copy
import sys
from pathlib import Path

import pytest
import torch

from noma_prorl_bench.config import make_config
from noma_prorl_bench.models.base import response_logprobs
from noma_prorl_bench.models.static_decode import CompiledStep, static_step
from noma_prorl_bench.tasks.base import EOS

pytestmark = pytest.mark.unit
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from decodehelp import V, fresh_dynamo  # noqa: E402,F401  (fresh_dynamo: autouse fixture)
from decodehelp import compiled as _compiled  # noqa: E402
from decodehelp import grouped_prompts as _prompts  # noqa: E402
from decodehelp import sample as _sample  # noqa: E402
from decodehelp import tiny_policy as _policy  # noqa: E402


class CountingBackend:
    """A torch.compile backend that counts the graphs dynamo hands it (= compilations)."""

    def __init__(self):
        self.graphs = 0

    def __call__(self, gm, example_inputs):
        self.graphs += 1
        return gm.forward


@torch.no_grad()
def test_static_step_equals_eager_decode_step_by_step():
    """Uncompiled static_step vs eager decode: same logits and the same K/V columns, every step."""
    pol = _policy()
    prompts = _prompts(G=1)
    le, ce = pol.prefill(prompts, capacity=20)
    ls, cs = pol.prefill(prompts, capacity=20)
    for buf in cs.k + cs.v:
        buf[:, :, 8:] = 0.0  # the compiled path zero-fills unwritten columns (finite)
    cs.pos_t = torch.tensor([cs.pos])
    g = torch.Generator().manual_seed(0)
    for _ in range(12):
        tok = torch.multinomial(le.softmax(-1), 1, generator=g)[:, 0]
        le, ce = pol.decode(tok, ce)
        ls = static_step(pol, None, tok, cs.pos_t, cs.k, cs.v)
        cs.pos_t += 1
        assert torch.allclose(le, ls, atol=1e-5, rtol=0), (le - ls).abs().max()
    for a, b in zip(ce.k + ce.v, cs.k + cs.v):
        assert torch.allclose(a[:, :, : ce.pos], b[:, :, : ce.pos], atol=1e-6)


def test_compiled_once_per_shape_same_tokens_and_logp_as_eager():
    """Two sampled rollouts (11 decode steps each, fresh KV buffers each time) -> 1 compilation;
    a rollout with other rows (N = 4 instead of 6) -> exactly 1 more. Tokens identical to the
    eager sampler's for the same generator seed, logp_old within float32 rounding."""
    pol, backend = _policy(), CountingBackend()
    comp = _compiled(pol, backend)
    prompts = _prompts()
    for seed in (3, 4):
        eager, got = _sample(pol, prompts, seed), _sample(comp, prompts, seed)
        assert torch.equal(eager[0], got[0]) and torch.equal(eager[2], got[2])
        assert torch.allclose(eager[1], got[1], atol=1e-5, rtol=0), (eager[1] - got[1]).abs().max()
    assert backend.graphs == 1  # 22 decode calls, one graph
    _sample(comp, _prompts(B=2), 5)
    assert backend.graphs == 2  # new N -> one new graph, no more


def test_compiled_sampler_logprobs_equal_learner_logprobs_with_eos():
    pol, backend = _policy(seed=2), CountingBackend()
    comp = _compiled(pol, backend)
    prompts = _prompts(B=4, G=3, seed=7)
    resp, logp_old, mask, _, _ = _sample(comp, prompts, 11, T=16, eos=EOS, G=3)
    tokens = torch.cat([prompts, resp], 1)
    with torch.no_grad():
        learner, _, _ = response_logprobs(pol, tokens, prompts.shape[1], 1.0)
    assert mask.sum() > 0 and backend.graphs == 1
    assert torch.allclose(learner * mask, logp_old * mask, atol=1e-5, rtol=0)


def test_compiled_state_is_not_copied():
    """The reference (deepcopy) and Ray (pickle) get the mode and compile their own on first use."""
    pol = _policy()
    pol.compile_decode("reduce-overhead")
    pol.static_decode.fn = object()  # stands for a compiled function
    ref = copy.deepcopy(pol)
    assert ref.static_decode is not pol.static_decode and ref.static_decode.fn is None
    assert ref.static_decode.mode == "reduce-overhead"
    assert pol.static_decode.__getstate__()["fn"] is None
    with pytest.raises(ValueError, match="compile mode"):
        CompiledStep("max-autotune-everything")


def test_flag_reaches_the_policy_and_is_refused_off_transformer():
    from noma_prorl_bench.config import ConfigError
    from noma_prorl_bench.models.build import build_policy

    pol, _ = build_policy(make_config({"outdir": "x", "model": "transformer", "compile_decode": "default"}), 32)
    assert pol.static_decode is not None and pol.static_decode.mode == "default"
    off, _ = build_policy(make_config({"outdir": "x", "model": "transformer"}), 32)
    assert off.static_decode is None
    with pytest.raises(ConfigError, match="compile_decode"):
        make_config({"outdir": "x", "model": "gru", "compile_decode": "reduce-overhead"})
