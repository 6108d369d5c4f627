"""--sample_draw: the two ways the sampler draws a token sample the same distribution (a
chi-square test against exact probabilities), the default is torch.multinomial's exponential
race bit for bit, the flag reaches the rollout and pass@k, and a run under either resumes exactly."""

from __future__ import annotations

import json
import os
import shutil

import pytest
import torch
from scipy.stats import chisquare

from noma_prorl_bench.config import choices as ch
from noma_prorl_bench.config import make_config
from noma_prorl_bench.io import checkpoint
from noma_prorl_bench.models.base import response_logprobs
from noma_prorl_bench.models.gru import GRUPolicy
from noma_prorl_bench.rollout import sampling
from noma_prorl_bench.rollout.sampling import draw_tokens, generate, inverse_cdf_tokens
from noma_prorl_bench.run import main
from noma_prorl_bench.tasks.base import EOS, PAD, CharTokenizer
from noma_prorl_bench.training.trainer import Trainer

pytestmark = pytest.mark.unit

# unnormalised on purpose (the sampler hands exp(log_softmax), whose rows sum to 1 only up to
# rounding); one entry of probability 0 must never be drawn
WEIGHTS = torch.tensor([0.5, 0.25, 0.125, 0.0625, 0.0625, 0.0]) * 3.7


@pytest.mark.parametrize("draw", ch.SAMPLE_DRAWS)
def test_each_draw_samples_the_distribution(draw):
    n = 40_000
    g = torch.Generator().manual_seed(11)
    tok = draw_tokens(WEIGHTS.expand(n, -1).contiguous(), g, draw)  # [n]
    counts = torch.bincount(tok, minlength=6).double()
    assert counts[5] == 0
    expected = WEIGHTS[:5].double() / WEIGHTS.sum() * n
    # a fixed seed: the test is deterministic; a wrong draw (off-by-one in the CDF, a dropped
    # normalisation) moves some cell by far more than the 3-sigma this p-value bound allows
    assert chisquare(counts[:5].numpy(), expected.numpy()).pvalue > 1e-3


def test_exponential_is_multinomial_as_before_and_inverse_cdf_reads_the_generator_otherwise():
    probs = torch.softmax(torch.randn(8, 1000, generator=torch.Generator().manual_seed(0)), -1)
    a = draw_tokens(probs, torch.Generator().manual_seed(3), "exponential")
    b = torch.multinomial(probs, 1, generator=torch.Generator().manual_seed(3)).squeeze(1)
    assert torch.equal(a, b)
    c = draw_tokens(probs, torch.Generator().manual_seed(3), "inverse_cdf")
    assert not torch.equal(a, c)
    # one float64 uniform per row, nothing else: the stream continues with the next variates
    g = torch.Generator().manual_seed(5)
    draw_tokens(probs, g, "inverse_cdf")
    ref = torch.Generator().manual_seed(5)
    torch.rand(8, 1, generator=ref, dtype=torch.float64)
    assert torch.equal(g.get_state(), ref.get_state())


@pytest.mark.parametrize("V", [1, 7, 256, 1000, 49152])
def test_inverse_cdf_is_the_first_entry_past_u_times_the_total(V):
    """Against a float64 running sum: the same entry wherever u x total is not within rounding of
    a boundary; a zero entry (zeros are planted, including whole blocks and the last entries) is
    never returned, even for u at the ends of [0, 1)."""
    gen = torch.Generator().manual_seed(V)
    probs = torch.rand(64, V, generator=gen) ** 4
    probs[:, ::3] = 0.0
    if V > 600:
        probs[:, 256:512] = 0.0
    probs[:, -2:] = 0.0
    probs[:, 0] = 0.5 if V <= 2 else probs[:, 0]
    probs[0, :] = 0.0
    probs[0, V // 2] = 1.0  # a one-hot row
    u = torch.rand(64, 1, generator=gen, dtype=torch.float64)
    u[1, 0], u[2, 0] = 0.0, 1.0 - 2.0**-53
    got, total = inverse_cdf_tokens(probs, u)
    assert bool((probs.gather(1, got[:, None]) > 0).all())
    cdf = probs.double().cumsum(-1)
    assert torch.allclose(total, cdf[:, -1:], rtol=1e-6)
    x = u * cdf[:, -1:]
    want = torch.searchsorted(cdf, x, right=True).squeeze(1).clamp(max=V - 1)
    near = (cdf - x).abs().min(-1).values <= 1e-6 * cdf[:, -1]  # rows where rounding may decide
    assert bool((got == want)[~near].all()) and int((~near).sum()) >= 50


@pytest.mark.parametrize("draw", ch.SAMPLE_DRAWS)
def test_non_finite_probabilities_are_refused_by_either_draw(draw):
    from noma_prorl_bench.rollout.nonfinite import NonFiniteLogits

    probs = torch.softmax(torch.randn(4, 50), -1)
    for bad in (float("nan"), float("inf"), -0.1):
        p = probs.clone()
        p[2, 7] = bad
        with pytest.raises(RuntimeError, match="probability tensor contains"):
            draw_tokens(p, torch.Generator().manual_seed(0), draw)

    class NaNPolicy(torch.nn.Module):  # logits NaN in one row: generate reports the rows
        def prefill(self, tokens):
            z = torch.zeros(tokens.shape[0], CharTokenizer().vocab_size)
            z[1] = float("nan")
            return z, 0

    prompts = CharTokenizer().encode_prompts(["1", "2", "3"], P=4)
    with pytest.raises(NonFiniteLogits) as e:
        generate(NaNPolicy(), prompts, 3, 1.0, EOS, PAD, torch.Generator().manual_seed(0), draw=draw)
    assert e.value.rows == 1


def _policy():
    torch.manual_seed(0)
    return GRUPolicy(CharTokenizer().vocab_size, hidden=32)


def test_generate_under_each_draw():
    pol, tok = _policy(), CharTokenizer()
    prompts = tok.encode_prompts(["123", "98765", "4", "55"], P=8)  # [4, 8]

    def gen(**kw):
        return generate(pol, prompts, 6, 0.7, EOS, PAD, torch.Generator().manual_seed(0), **kw)

    default, expo, inv = gen(), gen(draw="exponential"), gen(draw="inverse_cdf")
    for x, y in zip(default[:4], expo[:4]):
        assert torch.equal(x, y)
    assert not torch.equal(default[0], inv[0])
    resp, logp_old, mask = inv[0], inv[1], inv[2]
    logp, _, _ = response_logprobs(pol, torch.cat([prompts, resp], 1), 8, temperature=0.7)
    assert torch.allclose(logp * mask, logp_old * mask, atol=1e-5)  # logp_old is the drawn token's
    with pytest.raises(ValueError, match="draw must be one of"):
        gen(draw="gumbel")


def test_the_choice_list_is_the_configs():
    assert sampling.SAMPLE_DRAWS is ch.SAMPLE_DRAWS and ch.CHOICES["sample_draw"] == ("exponential", "inverse_cdf")


TINY = {"outdir": "/tmp/unused", "batch_size": 4, "group_size": 4, "warmstart_steps": 2, "quiet": True, "hidden": 32}


def test_the_flag_reaches_the_collector_and_pass_at_k():
    cfg = make_config({**TINY, "sample_draw": "inverse_cdf", "eval_samples": 2})
    t = Trainer.from_config(cfg).start()
    assert t.collector.sample_draw == "inverse_cdf" and t.specs.evaluation.sample_draw == "inverse_cdf"
    assert Trainer.from_config(make_config(TINY)).start().collector.sample_draw == "exponential"


@pytest.mark.smoke
def test_runs_differ_by_draw_and_an_inverse_cdf_run_resumes_exactly(tmp_path, fast_flags):
    def stable(d):
        with open(os.path.join(d, "metrics.jsonl")) as f:
            rows = [json.loads(line) for line in f]
        return [{k: v for k, v in r.items() if not k.startswith(("time/", "perf/"))} for r in rows]

    flags = [*fast_flags, "--eval_samples", "2", "--steps", "6"]
    expo, inv = str(tmp_path / "expo"), str(tmp_path / "inv")
    assert main(["--outdir", expo, *flags]) == 0
    assert main(["--outdir", inv, *flags, "--sample_draw", "inverse_cdf"]) == 0
    assert json.load(open(os.path.join(inv, "config.json")))["sample_draw"] == "inverse_cdf"
    assert stable(expo) != stable(inv)
    d = str(tmp_path / "cut")
    assert main(["--outdir", d, *flags, "--sample_draw", "inverse_cdf", "--save_every", "3"]) == 0
    assert [s for s, _ in checkpoint.list_checkpoints(d)] == [3, 6]
    shutil.rmtree(os.path.join(d, "checkpoints", "step_000006"))
    os.remove(os.path.join(d, "summary.json"))
    assert main(["--outdir", d, "--resume"]) == 0
    assert stable(d) == stable(inv)
