"""The Ray engines' sampling-side actors, Generator and ReferenceScorer (plain classes; the driver
wraps them), and what every actor shares (the CPU clock, object-store access); the Learner
actor is in learner_actor.py.

Legend: B prompts, G samples per prompt, N = B*G, P prompt length, T response length, L = P + T.

Versions. The policy version `v` is the number of learner steps done (0 = the warm-started
policy). Every weight pack, generator and rollout batch carries one: `batch.version` is the
version whose weights sampled it. The reference version `r` counts reference resets; a batch
scored remotely carries the `ref_version` that scored it and the learner refuses a mismatch.
`struct_version` counts changes of the policy's state-dict structure (adapter growth): the
learner ships the whole module once per structure version, weights as numpy otherwise.

  Learner          (learner_actor.py) a `Trainer` (the local engine's loop, unchanged) built with a collector that is a
                   `HandedCollector` serving the batch the driver hands it, so every metric,
                   reset, eval and counter is the local code path (the same `Learner` stage);
                   it publishes weight packs through the object store.
  Generator        samples with the local engine's `Collector` (rollout/collector.py), with the
                   learner's RNG streams handed over at start, so a generator at version v
                   draws exactly what the local trainer would. With `--ref_placement generator`
                   it also scores logp_ref right after sampling.
  ReferenceScorer  `--ref_placement own_actor`: a `ReferenceHolder` (A1, cached) in its own actor.

With the reference outside the learner, the learner's Trainer is built with a `RemoteReference`
(remote_ref.py): it serves the received logp_ref to the unchanged loss code and turns
`reset_to` into a pending update (the packed policy state + rule) that the driver sends to
every holder.
Each call returns its stage spans (timeline.py) and the CPU seconds its process used since
the previous call (`time.process_time`, all threads of the actor process).
"""

from __future__ import annotations

import os
import time
from typing import Any, Optional

import numpy as np
import torch

from noma_prorl_bench.config.specs import ReferenceSpec, RolloutSpec, RunSpecs
from noma_prorl_bench.engines.timeline import SpanRecorder
from noma_prorl_bench.engines.weights import (
    load_state,
    unpack_state,
)
from noma_prorl_bench.io.metrics import Counters
from noma_prorl_bench.rollout.collector import Collector
from noma_prorl_bench.rollout.nonfinite import NonFiniteLogits
from noma_prorl_bench.rollout.reference import ReferenceHolder
from noma_prorl_bench.rollout.sampling import RolloutBatch
from noma_prorl_bench.tasks import make_task

ROLLOUT_COUNTERS = ("policy_fwd_rollout", "tokens_policy")


def ray_put(obj):
    """Into the object store (inside an actor: Ray is imported there only)."""
    import ray  # noqa: PLC0415  (only inside actors)

    return ray.put(obj)


def ray_get(ref):
    import ray  # noqa: PLC0415

    return ray.get(ref)


class CpuClock:
    """CPU seconds of this process (all threads) since the previous `lap()`."""

    def __init__(self):
        self.last = time.process_time()

    def lap(self) -> float:
        now = time.process_time()
        out, self.last = now - self.last, now
        return out


# ============================================================================ generator side
def rollout_collector(
    spec: RolloutSpec, task, tok, policy, T_max: int, P: Optional[int], data_rng, sample_gen
) -> Collector:
    """The local engine's Collector on a generator's policy copy and streams (no warm start,
    optimizer or reference): the generator runs the local sampling code."""
    return Collector.from_spec(spec, task, tok, policy, T_max, P, data_rng, sample_gen, Counters(ROLLOUT_COUNTERS))


def rng_streams(payload: dict, index: int, seed: int):
    """(data_rng, sample_gen) of generator `index`: generator 0 continues the learner's own
    streams (so it matches the local engine), the others get independent seeded streams."""
    if index == 0:
        data_rng = np.random.default_rng()
        data_rng.bit_generator.state = payload["data_rng_state"]
        sample_gen = torch.Generator()
        sample_gen.set_state(payload["sample_gen_state"])
        return data_rng, sample_gen
    return (
        np.random.default_rng([seed, 1, 1000 + index]),
        torch.Generator().manual_seed(seed * 1000 + 2 + 7919 * index),
    )


class _RefSide:
    """A ReferenceHolder (A1) that scores batches and applies reset updates by version."""

    ref: Any  # the ReferenceHolder (None until built)
    rec: SpanRecorder  # set by the actor that mixes this in
    cpu: CpuClock

    def _init_ref(self, spec: ReferenceSpec, module, T_max: int):
        self.ref = ReferenceHolder(module, "cached", spec.shape.temperature, spec.rows, T_max, chunk=spec.logprob_chunk)
        self.ref_version = 0
        self.ref_struct_version = 0

    def _score(self, batch: RolloutBatch) -> dict:
        """logp_ref[N, T] onto the batch: one counted forward over the whole batch."""
        self.ref.prepare(batch.tokens, batch.prompt_len)
        batch.logp_ref = self.ref.minibatch(batch.tokens, batch.prompt_len, slice(None))  # [N, T]
        return {"ref_version": self.ref_version, "ref_counts": self.ref.pop_counts(), "ref_s": self.ref.pop_time()}

    def reset_ref(self, update: dict, step: int = 0) -> dict:
        """Apply a learner reference reset (hard copy or Polyak mix of the packed policy state)."""
        t = self.rec.now()
        if update["struct_version"] != self.ref_struct_version:
            if update["rule"] != "hard":
                raise ValueError("a Polyak reference update across a policy structure change is undefined")
            module = ray_get(update["module"][0])
            self.ref.model = module.eval().requires_grad_(False)
            self.ref_struct_version = update["struct_version"]
        state = unpack_state(ray_get(update["arrays"][0]))
        self.ref.reset_to(state, update["rule"], update["alpha"])
        self.ref_version = update["ref_version"]
        self.rec.add("sync", t, self.rec.now(), step)
        return {"ref_version": self.ref_version, "spans": self.rec.drain(), "cpu_s": self.cpu.lap()}

    def score(self, batch: RolloutBatch, step: int):
        """(meta, batch with logp_ref): the driver calls it with num_returns=2."""
        with self.rec.span("ref", step):
            info = self._score(batch)
        return {**info, "spans": self.rec.drain(), "cpu_s": self.cpu.lap()}, batch


class Generator(_RefSide):
    """Holds a policy copy at some version, samples B x G rollouts with behaviour logprobs."""

    def __init__(self, cfg, index: int, t0: float, ref_here: bool, fault: Optional[str] = None):
        self.cpu = CpuClock()
        self.specs = RunSpecs.from_config(cfg)
        torch.set_num_threads(self.specs.threads)
        self.index, self.ref_here, self.fault, self.calls = index, ref_here, fault, 0
        self.rec = SpanRecorder(f"generator/{index}", t0)
        self.core: Any = None  # the Collector, built at start()
        self.ref = None

    def start(self, payload: dict) -> dict:
        """Build from the learner's version-0 payload (separate from __init__ so that the
        process start overlaps the learner's warm start)."""
        specs = self.specs
        start = self.rec.now()
        policy = payload["module"]
        data_rng, sample_gen = rng_streams(payload, self.index, specs.seed)
        task = make_task(specs.task.task, n_val=specs.task.n_val, spec=specs.task)
        self.core = rollout_collector(
            specs.rollout, task, payload["tok"], policy, payload["T_max"], payload["P"], data_rng, sample_gen
        )
        self.version, self.struct_version = payload.get("version", 0), payload["struct_version"]
        if self.ref_here:
            self._init_ref(specs.reference, policy, payload["T_max"])
        self.rec.add("setup", start, self.rec.now(), 0)
        return {"pid": os.getpid(), "version": self.version, "spans": self.rec.drain(), "cpu_s": self.cpu.lap()}

    def set_weights(self, pub: dict, step: int = 0) -> dict:
        """Load a weight pack (and, on a structure change, the shipped module) -> its version."""
        t, t_wall = self.rec.now(), time.perf_counter()
        if pub["struct_version"] != self.struct_version:
            self.core.policy = ray_get(pub["module"][0])
            self.struct_version = pub["struct_version"]
        load_state(self.core.policy, ray_get(pub["arrays"][0]))
        self.version = pub["version"]
        load_s = time.perf_counter() - t_wall
        self.rec.add("sync", t, self.rec.now(), step)
        return {
            "version": self.version,
            "struct_version": self.struct_version,
            "load_s": load_s,
            "spans": self.rec.drain(),
            "cpu_s": self.cpu.lap(),
        }

    def generate(self, k: int, step: int):
        """k step-batches with the current weights -> (meta, batch_1, ..., batch_k).

        Each batch is one `Collector.collect()` (B prompts x G samples, scored), in order; with
        the reference here, it is scored right after sampling (reference evaluation on the rollout worker)."""
        self.calls += 1
        self._maybe_fault()
        infos, batches = [], []
        for i in range(k):
            t_wall = time.perf_counter()
            with self.rec.span("generate", step + i):
                try:
                    batch, rollout_metrics = self.core.collect()
                except NonFiniteLogits as e:  # the driver stops the run on it (exit 3, as local)
                    e.step = step + i
                    raise
            batch.version = self.version
            info = {
                "counts": self.core.counters.pop(),
                "rollout_metrics": rollout_metrics,
                "gen_s": time.perf_counter() - t_wall,
                "version": self.version,
                "generator": self.index,
            }
            if self.ref is not None:
                with self.rec.span("ref", step + i):
                    info.update(self._score(batch))
            infos.append(info)
            batches.append(batch)
        meta = {"batches": infos, "version": self.version, "spans": self.rec.drain(), "cpu_s": self.cpu.lap()}
        return (meta, *batches)

    def rng_state(self) -> dict:
        """The sampling streams (prompt sampler, rollout sampler) for the learner's checkpoint."""
        return {
            "data_rng_state": self.core.data_rng.bit_generator.state,
            "sample_gen_state": self.core.sample_gen.get_state(),
        }

    def set_rng(self, state: dict) -> dict:
        """Resume (ray_async, generators 1..): continue the streams `rng_state` saved."""
        self.core.data_rng.bit_generator.state = state["data_rng_state"]
        self.core.sample_gen.set_state(state["sample_gen_state"])
        return {"spans": self.rec.drain(), "cpu_s": self.cpu.lap()}

    def _maybe_fault(self) -> None:
        """Test hook (NOMA_PRORL_FAULT, read by the driver): `generator_exit@K` ends this process
        at its K-th generate call, `generator_hang@K` never returns from it."""
        if not self.fault or self.index != 0:
            return
        kind, _, at = self.fault.partition("@")
        if self.calls != int(at or 1):
            return
        if kind == "generator_exit":
            os._exit(1)
        if kind == "generator_hang":
            time.sleep(10**6)


class ReferenceScorer(_RefSide):
    """`--ref_placement own_actor`: the reference policy in an actor of its own."""

    def __init__(self, cfg, t0: float):
        self.cpu = CpuClock()
        specs = RunSpecs.from_config(cfg)
        self.spec = specs.reference
        torch.set_num_threads(specs.threads)
        self.rec = SpanRecorder("reference", t0)

    def start(self, payload: dict) -> dict:
        start = self.rec.now()
        self._init_ref(self.spec, payload["module"], payload["T_max"])
        self.ref_struct_version = payload["struct_version"]
        self.rec.add("setup", start, self.rec.now(), 0)
        return {"pid": os.getpid(), "ref_version": self.ref_version, "spans": self.rec.drain(), "cpu_s": self.cpu.lap()}
