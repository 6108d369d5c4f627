"""The Ray engines' parts that need no Ray: exact weight packs, the generator's sampling core,
the learner-side reference proxy, reference updates on a holder, spans, config validation,
what ray_async keeps in a checkpoint, the driver's stop handlers, non-finite errors through pickle."""

import copy

import pytest
import torch

from noma_prorl_bench.config import ConfigError, make_config
from noma_prorl_bench.config.specs import RunSpecs
from noma_prorl_bench.engines import actors
from noma_prorl_bench.engines.async_ import batch_state
from noma_prorl_bench.engines.remote_ref import RemoteReference
from noma_prorl_bench.engines.timeline import (
    SpanRecorder,
    stage_seconds,
    timeline_figure,
)
from noma_prorl_bench.engines.weights import load_state, pack_state, structure
from noma_prorl_bench.io import checkpoint as ck
from noma_prorl_bench.io.resume import inexact_steps_change
from noma_prorl_bench.models.gru import GRUPolicy
from noma_prorl_bench.rollout.reference import ReferenceHolder
from noma_prorl_bench.rollout.sampling import RolloutBatch
from noma_prorl_bench.training.trainer import Trainer

pytestmark = pytest.mark.unit


def _gru(seed):
    torch.manual_seed(seed)
    return GRUPolicy(20, hidden=8)


# ---------------------------------------------------------------- weights
def test_weight_pack_round_trip_is_bit_exact():
    a, b = _gru(0), _gru(1)
    pack = pack_state(a)
    assert all(arr.dtype.name == "float32" for arr in pack.arrays.values())
    load_state(b, pack)
    for (ka, ta), (kb, tb) in zip(a.state_dict().items(), b.state_dict().items()):
        assert ka == kb and torch.equal(ta, tb)


def test_weight_pack_bfloat16_travels_as_bits():
    a, b = _gru(0).to(torch.bfloat16), _gru(1).to(torch.bfloat16)
    pack = pack_state(a)
    assert pack.bf16 and all(pack.arrays[k].dtype.name == "int16" for k in pack.bf16)
    load_state(b, pack)
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))


def test_weight_pack_refuses_a_different_structure():
    a, b = _gru(0), GRUPolicy(20, hidden=16)
    assert structure(a) != structure(b)
    with pytest.raises(ValueError, match="does not match"):
        load_state(b, pack_state(a))


# ---------------------------------------------------------------- the generator samples what the trainer would
def test_rollout_core_with_handed_over_streams_draws_the_trainers_batch():
    cfg = make_config({"outdir": "/tmp/unused", "batch_size": 4, "group_size": 4, "warmstart_steps": 2, "n_val": 16})
    tr = Trainer.from_config(cfg).start()
    payload = {"data_rng_state": tr.data_rng.bit_generator.state, "sample_gen_state": tr.sample_gen.get_state()}
    data_rng, sample_gen = actors.rng_streams(payload, 0, cfg.seed)
    policy = copy.deepcopy(tr.policy)
    load_state(policy, pack_state(tr.policy))
    core = actors.rollout_collector(tr.specs.rollout, tr.task, tr.tok, policy, tr.T_max, tr.P, data_rng, sample_gen)
    for _ in range(2):
        want, got = tr.collector.collect()[0], core.collect()[0]
        for f in ("tokens", "mask", "logp_old", "rewards", "truncated"):
            assert torch.equal(getattr(want, f), getattr(got, f)), f
    mine, theirs = core.counters.pop(), tr.counters.pop()
    assert mine == {k: theirs[k] for k in mine} and mine["count/policy_fwd_rollout"] > 0
    other = actors.rng_streams(payload, 1, cfg.seed)  # generator 1: its own streams
    assert other[0].bit_generator.state != data_rng.bit_generator.state


# ---------------------------------------------------------------- reference outside the learner
def test_remote_reference_serves_received_logp_and_checks_versions():
    puts = []
    proxy = RemoteReference(put=lambda obj: puts.append(obj) or len(puts))
    policy = _gru(0)
    proxy.bind(policy)
    logp = torch.randn(6, 3)
    proxy.receive(logp, 0, {"count/ref_fwd": 1, "count/tokens_ref": 60}, 0.5)
    tokens = torch.zeros(6, 10, dtype=torch.long)
    proxy.prepare(tokens, 7)
    assert torch.equal(proxy.minibatch(tokens[2:4], 7, slice(2, 4)), logp[2:4])
    assert proxy.pop_counts() == {"count/ref_fwd": 1, "count/tokens_ref": 60}
    assert proxy.pop_counts() == {"count/ref_fwd": 0, "count/tokens_ref": 0}
    rec = proxy.reset_to(policy, "polyak", 0.6)
    assert rec == {"ref_update": "polyak", "ref_mix_alpha": 0.6}
    upd = proxy.pop_update()
    assert upd["ref_version"] == 1 and upd["rule"] == "polyak" and upd["struct_version"] == 0
    assert proxy.pop_update() is None
    with pytest.raises(RuntimeError, match="reference version 0, the learner is at 1"):
        proxy.receive(logp, 0, {"count/ref_fwd": 1, "count/tokens_ref": 60}, 0.0)


def test_reset_update_on_a_holder_matches_the_local_reference(monkeypatch):
    monkeypatch.setattr(actors, "ray_get", lambda x: x)  # refs are the objects here
    policy, ref0 = _gru(0), _gru(1)
    local = ReferenceHolder(ref0, "cached")
    local.reset_to(policy, "polyak", 0.6)

    side = actors.ReferenceScorer.__new__(actors.ReferenceScorer)
    side.cpu, side.rec = actors.CpuClock(), SpanRecorder("reference", 0.0)
    ref_spec = RunSpecs.from_config(make_config({"outdir": "/tmp/unused", "batch_size": 2, "group_size": 2})).reference
    side._init_ref(ref_spec, ref0, 4)  # N = 2*2 rows, T = 4
    proxy = RemoteReference(put=lambda obj: obj)
    proxy.bind(policy)
    proxy.reset_to(policy, "polyak", 0.6)
    out = side.reset_ref(proxy.pop_update(), step=3)
    assert out["ref_version"] == 1
    for a, b in zip(local.model.state_dict().values(), side.ref.model.state_dict().values()):
        assert torch.equal(a, b)


# ---------------------------------------------------------------- spans and the Gantt plot
def test_span_recorder_fills_gaps_with_idle():
    rec = SpanRecorder("generator/0", 0.0)
    rec.add("generate", 0.0, 1.0, 1)
    rec.add("sync", 1.5, 1.6, 2)
    spans = rec.drain()
    assert [s["stage"] for s in spans] == ["generate", "idle", "sync"]
    assert spans[1]["start"] == 1.0 and spans[1]["end"] == 1.5
    assert stage_seconds(spans)[("generator/0", "idle")] == pytest.approx(0.5)
    fig = timeline_figure(spans + [{"actor": "learner", "stage": "train", "start": 0.2, "end": 1.4, "step": 1}])
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == ["learner", "generator/0"]


# ---------------------------------------------------------------- engine flags
@pytest.mark.parametrize(
    "flags,match",
    [
        ({"weight_sync": "nccl", "engine": "ray_async"}, "needs CUDA GPUs"),
        ({"steps_per_rollout": 2}, "applies to --engine ray_colocated"),
        ({"max_staleness": 3, "engine": "ray_colocated"}, "applies to --engine ray_async"),
        ({"engine": "ray_async", "max_staleness": -1}, "must be >= 0"),
        ({"engine": "ray_async", "ref_placement": "generator", "ref_compute": "ring"}, "ref_compute cached"),
        ({"engine": "ray_async", "ref_placement": "own_actor", "variant": "B"}, "no reference model"),
        ({"engine": "ray_colocated", "actor_timeout": 0.0}, "must be > 0"),
        ({"engine": "ray_async", "save_every": 5, "ref_placement": "generator"}, "ray_async checkpoints only with"),
        ({"engine": "ray_async", "resume": True, "ref_placement": "own_actor"}, "reference held by the own_actor"),
        (
            {"engine": "ray_colocated", "save_every": 2, "ref_placement": "own_actor"},
            "only with --ref_placement learner",
        ),
        ({"engine": "ray_colocated", "save_every": 3, "steps_per_rollout": 2}, "multiple of --steps_per_rollout"),
    ],
)
def test_engine_flags_are_validated(flags, match):
    with pytest.raises(ConfigError, match=match):
        make_config({"outdir": "/tmp/unused", **flags})


def test_ray_async_checkpoints_with_the_reference_in_the_learner():
    cfg = make_config(
        {"outdir": "/tmp/unused", "engine": "ray_async", "save_every": 3, "max_staleness": 2, "num_generators": 2}
    )
    assert cfg.save_every == 3  # accepted (refused in earlier versions)


# ---------------------------------------------------------------- ray_async checkpoints
def test_async_checkpoint_extra_round_trips_a_batch_in_flight_and_sampling_streams(tmp_path):
    """ray_async saves its batches in flight and generators 1..'s streams in the checkpoint's
    `extra` (tensors under extra/...): read() gives back an equal RolloutBatch (dtypes too), and
    set_rng puts a generator back where rng_state was taken, so it draws the same next batch."""
    cfg = make_config({"outdir": "/tmp/unused", "batch_size": 2, "group_size": 3, "warmstart_steps": 1, "n_val": 4})
    tr = Trainer.from_config(cfg).start()
    streams = actors.rng_streams({}, 1, cfg.seed)  # generator 1's own streams
    gen = actors.Generator.__new__(actors.Generator)
    gen.cpu, gen.rec = actors.CpuClock(), SpanRecorder("generator/1", 0.0)
    gen.core = actors.rollout_collector(tr.specs.rollout, tr.task, tr.tok, tr.policy, tr.T_max, tr.P, *streams)
    batch = gen.core.collect()[0]
    batch.version = 5
    state = gen.rng_state()
    want = gen.core.collect()[0]  # what it draws next
    gen.core.collect()[0]  # moves the streams on
    info = {"version": 5, "generator": 1, "counts": {"count/tokens_policy": 7}, "gen_s": 0.25}
    path = ck.save(
        tr,
        str(tmp_path),
        1,
        extra={
            "inflight": [{"index": 6, "info": info, "batch": batch_state(batch)}],
            "gen_rng": [state],
            "launched": 7,
        },
    )
    back = ck.read(path).extra
    assert back["launched"] == 7 and back["inflight"][0]["info"] == info
    got = RolloutBatch(**back["inflight"][0]["batch"])
    for name, value in batch_state(batch).items():
        if isinstance(value, torch.Tensor):
            assert getattr(got, name).dtype == value.dtype and torch.equal(getattr(got, name), value), name
        else:
            assert getattr(got, name) == value, name
    gen.set_rng(back["gen_rng"][0])
    again = gen.core.collect()[0]
    assert torch.equal(again.tokens, want.tokens) and torch.equal(again.logp_old, want.logp_old)


@pytest.mark.parametrize(
    "engine,S,old,step,new,refused",
    [
        ("ray_async", 1, 6, 6, 8, True),  # final checkpoint: step 7's batch would be sampled by version 6, not 5
        (
            "ray_async",
            1,
            6,
            5,
            8,
            False,
        ),  # 5 + 1 <= 6: step 6's batch was sampled ahead (by version 4) as in an 8-step run
        ("ray_async", 2, 6, 5, 8, True),  # 5 + 2 > 6: step 7's batch was never sampled ahead (by version 4)
        ("ray_async", 0, 6, 6, 8, False),  # synchronous: nothing is sampled ahead
        ("ray_async", 1, 6, 6, 6, False),  # --steps unchanged
        ("local", 1, 6, 6, 8, False),
    ],
)
def test_async_refuses_a_steps_change_that_cuts_the_pipeline(engine, S, old, step, new, refused):
    flags = {"outdir": "/tmp/unused", "engine": engine, "steps": new, "eval_every": 2}
    if engine == "ray_async":
        flags["max_staleness"] = S
    problem = inexact_steps_change(old, step, make_config(flags))
    assert (problem is not None) == refused
    if refused:
        assert "--max_staleness" in problem


def test_stop_signals_raise_or_wait_as_asked_and_restore_the_handlers():
    """The Ray driver's stop handlers: a signal raises EngineStopped at once; inside `held()` it is
    only recorded and `check()` raises it afterwards; in an escapable hold a second one raises;
    the previous handlers come back at the end."""
    import os
    import signal

    from noma_prorl_bench.engines.stops import EngineStopped, stop_on_signals

    before = signal.getsignal(signal.SIGUSR1)
    with stop_on_signals() as stops:
        with pytest.raises(EngineStopped) as e:
            os.kill(os.getpid(), signal.SIGUSR1)
        assert e.value.signum == signal.SIGUSR1 and stops.signum == signal.SIGUSR1
        stops.signum = None
        with stops.held(second_escapes=True):
            os.kill(os.getpid(), signal.SIGHUP)  # recorded only
            stops.check()  # held: nothing raised yet
            with pytest.raises(EngineStopped) as e:
                os.kill(os.getpid(), signal.SIGTERM)  # the second one escapes
        assert e.value.signum == signal.SIGTERM and stops.signum == signal.SIGHUP
        with stops.held():
            os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGINT)  # not escapable: still recorded only
        with pytest.raises(EngineStopped) as e:
            stops.check()
        assert e.value.signum == signal.SIGHUP
    assert signal.getsignal(signal.SIGUSR1) is before


def test_nonfinite_errors_cross_process_boundaries_with_their_fields():
    """What a Ray actor raises reaches the driver by pickle: the NaN guard's error with its step,
    quantities and the step's records; non-finite logits with the step being sampled."""
    import pickle

    from noma_prorl_bench.rollout.nonfinite import NonFiniteError, NonFiniteLogits

    e = NonFiniteError(4, ["loss", "grad_norm"])
    e.records = {"events": [{"step": 4, "event": "nan_guard", "action": "stop"}]}
    back = pickle.loads(pickle.dumps(e))
    assert (type(back), str(back), back.step, back.bad, back.records) == (
        NonFiniteError,
        str(e),
        4,
        ["loss", "grad_norm"],
        e.records,
    )
    g = NonFiniteLogits(rows=6)
    g.step = 9
    back = pickle.loads(pickle.dumps(g))
    assert (type(back), back.step, back.rows, back.bad, str(back)) == (NonFiniteLogits, 9, 6, ["logits"], str(g))
