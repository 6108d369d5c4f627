"""A checkpoint is checked against the model and the optimizer before anything is cut back
(docs/reliability.md, "Resume semantics"): a saved Adam moment or weight of another shape or dtype is
refused (exit 2, one line naming the part and both shapes) while metrics.jsonl still holds the steps
after the checkpoint; the digests are rewritten to match, as whoever can write the directory can do.
A state.json naming a structured or subarray NumPy type is refused before it allocates anything."""

from __future__ import annotations

import json
import os
import shutil

import pytest
from safetensors.torch import load_file, save_file

from noma_prorl_bench import run as run_cli
from noma_prorl_bench.io.checkpoint import MARKER, STATE, TENSORS, sha256_file
from noma_prorl_bench.io.state_tree import CheckpointError, decode

pytestmark = pytest.mark.smoke


def _steps(outdir) -> list[int]:
    with open(os.path.join(outdir, "metrics.jsonl")) as f:
        return [json.loads(line)["step"] for line in f if line.strip()]


def _tamper(ckpt: str, edit) -> None:
    tensors = load_file(os.path.join(ckpt, TENSORS))
    edit(tensors)
    os.remove(os.path.join(ckpt, TENSORS))
    save_file(tensors, os.path.join(ckpt, TENSORS), metadata={"format": "noma_prorl_bench/checkpoint"})
    digests = {n: sha256_file(os.path.join(ckpt, n)) for n in (TENSORS, STATE)}
    marker = json.loads(open(os.path.join(ckpt, MARKER)).read())
    os.remove(os.path.join(ckpt, MARKER))
    with open(os.path.join(ckpt, MARKER), "w") as f:
        json.dump({**marker, "sha256": digests}, f)


def _first(tensors, part):
    return next(k for k in sorted(tensors) if k.startswith(part))


@pytest.mark.parametrize(
    "part,edit",
    [
        ("components/optimizer/state/", lambda t, k: t[k].reshape(-1)[:-1].clone()),
        ("components/optimizer/state/", lambda t, k: t[k].double()),
        ("components/policy/", lambda t, k: t[k].double()),
    ],
    ids=["adam-moment-shape", "adam-moment-dtype", "weight-dtype"],
)
def test_a_misfitting_checkpoint_is_refused_before_anything_is_cut_back(tmp_path, fast_flags, capsys, part, edit):
    out = str(tmp_path / "run")
    assert run_cli.main(["--outdir", out, *fast_flags, "--steps", "4", "--save_every", "2"]) == 0
    shutil.rmtree(os.path.join(out, "checkpoints", "step_000004"))  # resume from step 2: rows 3, 4 to cut
    ckpt = os.path.join(out, "checkpoints", "step_000002")
    key = {}

    def change(tensors):
        key["k"] = k = _first(tensors, part if "policy" in part else part + "0/exp_avg")
        tensors[k] = edit(tensors, k)

    _tamper(ckpt, change)
    before = open(os.path.join(out, "metrics.jsonl"), "rb").read()
    capsys.readouterr()
    assert run_cli.main(["--outdir", out, "--resume"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "does not fit" in err and "Traceback" not in err, err
    assert ("optimizer state 0/exp_avg" in err) if "optimizer" in part else ("policy" in err)
    assert open(os.path.join(out, "metrics.jsonl"), "rb").read() == before and _steps(out)[-1] == 4


@pytest.mark.parametrize(
    "dtype", ["(100000000000,)f8", "(100000,100000)f8", "V100000000000", "f8,f8", "O", "U5", "no such type"]
)
def test_a_state_json_array_type_that_allocates_is_refused(dtype):
    with pytest.raises(CheckpointError, match="not a plain number type"):
        decode({"x": {"__nd__": 0, "dtype": dtype}}, {})
    assert decode({"__nd__": [1, 2], "dtype": "int64"}, {}).tolist() == [1, 2]
