"""--compile_decode through inductor itself (torch.compile default mode on CPU; each test compiles
the decode step once, ~30 s on a 2-core machine): same tokens and logp_old as the eager sampler,
one compilation for a whole rollout and the next, the learner's log-probs equal the sampler's,
and the Trainer's rollout with the flag equals the one without. The fast versions (dynamo with the
"eager" backend) are in tests/unit/test_compile_decode.py."""
import copy

import pytest
import torch

from noma_prorl_bench.config import make_config
from noma_prorl_bench.models.base import response_logprobs
from noma_prorl_bench.models.transformer import TransformerPolicy
from noma_prorl_bench.rollout.sampling import generate
from noma_prorl_bench.tasks.base import PAD, CharTokenizer

pytestmark = pytest.mark.slow
V = CharTokenizer().vocab_size


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    """Every test starts with empty dynamo caches (compilations are counted per test)."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _policy(seed=0):
    torch.manual_seed(seed)
    return TransformerPolicy(V, d_model=32, n_layers=2, n_heads=4, max_len=48)


def _prompts(B=3, G=2, P=8, seed=1):
    return torch.randint(4, V, (B, P), generator=torch.Generator().manual_seed(seed)).repeat_interleave(G, 0)


def _sample(policy, prompts, seed=3, T=12, eos=-1, G=2):
    g = torch.Generator().manual_seed(seed)
    return generate(policy, prompts, T, 1.0, eos, PAD, g, group_size=G)


def _compiled(policy, backend):
    out = copy.deepcopy(policy)
    out.compile_decode("default", backend=backend)
    return out


def test_inductor_compiled_decode_equals_eager_and_compiles_once():
    from torch._dynamo.utils import counters
    pol = _policy()
    comp = _compiled(pol, "inductor")
    prompts = _prompts()
    counters.clear()
    for seed in (3, 4):
        eager, got = _sample(pol, prompts, seed), _sample(comp, prompts, seed)
        assert torch.equal(eager[0], got[0])
        assert torch.allclose(eager[1], got[1], atol=1e-5, rtol=0), (eager[1] - got[1]).abs().max()
    assert counters["stats"]["unique_graphs"] == 1                   # compiled once for 22 decode steps
    tokens = torch.cat([prompts, got[0]], 1)
    with torch.no_grad():
        learner, _, _ = response_logprobs(pol, tokens, prompts.shape[1], 1.0)
    assert torch.allclose(learner, got[1], atol=1e-5, rtol=0)


def test_trainer_rollout_with_compile_decode_equals_off():
    """Through the flag: the Trainer's first rollout (same seed) is the same with and without it."""
    from noma_prorl_bench.training.trainer import Trainer
    cfg = {"outdir": "/tmp/unused", "model": "transformer", "d_model": 32, "n_layers": 2, "batch_size": 3,
           "group_size": 4, "warmstart_steps": 2, "n_val": 8, "quiet": True}
    off = Trainer(make_config(cfg)).rollout()
    on = Trainer(make_config({**cfg, "compile_decode": "default"})).rollout()
    assert torch.equal(off.tokens, on.tokens) and torch.equal(off.mask, on.mask)
    assert torch.allclose(off.logp_old, on.logp_old, atol=1e-5, rtol=0)
