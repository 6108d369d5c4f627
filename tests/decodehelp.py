"""Shared set-up of the --compile_decode tests (tests/unit/test_compile_decode.py with dynamo's
eager backend, tests/slow/test_compile_decode_inductor.py with inductor): a tiny transformer,
grouped prompts, a seeded rollout, a compiled copy, and dynamo caches emptied around each test."""

import copy

import pytest
import torch

from noma_prorl_bench.models.transformer import TransformerPolicy
from noma_prorl_bench.rollout.sampling import generate
from noma_prorl_bench.tasks.base import PAD, CharTokenizer

V = CharTokenizer().vocab_size


@pytest.fixture(autouse=True)
def fresh_dynamo():
    """Every test starts with empty dynamo caches (compilations are counted per test). Autouse in
    a test module that imports it."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def tiny_policy(seed=0):
    torch.manual_seed(seed)
    return TransformerPolicy(V, d_model=32, n_layers=2, n_heads=4, max_len=48)


def grouped_prompts(B=3, G=2, P=8, seed=1):
    return torch.randint(4, V, (B, P), generator=torch.Generator().manual_seed(seed)).repeat_interleave(G, 0)


def sample(policy, prompts, seed=3, T=12, eos=-1, G=2):
    g = torch.Generator().manual_seed(seed)
    return generate(policy, prompts, T, 1.0, eos, PAD, g, group_size=G)


def compiled(policy, backend):
    """A deep copy of `policy` with its decode step compiled through `backend`."""
    out = copy.deepcopy(policy)
    out.compile_decode("default", backend=backend)
    return out
