"""Two `--resume`s of one run directory (docs/reliability.md, "One outdir, one run"): the first one
takes the run lock before it reads the checkpoint and keeps it for its run, so the second is refused
with one line while the first goes on, and never cuts back what the first one wrote. The first runs
in-process, the second in another process, started after the first has read its checkpoint and
before it trains (on the code
before the lock moved, the first one's checks passed then, the second extended the run, and the
first one then cut the log back to the checkpoint it had read and dropped the extension)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from noma_prorl_bench import run as run_cli
from noma_prorl_bench.engines.local import build_trainer, run
from noma_prorl_bench.io.lock import lock_error
from noma_prorl_bench.io.safe_files import RunDirRefused

pytestmark = pytest.mark.smoke


def _steps(outdir) -> list[int]:
    with open(os.path.join(outdir, "metrics.jsonl")) as f:
        return [json.loads(line)["step"] for line in f if line.strip()]


def test_a_second_resume_never_truncates_the_first_ones_extension(tmp_path, fast_flags):
    out = str(tmp_path / "run")
    assert run_cli.main(["--outdir", out, *fast_flags, "--steps", "4"]) == 0
    assert _steps(out) == [0, 1, 2, 3, 4]
    cfg, ckpt = run_cli.resolve_config(["--outdir", out, "--resume", "--steps", "6"], "first")
    assert ckpt.step == 4
    second = subprocess.run(  # meanwhile, another process
        [sys.executable, "-m", "noma_prorl_bench.run", "--outdir", out, "--resume", "--steps", "5"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    err = second.stderr
    trainer, buffers = build_trainer(cfg, ckpt)
    summary = run(cfg, ckpt, trainer, buffers)  # the first one goes on
    assert summary["complete"] and _steps(out) == [0, 1, 2, 3, 4, 5, 6]  # its extension survives
    assert second.returncode == 2 and "in use by another run" in err and f"pid {os.getpid()}" in err
    assert len([ln for ln in err.splitlines() if "error" in ln]) == 1 and "Traceback" not in err
    assert lock_error(out) is None and not os.path.exists(os.path.join(out, "run.lock"))


def test_a_refused_resume_gives_its_lock_back(tmp_path, fast_flags):
    out = str(tmp_path / "run")
    assert run_cli.main(["--outdir", out, *fast_flags]) == 0
    with pytest.raises(SystemExit) as e:
        run_cli.resolve_config(["--outdir", out, "--resume", "--seed", "7"], "p")  # a trajectory field changed
    assert e.value.code == 2
    assert not os.path.exists(os.path.join(out, "run.lock")) and lock_error(out) is None
    assert run_cli.main(["--outdir", out, "--resume", "--steps", "3"]) == 0 and _steps(out)[-1] == 3


def test_the_log_is_checked_again_under_the_lock(tmp_path, fast_flags):
    """A run written meanwhile by this same process (which holds the lock) is not cut back either."""
    out = str(tmp_path / "run")
    assert run_cli.main(["--outdir", out, *fast_flags, "--steps", "4"]) == 0
    cfg, ckpt = run_cli.resolve_config(["--outdir", out, "--resume", "--steps", "6"], "first")
    assert run_cli.main(["--outdir", out, "--resume", "--steps", "5"]) == 0 and _steps(out)[-1] == 5
    trainer, buffers = build_trainer(cfg, ckpt)
    with pytest.raises(RunDirRefused, match="changed since its checkpoint .*step_000004 was read"):
        run(cfg, ckpt, trainer, buffers)
    assert _steps(out) == [0, 1, 2, 3, 4, 5]
