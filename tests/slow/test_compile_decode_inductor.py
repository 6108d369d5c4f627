"""--compile_decode through inductor itself (torch.compile default mode on CPU; each test compiles
the decode step once, ~30 s on a 2-core machine): same tokens and logp_old as the eager sampler,
one compilation for a whole rollout and the next, the learner's log-probs equal the sampler's,
and the Trainer's rollout with the flag equals the one without. The fast versions (dynamo with the
"eager" backend) are in tests/unit/test_compile_decode.py."""

import sys
from pathlib import Path

import pytest
import torch

from noma_prorl_bench.config import make_config
from noma_prorl_bench.models.base import response_logprobs

pytestmark = pytest.mark.slow
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from decodehelp import compiled as _compiled  # noqa: E402
from decodehelp import fresh_dynamo  # noqa: E402,F401  (autouse fixture)
from decodehelp import grouped_prompts as _prompts  # noqa: E402
from decodehelp import sample as _sample  # noqa: E402
from decodehelp import tiny_policy as _policy  # noqa: E402


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
    assert counters["stats"]["unique_graphs"] == 1  # compiled once for 22 decode steps
    tokens = torch.cat([prompts, got[0]], 1)
    with torch.no_grad():
        learner, _, _ = response_logprobs(pol, tokens, prompts.shape[1], 1.0)
    assert torch.allclose(learner, got[1], atol=1e-5, rtol=0)


def test_trainer_rollout_with_compile_decode_equals_off():
    """Through the flag: the Trainer's first rollout (same seed) is the same with and without it."""
    from noma_prorl_bench.training.trainer import Trainer

    cfg = {
        "outdir": "/tmp/unused",
        "model": "transformer",
        "d_model": 32,
        "n_layers": 2,
        "batch_size": 3,
        "group_size": 4,
        "warmstart_steps": 2,
        "n_val": 8,
        "quiet": True,
    }
    off = Trainer.from_config(make_config(cfg)).collector.collect()[0]
    on = Trainer.from_config(make_config({**cfg, "compile_decode": "default"})).collector.collect()[0]
    assert torch.equal(off.tokens, on.tokens) and torch.equal(off.mask, on.mask)
    assert torch.allclose(off.logp_old, on.logp_old, atol=1e-5, rtol=0)
