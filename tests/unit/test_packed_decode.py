"""--decode_weights packed: the sampler's CPU Linears multiply by weights packed once for MKL
(float32) / oneDNN (bf16) where a probe shows the Linear's own bits, else keep their own forward.

What must hold on any machine (the probe decides per shape, so where a library would round
differently the Linear simply stays plain): the rollout's tokens, logp_old and masks equal the
plain Linears' bit for bit (float32, and bf16_mixed with merged adapters); a weight changed in place
(an optimizer step) is packed again, never read stale; a weight left alone is packed once; calls
with another number of rows take the module's own forward; the modules get their own forwards back;
the flag reaches the policy and is refused where it cannot apply. Where the library is present
(MKL / oneDNN with bf16 support), the packed op must actually have run."""

import pytest
import torch

pytest.importorskip("transformers")

from noma_prorl_bench.config import ConfigError, make_config  # noqa: E402
from noma_prorl_bench.models import packed  # noqa: E402
from noma_prorl_bench.models.tiny_hf import build_tiny_hf_model  # noqa: E402
from noma_prorl_bench.rollout.sampling import generate  # noqa: E402
from noma_prorl_bench.training.trainer import Trainer  # noqa: E402

pytestmark = [pytest.mark.unit, pytest.mark.hf]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return str(
        build_tiny_hf_model(
            tmp_path_factory.mktemp("tiny_hf") / "llama", "llama", hidden=64, layers=2, heads=4, seed=0, init_std=0.1
        )
    )


def _trainer(model_dir, **over):
    base = {
        "outdir": "/tmp/unused",
        "model": f"hf:{model_dir}",
        "task": "keyword_inclusion",
        "batch_size": 3,
        "group_size": 4,
        "max_new_tokens": 10,
        "n_val": 4,
        "eval_every": 100,
        "quiet": True,
        "seed": 0,
        "enable_growth": 1,
        "initial_rank": 4,
        "max_rank": 4,
        "lora_alpha": 8.0,
        "grow_on": "stall",
        "adapter_targets": "q_proj,k_proj,v_proj,o_proj",
    }

    class Sink:
        def write(self, rec):
            pass

        def close(self):
            pass

    tr = Trainer.from_config(make_config({**base, **over}), events_sink=Sink()).start()
    with torch.no_grad():  # B = 0 at init would make the adapters (and their merged weights) a no-op
        for n, p in tr.policy.named_parameters():
            if n.endswith("lora_B"):
                p.copy_(0.05 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
    return tr


class _Count:
    """Counts the packed op's calls and the packings (wraps models.packed._apply / _pack)."""

    def __init__(self, monkeypatch):
        self.applied = self.packs = 0
        apply, pack = packed._apply, packed._pack

        def counted_apply(*a, **k):
            self.applied += 1
            return apply(*a, **k)

        def counted_pack(*a, **k):
            self.packs += 1
            return pack(*a, **k)

        monkeypatch.setattr(packed, "_apply", counted_apply)
        monkeypatch.setattr(packed, "_pack", counted_pack)


def _expect_packed(dtype: torch.dtype) -> bool:
    """The library is present and some decode shape of this dtype passed the probe."""
    return packed.library_for(dtype) is not None and any(
        ok for (lib, dt, *_), ok in packed.SAME_BITS.items() if dt == dtype
    )


@pytest.mark.parametrize("dtype", ["float32", "bf16_mixed"])
def test_packed_rollout_is_the_plain_rollout_bit_for_bit(model_dir, dtype, monkeypatch):
    count = _Count(monkeypatch)
    batches = {}
    for mode in ("plain", "packed"):
        tr = _trainer(model_dir, dtype=dtype, decode_weights=mode)
        assert tr.policy.decode_weights == mode
        batches[mode], _ = tr.collector.collect()
        if mode == "plain":
            assert count.applied == 0 and count.packs == 0
    a, b = batches["plain"], batches["packed"]
    assert torch.equal(a.tokens, b.tokens)
    assert torch.equal(a.logp_old, b.logp_old)
    assert torch.equal(a.mask, b.mask)
    compute = torch.bfloat16 if dtype == "bf16_mixed" else torch.float32
    if _expect_packed(compute):
        assert count.applied > 0
    # no module keeps a patched forward after the rollout
    assert not any("forward" in m.__dict__ for m in tr.policy.modules())


def test_changed_weights_are_packed_again_and_unchanged_ones_are_not(model_dir, monkeypatch):
    """Full fine-tuning in float32: every Linear trains. A second rollout with unchanged weights packs
    nothing; after an in-place change of every weight (what an optimizer step does) each is packed
    again and the rollout equals the plain Linears' on the new weights."""
    from noma_prorl_bench.models.hf import load_hf_policy

    policy, tok = load_hf_policy(model_dir)
    ids = tok.encode_prompts(["hello there", "ab", "a longer prompt"]).repeat_interleave(2, 0)  # [6, P]
    monkeypatch.setattr(packed, "SAME_BITS", {})  # no probe verdicts or packed weights from other tests
    monkeypatch.setattr(packed, "_CACHE", packed.WeakIdKeyDictionary())
    count = _Count(monkeypatch)

    def roll(mode):
        policy.decode_weights = mode
        g = torch.Generator().manual_seed(3)
        return generate(policy, ids, 8, 1.0, -1, tok.pad_id, g, group_size=2)[:2]

    roll("packed")
    first = count.packs
    lins = [m for m in policy.modules() if isinstance(m, torch.nn.Linear)]
    shapes = {packed._shape_key("mkl", m.weight, m.bias, ids.shape[0]) for m in lins}
    accepted = sum(packed.SAME_BITS.get(packed._shape_key("mkl", m.weight, m.bias, ids.shape[0]), False) for m in lins)
    if packed.library_for(torch.float32) is not None:
        # each accepted weight packed once; a refused shape once, for its probe
        assert first == accepted + sum(packed.SAME_BITS.get(k) is False for k in shapes)
    roll("packed")
    assert count.packs == first  # unchanged weights: the cache
    with torch.no_grad():
        for m in lins:
            m.weight.mul_(1.01)
    tok_p, logp_p = roll("packed")
    assert count.packs == first + accepted  # every weight changed: the accepted ones packed again
    tok_q, logp_q = roll("plain")
    assert torch.equal(tok_p, tok_q) and torch.equal(logp_p, logp_q)


def test_other_row_counts_take_the_modules_own_forward(model_dir):
    from noma_prorl_bench.models.hf import load_hf_policy

    policy, _ = load_hf_policy(model_dir)
    lin = policy.model.model.layers[0].mlp.up_proj
    x4 = torch.randn(4, 1, lin.in_features)
    x6 = torch.randn(6, 1, lin.in_features)
    x_strided = torch.randn(6, 2, lin.in_features)[:, 1:]  # 6 rows, not contiguous
    with torch.inference_mode():
        want4, want6, want_s = lin(x4), lin(x6), lin(x_strided)
        with packed.packed_linears(policy, 6) as n:
            got4, got6, got_s = lin(x4), lin(x6), lin(x_strided)
            assert n == 0 or "forward" in lin.__dict__
        assert "forward" not in lin.__dict__
    assert torch.equal(got4, want4) and torch.equal(got6, want6) and torch.equal(got_s, want_s)


def test_a_shape_that_fails_the_probe_stays_plain(model_dir, monkeypatch):
    from noma_prorl_bench.models.hf import load_hf_policy

    if packed.library_for(torch.float32) is None:
        pytest.skip("no MKL packed GEMM in this torch build")
    policy, _ = load_hf_policy(model_dir)
    monkeypatch.setattr(packed, "SAME_BITS", {})
    monkeypatch.setattr(packed, "_CACHE", packed.WeakIdKeyDictionary())
    monkeypatch.setattr(packed, "_apply", lambda lib, x, p, w, b, rows: torch.zeros(x.shape[:-1] + (w.shape[0],)))
    with torch.inference_mode(), packed.packed_linears(policy, 4) as n:
        assert n == 0  # every probe differed: nothing patched
    assert packed.SAME_BITS and not any(packed.SAME_BITS.values())


def test_decode_weights_flag(model_dir):
    assert make_config({"outdir": "/tmp/unused"}).decode_weights == "auto"
    with pytest.raises(ConfigError, match="decode_weights"):
        make_config({"outdir": "/tmp/unused", "model": "gru", "decode_weights": "packed"})
    make_config({"outdir": "/tmp/unused", "model": "transformer", "decode_weights": "plain"})
    with pytest.raises(ConfigError, match="decode_weights"):
        make_config({"outdir": "/tmp/unused", "model": f"hf:{model_dir}", "device": "cuda", "decode_weights": "packed"})
    tr = _trainer(model_dir)  # auto: packed for hf:PATH
    assert tr.policy.decode_weights == "packed"
