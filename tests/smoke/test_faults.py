"""Faults are messages, with real processes: an unwritable --outdir, a missing
optional package and a batch that cannot fit are refused with one line and exit 2 before
anything is written; a full disk (a 7 MiB tmpfs, where mounting is permitted) or a file-size
limit ends the run with one line and exit 1, every JSONL line whole and the last complete
checkpoint resumable; a stop signal abandons a step that outlives the grace period."""

import json
import os
import resource
import signal
import subprocess
import sys
import time

import pytest

# tests/conftest.py's FAST (a name `from conftest import` cannot reach in a full run: tests/ray has one too)
FAST = [
    "--steps",
    "3",
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
]

pytestmark = pytest.mark.smoke
ENTRY = [sys.executable, "-m", "noma_prorl_bench.run"]
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def cli(*argv, block=(), preexec=None, env=None):
    """Run the CLI in a fresh interpreter (optionally with packages made unimportable)."""
    if block:
        code = (
            "import sys\nfor m in %r: sys.modules[m] = None\n"
            "from noma_prorl_bench.run import main\nsys.exit(main(sys.argv[1:]))" % (list(block),)
        )
        cmd = [sys.executable, "-c", code, *argv]
    else:
        cmd = [*ENTRY, *argv]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, preexec_fn=preexec, env=env or ENV)
    return r.returncode, r.stderr


def one_error_line(err):
    lines = [ln for ln in err.splitlines() if "error:" in ln]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def assert_jsonl_whole(outdir):
    for name in ("metrics.jsonl", "events.jsonl", "samples.jsonl"):
        text = (outdir / name).read_text()
        assert text == "" or text.endswith("\n"), name
        for line in text.splitlines():
            json.loads(line)  # no torn line


@pytest.mark.parametrize("outdir", ["/proc/noma_x", "/proc/self/noma/x"])
def test_unwritable_outdir(outdir):
    code, err = cli("--outdir", outdir, *FAST)
    assert code == 2 and "--outdir" in one_error_line(err)
    assert not os.path.exists(outdir)


@pytest.mark.parametrize(
    "flags,module,flag",
    [
        (["--engine", "ray_colocated"], "ray", "--engine"),
        (["--engine", "ray_async"], "ray", "--engine"),
        (["--model", "hf:/nonexistent"], "transformers", "--model"),
        (["--report_to", "tensorboard"], "tensorboard", "--report_to"),
        (["--report_to", "csv,wandb"], "wandb", "--report_to"),
    ],
)
def test_missing_optional_package_is_one_line_and_writes_nothing(tmp_path, flags, module, flag):
    out = tmp_path / "run"
    code, err = cli("--outdir", str(out), *FAST, *flags, block=[module])
    line = one_error_line(err)
    assert code == 2 and flag in line and repr(module) in line and "pip install" in line
    assert not out.exists()  # no config.json, no empty JSONL files


@pytest.mark.parametrize(
    "flags,flag",
    [
        (["--batch_size", "100000000"], "--batch_size"),
        (["--n_val", "1000000000"], "--n_val"),
        (["--hidden", "200000"], "--hidden"),
    ],
)
def test_sizes_beyond_the_machine_are_refused_up_front(tmp_path, flags, flag):
    out = tmp_path / "run"
    code, err = cli("--outdir", str(out), *FAST, *flags)
    line = one_error_line(err)
    assert code == 2 and flag in line and "GiB" in line and not out.exists()


def _fsize_limit():
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of a kill
    resource.setrlimit(resource.RLIMIT_FSIZE, (16000, 16000))


def test_file_size_limit_is_one_line_exit_1_and_no_torn_line(tmp_path):
    out = tmp_path / "run"
    code, err = cli("--outdir", str(out), *FAST, "--steps", "60", "--eval_every", "100", preexec=_fsize_limit)
    assert code == 1 and "disk full" in one_error_line(err), err
    assert 0 < len((out / "metrics.jsonl").read_text().splitlines()) < 60
    assert_jsonl_whole(out)


@pytest.fixture
def small_fs(tmp_path):
    mnt = tmp_path / "fs"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=7m", "tmpfs", str(mnt)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def test_disk_full_keeps_the_last_checkpoint_and_resumes(small_fs):
    out = small_fs / "run"  # a checkpoint is ~2.8 MB: two fit, the third does not
    code, err = cli("--outdir", str(out), *FAST, "--steps", "40", "--save_every", "2", "--keep_checkpoints", "2")
    line = one_error_line(err)
    assert code == 1 and "disk full" in line and "--resume" in line, err
    assert_jsonl_whole(out)
    ckpts = sorted(os.listdir(out / "checkpoints"))
    assert ckpts and all(c.startswith("step_") for c in ckpts), ckpts  # the half-written one removed
    last = int(ckpts[-1].split("_")[1])
    assert f"step {last}" in line
    subprocess.run(["mount", "-o", "remount,size=64m", str(small_fs)], check=True)  # free space
    code, err = cli("--outdir", str(out), "--resume", "--steps", str(last + 4))
    assert code == 0, err
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(0, last + 5))  # 0: the evaluation before RL


def test_stop_signal_abandons_a_step_that_outlives_the_grace(tmp_path):
    out = tmp_path / "run"  # big steps (seconds each); grace 0.2 s via the test hook
    cmd = [
        *ENTRY,
        "--outdir",
        str(out),
        "--batch_size",
        "64",
        "--group_size",
        "16",
        "--ppo_epochs",
        "4",
        "--warmstart_steps",
        "2",
        "--n_val",
        "16",
        "--eval_every",
        "100",
        "--save_every",
        "1",
        "--steps",
        "50",
        "--quiet",
    ]
    p = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, env={**ENV, "NOMA_PRORL_STOP_GRACE_S": "0.2"})
    ckpt_dir = out / "checkpoints"
    t0 = time.time()
    while not (ckpt_dir.exists() and any(n.startswith("step_") for n in os.listdir(ckpt_dir))):
        assert p.poll() is None and time.time() - t0 < 300
        time.sleep(0.05)
    p.send_signal(signal.SIGTERM)  # right after a checkpoint: mid-step
    _, err = p.communicate(timeout=120)
    assert p.returncode == 143, err
    assert "abandoned" in err and "Traceback" not in err
    kept = sorted(n for n in os.listdir(ckpt_dir) if n.startswith("step_"))
    assert not any(n.startswith(".tmp") for n in os.listdir(ckpt_dir))
    assert f"step {int(kept[-1].split('_')[1])}" in err
    assert_jsonl_whole(out)
