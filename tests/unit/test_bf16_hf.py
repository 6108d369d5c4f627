"""--dtype bf16_mixed and --dtype auto on a tiny random HF model with LoRA (the real model's recipe:
adapters on q/k/v/o, base frozen): the static KV cache in the compute dtype, the frozen base stored in
bf16 with float32 adapters and Adam state, sampler log-probs against the learner's under bf16, one
update against the float32 update, and the auto choice with its fallback (the detector
monkeypatched both ways).

The correctness tests run on every CPU: bf16 arithmetic is the same whether or not the CPU has bf16
units (without them PyTorch emulates it, which is only slower, and a tiny model takes milliseconds).
The one test that needs the real detector to say yes skips with the reason where it says no."""

import json
import os

import pytest
import torch

pytest.importorskip("transformers")

from noma_prorl_bench.config import make_config  # noqa: E402
from noma_prorl_bench.models import precision  # noqa: E402
from noma_prorl_bench.models.base import policy_logprobs  # noqa: E402
from noma_prorl_bench.models.tiny_hf import build_tiny_hf_model  # noqa: E402
from noma_prorl_bench.training.trainer import Trainer  # noqa: E402

pytestmark = [pytest.mark.unit, pytest.mark.hf]

# Tolerances, measured on this tiny model and stated here (docs/performance.md repeats them):
SAMPLER_VS_LEARNER_ATOL = (
    0.05  # (measured 0.008) max |logp_old (sampler, bf16 KV cache) - logp (learner forward)| per token
)
GRAD_REL_ERR = 0.05  # (measured 0.018) ||g_bf16 - g_fp32|| / ||g_fp32|| over the adapter gradients
UPDATE_COS = 0.95  # (measured 0.987) cosine(update_bf16, update_fp32) of the adapters' Adam step


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return str(
        build_tiny_hf_model(
            tmp_path_factory.mktemp("tiny_hf") / "llama", "llama", hidden=64, layers=2, heads=4, seed=0, init_std=0.1
        )
    )


def _cfg(model_dir, **over):
    base = {
        "outdir": "/tmp/unused",
        "model": f"hf:{model_dir}",
        "task": "keyword_inclusion",
        "batch_size": 3,
        "group_size": 4,
        "max_new_tokens": 12,
        "n_val": 4,
        "eval_every": 100,
        "quiet": True,
        "seed": 0,
        "minibatches": 1,
        "ppo_epochs": 1,
        "variant": "A",
        "ref_compute": "cached",
        "beta": 0.1,
        "lr": 1e-3,
        "enable_growth": 1,
        "initial_rank": 4,
        "max_rank": 4,
        "lora_alpha": 8.0,
        "grow_on": "stall",
        "adapter_targets": "q_proj,k_proj,v_proj,o_proj",
    }
    return make_config({**base, **over})


def _trainer(model_dir, events=None, **over):
    class Sink:
        def write(self, rec):
            (events if events is not None else []).append(rec)

        def close(self):
            pass

    return Trainer.from_config(_cfg(model_dir, **over), events_sink=Sink()).start()


def _lora_init_nonzero(tr):
    """B = 0 at init makes the adapters a no-op; give B a fixed non-zero value so they matter."""
    with torch.no_grad():
        for n, p in tr.policy.named_parameters():
            if n.endswith("lora_B"):
                p.copy_(0.05 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))


def test_bf16_mixed_rollout_runs_and_caches_in_bf16(model_dir):
    """The static KV cache crashed (float32 buffers, bf16 values); now both keys and values are bf16."""
    from noma_prorl_bench.models.hf_cache import prefill_static

    tr = _trainer(model_dir, dtype="bf16_mixed")
    ids = tr.tok.encode_prompts(["hello there", "ab"])
    mask = (ids != tr.tok.pad_id).long().cumsum(1).gt(0).long()
    with torch.no_grad():
        _, state = prefill_static(tr.policy, ids, mask, (mask.cumsum(1) - 1).clamp(min=0), ids.shape[1] + 4)
    layer = state.cache.layers[0]
    assert layer.keys.dtype == torch.bfloat16 and layer.values.dtype == torch.bfloat16
    batch, _ = tr.collector.collect()
    assert batch.logp_old.dtype == torch.float32 and batch.logp_old.isfinite().all()


def test_bf16_mixed_frozen_base_in_bf16_adapters_and_adam_in_float32(model_dir):
    events = []
    tr = _trainer(model_dir, events=events, dtype="bf16_mixed")
    tr.train_step()
    named = dict(tr.policy.named_parameters())
    lora = {n: p for n, p in named.items() if n.endswith(("lora_A", "lora_B"))}
    assert lora and all(p.dtype == torch.float32 and p.requires_grad for p in lora.values())
    base = {
        n: p for n, p in named.items() if n.endswith(("q_proj.base.weight", "o_proj.base.weight", "mlp.up_proj.weight"))
    }
    assert len(base) == 6 and all(p.dtype == torch.bfloat16 for p in base.values())
    emb = tr.policy.model.get_input_embeddings().weight
    assert emb.dtype == torch.float32  # embeddings and norms stay float32
    assert all(p.dtype == torch.float32 for n, p in named.items() if "norm" in n)
    assert all(
        s["exp_avg"].dtype == torch.float32 and s["exp_avg_sq"].dtype == torch.float32
        for s in tr.optimizer.state.values()
    ) and len(tr.optimizer.state) == len(lora)
    ref = dict(tr.ref.model.named_parameters())  # the reference copy: same layout
    assert {n: p.dtype for n, p in ref.items()} == {n: p.dtype for n, p in named.items()}
    (ev,) = [e for e in events if e["event"] == "precision"]
    assert ev["dtype"] == "bf16_mixed" and ev["requested"] == "bf16_mixed"
    # every Linear of the 2 layers (q, k, v, o bases; gate, up, down) and the untied head
    n_linear = 2 * 7 + (0 if tr.policy.model.config.tie_word_embeddings else 1)
    assert ev["frozen_bf16_tensors"] == n_linear
    assert ev["params_by_dtype"]["bfloat16"] == sum(p.numel() for p in named.values() if p.dtype == torch.bfloat16)


def test_bf16_sampler_logprobs_match_the_learner(model_dir):
    """logp_old of the sampler (prefill + incremental decode over the bf16 KV cache) against a
    teacher-forced learner forward of the same tokens, both under bf16: max |diff| per token <=
    SAMPLER_VS_LEARNER_ATOL (float32: ~1e-6). Also bf16 vs float32 learner log-probs: close."""
    tr = _trainer(model_dir, dtype="bf16_mixed")
    _lora_init_nonzero(tr)
    batch, _ = tr.collector.collect()
    m = batch.mask.bool()
    with torch.no_grad():
        learner = policy_logprobs(tr.policy, batch.tokens, batch.prompt_len, tr.cfg.temperature)[0]
    diff = (learner - batch.logp_old)[m].abs()
    assert m.sum() > 20 and float(diff.max()) <= SAMPLER_VS_LEARNER_ATOL, float(diff.max())
    fp = _trainer(model_dir, dtype="float32")
    _lora_init_nonzero(fp)
    with torch.no_grad():
        lp32 = policy_logprobs(fp.policy, batch.tokens, batch.prompt_len, tr.cfg.temperature)[0]
    assert float((lp32 - learner)[m].abs().mean()) <= SAMPLER_VS_LEARNER_ATOL


def _one_update(model_dir, dtype, batch=None):
    """One minibatch step over a fixed batch (fixed advantages, perturbed pi_ref) -> (grads,
    adapter deltas, batch)."""
    tr = _trainer(model_dir, dtype=dtype)
    _lora_init_nonzero(tr)
    batch = batch or tr.collector.collect()[0]
    with torch.no_grad():
        for n, p in tr.ref.model.named_parameters():
            if n.endswith("lora_A"):
                p.add_(0.01 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
        # logp_old from this policy (not the other run's), so the ratio starts at exactly 1
        batch.logp_old = policy_logprobs(tr.policy, batch.tokens, batch.prompt_len, tr.cfg.temperature)[0]
    tr.ref.prepare(batch.tokens, batch.prompt_len)
    batch.advantages = torch.randn(batch.n, generator=torch.Generator().manual_seed(1))
    before = {n: p.detach().clone() for n, p in tr.policy.named_parameters() if p.requires_grad}
    tr.policy.train()
    inp, _ = tr.learner.update_inputs(batch)
    out = tr.learner.minibatch_step(batch, slice(0, batch.n), inp, tr.ref)
    grads = {n: p.grad.clone() for n, p in tr.policy.named_parameters() if p.requires_grad}
    delta = {n: p.detach() - before[n] for n, p in tr.policy.named_parameters() if p.requires_grad}
    assert all(torch.isfinite(torch.tensor(v)) for k, v in out.items() if isinstance(v, float))
    return grads, delta, batch


def _flat(d):
    return torch.cat([d[k].flatten().float() for k in sorted(d)])


def test_one_bf16_update_close_to_the_float32_update(model_dir):
    """Same batch, same initial adapters: the bf16_mixed gradient is within GRAD_REL_ERR of the
    float32 one (relative L2 over all adapter tensors) and the Adam step points the same way
    (cosine >= UPDATE_COS; Adam's first step is ~lr * sign(g), so tiny gradient entries whose sign
    bf16 flips make the update differ more than the gradient)."""
    g32, d32, batch = _one_update(model_dir, "float32")
    g16, d16, _ = _one_update(model_dir, "bf16_mixed", batch=batch)
    gf32, gf16 = _flat(g32), _flat(g16)
    rel = float((gf16 - gf32).norm() / gf32.norm())
    assert 0 < rel <= GRAD_REL_ERR, rel
    cos = float(torch.nn.functional.cosine_similarity(_flat(d16), _flat(d32), dim=0))
    assert cos >= UPDATE_COS, cos


def _detector(monkeypatch, has_bf16: bool):
    monkeypatch.setattr(precision.platform, "machine", lambda: "x86_64")
    monkeypatch.setattr(precision, "cpu_flags", lambda *a: {"avx2", "avx512_bf16"} if has_bf16 else {"avx2"})
    monkeypatch.setattr(precision, "_mkldnn_bf16", lambda: False)


def test_detector_reads_the_cpu_flags(monkeypatch, tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu sse avx2 avx512f avx512_bf16\n\nprocessor\t: 1\n")
    assert precision.cpu_flags(info) == {"fpu", "sse", "avx2", "avx512f", "avx512_bf16"}
    assert precision.cpu_flags(tmp_path / "missing") == set()
    _detector(monkeypatch, True)
    ok, why = precision.bf16_support("cpu")
    assert ok and "avx512_bf16" in why
    _detector(monkeypatch, False)
    ok, why = precision.bf16_support("cpu")
    assert not ok and "no avx512_bf16" in why


def test_auto_resolution(monkeypatch):
    _detector(monkeypatch, True)
    assert precision.resolve_dtype_choice("auto", "hf:/m", "cpu")[0] == "bf16_mixed"
    assert precision.resolve_dtype_choice("auto", "transformer", "cpu")[0] == "float32"
    assert precision.resolve_dtype_choice("float32", "hf:/m", "cpu") == ("float32", "--dtype float32 as requested")
    _detector(monkeypatch, False)
    used, why = precision.resolve_dtype_choice("auto", "hf:/m", "cpu")
    assert used == "float32" and "fell back to float32" in why
    used, why = precision.resolve_dtype_choice("bf16_mixed", "hf:/m", "cpu")  # explicit: kept, with a warning
    assert used == "bf16_mixed" and "slower than float32" in why


@pytest.mark.parametrize("has_bf16", [False, True])
def test_auto_run_falls_back_or_uses_bf16_and_says_so(model_dir, monkeypatch, has_bf16):
    _detector(monkeypatch, has_bf16)
    events = []
    tr = _trainer(model_dir, events=events, dtype="auto")
    m = tr.train_step()
    assert m["loss/total"] == m["loss/total"]
    (ev,) = [e for e in events if e["event"] == "precision"]
    assert ev["requested"] == "auto"
    dtypes = {p.dtype for p in tr.policy.parameters()}
    if has_bf16:
        assert ev["dtype"] == "bf16_mixed" and "avx512_bf16" in ev["reason"]
        assert tr.policy.compute_dtype == torch.bfloat16 and dtypes == {torch.float32, torch.bfloat16}
    else:
        assert ev["dtype"] == "float32" and "fell back to float32" in ev["reason"]
        assert tr.policy.compute_dtype is None and dtypes == {torch.float32}


def test_auto_on_this_machine_uses_bf16_where_detected(model_dir):
    ok, why = precision.bf16_support("cpu")
    if not ok:
        pytest.skip(f"no bf16 units on this CPU: {why}")
    events = []
    _trainer(model_dir, events=events, dtype="auto")
    (ev,) = [e for e in events if e["event"] == "precision"]
    assert ev["dtype"] == "bf16_mixed"


def test_cli_auto_writes_the_precision_event(model_dir, tmp_path, monkeypatch):
    _detector(monkeypatch, False)
    from noma_prorl_bench.run import main

    out = tmp_path / "run"
    cfg = _cfg(model_dir, dtype="auto", steps=1, outdir=str(out))
    argv = [
        "--outdir",
        str(out),
        "--model",
        cfg.model,
        "--task",
        cfg.task,
        "--dtype",
        "auto",
        "--steps",
        "1",
        "--batch_size",
        "2",
        "--group_size",
        "2",
        "--max_new_tokens",
        "4",
        "--n_val",
        "2",
        "--quiet",
    ]
    assert main(argv) in (0, None)
    events = [json.loads(ln) for ln in open(os.path.join(out, "events.jsonl"))]
    (ev,) = [e for e in events if e["event"] == "precision"]
    config = json.load(open(out / "config.json"))
    assert ev["dtype"] == "float32" and config["dtype"] == "auto"
    # config.json names the dtype used and why, as the precision event does
    assert config["derived"]["dtype"] == ev["dtype"] and config["derived"]["dtype_reason"] == ev["reason"]


@pytest.fixture(scope="module")
def tied_model_dir(tmp_path_factory):
    return str(
        build_tiny_hf_model(
            tmp_path_factory.mktemp("tiny_hf_tied") / "llama",
            "llama",
            hidden=64,
            layers=2,
            heads=4,
            seed=0,
            init_std=0.1,
            tie=True,
        )
    )


def test_bf16_mixed_tied_head_gets_its_own_bf16_copy_with_the_same_logits_and_grads(tied_model_dir):
    """A frozen head tied to the input embedding (SmolLM2's) is untied under bf16_mixed: the head
    holds a bf16 copy, the embedding stays float32. Autocast casts a float32 weight with the same
    rounding, so logits and adapter gradients equal those of the tied float32 head bit for bit."""
    import copy

    events = []
    tr = _trainer(tied_model_dir, events=events, dtype="bf16_mixed")
    _lora_init_nonzero(tr)
    hf = tr.policy.model
    emb, head = hf.get_input_embeddings().weight, hf.get_output_embeddings().weight
    assert emb.dtype == torch.float32 and head.dtype == torch.bfloat16 and not head.requires_grad
    assert emb.untyped_storage().data_ptr() != head.untyped_storage().data_ptr()
    assert torch.equal(head.float(), emb.to(torch.bfloat16).float()) and not hf.config.tie_word_embeddings
    (ev,) = [e for e in events if e["event"] == "precision"]
    assert ev["frozen_bf16_tensors"] == 2 * 7 + 1  # 7 Linear bases per layer + the head
    tied = copy.deepcopy(tr.policy)  # the same policy with the head tied again
    tied.model.get_output_embeddings().weight = tied.model.get_input_embeddings().weight
    assert tied.model.get_output_embeddings().weight.dtype == torch.float32
    tokens = tr.tok.encode_prompts(["hello there", "ab", "a longer prompt"])
    grads = []
    for pol in (tr.policy, tied):
        logits = pol(tokens)
        (logits.log_softmax(-1)[..., :7].sum()).backward()
        grads.append({n: p.grad.clone() for n, p in pol.named_parameters() if p.grad is not None})
        pol.zero_grad(set_to_none=True)
        if pol is tr.policy:
            first = logits.detach()
    assert torch.equal(first, logits.detach())
    assert grads[0].keys() == grads[1].keys() and len(grads[0]) == 2 * 4 * 2
    assert all(torch.equal(grads[0][n], grads[1][n]) for n in grads[0])
    from noma_prorl_bench.models.base import same_tensor

    ref_head = tr.ref.model.model.get_output_embeddings().weight
    assert same_tensor(ref_head, head)  # the reference aliases the bf16 head
    tr.train_step()
    assert (
        torch.equal(hf.get_input_embeddings().weight, emb) and hf.get_output_embeddings().weight.dtype == torch.bfloat16
    )


def test_float32_run_keeps_a_tied_head_tied(tied_model_dir):
    tr = _trainer(tied_model_dir, dtype="float32")
    hf = tr.policy.model
    assert hf.get_output_embeddings().weight is hf.get_input_embeddings().weight


def test_bf16_mixed_sampler_decodes_through_merged_adapters_and_the_learner_does_not(model_dir):
    """Under bf16_mixed every sampler forward meets merged adapters (models/lora.merged_adapters),
    every teacher-forced one the adapters themselves; float32 never merges."""
    for dtype, sampler_merged in (("bf16_mixed", True), ("float32", False)):
        tr = _trainer(model_dir, dtype=dtype)
        _lora_init_nonzero(tr)
        seen: list[bool] = []
        (name, mod), *_ = [(n, m) for n, m in tr.policy.named_modules() if n.endswith("q_proj")]
        hook = mod.register_forward_hook(lambda m, i, o: seen.append(m.merged is not None))
        batch, _ = tr.collector.collect()
        n_sampler = len(seen)
        assert n_sampler > 2 and set(seen) == {sampler_merged}, (dtype, name)
        policy_logprobs(tr.policy, batch.tokens, batch.prompt_len, tr.cfg.temperature)
        hook.remove()
        assert len(seen) == n_sampler + 1 and seen[-1] is False


def test_bf16_mixed_teacher_forced_attention_in_float32(model_dir):
    """bf16_mixed switches the HF policy to the float32 teacher-forced attention (and says so in the
    precision event); learner (grad) and reference (no grad) compute the same bits; under inference
    mode (the sampler) it is SDPA in bf16, bit for bit; a float32 run keeps plain SDPA."""
    events: list = []
    tr = _trainer(model_dir, events=events, dtype="bf16_mixed")
    _lora_init_nonzero(tr)
    config = tr.policy.model.config
    assert config._attn_implementation == precision.TEACHER_ATTENTION
    assert tr.ref.model.model.config._attn_implementation == precision.TEACHER_ATTENTION
    (ev,) = [e for e in events if e["event"] == "precision"]
    assert ev["float32_teacher_attention"] is True
    ids = tr.tok.encode_prompts(["hello there", "ab", "a longer prompt here"])
    grad = tr.policy(ids)
    with torch.no_grad():
        nograd = tr.policy(ids)
    with torch.inference_mode():
        infer = tr.policy(ids)
    config._attn_implementation = "sdpa"
    try:
        plain = tr.policy(ids).detach()
    finally:
        config._attn_implementation = precision.TEACHER_ATTENTION
    assert torch.equal(grad.detach(), nograd) and torch.equal(infer, plain)
    assert not torch.equal(nograd, plain)  # the learner's pass did compute another attention
    events32: list = []
    fp = _trainer(model_dir, events=events32, dtype="float32")
    assert fp.policy.model.config._attn_implementation == "sdpa"
    assert ["float32_teacher_attention" in e for e in events32 if e["event"] == "precision"] == [False]


def test_bf16_mixed_norms_hand_bf16_to_their_linears_once(model_dir):
    """bf16_mixed hooks each layer's input_layernorm and post_attention_layernorm (2 layers: 4) so
    their output is cast to bf16 once; the learner's gradients still reach every adapter; float32
    hooks nothing and its norms return float32."""
    events: list = []
    tr = _trainer(model_dir, events=events, dtype="bf16_mixed")
    _lora_init_nonzero(tr)
    (ev,) = [e for e in events if e["event"] == "precision"]
    assert ev["norms_cast_once"] == 4
    layer = tr.policy.model.model.layers[0]
    seen: list = []
    hook = layer.self_attn.q_proj.register_forward_hook(lambda m, i, o: seen.append(i[0].dtype))
    ids = tr.tok.encode_prompts(["hello there", "ab"])
    out = tr.policy(ids)
    hook.remove()
    assert seen == [torch.bfloat16]
    out.logsumexp(-1).sum().backward()
    grads = [p.grad for n, p in tr.policy.named_parameters() if n.endswith(("lora_A", "lora_B"))]
    assert grads and all(g is not None and g.dtype == torch.float32 and g.isfinite().all() for g in grads)
    events32: list = []
    fp = _trainer(model_dir, events=events32, dtype="float32")
    assert ["norms_cast_once" in e for e in events32 if e["event"] == "precision"] == [False]
    with torch.no_grad():
        h = fp.policy.model.model.layers[0].input_layernorm(torch.randn(2, 3, 64))
    assert h.dtype == torch.float32


def test_a_pickled_bf16_policy_computes_the_same_bits_in_a_fresh_process(model_dir, tmp_path):
    """What a Ray actor does: unpickle the learner's bf16_mixed policy (its config names the float32
    teacher attention, its norms carry hooks) in a new process; its teacher-forced forward with
    grad and its sampler's forward give the learner process's bits."""
    import subprocess
    import sys

    tr = _trainer(model_dir, dtype="bf16_mixed")
    _lora_init_nonzero(tr)
    ids = tr.tok.encode_prompts(["hello there", "ab", "a longer prompt here"])
    with torch.inference_mode():
        infer = tr.policy(ids)
    torch.save({"policy": tr.policy, "ids": ids, "grad": tr.policy(ids).detach(), "infer": infer}, tmp_path / "p.pt")
    code = (
        "import torch, sys\n"
        "d = torch.load(sys.argv[1], weights_only=False)\n"
        "p = d['policy']\n"
        "g = p(d['ids']).detach()\n"
        "with torch.inference_mode():\n"
        "    i = p(d['ids'])\n"
        "assert torch.equal(g, d['grad']) and torch.equal(i, d['infer']), 'bits differ'\n"
        "print('same')\n"
    )
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "p.pt")], capture_output=True, text=True)
    assert out.returncode == 0 and "same" in out.stdout, out.stderr[-2000:]


@pytest.mark.parametrize("dtype", ["float32", "bf16_mixed"])
def test_lean_decode_step_is_the_models_own_forward_bit_for_bit(model_dir, dtype, monkeypatch):
    """models/hf_cache.lean_step (the Llama decode step without transformers' per-call plumbing)
    against the model's own forward on the same static cache: every collected token, logp_old and
    mask identical, float32 and bf16_mixed (LoRA merged for the sampler), grouped-query attention
    (4 heads, 2 KV heads), left-padded prompts of several lengths."""
    from noma_prorl_bench.models import hf_cache

    outs, calls = [], []
    real = hf_cache.lean_step
    monkeypatch.setattr(hf_cache, "lean_step", lambda *a: calls.append(1) or real(*a))
    for lean in (True, False):
        monkeypatch.setattr(hf_cache, "LEAN_DECODE", lean)
        tr = _trainer(model_dir, dtype=dtype)
        _lora_init_nonzero(tr)
        tr.train_step()  # the learner leaves the model in training mode (dropout 0: the same function)
        assert tr.policy.model.training
        n = len(calls)
        batch, _ = tr.collector.collect()
        assert (len(calls) > n) == lean  # the lean step ran only when on
        outs.append(batch)
    a, b = outs
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.logp_old, b.logp_old) and torch.equal(a.mask, b.mask)
    assert a.tokens.shape[1] - a.prompt_len > 3 and (a.tokens == tr.tok.pad_id).any()  # decoded; padded prompts
    assert tr.policy.model.config.num_key_value_heads < tr.policy.model.config.num_attention_heads


def test_lean_decode_is_for_llama_without_attention_dropout(tmp_path):
    from noma_prorl_bench.models import hf_cache
    from noma_prorl_bench.models.hf import load_hf_policy

    qwen = build_tiny_hf_model(tmp_path / "qwen2", "qwen2", hidden=32, layers=1, heads=4, seed=0)
    llama = build_tiny_hf_model(tmp_path / "llama", "llama", hidden=32, layers=1, heads=4, seed=0)
    assert not hf_cache.lean_decode_ok(load_hf_policy(qwen)[0].model)
    model = load_hf_policy(llama)[0].model
    assert hf_cache.lean_decode_ok(model)
    model.train()  # attention dropout 0 (disable_dropout): the training-mode forward is the same
    assert hf_cache.lean_decode_ok(model)
    model.config.attention_dropout = 0.1
    assert not hf_cache.lean_decode_ok(model)
    model.eval()
    assert hf_cache.lean_decode_ok(model)
