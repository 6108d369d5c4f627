"""Run directories are untrusted input (docs/reliability.md): the central write helpers never
follow a symlink planted in a run directory, `--overwrite` clears only empty directories or this
tool's runs (never /, the home or the working directory), checkpoints verify their sha256, a
resume checks metrics.jsonl, and text from a directory is printed in a report as data.
Every symlink case points at a harmless marker file under tmp_path and checks it is untouched."""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from fakeruns import write_run  # noqa: E402

from noma_prorl_bench.analysis.commands import plot_main, report_main  # noqa: E402
from noma_prorl_bench.config import RunConfig  # noqa: E402
from noma_prorl_bench.io import checkpoint as ck  # noqa: E402
from noma_prorl_bench.io import resume, run_dir, safe_files  # noqa: E402
from noma_prorl_bench.io import state_tree as st  # noqa: E402
from noma_prorl_bench.io.lock import lock_error, run_lock  # noqa: E402
from noma_prorl_bench.io.metrics import CsvSink, JsonlSink  # noqa: E402

pytestmark = pytest.mark.unit
MARK = "harmless marker\n"


@pytest.fixture
def victim(tmp_path):
    v = tmp_path / "victim.txt"
    v.write_text(MARK)
    return v


def _untouched(victim):
    return victim.read_text() == MARK


# ------------------------------------------------------------------ the helpers never follow a link
def test_truncate_jsonl_does_not_write_through_a_planted_tmp_link(tmp_path, victim):
    """`--resume` cut metrics.jsonl back through `metrics.jsonl.tmp`; a link there redirected
    the log (text the directory's author controls) into the link's target."""
    d = tmp_path / "run"
    d.mkdir()
    (d / "metrics.jsonl").write_text('{"step": 1}\n{"step": 2}\n`touch pwned`\n')
    os.symlink(victim, d / "metrics.jsonl.tmp")
    resume.truncate_jsonl(str(d / "metrics.jsonl"), 1)
    assert _untouched(victim)
    assert (d / "metrics.jsonl").read_text() == '{"step": 1}\n'


def test_write_json_does_not_follow_a_planted_tmp_link(tmp_path, victim):
    os.symlink(victim, tmp_path / "config.json.tmp")
    run_dir.write_json(str(tmp_path / "config.json"), {"a": 1})
    assert _untouched(victim) and json.loads((tmp_path / "config.json").read_text()) == {"a": 1}


@pytest.mark.parametrize(
    "make",
    [
        lambda p: JsonlSink(p, "a"),
        lambda p: JsonlSink(p, "w"),
        lambda p: safe_files.write_json(p, {}),
        lambda p: CsvSink(p, [{"step": 1}]),
    ],
)
def test_run_files_are_never_opened_through_a_link(tmp_path, victim, make):
    target = tmp_path / "metrics.jsonl"
    os.symlink(victim, target)
    with pytest.raises(safe_files.UnsafePath, match="metrics.jsonl"):
        make(str(target))
    assert _untouched(victim)


def test_a_linked_lock_file_is_refused_and_its_target_not_truncated(tmp_path, victim):
    os.symlink(victim, tmp_path / "run.lock")
    assert "run.lock" in lock_error(str(tmp_path)) and "symbolic link" in lock_error(str(tmp_path))
    with pytest.raises(safe_files.UnsafePath):
        with run_lock(str(tmp_path)):
            pass
    assert _untouched(victim)


def test_clear_run_files_removes_links_not_their_targets(tmp_path, victim):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep.txt").write_text("x")
    d = tmp_path / "run"
    d.mkdir()
    os.symlink(elsewhere, d / "checkpoints")
    os.symlink(victim, d / "summary.json")
    run_dir.clear_run_files(str(d))
    assert _untouched(victim) and (elsewhere / "keep.txt").read_text() == "x" and os.listdir(d) == []


@pytest.mark.parametrize(
    "name", ["metrics.jsonl.tmp", "config.json", "run.lock", "checkpoints", "summary.json", "report.md", ".anything"]
)
def test_check_outdir_names_a_linked_run_file(tmp_path, victim, name):
    d = tmp_path / "run"
    d.mkdir()
    os.symlink(victim, d / name)
    err = run_dir.check_outdir(RunConfig(outdir=str(d), overwrite=True))
    assert err.startswith("argument --outdir:") and name in err and "symbolic link" in err


def test_a_link_inside_a_checkpoint_is_refused(tmp_path, victim):
    step = tmp_path / "checkpoints" / "step_000002"
    step.mkdir(parents=True)
    os.symlink(victim, step / "state.json")
    assert "state.json" in run_dir.run_dir_links(str(tmp_path))


# ------------------------------------------------------------------ ownership
@pytest.fixture
def home(tmp_path, monkeypatch):
    h = tmp_path / "home"
    h.mkdir()
    monkeypatch.setenv("HOME", str(h))
    return h


def _ours(d: Path) -> None:
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps({"steps": 3, "versions": {"noma_prorl_bench": "0.1"}}))


def test_overwrite_refuses_a_directory_that_is_not_ours(tmp_path, home):
    d = tmp_path / "project"
    for sub in ("checkpoints", "plots", "tb"):
        (d / sub).mkdir(parents=True)
    (d / "config.json").write_text('{"model": "someone else\'s"}')
    (d / "summary.json").write_text("{}")
    err = run_dir.check_outdir(RunConfig(outdir=str(d), overwrite=True))
    assert err.startswith("argument --overwrite:") and "not a run directory of this tool" in err


@pytest.mark.parametrize("where", ["home", "cwd", "root", "parent_of_cwd"])
def test_overwrite_always_refuses_home_cwd_and_root(tmp_path, home, monkeypatch, where):
    cwd = tmp_path / "work" / "here"
    cwd.mkdir(parents=True)
    monkeypatch.chdir(cwd)
    d = {"home": home, "cwd": Path("."), "root": Path("/"), "parent_of_cwd": tmp_path / "work"}[where]
    if where != "root":
        _ours(d)  # even one that holds a run of ours
    err = run_dir.check_outdir(RunConfig(outdir=str(d), overwrite=True))
    assert err and err.startswith("argument --overwrite: refusing to clear"), err


def test_ours_and_empty_directories_are_accepted_legacy_config_included(tmp_path, home):
    legacy = tmp_path / "legacy"
    _ours(legacy)  # a config.json made before run ids: still ours
    (legacy / "metrics.jsonl").write_text("")
    empty = tmp_path / "empty"
    empty.mkdir()
    assert run_dir.check_outdir(RunConfig(outdir=str(legacy), overwrite=True)) is None
    assert run_dir.check_outdir(RunConfig(outdir=str(empty))) is None
    assert "not empty" in run_dir.check_outdir(RunConfig(outdir=str(legacy)))


def test_resolved_config_carries_a_run_id():
    a, b = run_dir.resolved_config(RunConfig()), run_dir.resolved_config(RunConfig())
    assert len(a["run_id"]) == 32 and a["run_id"] != b["run_id"]
    assert a["versions"]["noma_prorl_bench"]


# ------------------------------------------------------------------ checkpoint integrity
class _Tiny:
    def __init__(self, seed=0):
        torch.manual_seed(seed)
        from noma_prorl_bench.config import RunConfig

        self.cfg = RunConfig(steps=10)
        self.policy = torch.nn.Linear(64, 64)
        self.step_idx = 2

    def state_dict(self):
        return st.state_tree(self.step_idx, {"policy": self.policy}, {}, {})


def test_checkpoint_records_sha256_and_refuses_flipped_bytes(tmp_path):
    path = ck.save(_Tiny(), str(tmp_path), keep=1)
    marker = json.loads((Path(path) / "COMPLETE").read_text())
    assert marker["step"] == 2 and set(marker["sha256"]) == {"tensors.safetensors", "state.json"}
    ck.read(path)  # intact: reads
    t = Path(path) / "tensors.safetensors"
    data = bytearray(t.read_bytes())
    mid = len(data) - 4 * 64  # inside the tensor data, the header untouched
    data[mid : mid + 64] = bytes(b ^ 0xFF for b in data[mid : mid + 64])
    t.write_bytes(bytes(data))
    with pytest.raises(ck.CheckpointError, match="tensors.safetensors does not match the sha256"):
        ck.read(path)


def test_checkpoint_refuses_another_runs_tensors(tmp_path):
    a = ck.save(_Tiny(0), str(tmp_path / "a"), keep=1)
    b = ck.save(_Tiny(1), str(tmp_path / "b"), keep=1)
    (Path(a) / "tensors.safetensors").write_bytes((Path(b) / "tensors.safetensors").read_bytes())
    with pytest.raises(ck.CheckpointError, match="tensors.safetensors does not match"):
        ck.read(a)


def test_legacy_marker_is_read_unverified(tmp_path):
    path = ck.save(_Tiny(), str(tmp_path), keep=1)
    (Path(path) / "COMPLETE").write_text("2\n")  # written before digests were recorded
    assert ck.read(path).step == 2


def test_a_linked_checkpoint_directory_is_not_listed(tmp_path):
    real = ck.save(_Tiny(), str(tmp_path / "other"), keep=1)
    (tmp_path / "run" / "checkpoints").mkdir(parents=True)
    os.symlink(real, tmp_path / "run" / "checkpoints" / "step_000002")
    assert ck.list_checkpoints(str(tmp_path / "run")) == []


@pytest.mark.parametrize(
    "steps,ok,match",
    [
        ([1, 2, 3, 4, 5], True, None),
        ([1, 2, 3, 4, 5, 6, 7], True, None),  # lines past the checkpoint: cut back later
        ([1, 2, 4, 5], False, "missing steps 3"),
        ([1, 2, 2, 3, 4, 5], False, "repeated steps 2"),
        ([1, 5], False, "missing steps 2-4"),
        ([], False, "missing steps 1-5"),
        ([0, 1, 2, 3, 4, 5], True, None),  # the step-0 row (evaluation before RL)
        ([0, 1, 2, 0, 3, 4, 5], False, "repeated steps 0"),
        ([-1, 1, 2, 3, 4, 5], False, "steps out of range -1"),
    ],
)
def test_metrics_log_must_hold_steps_1_to_k_once(tmp_path, steps, ok, match):
    p = tmp_path / "metrics.jsonl"
    p.write_text("".join(json.dumps({"step": s}) + "\n" for s in steps) + '{"step": 9, "x": 0.')  # partial line
    problem = resume.check_metrics_log(str(p), 5)
    assert (problem is None) == ok and (ok or match in problem), problem


def test_metrics_log_with_nested_json_is_refused_not_a_traceback(tmp_path):
    p = tmp_path / "metrics.jsonl"
    p.write_text('{"step": 1}\n' + "[" * 100_000 + "]" * 100_000 + "\n")
    assert "line 2" in resume.check_metrics_log(str(p), 1)


# ------------------------------------------------------------------ report and plot outputs
def _run_dir(tmp_path, **kw):
    return write_run(tmp_path / "run", seed=0, steps=20, **kw)


def test_report_on_a_run_dir_keeps_its_summary_json(tmp_path):
    d = _run_dir(tmp_path)
    before = (d / "summary.json").read_bytes()
    assert report_main([str(d)]) == 0
    assert (d / "summary.json").read_bytes() == before
    assert (d / "report" / "report.md").is_file() and (d / "report" / "summary.json").is_file()


def test_report_refuses_a_linked_out_and_leaves_the_target(tmp_path, victim, capsys):
    d = _run_dir(tmp_path)
    os.symlink(victim, d / "report.md")
    with pytest.raises(SystemExit) as e:
        report_main([str(d), "--out", str(d / "report.md")])
    assert e.value.code == 2 and _untouched(victim)
    err = capsys.readouterr().err
    assert "report.md" in err and "symbolic link" in err and "Traceback" not in err


def test_plot_refuses_a_linked_out(tmp_path, victim, capsys):
    d = _run_dir(tmp_path)
    os.symlink(victim, tmp_path / "fig.png")
    with pytest.raises(SystemExit) as e:
        plot_main(["--runs", str(d), "--out", str(tmp_path / "fig.png")])
    assert e.value.code == 2 and _untouched(victim) and "--out" in capsys.readouterr().err


def test_text_from_a_directory_is_rendered_as_data(tmp_path):
    d = _run_dir(tmp_path)
    (d / "settings.json").write_text(
        json.dumps(
            {
                "commit": "abc` $(touch pwned) `def",
                "machine": "box\n\n# Injected heading",
                "command": "prorl-bench suite --preset quick; touch pwned\nrm -rf ~",
            }
        )
    )
    assert report_main([str(d)]) == 0
    text = (d / "report" / "report.md").read_text()
    line = next(x for x in text.splitlines() if "Made at commit" in x)
    assert "commit ``abc` $(touch pwned) `def`` on" in line  # one code span, its fence longer than any run inside
    assert "\\n" in line and not any(x.lstrip().startswith("#") and "Injected" in x for x in text.splitlines())
    cmd = next(x for x in text.splitlines() if "touch pwned" in x and x.startswith("    "))
    words = shlex.split(cmd)
    assert len(words) == 1 and words[0].startswith("prorl-bench suite")  # one word: a shell runs nothing
    assert not any(x.startswith("rm -rf") for x in text.splitlines())


def test_plain_commands_stay_readable(tmp_path):
    d = _run_dir(tmp_path)
    (d / "settings.json").write_text(json.dumps({"commit": "a2427cd", "command": "prorl-bench suite --preset quick"}))
    assert report_main([str(d)]) == 0
    text = (d / "report" / "report.md").read_text()
    assert "    prorl-bench suite --preset quick" in text.splitlines() and "`a2427cd`" in text


@pytest.mark.parametrize("dpi", ["0", "-5", "100000"])
def test_plot_dpi_out_of_range(tmp_path, capsys, dpi):
    with pytest.raises(SystemExit) as e:
        plot_main(["--runs", str(tmp_path), "--out", str(tmp_path / "x.png"), "--dpi", dpi])
    assert e.value.code == 2 and "argument --dpi" in capsys.readouterr().err
    assert not (tmp_path / "x.png").exists()


@pytest.mark.parametrize("damage", ["nested_settings", "huge_step", "infinity"])
def test_report_on_odd_input_is_one_line(tmp_path, capsys, damage):
    d = _run_dir(tmp_path)
    if damage == "nested_settings":
        (d / "settings.json").write_text("[" * 100_000 + "]" * 100_000)
    elif damage == "huge_step":
        with open(d / "metrics.jsonl", "a") as f:
            f.write('{"step": ' + "9" * 400 + ', "reward/mean": 0.5}\n')
    else:
        with open(d / "metrics.jsonl", "a") as f:
            f.write('{"step": 21, "reward/mean": Infinity, "reward/val": -Infinity}\n')
    try:
        code = report_main([str(d)])
    except SystemExit as e:
        code = e.code
    err = capsys.readouterr().err
    assert code in (0, 2) and "Traceback" not in err
    if code == 2:
        assert len([x for x in err.splitlines() if "error:" in x]) == 1
