"""The TRL plug-in's refusals name the argument or field at fault (docs/reliability.md, "Bad input"):
`args: GRPOConfig.<field>`, `optimizers[0]`, `reset_config: ResetConfig.<field>`; its saved
reset_state.json is read as a run file (no FIFO or link, bounded) and a malformed one is one line
naming the file and the key. No model is loaded."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

pytest.importorskip("trl")
sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_trl_resets import dataset, grpo_args, reward  # noqa: E402

from noma_prorl_bench.integrations.trl import ResetConfig, ResetGRPOTrainer  # noqa: E402
from noma_prorl_bench.integrations.trl_parts import STATE_KEYS, read_reset_state  # noqa: E402

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    "kw,cfg,names",
    [
        ({"beta": 0.0}, None, "args: GRPOConfig.beta=0.0"),
        ({"sync_ref_model": True}, None, "args: GRPOConfig.sync_ref_model=True"),
        ({"optim": "sgd"}, None, "args: GRPOConfig.optim='sgd'"),
        ({}, ResetConfig(reset_on_stall=2), "reset_config: ResetConfig.reset_on_stall"),
    ],
)
def test_construction_refusals_name_the_field(tmp_path, kw, cfg, names):
    with pytest.raises(ValueError) as e:
        ResetGRPOTrainer(
            model="/nonexistent-model", reward_funcs=reward, args=grpo_args(tmp_path, **kw), train_dataset=dataset(),
            reset_config=cfg,
        )  # fmt: skip
    assert str(e.value).startswith("ResetGRPOTrainer: ") and names in str(e.value) and "\n" not in str(e.value)


def test_missing_args_and_optimizer_name_the_argument(tmp_path):
    with pytest.raises(ValueError, match="^ResetGRPOTrainer: args: needs args=GRPOConfig"):
        ResetGRPOTrainer(model="/nonexistent-model", reward_funcs=reward, train_dataset=dataset())
    import torch

    sgd = torch.optim.SGD([torch.nn.Parameter(torch.zeros(2))], lr=0.1)
    with pytest.raises(ValueError, match=r"^ResetGRPOTrainer: optimizers\[0\]: optimizer SGD"):
        ResetGRPOTrainer(
            model="/nonexistent-model", reward_funcs=reward, args=grpo_args(tmp_path), train_dataset=dataset(),
            optimizers=(sgd, None),
        )  # fmt: skip


GOOD = {k: {} for k in STATE_KEYS} | {"events": [], "pending": None, "n_resets": 0, "merged": 0}


@pytest.mark.parametrize(
    "make,says",
    [
        (lambda p: os.mkfifo(p), "is a FIFO"),
        (lambda p: (p.parent / "x").write_text("{}") and os.symlink(p.parent / "x", p), "symbolic link"),
        (lambda p: p.write_text("{"), "is unreadable"),
        (lambda p: p.write_text("[" * 100000), "is unreadable"),
        (lambda p: p.write_text("[]"), "does not hold a JSON object"),
        (
            lambda p: p.write_text(json.dumps({k: v for k, v in GOOD.items() if k != "trigger"})),
            "lacks the key 'trigger'",
        ),
        (lambda p: p.write_text(json.dumps({**GOOD, "events": {}})), "key 'events' is not a JSON array"),
        (lambda p: p.write_text(json.dumps({**GOOD, "config": 3})), "key 'config' is not a JSON object"),
    ],
    ids=["fifo", "symlink", "not-json", "deep", "list", "missing-key", "events-object", "config-number"],
)
def test_a_malformed_reset_state_is_one_line_naming_the_file_and_key(tmp_path, make, says):
    p = tmp_path / "reset_state.json"
    make(p)
    with pytest.raises(ValueError) as e:
        read_reset_state(str(p))
    msg = str(e.value)
    assert msg.startswith("ResetGRPOTrainer: resume_from_checkpoint: ") and str(p) in msg and says in msg
    assert "\n" not in msg
    assert read_reset_state(str(_good(tmp_path))) == GOOD


def _good(tmp_path: Path) -> Path:
    q = tmp_path / "good.json"
    q.write_text(json.dumps(GOOD))
    return q
