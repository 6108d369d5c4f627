"""ResetGRPOTrainer in 2 processes (DDP on CPU, gloo), launched with the command docs/trl.md gives.

tests/slow/trl_ddp_worker.py runs, per rank (the full model, and a LoRA policy whose reference is the
plug-in's "ref" adapter), 4 optimizer steps where only rank 1 sees a KL spike
after step 2, then a run resumed from checkpoint-2 (right after the reset). Checked: both ranks reset
at step 2 with the same event; every rank's reference, policy and optimizer state agree after the
reset and at the end; the checkpoint records every rank's reference checksum; the resumed run ends
with the same reference, policy, optimizer state, events and logs as the unbroken one.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys

import pytest

pytest.importorskip("trl", reason="the hf extra (trl) is not installed")
pytest.importorskip("accelerate", reason="accelerate is not installed")

pytestmark = [pytest.mark.slow, pytest.mark.hf]
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def docs_command() -> list[str]:
    """The multi-process command of docs/trl.md, as a user types it."""
    with open(os.path.join(ROOT, "docs", "trl.md")) as f:
        lines = [ln for ln in f.read().splitlines() if re.match(r"^(PYTHONPATH=\S+ )?accelerate launch ", ln)]
    assert len(lines) == 1, lines
    return shlex.split(lines[0])


@pytest.mark.parametrize("peft", [False, True], ids=["full", "peft"])
def test_two_processes_reset_together_and_resume_exactly(tmp_path, peft):
    cmd = docs_command()
    env = {**os.environ, "PYTHONHASHSEED": "0", "OMP_NUM_THREADS": "1"}
    if cmd[0].startswith("PYTHONPATH="):
        env["PYTHONPATH"] = os.pathsep.join([os.path.join(ROOT, cmd.pop(0).split("=", 1)[1]), ROOT])
    assert cmd[:2] == ["accelerate", "launch"] and cmd[-1] == "runs/trl_ddp", cmd
    argv = [sys.executable, "-m", "accelerate.commands.launch", *cmd[2:-1], str(tmp_path), *["--peft"] * peft]
    p = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    for rank in ranks:
        for run in ("full", "resumed"):
            assert rank[run]["world_size"] == 2 and rank[run]["distributed_type"] == "DistributedType.MULTI_CPU"
    full = ranks[0]["full"]
    if peft:  # the reference is the "ref" adapter: as many numbers as the trained LoRA weights
        assert full["ref_numel"] == full["trainable_numel"] > 0
    else:
        assert full["ref_numel"] == full["trainable_numel"] > 10_000  # the whole tiny Llama
    events = full["events"]
    assert [(e["decided_step"], e["step"], e["reason"], e["kl"]) for e in events] == [(2, 2, "kl_spike", 1e3)]
    assert events[0]["m_scaled"] == events[0]["v_scaled"] == events[0]["params_walked"] > 0
    assert events[0]["opt_step_reset"] is True and events[0]["kl_after"] == 0.0
    for key in ("events", "ref", "policy", "optimizer", "logs"):
        values = [rank[run][key] for rank in ranks for run in ("full", "resumed")]
        assert all(v == values[0] for v in values), key  # every rank, unbroken and resumed
    state = json.loads((tmp_path / "full" / "checkpoint-2" / "reset_state.json").read_text())
    assert state["n_resets"] == 1 and state["optimizer_step"] == 0
    assert state["ref_sha256_ranks"] == [ranks[0]["full"]["ref"]] * 2 == [state["ref_sha256"]] * 2
    assert [h["step"] for h in ranks[0]["full"]["logs"] if "reset/step" in h] == [2]
