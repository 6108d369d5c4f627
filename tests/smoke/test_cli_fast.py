"""The CLI answers at once: `--help`, `--version` and flag errors are handled by the parser before
torch, transformers or ray are imported (asserted on `sys.modules` in a fresh interpreter, not
on a timing); misspelt flags, choices and commands get a "did you mean"; `--help` is grouped."""

import subprocess
import sys

import pytest

pytestmark = pytest.mark.smoke
HEAVY = ("torch", "transformers", "ray", "numpy", "matplotlib")

# Runs `entry(argv)` in a fresh interpreter; prints the heavy modules imported, whatever the exit.
PROBE = """
import sys
entry, argv = sys.argv[1], sys.argv[2:]
if entry == "run":
    from noma_prorl_bench.run import main
else:
    from noma_prorl_bench.cli import main
try:
    code = main(argv)
except SystemExit as e:
    code = e.code
heavy = sorted({m.split('.')[0] for m in sys.modules} & set(%r))
print("EXIT", code, "HEAVY", ",".join(heavy), file=sys.stderr)
""" % (HEAVY,)


def probe(entry, *argv):
    r = subprocess.run([sys.executable, "-c", PROBE, entry, *argv], capture_output=True, text=True, timeout=120)
    last = r.stderr.strip().splitlines()[-1].split()
    return int(last[1]), last[3] if len(last) > 3 else "", r.stdout + r.stderr


@pytest.mark.parametrize(
    "entry,argv,code",
    [
        ("run", ["--help"], 0),
        ("run", ["--version"], 0),
        ("run", ["--outdir", "/tmp/never", "--stepz", "3"], 2),
        ("run", ["--outdir", "/tmp/never", "--loss", "grpo"], 2),
        ("run", ["--outdir", "/tmp/never", "--steps", "0"], 2),  # validation error, still torch-free
        ("run", ["--steps", "3"], 2),  # --outdir missing
        ("cli", ["--version"], 0),
        ("cli", ["run", "--help"], 0),
        ("cli", ["suite", "--help"], 0),
        ("cli", ["runn"], 2),
        ("cli", ["plot", "--help"], 0),
        ("cli", ["plot", "--out", "x.png"], 2),  # --runs missing
        ("cli", ["report", "--help"], 0),
        ("cli", ["report"], 2),  # DIR missing
        ("cli", ["plan", "--help"], 0),
        ("cli", ["plan"], 2),  # DIR missing
        ("cli", ["plan", "/tmp/never", "--power", "2"], 2),  # bad power, still numpy-free
        ("cli", ["replicate", "--help"], 0),
        ("cli", ["replicate"], 2),  # DIR missing
        ("cli", ["replicate", "/tmp/never"], 2),  # no summary.json, still numpy-free
        ("cli", ["pool", "--help"], 0),
        ("cli", ["pool", "/tmp/never"], 2),  # --out missing
        ("cli", ["pool", "/tmp/never", "--out", "/tmp/never-out"], 2),  # no such folder, still numpy-free
        ("cli", ["get-model", "--help"], 0),
        ("cli", ["map", "--help"], 0),
        ("cli", ["map"], 2),  # DIR missing
        ("cli", ["map", "/tmp/never", "--outdir", "/tmp/never-out"], 2),  # no such folder, still numpy-free
    ],
)
def test_parser_answers_before_heavy_imports(entry, argv, code):
    got, heavy, out = probe(entry, *argv)
    assert got == code, out
    assert heavy == "", f"{argv} imported {heavy}"
    assert "Traceback" not in out


@pytest.mark.parametrize(
    "argv,hint",
    [
        (["--stepz", "3"], "did you mean --steps?"),
        (["--kl_estimatr", "k3"], "did you mean --kl_estimator?"),
        (["--loss", "grpo"], "did you mean grpo_clip?"),
        (["--ref_compute", "cache"], "did you mean cached?"),
        (["--kl_estimator", "k4"], "did you mean k3?"),
    ],
)
def test_did_you_mean(argv, hint):
    code, _, out = probe("run", "--outdir", "/tmp/never", *argv)
    assert code == 2 and hint in out, out
    assert argv[0] in [ln for ln in out.splitlines() if "error:" in ln][0]


def test_misspelt_command():
    code, _, out = probe("cli", "suit")
    assert code == 2 and "did you mean suite?" in out


def test_help_is_grouped_by_section_with_unchanged_flags():
    from dataclasses import fields

    from noma_prorl_bench.config import RunConfig, build_parser

    text = build_parser().format_help()
    titles = [
        "task and model:",
        "RL: sampling:",
        "RL: loss and advantages:",
        "KL and reference:",
        "reference resets:",
        "topology growth:",
        "engines (Ray):",
        "output and run:",
    ]
    pos = [text.index("\n" + t) for t in titles]
    assert pos == sorted(pos)  # in the newcomer's reading order
    for f in fields(RunConfig):  # every field keeps its exact spelling
        assert f"--{f.name} " in text or f"--{f.name}\n" in text, f.name
    section = text.split("\nreference resets:", 1)[1].split("\ntopology growth:", 1)[0]
    assert "--reset_every" in section and "--opt_reset" in section and "--steps " not in section


def test_every_command_help_opens_with_whole_sentences():
    # the description argparse prints under the usage: complete sentences, none cut at a line of a
    # docstring (replicate's once ended "...: re-run a")
    from noma_prorl_bench.cli import COMMANDS

    for cmd in COMMANDS:
        r = subprocess.run(
            [sys.executable, "-m", "noma_prorl_bench.cli", cmd, "--help"], capture_output=True, text=True, timeout=120
        )
        assert r.returncode == 0, (cmd, r.stderr)
        paragraphs = r.stdout.split("\n\n")
        usage_end = next(i for i, p in enumerate(paragraphs) if p.startswith("usage:"))
        desc = " ".join(paragraphs[usage_end + 1].split())
        assert desc[0].isupper() and desc.endswith("."), (cmd, desc)
        assert not desc.startswith(("`", "usage")) and "prorl-bench " + cmd not in desc[:40], (cmd, desc)
