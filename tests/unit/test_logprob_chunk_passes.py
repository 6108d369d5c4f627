"""--logprob_chunk on every log-prob pass: the reference forward (A0 naive_epoch, A1 cached,
A2 ring), the pre-update recompute of --tis_cap, the warm start and the delta_logp monitor give the
unchunked numbers (float32 rounding), and no pass outside sampling makes the output head produce
more than `chunk` rows of logits at once: a forward hook on every Linear whose output width is the
vocabulary records the largest [rows, V] it returns (sampling, under inference_mode, is skipped:
its decode step is [N, 1, V] by construction). Before this change the reference and TIS passes
produced [N, L, V] (transformer) / [N, T + 1, V] (HF) there."""

import dataclasses

import pytest
import torch
from torch import nn

from noma_prorl_bench.config import make_config
from noma_prorl_bench.models.base import policy_logprobs
from noma_prorl_bench.models.transformer import TransformerPolicy
from noma_prorl_bench.rollout.reference import ReferenceHolder
from noma_prorl_bench.tasks.base import CharTokenizer
from noma_prorl_bench.training.trainer import Trainer

pytestmark = pytest.mark.unit
V = CharTokenizer().vocab_size
CHUNK = 7
TINY = {
    "outdir": "/tmp/unused",
    "model": "transformer",
    "d_model": 32,
    "n_layers": 2,
    "batch_size": 3,
    "group_size": 4,
    "warmstart_steps": 2,
    "n_val": 8,
    "eval_every": 100,
    "steps": 5,
    "quiet": True,
    "minibatches": 2,
    "ppo_epochs": 2,
    "variant": "A",
    "beta": 0.1,
    "tis_cap": 2.0,
}


class HeadRows:
    """Records the row count (numel / V) of every output-head result outside inference_mode."""

    def __init__(self, vocab: int):
        self.vocab, self.rows = vocab, []
        self.handle = nn.modules.module.register_module_forward_hook(self._hook)

    def _hook(self, module, args, out):
        if (
            isinstance(module, nn.Linear)
            and module.out_features == self.vocab
            and not torch.is_inference_mode_enabled()
        ):
            self.rows.append(out.numel() // self.vocab)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.handle.remove()


@pytest.fixture(scope="module")
def hf():
    pytest.importorskip("transformers")
    import tempfile

    from noma_prorl_bench.models.hf import load_hf_policy
    from noma_prorl_bench.models.tiny_hf import build_tiny_hf_model

    with tempfile.TemporaryDirectory() as tmp:
        path = build_tiny_hf_model(f"{tmp}/q", "qwen2", hidden=32, layers=2, heads=4, seed=0, init_std=0.1)
        policy, tok = load_hf_policy(path)
    ids = tok.encode_prompts(["ab", "a longer prompt", "xyz 12", "q"])  # left-padded
    resp = torch.randint(4, 200, (4, 9), generator=torch.Generator().manual_seed(5))
    return policy, torch.cat([ids, resp], 1), ids.shape[1]


def _transformer_batch():
    torch.manual_seed(0)
    pol = TransformerPolicy(V, d_model=32, n_layers=2, n_heads=4, max_len=48)
    tokens = torch.randint(4, V, (6, 17), generator=torch.Generator().manual_seed(6))  # N=6, P=8, T=9
    return pol, tokens, 8


@pytest.mark.parametrize("mode", ["naive_epoch", "cached", "ring"])
@pytest.mark.parametrize("which", ["transformer", "hf"])
def test_reference_logprobs_chunked_equal_unchunked_and_no_full_logits(mode, which, request):
    pol, tokens, P = request.getfixturevalue("hf") if which == "hf" else _transformer_batch()
    N, T = tokens.shape[0], tokens.shape[1] - P
    out, rows = {}, {}
    for chunk in (0, CHUNK):
        holder = ReferenceHolder(pol, mode, 0.8, max_seqs=N, max_resp_len=T, chunk=chunk)
        with HeadRows(pol.vocab_size) as rec:
            holder.prepare(tokens, P)
            whole = holder.minibatch(tokens, P, slice(None)).clone()  # [N, T]
            half = holder.minibatch(tokens[1:4], P, slice(1, 4)).clone()  # [3, T]
        out[chunk], rows[chunk] = (whole, half), rec.rows
        assert holder.pop_counts()["count/ref_fwd"] == (2 if mode == "naive_epoch" else 1)
    for a, b in zip(out[0], out[CHUNK]):
        assert a.shape == b.shape
        assert torch.allclose(a, b, atol=1e-6, rtol=0), (a - b).abs().max()
    assert max(rows[CHUNK]) <= CHUNK  # no [n, T, V]
    assert max(rows[0]) >= N * T  # the hook sees it
    assert sum(rows[CHUNK]) == N * T + (3 * T if mode == "naive_epoch" else 0)  # A0: 2nd forward, 3 rows


def test_reference_refuses_chunk_with_kept_logits():
    pol, _, _ = _transformer_batch()
    with pytest.raises(ValueError, match="keep_logits"):
        ReferenceHolder(pol, "cached", 1.0, keep_logits=True, chunk=4)


def test_policy_logprobs_refuses_chunk_on_a_policy_without_a_separate_head():
    from noma_prorl_bench.models.gru import GRUPolicy

    with pytest.raises(ValueError, match="hidden_states"):
        policy_logprobs(GRUPolicy(V, hidden=8), torch.zeros(2, 5, dtype=torch.long), 3, chunk=2)


def _tis_inputs(tr, batch, chunk):
    tr.learner.spec = dataclasses.replace(tr.learner.spec, logprob_chunk=chunk)
    with HeadRows(V) as rec:
        inp, _ = tr.learner.update_inputs(batch)
    return inp, rec.rows


def test_tis_recompute_chunked_equals_unchunked_and_no_full_logits():
    tr = Trainer.from_config(make_config({**TINY, "logprob_chunk": CHUNK})).start()
    batch = tr.collector.collect()[0]
    full, rows_full = _tis_inputs(tr, batch, 0)
    ch, rows_ch = _tis_inputs(tr, batch, CHUNK)
    assert ch.tis_weight is not None and ch.old_logits is None
    assert torch.allclose(full.logp_old, ch.logp_old, atol=1e-6, rtol=0)  # learner's logp_old
    assert torch.allclose(full.tis_weight, ch.tis_weight, atol=1e-6, rtol=0)
    assert rows_full == [batch.tokens.numel()]  # [N, L, V] once
    assert max(rows_ch) <= CHUNK and sum(rows_ch) == batch.n * batch.T


@pytest.mark.parametrize("ref_compute", ["naive_epoch", "ring"])
def test_a_whole_train_step_never_materialises_more_than_chunk_rows_of_logits(ref_compute):
    """Warm start, reference (A0: 4 forwards, A2: 1), TIS recompute, 4 learner passes (backward
    recomputes each chunk), delta_logp monitor: every head call outside sampling returns at most
    CHUNK rows; without the flag the same step returns whole-batch logits."""
    for chunk in (CHUNK, 0):
        with HeadRows(V) as rec:
            tr = Trainer.from_config(make_config({**TINY, "ref_compute": ref_compute, "logprob_chunk": chunk})).start()
            m = tr.train_step()
            # kl/to_init, kl/to_prev are exact full-vocabulary KLs (two policies' [N, T, V] logits on
            # the fixed monitor batch): not chunked (docs/performance.md), left out here
            tr.monitors.drift.measure = lambda policy: {}
            tr.monitors.measure(tr.collector.collect()[0])  # delta_logp pass
        assert m["count/ref_fwd"] == (4 if ref_compute == "naive_epoch" else 1)
        assert rec.rows and (max(rec.rows) <= CHUNK) == (chunk > 0), (chunk, max(rec.rows))


def test_hf_trainer_tis_and_reference_chunked_equal_unchunked(tmp_path):
    pytest.importorskip("transformers")
    from noma_prorl_bench.models.tiny_hf import build_tiny_hf_model

    path = build_tiny_hf_model(tmp_path / "q", "qwen2", hidden=32, layers=2, heads=4, seed=0)
    cfg = {
        **TINY,
        "model": f"hf:{path}",
        "task": "keyword_inclusion",
        "warmstart_steps": 0,
        "max_new_tokens": 6,
        "logprob_chunk": CHUNK,
    }
    tr = Trainer.from_config(make_config(cfg)).start()
    batch = tr.collector.collect()[0]
    vocab = tr.policy.vocab_size
    out = {}
    for chunk in (0, CHUNK):
        tr.learner.spec = dataclasses.replace(tr.learner.spec, logprob_chunk=chunk)
        tr.ref.chunk = chunk
        with HeadRows(vocab) as rec:
            inp, _ = tr.learner.update_inputs(batch)
            tr.ref.prepare(batch.tokens, batch.prompt_len)
        out[chunk] = (inp.logp_old, tr.ref.minibatch(batch.tokens, batch.prompt_len, slice(None)).clone())
        assert (max(rec.rows) <= chunk) == (chunk > 0), max(rec.rows)
    for a, b in zip(out[0], out[CHUNK]):
        assert torch.allclose(a, b, atol=1e-5, rtol=0), (a - b).abs().max()
