"""The device paths that only a CUDA device exercises: the sampler on the GPU, bf16 there, the
compiled decode step with CUDA graphs, and the learner -> generator weight pack from GPU tensors.
Skipped without CUDA; `benchmarks/studies/gpu_study.py device` runs them on a lent GPU and tabulates them."""

import copy
import sys
from pathlib import Path

import pytest
import torch

from noma_prorl_bench.config import make_config
from noma_prorl_bench.engines.weights import load_state, pack_state
from noma_prorl_bench.models.base import response_logprobs
from noma_prorl_bench.rollout.sampling import generate
from noma_prorl_bench.tasks.base import EOS, PAD

pytestmark = [pytest.mark.smoke, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from decodehelp import (  # noqa: E402
    fresh_dynamo,  # noqa: E402,F401  (autouse: empty dynamo caches per test)
    grouped_prompts,
    tiny_policy,
)

CUDA = torch.device("cuda")


def _sample(policy, prompts, seed, T=16, eos=EOS, G=2):
    g = torch.Generator(device=prompts.device).manual_seed(seed)
    return generate(policy, prompts, T, 1.0, eos, PAD, g, group_size=G)


@torch.no_grad()
def test_cuda_sampler_logprobs_equal_a_cpu_forward_of_its_tokens():
    """Tokens drawn on the GPU (KV cache, EOS on): their logp_old equals a float32 CPU forward of the
    same weights over the same tokens, on every generated position, and the mask stops at EOS."""
    cpu = tiny_policy(seed=4)
    gpu = copy.deepcopy(cpu).to(CUDA)
    prompts = grouped_prompts(B=4, G=3, seed=5)
    resp, logp_old, mask, _, _ = _sample(gpu, prompts.to(CUDA), 7, T=20, G=3)
    assert resp.device.type == "cuda" and mask.sum() > 0
    tokens = torch.cat([prompts, resp.cpu()], 1)
    ref, _, _ = response_logprobs(cpu, tokens, prompts.shape[1], 1.0)
    m = mask.cpu()
    assert torch.allclose(ref * m, logp_old.cpu() * m, atol=1e-4, rtol=0), ((ref - logp_old.cpu()) * m).abs().max()
    for row, mrow in zip(resp.cpu(), m):  # nothing counted after the first EOS
        hits = (row == EOS).nonzero()
        if len(hits):
            assert mrow[hits[0, 0] + 1 :].sum() == 0


@torch.no_grad()
def test_cuda_sampler_is_deterministic_per_seed():
    gpu = tiny_policy(seed=1).to(CUDA)
    prompts = grouped_prompts(seed=2).to(CUDA)
    a, b, c = _sample(gpu, prompts, 3), _sample(gpu, prompts, 3), _sample(gpu, prompts, 4)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.equal(a[0], c[0])


def test_bf16_mixed_run_on_cuda_trains_and_logs_finite_metrics(tmp_path):
    """Three RL steps of the transformer policy with --dtype bf16_mixed on CUDA: the run resolves
    the dtype it was asked for, the weights move, every logged loss and KL is finite."""
    from noma_prorl_bench.training.trainer import Trainer

    cfg = make_config(
        {
            "outdir": str(tmp_path),
            "model": "transformer",
            "d_model": 32,
            "n_layers": 2,
            "batch_size": 4,
            "group_size": 4,
            "warmstart_steps": 2,
            "n_val": 8,
            "steps": 3,
            "quiet": True,
            "device": "cuda",
            "dtype": "bf16_mixed",
        }
    )
    tr = Trainer(cfg)
    before = {k: v.detach().float().cpu().clone() for k, v in tr.policy.state_dict().items()}
    rows = [tr.train_step() for _ in range(3)]
    assert next(tr.policy.parameters()).device.type == "cuda"
    moved = sum(not torch.equal(before[k], v.detach().float().cpu()) for k, v in tr.policy.state_dict().items())
    assert moved > 0
    for r in rows:
        for k in ("loss/pg", "kl/k3"):
            if k in r:
                assert torch.isfinite(torch.tensor(float(r[k]))), (k, r[k])


@torch.no_grad()
def test_compiled_decode_with_cuda_graphs_equals_eager_on_cuda():
    """--compile_decode reduce-overhead (inductor + CUDA graphs) on the GPU: the same tokens as the
    eager decode for two seeds, logp_old within float rounding, and equal to a learner forward."""
    pol = tiny_policy(seed=0).to(CUDA)
    comp = copy.deepcopy(pol)
    comp.compile_decode("reduce-overhead")
    prompts = grouped_prompts().to(CUDA)
    for seed in (3, 4):
        eager, got = _sample(pol, prompts, seed, eos=-1), _sample(comp, prompts, seed, eos=-1)
        assert torch.equal(eager[0], got[0])
        assert torch.allclose(eager[1], got[1], atol=1e-4, rtol=0), (eager[1] - got[1]).abs().max()
    learner, _, _ = response_logprobs(pol, torch.cat([prompts, got[0]], 1), prompts.shape[1], 1.0)
    assert torch.allclose(learner, got[1], atol=1e-4, rtol=0)


@torch.no_grad()
def test_weight_pack_from_cuda_learner_loads_into_cpu_generator_and_back():
    """The object-store weight sync with the learner on the GPU: pack_state of CUDA tensors (bf16
    ones included) loads into a CPU module bit-exactly, and a CPU pack loads into a CUDA module."""
    learner = tiny_policy(seed=6).to(CUDA)
    learner.head.to(torch.bfloat16)  # a bf16 tensor travels as its bits
    gen = copy.deepcopy(learner).cpu()
    for p in gen.parameters():
        p.zero_()
    load_state(gen, pack_state(learner))
    for (k, a), b in zip(learner.state_dict().items(), gen.state_dict().values()):
        assert a.dtype == b.dtype and torch.equal(a.cpu(), b), k
    back = copy.deepcopy(learner)
    for p in back.parameters():
        p.zero_()
    load_state(back, pack_state(gen))
    for (k, a), b in zip(learner.state_dict().items(), back.state_dict().values()):
        assert b.device.type == "cuda" and torch.equal(a, b), k
