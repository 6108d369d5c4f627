"""Bounds checked before anything is built or allocated (docs/reliability.md, "Bad input"): `--lr` in
(0, LR_MAX] (Adam's update overflows float32 beyond), a --config file's task_kwargs holding what JSON
cannot (a date, bytes, a set, a Python tag, a recursive alias) or not parsing at all: one line naming
the flag, exit 2, nothing written."""

from __future__ import annotations

import pytest

from noma_prorl_bench.run import resolve_config

pytestmark = pytest.mark.unit


def _refused(capsys, argv) -> str:
    with pytest.raises(SystemExit) as e:
        resolve_config(argv, "prog")
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("prog: error:")]
    assert e.value.code == 2 and len(lines) == 1 and len(err.strip().splitlines()) == 2, err
    return lines[0]


@pytest.mark.parametrize("lr", ["3.4e38", "1e7", "-1", "0", "-0.0"])
def test_lr_out_of_range_is_refused_naming_the_flag(tmp_path, capsys, lr):
    line = _refused(capsys, ["--outdir", str(tmp_path / "o"), "--lr", lr])
    assert "argument --lr:" in line and "(0, 1e+06]" in line
    assert not (tmp_path / "o").exists()


def test_lr_within_range_is_accepted(tmp_path):
    cfg, _ = resolve_config(["--outdir", str(tmp_path / "o"), "--lr", "10"], "prog")
    assert cfg.lr == 10.0


@pytest.mark.parametrize(
    "body,why",
    [
        ("task_kwargs:\n  d: 2024-01-01\n", "is a date"),
        ("task_kwargs:\n  b: !!binary aGVsbG8=\n", "is a bytes"),
        ("task_kwargs:\n  s: !!set {a, b}\n", "is a set"),
        ("task_kwargs: &a\n  self: *a\n", "recursive alias"),
        ("task_kwargs:\n  l: &b [1, *b]\n", "recursive alias"),
        ("task_kwargs:\n  t: !!python/tuple [1, 2]\n", "python/tuple"),
        ("task_kwargs: {a: 1\n", "does not parse"),
        ("task_kwargs:\n  1: x\n", "not a string"),
    ],
    ids=["date", "bytes", "set", "alias-map", "alias-list", "python-tag", "malformed", "int-key"],
)
def test_task_kwargs_that_json_cannot_hold_are_one_line(tmp_path, capsys, body, why):
    f = tmp_path / "c.yaml"
    f.write_text("task: rg:chain_sum\n" + body)
    line = _refused(capsys, ["--outdir", str(tmp_path / "o"), "--config", str(f)])
    assert "argument --config:" in line and why in line
    assert not (tmp_path / "o").exists()
