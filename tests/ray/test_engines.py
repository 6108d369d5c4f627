"""Ray engines end to end on the session's cluster: colocated K=1 equals local, K rounds,
the async staleness bound, and a generator that dies or hangs."""
import json
import os
import subprocess
import sys
import time

import pytest

from noma_prorl_bench.run import main

pytestmark = [pytest.mark.ray, pytest.mark.smoke]

VOLATILE = ("time/", "perf/")


def _lines(d, name="metrics.jsonl"):
    with open(os.path.join(d, name)) as f:
        return [json.loads(line) for line in f]


def _events(d):
    return [(e["step"], e["event"], e["reason"]) for e in _lines(d, "events.jsonl") if e["event"] != "checkpoint"]


EQUIV = ["--steps", "4", "--batch_size", "4", "--group_size", "4", "--warmstart_steps", "5", "--n_val", "16",
         "--eval_every", "2", "--quiet", "--reset_every", "2", "--ref_update", "polyak"]


@pytest.fixture(scope="module")
def local_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("local") / "run"
    assert main(["--outdir", str(out), *EQUIV]) == 0
    return out


@pytest.mark.parametrize("placement", ["learner", "generator"])
def test_colocated_k1_reproduces_local(ray_cluster, tmp_path, local_run, placement):
    """Same code, same RNG streams, same weights (numpy float32 is exact): every metric but
    time/perf is equal, resets included (with the reference on the generator, each reset must
    reach it before the next batch is scored, or logp_ref and every KL metric would differ)."""
    flags, local, ray_run = EQUIV, local_run, tmp_path / "ray"
    assert main(["--outdir", str(ray_run), *flags, "--engine", "ray_colocated", "--ref_placement", placement]) == 0
    a, b = _lines(local), _lines(ray_run)
    assert len(a) == len(b) == 4
    for ra, rb in zip(a, b):
        stable = {k: v for k, v in ra.items() if not k.startswith(VOLATILE)}
        assert stable == {k: rb[k] for k in stable}
        assert rb["staleness"] == 0 and rb["version"] == rb["step"] - 1
    assert _events(local) == _events(ray_run)
    if placement == "generator":
        assert [r["ref_version"] for r in b] == [0, 0, 1, 1]
    assert (ray_run / "timeline.jsonl").is_file() and (ray_run / "plots" / "timeline.png").is_file()


def test_colocated_k_steps_per_rollout(ray_cluster, tmp_path, fast_flags):
    """K=2: one generation round per 2 steps; step k of a round trains on data k-1 versions
    old; weights are synced once per round (not after the last step)."""
    out = tmp_path / "k2"
    assert main(["--outdir", str(out), *fast_flags, "--steps", "4", "--engine", "ray_colocated",
                 "--steps_per_rollout", "2", "--ref_placement", "own_actor"]) == 0
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
    assert main(["--outdir", str(out), *fast_flags, "--steps", "6", "--engine", "ray_async", "--max_staleness",
                 str(S), "--num_generators", "2", "--ref_placement", "generator", "--reset_every", "2"]) == 0
    recs = _lines(out)
    stale = [r["learner_version"] - r["version"] for r in recs]
    assert [r["step"] for r in recs] == list(range(1, 7))
    assert [r["learner_version"] for r in recs] == list(range(6))
    assert stale == [r["staleness"] for r in recs] and max(stale) <= S
    assert stale[0] == 0 and stale[1] == 1                     # batch 1 is launched before step 1 ends
    summary = json.loads((out / "summary.json").read_text())
    assert summary["complete"] and sum(summary["staleness_hist"].values()) == 6
    assert summary["staleness_hist"] == {str(k): stale.count(k) for k in sorted(set(stale))}
    # resets after steps 2 and 4 reach the generators: later batches are (re)scored by the new reference
    assert [r["ref_version"] for r in recs] == [0, 0, 1, 1, 2, 2]
    assert {s["actor"] for s in _lines(out, "timeline.jsonl")} >= {"learner", "generator/0", "generator/1"}


def test_dead_generator_is_a_clear_error_with_flushed_outputs(ray_cluster, tmp_path, fast_flags, monkeypatch,
                                                              capsys, alive_actors):
    """The generator process exits at its 3rd generate call (test hook): exit 1 well within
    --actor_timeout, two finished steps on disk, an error event, no actor left alive."""
    monkeypatch.setenv("NOMA_PRORL_FAULT", "generator_exit@3")
    out = tmp_path / "dies"
    t0 = time.time()
    rc = main(["--outdir", str(out), *fast_flags, "--steps", "5", "--engine", "ray_colocated",
               "--actor_timeout", "30"])
    assert rc == 1 and time.time() - t0 < 30
    err = capsys.readouterr().err
    assert "generator/0 generate (steps 3-3): the actor died" in err
    assert [r["step"] for r in _lines(out)] == [1, 2]
    ev = _lines(out, "events.jsonl")[-1]
    assert ev["event"] == "error" and "died" in ev["reason"]
    assert json.loads((out / "summary.json").read_text())["complete"] is False
    assert alive_actors() == []


def test_hung_generator_times_out_in_a_joined_cluster(ray_cluster, tmp_path, fast_flags, alive_actors):
    """CLI in a subprocess that joins the session cluster (--ray_address): the generator hangs
    at its 2nd call; the driver gives up after --actor_timeout, kills its actors, exits 1."""
    out = tmp_path / "hangs"
    env = {**os.environ, "NOMA_PRORL_FAULT": "generator_hang@2"}
    cmd = [sys.executable, "-m", "noma_prorl_bench.run", "--outdir", str(out), *fast_flags, "--steps", "4",
           "--engine", "ray_async", "--max_staleness", "0", "--ray_address", ray_cluster, "--actor_timeout", "3"]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 1, p.stderr[-2000:]
    assert "generator/0 generate (step 2) did not answer within --actor_timeout 3 s" in p.stderr
    assert [r["step"] for r in _lines(out)] == [1]
    assert _lines(out, "events.jsonl")[-1]["event"] == "error"
    assert alive_actors() == []
