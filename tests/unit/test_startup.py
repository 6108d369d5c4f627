"""models/startup.py: a toy run's start-up never imports torch._dynamo, and the lean optimizer is
torch's optimizer bit for bit."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch

from noma_prorl_bench.models.gru import GRUPolicy
from noma_prorl_bench.models.startup import lean_optimizer, meta_modules

pytestmark = pytest.mark.unit


def test_meta_modules_skips_init_and_restores_it():
    normal = torch.nn.init.normal_
    with meta_modules():
        m = GRUPolicy(20, hidden=8)
        assert torch.nn.init.normal_ is not normal
    assert torch.nn.init.normal_ is normal
    assert m.head.weight.device.type == "meta"
    assert sum(p.numel() for p in m.parameters()) == sum(p.numel() for p in GRUPolicy(20, hidden=8).parameters())


@pytest.mark.parametrize("base", [torch.optim.Adam, torch.optim.AdamW])
def test_lean_optimizer_steps_bit_identically(base):
    torch.manual_seed(0)
    a = GRUPolicy(20, hidden=8)
    b = GRUPolicy(20, hidden=8)
    b.load_state_dict(a.state_dict())
    cls = lean_optimizer(base)
    assert cls.__name__ == base.__name__ and issubclass(cls, base)
    opts = [base(a.parameters(), lr=1e-2, weight_decay=0.01), cls(b.parameters(), lr=1e-2, weight_decay=0.01)]
    x = torch.randint(0, 20, (4, 6))
    for _ in range(3):
        for m, opt in zip((a, b), opts):
            opt.zero_grad()
            m(x).square().mean().backward()
            opt.step()
    for (n, p), q in zip(a.named_parameters(), b.parameters()):
        assert torch.equal(p, q), n
    sa, sb = opts[0].state_dict(), opts[1].state_dict()
    assert sa["param_groups"] == sb["param_groups"]
    assert all(torch.equal(sa["state"][i]["exp_avg"], sb["state"][i]["exp_avg"]) for i in sa["state"])
    assert torch.is_grad_enabled()  # step restored the grad mode


def test_toy_start_up_does_not_import_dynamo(tmp_path):
    """The memory pre-check's meta policy, the warm start and a few optimizer steps, in a fresh process."""
    code = textwrap.dedent(
        f"""
        import sys
        from noma_prorl_bench.run import main
        rc = main(["--outdir", {str(tmp_path / "run")!r}, "--steps", "2", "--warmstart_steps", "2", "--n_val", "8",
                   "--eval_every", "1", "--batch_size", "2", "--group_size", "2", "--quiet"])
        print(rc, "torch._dynamo" in sys.modules)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert out.stdout.split()[-2:] == ["0", "False"], out.stderr[-2000:]


def test_lean_optimizer_runs_the_global_step_hooks():
    """training/adam_cohorts.py installs a global step pre-hook: it must see the lean optimizer's steps."""
    from torch.optim.optimizer import register_optimizer_step_pre_hook

    seen = []
    handle = register_optimizer_step_pre_hook(lambda opt, args, kwargs: seen.append(type(opt).__name__))
    try:
        m = torch.nn.Linear(2, 2)
        opt = lean_optimizer(torch.optim.Adam)(m.parameters())
        m(torch.ones(1, 2)).sum().backward()
        opt.step()
        opt.step()
    finally:
        handle.remove()
    assert seen == ["Adam", "Adam"]
