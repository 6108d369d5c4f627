"""Rollout: incremental GRU decoding equals teacher forcing; masks, EOS, truncation, counts."""

import pytest
import torch

from noma_prorl_bench.models.base import response_logprobs
from noma_prorl_bench.models.gru import GRUPolicy
from noma_prorl_bench.rollout.sampling import collect, generate
from noma_prorl_bench.tasks import make_task
from noma_prorl_bench.tasks.base import EOS, PAD, CharTokenizer

pytestmark = pytest.mark.unit


def _policy(seed=0):
    torch.manual_seed(seed)
    return GRUPolicy(CharTokenizer().vocab_size, hidden=32)


def test_behaviour_logprobs_equal_teacher_forced_logprobs():
    pol, tok = _policy(), CharTokenizer()
    prompts = tok.encode_prompts(["123", "98765", "4"], P=8)  # [3, 8]
    g = torch.Generator().manual_seed(0)
    resp, logp_old, mask, trunc, stats = generate(pol, prompts, 6, 0.7, EOS, PAD, g)
    logp, _, _ = response_logprobs(pol, torch.cat([prompts, resp], 1), 8, temperature=0.7)
    assert torch.allclose(logp * mask, logp_old * mask, atol=1e-5)
    # one prefill + one decode per generated position except the last
    assert stats.fwd_calls == 1 + (resp.shape[1] - 1)
    assert stats.tokens == 3 * 8 + 3 * (resp.shape[1] - 1)


def test_mask_stops_after_eos_and_pads():
    class EOSAtTwo(torch.nn.Module):  # emits '7' then EOS deterministically
        vocab_size = CharTokenizer().vocab_size

        def prefill(self, tokens):
            return self._logits(tokens.shape[0], 0), 0

        def decode(self, tok, t):
            return self._logits(tok.shape[0], t + 1), t + 1

        def _logits(self, n, t):
            z = torch.full((n, self.vocab_size), -1e4)
            z[:, EOS if t >= 1 else 11] = 0.0
            return z

    prompts = CharTokenizer().encode_prompts(["1", "2"], P=4)
    resp, logp_old, mask, trunc, _ = generate(EOSAtTwo(), prompts, 5, 1.0, EOS, PAD, greedy=True)
    assert resp.tolist() == [[11, EOS], [11, EOS]]  # trimmed to the longest response
    assert mask.tolist() == [[1.0, 1.0], [1.0, 1.0]]
    assert not trunc.any()


def test_truncation_flag_when_no_eos():
    tok = CharTokenizer()
    prompts = tok.encode_prompts(["12"], P=4)

    class NeverEOS(torch.nn.Module):
        vocab_size = tok.vocab_size

        def prefill(self, t):
            z = torch.zeros(t.shape[0], self.vocab_size)
            z[:, EOS] = -1e9
            return z, None

        def decode(self, tok_, s):
            return self.prefill(tok_[:, None])

    resp, _, mask, trunc, stats = generate(NeverEOS(), prompts, 3, 1.0, EOS, PAD, torch.Generator().manual_seed(1))
    assert resp.shape == (1, 3) and trunc.tolist() == [True] and mask.sum() == 3
    assert stats.fwd_calls == 3


def test_collect_groups_and_rewards_in_unit_interval():
    pol, tok, task = _policy(), CharTokenizer(), make_task("reverse_digits", n_val=8)
    import numpy as np

    ex = task.sample(np.random.default_rng(0), 3)
    batch, _ = collect(
        pol, task, tok, ex, 4, task.max_new_tokens, 1.0, torch.Generator().manual_seed(0), task.prompt_len
    )
    assert batch.n == 12 and batch.group.tolist() == [0] * 4 + [1] * 4 + [2] * 4
    assert batch.tokens.shape[1] == task.prompt_len + batch.T
    assert ((batch.rewards >= 0) & (batch.rewards <= 1)).all()
    assert batch.answers[0] == ex[0].prompt[::-1]


def test_sampling_is_reproducible_with_a_seeded_generator():
    pol, tok = _policy(), CharTokenizer()
    prompts = tok.encode_prompts(["123", "456"], P=6)
    a = generate(pol, prompts, 5, 1.0, EOS, PAD, torch.Generator().manual_seed(7))[0]
    b = generate(pol, prompts, 5, 1.0, EOS, PAD, torch.Generator().manual_seed(7))[0]
    assert torch.equal(a, b)
