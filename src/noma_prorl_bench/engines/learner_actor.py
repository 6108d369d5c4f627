"""The Ray engines' learner actor: a `Trainer` (the local engine's loop, unchanged) built with a
collector that is a `HandedCollector` serving the batch the driver hands it, so every metric,
reset, eval and counter is the local code path (the same `Learner` stage); it publishes weight
packs through the object store and writes the run's checkpoints.

Versions (actors.py defines them): `version` counts learner steps done; `struct_version` counts
changes of the policy's state-dict structure (adapter growth), so the whole module is shipped
once per structure version and weights as numpy otherwise. With the reference outside the
learner, the Trainer is built with a `RemoteReference` (remote_ref.py), whose resets the
driver sends to every holder. Each call returns its stage spans (timeline.py) and the CPU
seconds its process used since the previous call.
"""

from __future__ import annotations

import os
import time
from typing import Any, Optional, cast

from noma_prorl_bench.engines.actors import CpuClock, ray_put
from noma_prorl_bench.engines.remote_ref import RemoteReference
from noma_prorl_bench.engines.timeline import SpanRecorder
from noma_prorl_bench.engines.weights import WeightPack, pack_state, structure
from noma_prorl_bench.io.metrics import Counters, MemorySink, NullSink
from noma_prorl_bench.rollout.collector import HandedCollector
from noma_prorl_bench.rollout.nonfinite import NonFiniteError
from noma_prorl_bench.rollout.reference_source import ReferenceSource
from noma_prorl_bench.rollout.sampling import RolloutBatch
from noma_prorl_bench.training.trainer import COUNTER_KEYS, Trainer


class Learner:
    """Owns the trainable policy, the optimizer and (with --ref_placement learner) pi_ref."""

    def __init__(self, cfg, t0: float, ref_remote: bool, resume: bool = False):
        """`resume`: the driver resumes a checkpoint (`restore` follows), so the warm start and
        the evaluation before RL are skipped."""
        self.cpu = CpuClock()
        self.rec = SpanRecorder("learner", t0)
        start = self.rec.now()
        self.events, self.samples = MemorySink(), MemorySink()
        counters = Counters(COUNTER_KEYS)
        remote = RemoteReference() if ref_remote else None  # logp_ref scored elsewhere, resets sent out
        self.handed = HandedCollector(counters, remote)  # the driver's batches
        self.trainer = Trainer.from_config(
            cfg,
            NullSink(),
            self.events,
            self.samples,
            counters=counters,
        ).start(self.handed, cast(Optional[ReferenceSource], remote), warm_start=not resume)
        if remote is not None:
            remote.bind(self.trainer.policy)
        self.version = 0
        self.struct_version, self._sig, self._module_ref = 0, structure(self.trainer.policy), None
        self.rec.add("setup", start, self.rec.now(), 0)

    def init_payload(self) -> dict:
        """What generators and the reference scorer start from (the version-0 policy module,
        tokenizer, shapes, the learner's RNG streams) plus the warm-start info."""
        tr = self.trainer
        return {
            "module": tr.policy,
            "tok": tr.tok,
            "T_max": tr.T_max,
            "P": tr.P,
            "data_rng_state": tr.data_rng.bit_generator.state,
            "sample_gen_state": tr.sample_gen.get_state(),
            "struct_version": self.struct_version,
            "version": self.version,
            "warmstart": dict(tr.warmstart_info),
            "initial_metrics": dict(tr.initial_metrics),  # metrics.jsonl's step-0 row (a new run's)
            "events": self.events.drain(),
            "samples": self.samples.drain(),
            "pid": os.getpid(),
            "spans": self.rec.drain(),
            "cpu_s": self.cpu.lap(),
        }

    def restore(self, path: str) -> dict:
        """Resume: load the checkpoint written by `save_checkpoint`; its sampling
        streams are generator 0's, handed over by the next `init_payload`. The set-up records
        (already in the run's files) are dropped; a growth due on a shorter run's last step is done."""
        from noma_prorl_bench.io.checkpoint import read  # noqa: PLC0415

        tr, ckpt = self.trainer, read(path)
        tr.load_state_dict(ckpt.state)
        self.events.drain()
        self.samples.drain()
        self.version, self.struct_version = tr.step_idx, int(ckpt.extra.get("struct_version", 0))
        self._sig, self._module_ref = structure(tr.policy), None
        tr.growth.grow_pending(tr.step_idx)  # published as a new structure at the next step
        return {"spans": self.rec.drain(), "cpu_s": self.cpu.lap()}

    def save_checkpoint(self, outdir: str, keep: int, extra: dict, rng: dict) -> dict:
        """io.checkpoint.save of this learner's Trainer at its step, with generator 0's sampling
        streams in place of the learner's own (unused: batches are handed in), so a resume
        continues sampling where generator 0 stopped."""
        from noma_prorl_bench.io.checkpoint import save  # noqa: PLC0415

        tr = self.trainer
        tr.data_rng.bit_generator.state = rng["data_rng_state"]
        tr.sample_gen.set_state(rng["sample_gen_state"])
        path = save(tr, outdir, keep, extra={**extra, "struct_version": self.struct_version})
        return {"path": path, "spans": self.rec.drain(), "cpu_s": self.cpu.lap()}

    def publish(self, step: int = 0) -> dict:
        """The current weights into the object store: {version, arrays: [ref], struct_version,
        module: [ref], bytes, pack_s}. Refs travel inside lists so Ray does not resolve them
        on the way; the receiver fetches (and times) the transfer itself."""
        t, t_wall = self.rec.now(), time.perf_counter()
        policy = self.trainer.policy
        sig = structure(policy)
        if sig != self._sig:
            self._sig, self.struct_version = sig, self.struct_version + 1
            self._module_ref = ray_put(policy)
        pack: WeightPack = pack_state(policy)
        pub = {
            "version": self.version,
            "arrays": [ray_put(pack)],
            "struct_version": self.struct_version,
            "module": [self._module_ref],
            "bytes": pack.nbytes,
        }
        pub["pack_s"] = time.perf_counter() - t_wall
        self.rec.add("sync", t, self.rec.now(), step)
        return pub

    def train_step(self, batch: RolloutBatch, info: dict, publish: bool) -> dict:
        """One local-engine step on the given batch; optionally publish the new weights."""
        tr = self.trainer
        step = tr.step_idx + 1
        start = self.rec.now()
        self.handed.hand(batch, info)
        try:
            m = tr.train_step()
        except NonFiniteError as e:  # --on_nan stop: the step's records (its nan_guard event)
            cast(Any, e).records = {"events": self.events.drain(), "samples": self.samples.drain()}  # go with it
            raise
        self.version += 1
        self._train_spans(start, m, step)
        ref = tr.ref.pop_update() if isinstance(tr.ref, RemoteReference) else None
        pub = self.publish(step) if publish else None
        return {
            "metrics": m,
            "events": self.events.drain(),
            "samples": self.samples.drain(),
            "pub": pub,
            "ref_update": ref,
            "version": self.version,
            "spans": self.rec.drain(),
            "cpu_s": self.cpu.lap(),
        }

    def _train_spans(self, start: float, m: dict, step: int) -> None:
        """The step's span split by the trainer's stage timers in loop order (ref, train, eval)."""
        end = self.rec.now()
        t = start
        for stage, key in (("ref", "time/ref"), ("train", None), ("eval", "time/eval")):
            dur = m.get(key, 0.0) if key else max(0.0, (end - start) - m.get("time/ref", 0.0) - m.get("time/eval", 0.0))
            if dur > 0:
                self.rec.add(stage, t, min(end, t + dur), step)
                t += dur
