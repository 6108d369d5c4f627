"""A newcomer's command lines and config files, end to end through run.main: a TRL/verl name, a
float that is 0 or subnormal in float32, a warmup longer than the run, an adapter rank the machine
cannot hold: exit 2, one error line naming the flag (and ours, for a foreign name), nothing written."""

import pytest

from noma_prorl_bench.run import main

pytestmark = pytest.mark.smoke

CASES = [
    (
        ["--learning_rate", "1e-3"],
        "argument --learning_rate: unrecognized flag (--learning_rate is TRL's name; ours is --lr)",
    ),
    (["--kl_coef", "0.1"], "ours is --beta"),
    (["--temperature", "1e-45"], "argument --temperature: must be >= 1.175e-38"),
    (["--lr", "3.5e-46"], "argument --lr: must be >= 1.175e-38"),
    (["--warmup_steps", "100000000000"], "argument --warmup_steps: counts optimizer steps and must be <= the run's 12"),
    (["--enable_growth", "1", "--grow_every", "2", "--max_rank", "100000000"], "argument --max_rank: this run needs"),
]


def _run(argv):
    try:
        return main(argv)
    except SystemExit as e:
        return e.code


@pytest.mark.parametrize("extra, message", CASES, ids=[" ".join(x) for x, _ in CASES])
def test_newcomer_mistakes_exit_2_with_one_line_and_write_nothing(tmp_path, fast_flags, capsys, extra, message):
    outdir = tmp_path / "run"
    assert _run(["--outdir", str(outdir), *fast_flags, *extra]) == 2
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if "error:" in ln]
    assert len(lines) == 1 and message in lines[0], err
    assert "Traceback" not in err and not outdir.exists()


def test_a_trl_key_in_a_config_file_exits_2_with_ours(tmp_path, capsys):
    (tmp_path / "c.yaml").write_text("learning_rate: 1.0e-6\nnum_generations: 8\n")
    assert _run(["--outdir", str(tmp_path / "run"), "--config", str(tmp_path / "c.yaml")]) == 2
    err = capsys.readouterr().err
    assert "unknown key 'learning_rate'" in err and "(learning_rate is TRL's name; ours is lr)" in err, err
    assert not (tmp_path / "run").exists()
