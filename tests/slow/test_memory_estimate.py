"""The run's memory estimate (io/memory.py) against the measured peak resident memory of real runs.

Three shapes, each a CLI run in its own subprocess whose peak RSS comes from `os.wait4` (that
child's ru_maxrss, not the maximum over every child so far): a toy transformer whose peak is
weights, gradients, Adam moments, the reference and the monitor snapshots (7 copies of 12.6M
parameters); a toy transformer whose peak is one minibatch's saved activations (128 rows, one
minibatch); and a tiny random Llama with a 32,000-wide vocabulary whose peak is logits-sized
tensors. The estimate is read from the run's `memory_estimate` event and must be within a factor
1.5 of the measured peak, either way. About 40 s on 2 CPU cores.
"""
import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow

SRC = os.path.join(os.path.dirname(__file__), "..", "..", "src")
COMMON = ["--steps", "1", "--eval_every", "1", "--n_val", "16", "--quiet"]
TOY = ["--model", "transformer", "--warmstart_steps", "0"]
SHAPES = {
    "weights": [*TOY, "--d_model", "512", "--n_layers", "4", "--n_heads", "8", "--batch_size", "4", "--group_size", "4"],
    "activations": [*TOY, "--d_model", "256", "--n_layers", "4", "--n_heads", "4", "--batch_size", "16",
                    "--group_size", "8", "--minibatches", "1"],
    "vocab_32k": ["--task", "arithmetic", "--batch_size", "8", "--group_size", "4", "--max_new_tokens", "24"],
}
# the term that should dominate each shape's estimate: held weights-like terms, or the peak phase
DOMINANT = {"weights": "grads_adam", "activations": "update", "vocab_32k": None}


@pytest.fixture(scope="module")
def hf32k(tmp_path_factory):
    pytest.importorskip("transformers")
    from noma_prorl_bench.models.tiny_hf import build_tiny_hf_model
    return build_tiny_hf_model(tmp_path_factory.mktemp("hf") / "llama32k", "llama", hidden=64, layers=2, heads=4,
                               vocab_size=32000)


def _measure(out, flags) -> tuple[dict, float]:
    """(the memory_estimate event, the child's peak RSS in MiB) of one run in a subprocess."""
    env = dict(os.environ, PYTHONPATH=os.path.abspath(SRC), OMP_NUM_THREADS="1")
    child = subprocess.Popen([sys.executable, "-m", "noma_prorl_bench.run", "--outdir", str(out), *COMMON, *flags],
                             env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(child.pid, 0)
    err = child.stderr.read().decode()
    child.stderr.close()
    assert status == 0, err[-2000:]
    events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    (est,) = [e for e in events if e["event"] == "memory_estimate"]
    assert events[0] is est and est["step"] == 0                       # the run's first record
    return est, usage.ru_maxrss / 1024.0


@pytest.mark.parametrize("shape", list(SHAPES))
def test_estimate_is_within_1_5x_of_the_measured_peak(tmp_path, shape, request):
    flags = list(SHAPES[shape])
    if shape == "vocab_32k":
        flags += ["--model", f"hf:{request.getfixturevalue('hf32k')}"]
    est, peak = _measure(tmp_path / shape, flags)
    ratio = est["total_mib"] / peak
    print(f"{shape}: estimate {est['total_mib']:.0f} MiB, peak RSS {peak:.0f} MiB, ratio {ratio:.2f}, "
          f"peak phase {est['peak_phase']}, load {os.getloadavg()[0]:.1f}")
    assert 1 / 1.5 <= ratio <= 1.5, (shape, est, peak)
    held, phases = est["held_mib"], est["phases_mib"]
    # the terms add up: baseline + held + the peak phase (no warm start in these runs)
    assert est["total_mib"] == pytest.approx(est["baseline_mib"] + sum(held.values()) + phases[est["peak_phase"]],
                                             abs=0.5)
    assert held["reference"] == held["weights"] and held["monitor_snapshots"] == pytest.approx(2 * held["weights"],
                                                                                              abs=0.2)
    if DOMINANT[shape] == "grads_adam":
        assert held["grads_adam"] == pytest.approx(3 * held["weights"], rel=0.01)   # no adapters: all trainable
    if DOMINANT[shape] == "update":
        assert est["peak_phase"] == "update"
