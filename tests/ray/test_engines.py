"""Ray engines end to end on the session's cluster: colocated K=1 equals local, K rounds,
the async staleness bound, both engines' resume, and a generator that dies or hangs."""

import json
import os
import shutil
import subprocess
import sys
import time

import pytest
import torch

from noma_prorl_bench.config import make_config
from noma_prorl_bench.engines.learner_actor import Learner
from noma_prorl_bench.io.checkpoint import read
from noma_prorl_bench.run import main

pytestmark = [pytest.mark.ray, pytest.mark.smoke]

VOLATILE = ("time/", "perf/")


def _lines(d, name="metrics.jsonl"):
    """A file's records; for metrics.jsonl the RL steps' rows, after checking the step-0 row."""
    with open(os.path.join(d, name)) as f:
        rows = [json.loads(line) for line in f]
    if name == "metrics.jsonl":  # first the step-0 row (the evaluation before RL), once
        assert rows[0]["step"] == 0 and "reward/val" in rows[0] and all(r["step"] > 0 for r in rows[1:])
        return rows[1:]
    return rows


def _step0(d):
    with open(os.path.join(d, "metrics.jsonl")) as f:
        return {k: v for k, v in json.loads(f.readline()).items() if not k.startswith(VOLATILE)}


def _events(d):
    """(step, event, reason) of a run's events; checkpoints (timing-dependent) and the memory
    estimate (written by the local engine only: it estimates one process) left out."""
    return [
        (e["step"], e["event"], e["reason"])
        for e in _lines(d, "events.jsonl")
        if e["event"] not in ("checkpoint", "memory_estimate")
    ]


EQUIV = [
    "--steps",
    "4",
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
    "--reset_every",
    "2",
    "--ref_update",
    "polyak",
]
GROWTH = ["--enable_growth", "1", "--grow_every", "2", "--initial_rank", "2", "--rank_step", "2"]


@pytest.fixture(scope="module")
def local_runs(tmp_path_factory):
    """Local-engine runs, one per flag set, made once for the module."""
    cache = {}

    def get(extra):
        key = tuple(extra)
        if key not in cache:
            cache[key] = tmp_path_factory.mktemp("local") / "run"
            assert main(["--outdir", str(cache[key]), *EQUIV, *extra]) == 0
        return cache[key]

    return get


@pytest.mark.parametrize(
    "placement,extra", [("learner", GROWTH), ("generator", [])], ids=["learner+growth", "generator"]
)
def test_colocated_k1_reproduces_local(ray_cluster, tmp_path, local_runs, placement, extra):
    """Same code, same RNG streams, same weights (numpy float32 is exact): every metric but
    time/perf is equal, with Polyak reference resets at steps 2 and 4 and (learner placement)
    adapter growth after step 2, whose new tensor shapes reach the generator as a new module. With the reference on the generator each reset must reach it before the next
    batch is scored, or logp_ref and every KL metric would differ."""
    flags, local, ray_run = [*EQUIV, *extra], local_runs(extra), tmp_path / "ray"
    assert main(["--outdir", str(ray_run), *flags, "--engine", "ray_colocated", "--ref_placement", placement]) == 0
    a, b = _lines(local), _lines(ray_run)
    assert len(a) == len(b) == 4
    for ra, rb in zip(a, b):
        stable = {k: v for k, v in ra.items() if not k.startswith(VOLATILE)}
        assert stable == {k: rb[k] for k in stable}
        assert rb["staleness"] == 0 and rb["version"] == rb["step"] - 1
    assert _events(local) == _events(ray_run)
    assert _step0(local) == _step0(ray_run)  # the learner's evaluation before RL
    if placement == "generator":
        assert [r["ref_version"] for r in b] == [0, 0, 1, 1]
    else:  # grown after step 2: the generator got the new module
        assert [r["adapter/rank"] for r in b] == [2, 2, 4, 4]
        assert [r["sync/struct_version"] for r in b] == [0, 1, 1, 1]
    assert (ray_run / "timeline.jsonl").is_file() and (ray_run / "plots" / "timeline.png").is_file()


def test_colocated_resumes_exactly_across_a_pending_growth(ray_cluster, tmp_path, local_runs):
    """ray_colocated checkpoints (learner's Trainer + generator 0's sampling streams + driver
    counters) and resumes: a 2-step run (its final checkpoint at step 2, where a reset and a
    growth are due; the growth is skipped on a last step) extended to 4 steps equals the local
    4-step run metric for metric, growth included, and its events too."""
    flags, local, ray_run = [*EQUIV, *GROWTH], local_runs(GROWTH), tmp_path / "ray"
    short = [f if f != "4" or flags[i - 1] != "--steps" else "2" for i, f in enumerate(flags)]
    assert main(["--outdir", str(ray_run), *short, "--engine", "ray_colocated", "--save_every", "2"]) == 0
    assert sorted(os.listdir(ray_run / "checkpoints")) == ["step_000002"]
    assert main(["--outdir", str(ray_run), "--resume", "--steps", "4"]) == 0
    a, b = _lines(local), _lines(ray_run)
    assert len(a) == len(b) == 4
    for ra, rb in zip(a, b):
        stable = {k: v for k, v in ra.items() if not k.startswith(VOLATILE)}
        assert stable == {k: rb[k] for k in stable}
    assert [r["adapter/rank"] for r in b] == [2, 2, 4, 4]
    assert [r["sync/struct_version"] for r in b] == [0, 0, 1, 1]
    assert [e for e in _events(ray_run) if e[1] != "resume"] == _events(local)
    assert json.loads((ray_run / "summary.json").read_text())["resumed_from_step"] == 2


def test_colocated_k_steps_per_rollout(ray_cluster, tmp_path, fast_flags):
    """K=2: one generation round per 2 steps; step k of a round trains on data k-1 versions
    old; weights are synced once per round (not after the last step)."""
    out = tmp_path / "k2"
    assert (
        main(
            [
                "--outdir",
                str(out),
                *fast_flags,
                "--steps",
                "4",
                "--engine",
                "ray_colocated",
                "--steps_per_rollout",
                "2",
                "--ref_placement",
                "own_actor",
            ]
        )
        == 0
    )
    recs = _lines(out)
    assert [r["version"] for r in recs] == [0, 0, 2, 2]
    assert [r["staleness"] for r in recs] == [0, 1, 0, 1]
    assert [r["sync/loads"] for r in recs] == [0, 1, 0, 0]
    assert recs[1]["time/sync"] > 0 and recs[1]["sync/bytes"] > 0 and recs[1]["sync/version"] == 2
    assert all(r["count/ref_fwd"] == 1 for r in recs)
    spans = _lines(out, "timeline.jsonl")
    assert {s["actor"] for s in spans} == {"learner", "generator/0", "reference"}
    assert {"generate", "ref", "train", "sync"} <= {s["stage"] for s in spans}
    assert all(set(s) == {"actor", "stage", "start", "end", "step"} and s["end"] >= s["start"] for s in spans)


def test_async_never_trains_beyond_max_staleness(ray_cluster, tmp_path, fast_flags):
    S = 2
    out = tmp_path / "async"
    assert (
        main(
            [
                "--outdir",
                str(out),
                *fast_flags,
                "--steps",
                "6",
                "--engine",
                "ray_async",
                "--max_staleness",
                str(S),
                "--num_generators",
                "2",
                "--ref_placement",
                "generator",
                "--reset_every",
                "2",
            ]
        )
        == 0
    )
    recs = _lines(out)
    stale = [r["learner_version"] - r["version"] for r in recs]
    assert [r["step"] for r in recs] == list(range(1, 7))
    assert [r["learner_version"] for r in recs] == list(range(6))
    assert stale == [r["staleness"] for r in recs] and max(stale) <= S
    assert stale[0] == 0 and stale[1] == 1  # batch 1 is launched before step 1 ends
    summary = json.loads((out / "summary.json").read_text())
    assert summary["complete"] and sum(summary["staleness_hist"].values()) == 6
    assert summary["staleness_hist"] == {str(k): stale.count(k) for k in sorted(set(stale))}
    # resets after steps 2 and 4 reach the generators: later batches are (re)scored by the new reference
    assert [r["ref_version"] for r in recs] == [0, 0, 1, 1, 2, 2]
    assert {s["actor"] for s in _lines(out, "timeline.jsonl")} >= {"learner", "generator/0", "generator/1"}


def _resumed_copy(full, dest, keep_step):
    """`full` as a run killed after its checkpoint at `keep_step` would leave it (later lines
    are cut back by the resume; later checkpoints deleted), resumed in place."""
    shutil.copytree(full, dest)
    for name in os.listdir(dest / "checkpoints"):
        if int(name[5:]) > keep_step:
            shutil.rmtree(dest / "checkpoints" / name)
    assert main(["--outdir", str(dest), "--resume"]) == 0
    return _lines(dest)


def _stable(rec):
    return {k: v for k, v in rec.items() if not k.startswith(VOLATILE + ("sync/",))}


ASYNC = ["--steps", "6", "--engine", "ray_async", "--keep_checkpoints", "3"]


def test_async_resume_is_exact_where_the_schedule_is_fixed(ray_cluster, tmp_path, fast_flags):
    """N=1, S=1: batch i (0-based) is always sampled by version max(0, i-1) (the one generator
    launches batch i as soon as batch i-1 is sampled, and only once step i-1 is done), so the
    schedule is fixed by the config and a resume must reproduce it. The checkpoint at step 3
    drains and holds batch 3 (sampled by version 2, in flight); resumed from it, every metric but
    time/perf/sync equals the uninterrupted run's, events too, and summary.json counts the
    staleness of all 6 steps."""
    full, flags = tmp_path / "full", [*fast_flags, *ASYNC, "--max_staleness", "1", "--save_every", "3"]
    assert main(["--outdir", str(full), *flags]) == 0
    assert sorted(os.listdir(full / "checkpoints")) == ["step_000003", "step_000006"]
    extra = read(str(full / "checkpoints" / "step_000003")).extra
    assert extra["launched"] == 4 and [(d["index"], d["info"]["version"]) for d in extra["inflight"]] == [(3, 2)]
    assert extra["staleness"] == [0, 1, 1] and extra["engine"] == "ray_async"
    a, b = _lines(full), _resumed_copy(full, tmp_path / "cut", 3)
    assert [r["step"] for r in b] == list(range(1, 7))
    assert [r["version"] for r in b] == [0, 0, 1, 2, 3, 4] and [r["staleness"] for r in b] == [0, 1, 1, 1, 1, 1]
    assert [_stable(r) for r in a] == [_stable(r) for r in b]
    sync = [r["sync/version"] for r in b]
    assert sync == sorted(sync) and sync[3] >= extra["sync_version"] >= 1  # continued, not reset to 0
    assert [e for e in _events(tmp_path / "cut") if e[1] != "resume"] == _events(full)
    summary = json.loads((tmp_path / "cut" / "summary.json").read_text())
    assert summary["resumed_from_step"] == 3 and summary["staleness_hist"] == {"0": 1, "1": 5}


def test_async_resume_keeps_its_invariants_where_timing_decides(ray_cluster, tmp_path, fast_flags):
    """N=2, S=2: which generator samples which batch, by which version, depends on timing, so
    only invariants are promised. Resumed from the checkpoint at step 2: steps 1..6 once each;
    the steps that train the batches saved in flight equal the uninterrupted run's (same batches,
    same learner state); every later batch is sampled by version >= 2 (the generators restart
    from the learner's version, not 0); staleness <= S everywhere; the learner restored from the
    checkpoint has exactly the saved optimizer state."""
    S, full = 2, tmp_path / "full"
    assert (
        main(
            [
                "--outdir",
                str(full),
                *fast_flags,
                *ASYNC,
                "--max_staleness",
                str(S),
                "--num_generators",
                "2",
                "--save_every",
                "2",
            ]
        )
        == 0
    )
    ckpt = read(str(full / "checkpoints" / "step_000002"))
    inflight = [d["index"] for d in ckpt.extra["inflight"]]
    assert inflight == list(range(2, ckpt.extra["launched"])) and 1 <= len(inflight) <= S
    a, b = _lines(full), _resumed_copy(full, tmp_path / "cut", 2)
    assert [r["step"] for r in b] == list(range(1, 7)) and [r["learner_version"] for r in b] == list(range(6))
    assert a[:2] == b[:2]
    n = 2 + len(inflight)
    assert [_stable(r) for r in a[:n]] == [_stable(r) for r in b[:n]]
    assert [r["version"] for r in b[2:n]] == [d["info"]["version"] for d in ckpt.extra["inflight"]]
    assert all(r["version"] >= 2 for r in b[n:])
    assert all(r["staleness"] == r["learner_version"] - r["version"] <= S for r in b)
    sync = [r["sync/version"] for r in b]
    assert sync == sorted(sync)
    summary = json.loads((tmp_path / "cut" / "summary.json").read_text())
    assert summary["staleness_hist"] == {
        str(k): [r["staleness"] for r in b].count(k) for k in range(S + 1) if any(r["staleness"] == k for r in b)
    }
    assert summary["resumed_from_step"] == 2 and summary["max_staleness_seen"] <= S
    learner = Learner(make_config(ckpt.config), 0.0, False)
    learner.restore(ckpt.path)
    saved = ckpt.state["components"]["optimizer"]
    assert saved["state"] and all(float(st["step"]) > 0 for st in saved["state"].values())
    now = learner.trainer.optimizer.state_dict()
    assert now["param_groups"] == saved["param_groups"] and now["state"].keys() == saved["state"].keys()
    for i, st in saved["state"].items():
        assert all(torch.equal(now["state"][i][k], v) for k, v in st.items())


def test_non_finite_logits_stop_a_ray_run_as_they_stop_a_local_one(ray_cluster, tmp_path, capsys, alive_actors):
    """--lr 1e6 blows the weights up until the logits are NaN where tokens are sampled. In the
    generator actor this arrives wrapped by Ray; the run must still stop as the local engine
    does: exit 3, the same one-line message, the same nan_guard event (colocated K=1 samples
    exactly what the local run samples: same step, same rows), the same checkpoints (none of the
    broken step), and no actor left."""
    flags = [*EQUIV[:13], "--model", "transformer", "--lr", "1e6", "--save_every", "1"]
    got = {}
    for engine in ("local", "ray_colocated"):
        d = tmp_path / engine
        code = main(["--outdir", str(d), *flags, "--engine", engine])
        err = capsys.readouterr().err
        assert code == 3, err[-3000:]
        got[engine] = (
            code,
            [line.replace(str(d), "OUTDIR") for line in err.splitlines() if "stopped" in line],
            [e for e in _lines(d, "events.jsonl") if e["event"] == "nan_guard"],
            [r["step"] for r in _lines(d)],
            sorted(os.listdir(d / "checkpoints")),
            "Traceback" in err,
        )
    code, stopped, guard, steps, saved, traceback = got["ray_colocated"]
    assert got["local"] == got["ray_colocated"]
    assert code == 3 and len(stopped) == 1 and "stopped: non-finite logits while sampling step" in stopped[0]
    logits = [e for e in guard if e["reason"] == "non-finite logits before sampling"]  # after skipped updates
    assert len(logits) == 1 and logits[0]["step_sampled"] == len(steps) + 1 and not traceback
    assert saved and int(saved[-1][5:]) == len(steps)  # no checkpoint of the broken step
    assert alive_actors() == []


def test_dead_generator_is_a_clear_error_in_a_joined_cluster(ray_cluster, tmp_path, fast_flags, alive_actors):
    """The CLI in a subprocess joins the session cluster (--ray_address); the generator process
    exits at its 3rd generate call (test hook). Exit 1 with the actor named, noticed at once
    (well within --actor_timeout), two finished steps flushed, an error event, no actor alive."""
    out = tmp_path / "dies"
    env = {**os.environ, "NOMA_PRORL_FAULT": "generator_exit@3"}
    cmd = [
        sys.executable,
        "-m",
        "noma_prorl_bench.run",
        "--outdir",
        str(out),
        *fast_flags,
        "--steps",
        "5",
        "--engine",
        "ray_colocated",
        "--ray_address",
        ray_cluster,
        "--actor_timeout",
        "30",
    ]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 1, p.stderr[-2000:]
    assert "error: --engine ray_colocated: generator/0 generate (steps 3-3): the actor died" in p.stderr
    assert [r["step"] for r in _lines(out)] == [1, 2]
    ev = _lines(out, "events.jsonl")[-1]
    assert ev["event"] == "error" and "the actor died" in ev["reason"] and ev["waited_s"] < 30
    assert json.loads((out / "summary.json").read_text())["complete"] is False
    assert alive_actors() == []


def test_hung_actor_call_times_out(ray_cluster, tmp_path, alive_actors):
    """A generator that never returns: the driver's wait gives up after --actor_timeout."""
    from noma_prorl_bench.config import make_config
    from noma_prorl_bench.engines.actors import Generator
    from noma_prorl_bench.engines.calls import EngineError
    from noma_prorl_bench.engines.driver import RayEngine

    cfg = make_config({"outdir": str(tmp_path), "engine": "ray_async", "actor_timeout": 1.0})
    engine = RayEngine(cfg, files=None)
    engine.place(1, pack=False)
    gen = engine.spawn(Generator, "generator/0", cfg, 0, time.time(), False, "generator_hang@1")
    engine.get(gen.__ray_ready__.remote(), "generator/0 start", setup=True)
    t0 = time.time()
    with pytest.raises(
        EngineError,
        match=r"generator/0 generate \(step 1\) did not answer within "
        r"--actor_timeout 1 s",
    ) as e:
        engine.get(gen.generate.remote(1, 1), "generator/0 generate (step 1)")
    assert 1.0 <= time.time() - t0 < 5.0 and 1.0 <= e.value.waited_s < 5.0
    engine.stop()
    assert alive_actors() == []
