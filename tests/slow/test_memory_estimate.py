"""The run's memory estimate (io/memory.py) against the measured peak resident memory of real runs.

Three shapes, each a CLI run in its own subprocess whose peak RSS comes from `os.wait4` in a small
launcher that forked it (that run's own ru_maxrss: not the maximum over every child so far, nor
pytest's size, which a process exec'd straight from pytest starts from): a toy transformer whose peak is
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
    "weights": [
        *TOY,
        "--d_model",
        "512",
        "--n_layers",
        "4",
        "--n_heads",
        "8",
        "--batch_size",
        "4",
        "--group_size",
        "4",
    ],
    "activations": [
        *TOY,
        "--d_model",
        "256",
        "--n_layers",
        "4",
        "--n_heads",
        "4",
        "--batch_size",
        "16",
        "--group_size",
        "8",
        "--minibatches",
        "1",
    ],
    "vocab_32k": ["--task", "arithmetic", "--batch_size", "8", "--group_size", "4", "--max_new_tokens", "24"],
}
# the term that should dominate each shape's estimate: held weights-like terms, or the peak phase
DOMINANT = {"weights": "grads_adam", "activations": "update", "vocab_32k": None}


@pytest.fixture(scope="module")
def hf32k(tmp_path_factory):
    pytest.importorskip("transformers")
    from noma_prorl_bench.models.tiny_hf import build_tiny_hf_model

    return build_tiny_hf_model(
        tmp_path_factory.mktemp("hf") / "llama32k", "llama", hidden=64, layers=2, heads=4, vocab_size=32000
    )


#: forks the run from this small process and writes the run's own ru_maxrss (KiB) to $PEAK_FILE. A process
#: exec'd straight from pytest would start from pytest's high-water mark (Linux keeps the larger of the old
#: and new image's peak across execve, and a vfork child shares the parent's memory), so late in a full
#: test session every run would seem to peak at the size of the pytest process
LAUNCH = (
    "import os, sys\npid = os.fork()\nif pid == 0:\n    os.execv(sys.argv[1], sys.argv[1:])\n"
    "_, status, usage = os.wait4(pid, 0)\nopen(os.environ['PEAK_FILE'], 'w').write(str(usage.ru_maxrss))\n"
    "sys.exit(os.waitstatus_to_exitcode(status))\n"
)


def _measure(out, flags) -> tuple[dict, float]:
    """(the memory_estimate event, the run's own peak RSS in MiB) of one run in a subprocess."""
    peak_file = f"{out}.peak"
    env = dict(os.environ, PYTHONPATH=os.path.abspath(SRC), OMP_NUM_THREADS="1", PEAK_FILE=peak_file)
    child = subprocess.run(
        [
            sys.executable,
            "-c",
            LAUNCH,
            sys.executable,
            "-m",
            "noma_prorl_bench.run",
            "--outdir",
            str(out),
            *COMMON,
            *flags,
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        timeout=900,
    )
    err = child.stderr.decode()
    assert child.returncode == 0, err[-2000:]
    events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    (est,) = [e for e in events if e["event"] == "memory_estimate"]
    assert events[0] is est and est["step"] == 0  # the run's first record
    with open(peak_file) as f:
        return est, int(f.read()) / 1024.0


@pytest.mark.parametrize("shape", list(SHAPES))
def test_estimate_is_within_1_5x_of_the_measured_peak(tmp_path, shape, request):
    flags = list(SHAPES[shape])
    if shape == "vocab_32k":
        flags += ["--model", f"hf:{request.getfixturevalue('hf32k')}"]
    est, peak = _measure(tmp_path / shape, flags)
    ratio = est["total_mib"] / peak
    print(
        f"{shape}: estimate {est['total_mib']:.0f} MiB, peak RSS {peak:.0f} MiB, ratio {ratio:.2f}, "
        f"peak phase {est['peak_phase']}, load {os.getloadavg()[0]:.1f}"
    )
    assert 1 / 1.5 <= ratio <= 1.5, (shape, est, peak)
    held, phases = est["held_mib"], est["phases_mib"]
    # the terms add up: baseline + held + the peak phase (no warm start in these runs)
    assert est["total_mib"] == pytest.approx(
        est["baseline_mib"] + sum(held.values()) + phases[est["peak_phase"]], abs=0.5
    )
    assert held["reference"] == held["weights"] and held["monitor_snapshots"] == pytest.approx(
        2 * held["weights"], abs=0.2
    )
    if DOMINANT[shape] == "grads_adam":
        assert held["grads_adam"] == pytest.approx(3 * held["weights"], rel=0.01)  # no adapters: all trainable
    if DOMINANT[shape] == "update":
        assert est["peak_phase"] == "update"


def test_the_launcher_measures_the_run_not_pytest(tmp_path):
    """A direct child of a large process reports that process's size as its own peak; the launcher's does not."""
    ballast = bytearray(400 * 2**20)
    ballast[::4096] = b"\1" * len(ballast[::4096])  # resident, not just reserved
    env = dict(os.environ, PEAK_FILE=str(tmp_path / "peak"))
    code = "import resource; print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)"
    direct = int(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env).stdout)
    assert subprocess.run([sys.executable, "-c", LAUNCH, sys.executable, "-c", "pass"], env=env).returncode == 0
    launched = int((tmp_path / "peak").read_text())
    assert direct > 400 * 1024 > 4 * launched, (direct, launched)  # KiB
    del ballast
