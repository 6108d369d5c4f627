"""The memory estimate's terms (io/memory.py): parameter counts on the meta device, which copies each
variant holds, LoRA's adapter-only optimizer state, how the terms combine, and that the real-model
demo preset is not refused on a 24 GiB machine. Measured peaks: tests/slow/test_memory_estimate.py."""

import json

import pytest

from noma_prorl_bench.config import make_config
from noma_prorl_bench.config.specs import RunSpecs
from noma_prorl_bench.io import preflight
from noma_prorl_bench.io.memory import MiB, build_estimate, estimate
from noma_prorl_bench.io.memory_shape import model_shape

# SmolLM2-135M-Instruct's config.json (the smollm2_demo model): no weights are needed for the estimate
SMOLLM2 = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "head_dim": 64,
    "hidden_act": "silu",
    "hidden_size": 576,
    "intermediate_size": 1536,
    "max_position_embeddings": 8192,
    "num_attention_heads": 9,
    "num_hidden_layers": 30,
    "num_key_value_heads": 3,
    "rms_norm_eps": 1e-5,
    "tie_word_embeddings": True,
    "vocab_size": 49152,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "pad_token_id": 2,
}


def cfg_of(**kw):
    return make_config({"outdir": "-", **kw})


def specs_of(**kw) -> RunSpecs:
    return RunSpecs.from_config(cfg_of(**kw))


def test_gru_parameters_are_counted_exactly():
    # embed 54 x 128 + GRU 3*128*(128 + 128) + 2*3*128 biases + head 128 x 54 + 54 = 112,950
    s = model_shape(specs_of(), 15)
    assert (s.full_params, s.trainable, s.copy_bytes) == (112_950, 112_950, 112_950 * 4)


def test_held_copies_per_variant_and_reset_target():
    a = estimate(specs_of(model="transformer", d_model=128))
    w = a.held["weights"]
    assert a.held["reference"] == w and a.held["monitor_snapshots"] == 2 * w and a.held["best_snapshot"] == 0
    assert a.held["grads_adam"] == 3 * w  # float32, everything trainable
    b = estimate(specs_of(model="transformer", d_model=128, variant="B"))
    assert b.held["reference"] == 0 and b.total < a.total
    best = estimate(specs_of(model="transformer", d_model=128, reset_to="best"))
    assert best.held["best_snapshot"] == w and best.total == a.total + w


def test_terms_combine_as_baseline_plus_held_plus_largest_phase():
    e = estimate(specs_of(model="transformer", d_model=256, batch_size=64, minibatches=1, warmstart_steps=0))
    assert e.warm_start == 0 and e.peak_phase == "update"
    assert e.total == e.baseline + sum(e.held.values()) + e.phases["update"]
    assert (
        preflight.estimated_bytes(
            cfg_of(model="transformer", d_model=256, batch_size=64, minibatches=1, warmstart_steps=0)
        )
        == e.total
    )


def test_chunked_logprobs_and_micro_batches_shrink_the_update():
    base = dict(model="transformer", d_model=128, batch_size=64, minibatches=1)
    full = estimate(specs_of(**base)).phases["update"]
    assert estimate(specs_of(**base, micro_batch=8)).phases["update"] < full / 4
    assert estimate(specs_of(**base, logprob_chunk=64)).phases["update"] < full


@pytest.fixture
def smollm2_dir(tmp_path):
    pytest.importorskip("transformers")
    (tmp_path / "config.json").write_text(json.dumps(SMOLLM2))
    return tmp_path


def test_lora_holds_adapter_gradients_only_and_the_frozen_base_once(smollm2_dir):
    sp = specs_of(preset="smollm2_demo", model=f"hf:{smollm2_dir}")
    s = model_shape(sp, 96)
    # rank 8 on q, k, v, o of 30 layers: 30 * 8 * ((576 + 576) * 2 + (576 + 192) * 2) = 921,600
    assert s.trainable == 921_600
    assert s.full_params == 134_515_008  # tied embedding counted once
    assert s.copy_bytes == (134_515_008 + 921_600 + 64) * 4  # + the rotary buffers' 64 elements
    e = build_estimate(sp, s, 64, 32)
    assert e.held["grads_adam"] == 3 * 921_600 * 4
    assert e.held["weights"] == s.copy_bytes
    assert s.shared_bytes == 134_515_008 * 4  # the frozen base, tied embedding once
    own = (921_600 + 64) * 4  # a copy holds its adapters and buffers
    assert e.held["reference"] == own and e.held["monitor_snapshots"] == 2 * own


def test_smollm2_demo_is_not_refused_on_a_24_gib_machine(smollm2_dir, monkeypatch):
    cfg = cfg_of(preset="smollm2_demo", model=f"hf:{smollm2_dir}")
    sp = RunSpecs.from_config(cfg)
    e = build_estimate(sp, model_shape(sp, 96), 64, 32)  # the demo's prompts are 64 tokens long
    # measured peak: 4,744 MiB with the packed decode weights, 3,752 with --decode_weights plain (docs/performance.md)
    assert 3000 * MiB < e.total < 5000 * MiB
    assert estimate(sp).total < 8 * 2**30  # no tokenizer here: 128 prompt tokens assumed
    monkeypatch.setattr(preflight, "machine_bytes", lambda: 24 * 2**30)
    assert preflight.memory_error(cfg) is None
    monkeypatch.setattr(preflight, "machine_bytes", lambda: 2 * 2**30)
    err = preflight.memory_error(cfg)
    assert err.startswith("argument --batch_size: this run needs about") and "GiB" in err and "\n" not in err
    assert "update --batch_size" in err and "weights --model" in err  # one micro-batch's activations lead
    assert "reference" not in err  # the reference shares the frozen base: no longer a top term


def test_the_refusal_names_the_flag_with_the_largest_share(monkeypatch):
    monkeypatch.setattr(preflight, "machine_bytes", lambda: 2**28)
    assert preflight.memory_error(cfg_of(model="transformer", d_model=1024)).startswith("argument --d_model:")
    assert preflight.memory_error(cfg_of(batch_size=4096)).startswith("argument --batch_size:")
    assert preflight.memory_error(cfg_of(n_val=10**6)).startswith("argument --n_val:")


def test_eval_batch_is_the_evaluations():
    """The estimate's evaluation rows are the evaluation's own batch (io/ sits below rollout/,
    so it cannot import the constant: the two are tied here)."""
    from noma_prorl_bench.io import memory
    from noma_prorl_bench.rollout import sampling

    assert memory.EVAL_BATCH == sampling.EVAL_BATCH


def test_shared_prompt_counts_the_positions_the_passes_run(smollm2_dir, monkeypatch):
    """--shared_prompt: a pass runs B x (P - 1) + N x (T + 1) positions instead of N x (P + T), plus
    the prompts' keys and values gathered to the N rows in every layer: by hand at the demo's shapes."""
    from noma_prorl_bench.io import memory

    kw = dict(model=f"hf:{smollm2_dir}", batch_size=4, group_size=4, max_new_tokens=32, task="keyword_inclusion")
    sp_off, sp_on = specs_of(**kw), specs_of(**kw, shared_prompt=True)
    shape = model_shape(sp_off, 96)
    P, T, N, B = 55, 32, 16, 4
    a = memory._per_token(shape) * shape.act_bytes
    logits = 3 * N * (T + 1) * shape.vocab * 4
    off = memory._logprob_pass(sp_off, shape, N, P, T, 3, train=False)
    on = memory._logprob_pass(sp_on, shape, N, P, T, 3, train=False)
    assert off == N * (P + T) * a + logits
    assert on == (B * (P - 1) + N * (T + 1)) * a + N * (P - 1) * 2 * shape.kv * shape.act_bytes + logits
    assert on < off
    # with gradients every layer keeps both, and the update phase shrinks with them
    assert memory._logprob_pass(sp_on, shape, N, P, T, 3, train=True) < memory._logprob_pass(
        sp_off, shape, N, P, T, 3, train=True
    )
    assert build_estimate(sp_on, shape, P, T).phases["update"] < build_estimate(sp_off, shape, P, T).phases["update"]


def test_packed_decode_weights_are_held_for_hf_on_cpu(smollm2_dir):
    """--decode_weights: the sampler's packed copy of the Linear weights (models/packed.py) is a held
    term for hf:PATH on CPU, by hand at SmolLM2's shapes: 30 layers x (2 x 576^2 + 2 x 576 x 192 +
    3 x 576 x 1536) + the 49,152 x 576 head, 4 bytes each in float32 (x 2.0 packed), 2 in bf16 (x 0.93);
    nothing with plain."""
    kw = dict(model=f"hf:{smollm2_dir}", batch_size=4, group_size=4, max_new_tokens=32, task="keyword_inclusion")
    linear_params = 30 * (2 * 576 * 576 + 2 * 576 * 192 + 3 * 576 * 1536) + 49152 * 576
    for dtype, size, factor in (("float32", 4, 2.0), ("bf16_mixed", 2, 0.93)):
        sp = specs_of(**kw, dtype=dtype)
        shape = model_shape(sp, 96)
        assert shape.linear_bytes == linear_params * size
        est = build_estimate(sp, shape, 55, 32)
        assert est.held["packed_weights"] == int(linear_params * size * factor)
        assert est.flags["packed_weights"] == "decode_weights"
        plain = specs_of(**kw, dtype=dtype, decode_weights="plain")
        assert build_estimate(plain, model_shape(plain, 96), 55, 32).held["packed_weights"] == 0
    toy = specs_of(model="transformer")
    assert build_estimate(toy, model_shape(toy, 96), 8, 8).held["packed_weights"] == 0
