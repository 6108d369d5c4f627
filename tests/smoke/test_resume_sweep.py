"""Resume is exact or refused: the stop step swept over a window that covers
growth, reference-reset and evaluation boundaries.

Scenario (10 steps): LoRA growth every 4 steps (4, 8), a soft reference reset every 3 (3, 6, 9),
an evaluation every 2 (2, 4, ..., 10). For every stop step k in 3..9:

  interrupted  a run checkpointed after every step, cut back to its checkpoint k (as a signal or
               a `kill -9` would leave it), resumed: metrics.jsonl equals the uninterrupted run's;
  extended     a `--steps k` run, then `--resume --steps 10`: equal to the uninterrupted 10-step
               run, or refused with exit 2 naming --steps. Refused exactly when step k, as the
               short run's last step, evaluated off the --eval_every cadence (k odd here), which
               the 10-step run does not do; a growth due at k (k = 4, 8), skipped on a last step,
               is done by the resume, so those extensions are exact.
A cosine LR schedule (its horizon is --steps) refuses any change of --steps.
"""

import json
import os
import shutil

import pytest

from noma_prorl_bench.run import main

pytestmark = pytest.mark.smoke

VOLATILE = ("time/", "perf/")
N = 10
WINDOW = range(3, 10)
FLAGS = [
    "--batch_size",
    "4",
    "--group_size",
    "4",
    "--warmstart_steps",
    "5",
    "--n_val",
    "16",
    "--eval_every",
    "2",
    "--quiet",
    "--enable_growth",
    "1",
    "--grow_every",
    "4",
    "--reset_every",
    "3",
    "--opt_reset",
    "soft",
]


def _stable(d):
    with open(os.path.join(d, "metrics.jsonl")) as f:
        return [{k: v for k, v in json.loads(line).items() if not k.startswith(VOLATILE)} for line in f]


def _exit_code(argv):
    """main's return value, or the code of the SystemExit an argument error raises."""
    try:
        return main(argv)
    except SystemExit as e:
        return e.code


def _growth_steps(d):
    with open(os.path.join(d, "events.jsonl")) as f:
        return [e["step"] for e in map(json.loads, f) if e["event"] == "growth"]


@pytest.fixture(scope="module")
def full(tmp_path_factory):
    """The uninterrupted run, checkpointed after every step."""
    d = str(tmp_path_factory.mktemp("sweep") / "full")
    assert main(["--outdir", d, *FLAGS, "--steps", str(N), "--save_every", "1", "--keep_checkpoints", str(N)]) == 0
    assert _growth_steps(d) == [4, 8]
    return d


@pytest.mark.parametrize("k", WINDOW)
def test_interrupted_at_k_resumes_exactly(full, tmp_path, k):
    d = str(tmp_path / "cut")
    shutil.copytree(full, d)
    for s in range(k + 1, N + 1):  # as if stopped right after checkpoint k
        shutil.rmtree(os.path.join(d, "checkpoints", f"step_{s:06d}"))
    os.remove(os.path.join(d, "summary.json"))
    assert main(["--outdir", d, "--resume"]) == 0
    assert _stable(d) == _stable(full)
    assert _growth_steps(d) == [4, 8]


@pytest.mark.parametrize("k", WINDOW)
def test_extended_from_k_is_exact_or_refused(full, tmp_path, capsys, k):
    d = str(tmp_path / "short")
    assert main(["--outdir", d, *FLAGS, "--steps", str(k)]) == 0
    before = _stable(d)
    capsys.readouterr()
    rc = _exit_code(["--outdir", d, "--resume", "--steps", str(N)])
    err = capsys.readouterr().err
    if k % 2:  # step k evaluated only because it was the last
        assert rc == 2 and "argument --steps" in err and "--eval_every" in err and "Traceback" not in err
        assert _stable(d) == before  # nothing written
    else:
        assert rc == 0, err
        assert _stable(d) == _stable(full)
        assert _growth_steps(d) == [4, 8]


def test_cosine_schedule_refuses_a_change_of_steps(tmp_path, capsys):
    d = str(tmp_path / "cos")
    assert main(["--outdir", d, *FLAGS, "--steps", "4", "--lr_schedule", "cosine"]) == 0
    capsys.readouterr()
    assert _exit_code(["--outdir", d, "--resume", "--steps", "6"]) == 2
    err = capsys.readouterr().err
    assert "argument --steps" in err and "--lr_schedule cosine" in err
