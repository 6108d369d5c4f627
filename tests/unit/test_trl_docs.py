"""docs/trl.md's example runs as written, and docs/examples/trl_resets.py runs on CPU (tiny random Llama)."""

from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path

import pytest

pytest.importorskip("trl", reason="the hf extra (trl) is not installed")

pytestmark = [pytest.mark.unit, pytest.mark.hf]
ROOT = Path(__file__).resolve().parents[2]


def test_docs_example_runs_and_prints_what_the_doc_says(tmp_path, monkeypatch):
    import torch

    text = (ROOT / "docs" / "trl.md").read_text()
    code = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    monkeypatch.chdir(tmp_path)
    torch.set_num_threads(1)
    out = io.StringIO()
    scope: dict = {}
    with contextlib.redirect_stdout(out):
        exec(compile(code, "docs/trl.md", "exec"), scope)
    events = scope["trainer"].reset_events
    assert [(e["decided_step"], e["step"], e["reason"]) for e in events] == [(1, 2, "periodic"), (3, 4, "periodic")]
    assert all(e["kl_after"] == 0.0 and e["kl_before"] > 0 for e in events)
    lines = [ln for ln in out.getvalue().splitlines() if re.match(r"^\d+ \d+ periodic ", ln)]
    assert [ln.split()[:2] for ln in lines] == [["1", "2"], ["3", "4"]] and all(ln.endswith(" 0.0") for ln in lines)


def test_example_script_on_cpu_with_lora(tmp_path, capsys):
    import importlib.util

    import torch

    torch.set_num_threads(1)
    spec = importlib.util.spec_from_file_location("trl_resets_example", ROOT / "docs" / "examples" / "trl_resets.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = tmp_path / "out"
    argv = [
        "--outdir",
        str(out),
        "--steps",
        "2",
        "--reset_every",
        "1",
        "--preset",
        "noma_soft",
        "--lora",
        "1",
        "--max_new_tokens",
        "6",
    ]
    assert mod.main(argv) == 0
    events = [json.loads(ln) for ln in (out / "reset_events.jsonl").read_text().splitlines()]
    assert [e["step"] for e in events] == [1, 2] and all(e["ref_kind"] == "peft_ref_adapter" for e in events)
    assert all(e["opt_reset"] == "soft" and e["soft_factor"] == 0.2 for e in events)
    logs = json.loads((out / "log_history.json").read_text())
    assert [h["reset/count"] for h in logs if "reset/count" in h] == [1.0, 2.0]
    assert "2 resets in 2 steps" in capsys.readouterr().out
    for bad, flag in (
        (["--opt_reset", "fresh"], "--opt_reset"),
        (["--model", str(tmp_path / "none")], "--model"),
        (["--steps", "0"], "--steps"),
    ):
        with pytest.raises(SystemExit) as e:
            mod.main(["--outdir", str(tmp_path / "bad"), *bad])
        assert e.value.code == 2 and flag in capsys.readouterr().err and not (tmp_path / "bad").exists()
