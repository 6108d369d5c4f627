"""benchmarks/micro/decode_floor.py: it times every Linear a decode step multiplies by (7 per Llama layer
plus the head) and turns a sampler result into CPU ms per decode step by hand-checkable arithmetic."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "micro"))

from decode_floor import floor_ms, linears, sampler_ms  # noqa: E402

pytestmark = pytest.mark.unit


def test_the_linears_of_a_decode_step(tmp_path):
    pytest.importorskip("transformers")
    from noma_prorl_bench.models.hf import load_hf_policy
    from noma_prorl_bench.models.tiny_hf import build_tiny_hf_model

    d = build_tiny_hf_model(tmp_path / "m", "llama", hidden=32, layers=3, heads=4, seed=0)
    model = load_hf_policy(d)[0].model
    ws = linears(model)
    assert len(ws) == 7 * 3 + 1 and ws[-1] is model.lm_head.weight
    ms = floor_ms(ws, rows=4, repeats=2)
    assert len(ms) == 2 and all(m > 0 for m in ms)


def test_sampler_ms_per_decode_step(tmp_path):
    f = tmp_path / "s.json"
    rows = [{"N": 16, "T": 32, "cpu_s": {"ours": [3.2, 3.0, 3.4], "hf_dynamic": [4.8, 4.8, 4.8]}}]
    f.write_text(json.dumps({"args": {"dtype": "bfloat16"}, "rows": rows}))
    s = sampler_ms(str(f))
    assert s["dtype"] == "bfloat16" and s["rows"] == 16 and s["tokens_per_call"] == 512
    assert s["ms_per_token_step"]["ours"] == pytest.approx(3.2 / 32 * 1e3)
    assert s["ms_per_token_step"]["hf_dynamic"] == pytest.approx(150.0)
