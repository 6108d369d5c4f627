"""`--model transformer` and `--model hf:PATH` end to end through the run CLI: a few training
steps, the standard outputs, warm start on demonstrations, LoRA growth on HF projections, and
a bad model path that exits 2 without writing anything."""

import json

import pytest

from noma_prorl_bench.run import main

pytestmark = pytest.mark.smoke
OUTPUTS = ("config.json", "metrics.jsonl", "events.jsonl", "samples.jsonl", "summary.json")
HF_FAST = [
    "--steps",
    "3",
    "--batch_size",
    "2",
    "--group_size",
    "4",
    "--max_new_tokens",
    "12",
    "--n_val",
    "4",
    "--eval_every",
    "2",
    "--task",
    "keyword_inclusion",
    "--quiet",
]


def _records(path):
    """A JSONL file's records; of metrics.jsonl the RL steps' (the step-0 row checked, left out)."""
    with open(path) as f:
        rows = [json.loads(line) for line in f]
    if path.name == "metrics.jsonl":
        assert rows[0]["step"] == 0 and "reward/val" in rows[0]
        return rows[1:]
    return rows


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory):
    pytest.importorskip("transformers")
    from noma_prorl_bench.models.tiny_hf import build_tiny_hf_model

    return build_tiny_hf_model(tmp_path_factory.mktemp("hf") / "llama", "llama", hidden=32, layers=2, heads=4)


def test_transformer_trains_end_to_end(tmp_path, fast_flags):
    out = tmp_path / "tr"
    assert main(["--outdir", str(out), "--model", "transformer", "--d_model", "32", "--n_heads", "4", *fast_flags]) == 0
    for f in OUTPUTS:
        assert (out / f).is_file(), f
    recs = _records(out / "metrics.jsonl")
    assert [r["step"] for r in recs] == [1, 2, 3]
    assert recs[-1]["kl/k3"] > 0  # the policy moved away from pi_ref
    assert recs[-1]["count/ref_fwd"] == 1 and "reward/val" in recs[-1]


@pytest.mark.hf
def test_hf_model_trains_end_to_end_on_cpu(tmp_path, tiny_llama):
    out = tmp_path / "hf"
    assert main(["--outdir", str(out), "--model", f"hf:{tiny_llama}", "--device", "auto", *HF_FAST]) == 0
    for f in OUTPUTS:
        assert (out / f).is_file(), f
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["warmstart_steps"] == -1 and cfg["derived"]["warmstart_steps"] == 0  # auto: none for hf
    assert cfg["derived"]["device"] in ("cpu", "cuda")
    recs = _records(out / "metrics.jsonl")
    assert [r["step"] for r in recs] == [1, 2, 3]
    assert all(r["count/tokens_policy"] > 0 and r["count/ref_fwd"] == 1 for r in recs)
    assert (
        recs[-1]["kl/k3"] >= 0 and "kl/to_init" in recs[-1]
    )  # a random model earns no reward: with k3 nothing need move
    events = _records(out / "events.jsonl")
    assert [e["steps"] for e in events if e["event"] == "warmstart"] == [0]
    assert _records(out / "samples.jsonl")  # validation texts were written


@pytest.mark.hf
def test_hf_warm_start_uses_the_tasks_demonstrations(tmp_path, tiny_llama, monkeypatch):
    from noma_prorl_bench.tasks import text

    calls = []
    original = text.KeywordInclusionTask.demonstration

    def spy(self, ex):
        calls.append(ex)
        return original(self, ex)

    monkeypatch.setattr(text.KeywordInclusionTask, "demonstration", spy)
    out = tmp_path / "ws"
    flags = [*HF_FAST, "--steps", "1", "--warmstart_steps", "2"]
    assert main(["--outdir", str(out), "--model", f"hf:{tiny_llama}", *flags]) == 0
    assert len(calls) == 2 * 64  # every warm-start target is a demonstration
    ws = [e for e in _records(out / "events.jsonl") if e["event"] == "warmstart"]
    assert ws[0]["steps"] == 2


@pytest.mark.hf
@pytest.mark.parametrize("targets", ["q_proj,v_proj", "*_proj"])
def test_hf_lora_growth_on_projection_layers(tmp_path, tiny_llama, targets):
    out = tmp_path / "grow"
    flags = [
        *HF_FAST,
        "--enable_growth",
        "1",
        "--adapter_targets",
        targets,
        "--grow_every",
        "1",
        "--initial_rank",
        "2",
        "--rank_step",
        "2",
    ]
    assert main(["--outdir", str(out), "--model", f"hf:{tiny_llama}", *flags]) == 0
    events = _records(out / "events.jsonl")
    adapters = [e for e in events if e["event"] == "adapters"]
    assert len(adapters) == 1 and adapters[0]["targets"]
    assert all(t.startswith("model.model.layers.") and t.endswith("_proj") for t in adapters[0]["targets"])
    if targets == "q_proj,v_proj":
        assert {t.rsplit(".", 1)[1] for t in adapters[0]["targets"]} == {"q_proj", "v_proj"}
    growths = [e for e in events if e["event"] == "growth"]
    assert [(g["old_rank"], g["new_rank"]) for g in growths] == [(2, 4), (4, 6)]
    assert all(g["stale_state_problems"] == [] for g in growths)
    assert [r["adapter/rank"] for r in _records(out / "metrics.jsonl")] == [2, 4, 6]


@pytest.mark.parametrize("model", ["hf:/nonexistent/model", "hf:{tmp}"])
def test_bad_hf_model_exits_2_naming_model_and_writes_nothing(tmp_path, capsys, model):
    if "{tmp}" in model:
        pytest.importorskip("transformers")  # reading the config needs it
    (tmp_path / "config.json").write_text('{"model_type": "distilbert"}')  # not a causal LM
    out = tmp_path / "out"
    rc = main(["--outdir", str(out), "--model", model.format(tmp=tmp_path), "--task", "keyword_inclusion", "--quiet"])
    err = capsys.readouterr().err
    assert rc == 2 and "--model" in err and "Traceback" not in err
    assert not out.exists()
