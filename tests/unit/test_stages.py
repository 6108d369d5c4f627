"""The step as stage objects: the reference strategies, the handed-in collector, and the structural
rules (a small Trainer, no module replacing its methods, a checkpoint module without reflection)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

from noma_prorl_bench.io.metrics import Counters
from noma_prorl_bench.rollout.collector import HandedCollector
from noma_prorl_bench.rollout.reference import ReferenceHolder, make_reference
from noma_prorl_bench.rollout.reference_source import NoReference
from noma_prorl_bench.rollout.sampling import RolloutBatch

pytestmark = pytest.mark.unit
SRC = Path(__file__).resolve().parents[2] / "src" / "noma_prorl_bench"


def _batch(n=4, P=2, T=3) -> RolloutBatch:
    return RolloutBatch(
        tokens=torch.ones(n, P + T, dtype=torch.long),
        mask=torch.ones(n, T),
        logp_old=torch.full((n, T), -0.5),
        rewards=torch.zeros(n),
        truncated=torch.zeros(n, dtype=torch.bool),
        group=torch.arange(n),
        prompt_len=P,
        prompts=["p"] * n,
        answers=["a"] * n,
        responses=["r"] * n,
    )


def test_no_reference_anchors_to_logp_old_and_counts_nothing():
    ref = make_reference(torch.nn.Linear(2, 2), "none", 1.0, 4, 3)
    assert isinstance(ref, NoReference) and not ref.enabled
    b = _batch()
    ref.prepare(b.tokens, b.prompt_len)
    old_logits = torch.randn(2, 3, 5)
    anchor, logits = ref.anchor(b.tokens[1:3], b.prompt_len, slice(1, 3), b.logp_old[1:3], old_logits)
    assert anchor is not None and torch.equal(anchor, b.logp_old[1:3]) and logits is old_logits
    assert ref.pop_counts() == {"count/ref_fwd": 0, "count/tokens_ref": 0}
    with pytest.raises(RuntimeError, match="Variant B"):
        ref.reset_to(torch.nn.Linear(2, 2))


def test_no_reference_checkpoint_state_is_the_old_none_holders():
    """A Variant B checkpoint written before NoReference existed loads, and vice versa."""
    old = ReferenceHolder(None, "none")
    assert NoReference().state_dict() == old.state_dict()
    NoReference().load_state_dict(old.state_dict())
    with pytest.raises(ValueError, match="ref mode"):
        NoReference().load_state_dict({"mode": "cached", "model": {}})


def test_handed_collector_serves_the_batch_once_with_its_counts_and_metrics():
    counters = Counters(("policy_fwd_rollout", "tokens_policy"))
    handed = HandedCollector(counters)
    with pytest.raises(RuntimeError, match="without a handed-in batch"):
        handed.collect()
    b = _batch()
    handed.hand(
        b,
        {
            "counts": {"count/policy_fwd_rollout": 3, "count/tokens_policy": 60},
            "rollout_metrics": {"dapo/extra_rounds": 1.0},
        },
    )
    got, metrics = handed.collect()
    assert got is b and metrics == {"dapo/extra_rounds": 1.0}
    assert counters.pop() == {"count/policy_fwd_rollout": 3, "count/tokens_policy": 60}
    with pytest.raises(RuntimeError):
        handed.collect()


def _trees():
    for p in SRC.rglob("*.py"):
        yield p, ast.parse(p.read_text())


def test_trainer_has_at_most_12_methods():
    tree = ast.parse((SRC / "training" / "trainer.py").read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Trainer")
    methods = [n.name for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    assert 5 <= len(methods) <= 12, methods


def test_no_module_replaces_or_subclasses_trainer_methods():
    bad = []
    for p, tree in _trees():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and any(
                isinstance(b, ast.Name) and b.id == "Trainer" for b in node.bases
            ):
                bad.append(f"{p.name}: class {node.name}(Trainer)")
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "Trainer"
                and node.attr != "from_config"
            ):  # its constructor, called, not replaced
                bad.append(f"{p.name}:{node.lineno}: Trainer.{node.attr}")
    assert bad == []


@pytest.mark.parametrize("name", ["checkpoint.py", "state_tree.py"])
def test_checkpoint_modules_have_no_reflection(name):
    tree = ast.parse((SRC / "io" / name).read_text())
    calls = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    assert not calls & {"vars", "setattr", "getattr", "hasattr"}, calls & {"vars", "setattr", "getattr", "hasattr"}
