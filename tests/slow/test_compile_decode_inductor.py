"""--compile_decode through inductor itself (torch.compile default mode on CPU; the test compiles
the decode step once, ~30 s on a 2-core machine): the Trainer's rollouts with the flag equal the
eager ones (tokens and logp_old), one compilation for a whole rollout and the next, the learner's
log-probs equal the sampler's. The fast versions (dynamo with the "eager" backend) are in
tests/unit/test_compile_decode.py."""

import sys
from pathlib import Path

import pytest
import torch

from noma_prorl_bench.config import make_config
from noma_prorl_bench.models.base import response_logprobs

pytestmark = pytest.mark.slow
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from decodehelp import fresh_dynamo  # noqa: E402,F401  (autouse fixture)


def test_inductor_compiled_decode_equals_eager_compiles_once_and_matches_the_learner():
    """Through the flag, one inductor compilation for the whole test: the Trainer's first two rollouts
    (same seed) are the same with and without it, the second reuses the first's graph, and the
    learner's log-probs of the compiled sampler's tokens equal its logp_old."""
    from torch._dynamo.utils import counters

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
    off = Trainer.from_config(make_config(cfg)).start()
    on = Trainer.from_config(make_config({**cfg, "compile_decode": "default"})).start()
    counters.clear()
    for _ in range(2):  # a rollout and the next
        a, b = off.collector.collect()[0], on.collector.collect()[0]
        assert torch.equal(a.tokens, b.tokens) and torch.equal(a.mask, b.mask)
        assert torch.allclose(a.logp_old, b.logp_old, atol=1e-5, rtol=0), (a.logp_old - b.logp_old).abs().max()
    assert counters["stats"]["unique_graphs"] == 1  # compiled once for both rollouts' decode steps
    with torch.no_grad():
        learner, _, _ = response_logprobs(on.policy, b.tokens, b.prompt_len, 1.0)
    assert torch.allclose(learner * b.mask, b.logp_old * b.mask, atol=1e-5, rtol=0)
