"""The single-controller driver shared by `ray_colocated` and `ray_async`: Ray lifecycle, actor
placement, calls with deadlines, and what each step writes.

    engine = ColocatedEngine(cfg, files); engine.start(); summary = engine.run()   # via launch.run_engine(cfg)

Lifecycle. If Ray is already initialised in this process (a test session, the benchmark) the
engine uses that cluster and only kills its own actors at the end; with `--ray_address` it
joins that cluster and disconnects at the end; otherwise it starts a quiet local one (no
dashboard, no log forwarding, a scratch `_temp_dir` under /tmp removed afterwards) and shuts
it down; its reaper (reaper.py) does that if the driver is killed (kill -9). Every actor call
is awaited with a deadline of `--actor_timeout` seconds from its submission (start-up calls,
which build models and run the warm start: at least SETUP_TIMEOUT_S); a dead actor
(`RayActorError`), a hung one (deadline passed) or an exception inside one (`RayTaskError`)
becomes an `EngineError` naming the actor and the call (and carrying the actor's exception):
calls.py. Before the error leaves `run_engine`, the outputs are flushed (an `error` event with `waited_s`,
`summary.json` with `"complete": false`), every actor is killed and Ray is shut down;
`run.main` exits 1 (3 for non-finite logits in a generator or the learner's NaN guard under
`--on_nan stop`, as the local engine). SIGINT / SIGTERM / SIGHUP / SIGUSR1 take the same path
(`EngineStopped`, a `stopped` event, exit 130 / 143 / 129 / 138), except during `start()` (Ray,
actors, warm start), which writes nothing, so a stop there leaves OUTDIR untouched. Both engines
write checkpoints (`--save_every`, and at the end) and resume from them (checkpoints.py;
`ray_colocated` at round ends, `ray_async` after draining the batches in flight: async_.py).

Placement. Each actor asks for min(1, cluster CPUs / actors) CPUs. `ray_colocated` puts all
actors in one STRICT_PACK placement group (one node; on GPUs this is where they would share a
device); `ray_async` spreads them (`SPREAD`: on a multi-node cluster generators and learner
land on different nodes where possible).

Per-step keys the driver adds to the learner's metrics (docs/ray.md defines them): `version`,
`learner_version`, `staleness`, `ref_version`, `time/step` (driver wall time since the previous
line), `time/learner_step`, `time/rollout` (the batch's generation), `time/ref` (when scored
outside the learner), `time/sync`, `sync/*`, `perf/samples_per_s`, `perf/tokens_per_s`,
`perf/cpu_s`, `perf/cpu_s_total`.
"""

from __future__ import annotations

import math
import os
import shutil
import sys
import tempfile
import time
from collections import Counter
from typing import Any, Optional

from noma_prorl_bench.engines.actors import CpuClock, Generator, ReferenceScorer
from noma_prorl_bench.engines.calls import Call, Deadlines, EngineError
from noma_prorl_bench.engines.learner_actor import Learner
from noma_prorl_bench.engines.reaper import Reaper, session_env
from noma_prorl_bench.engines.stops import ray_starting

FAULT_ENV = "NOMA_PRORL_FAULT"  # test hook, see actors.Generator._maybe_fault


class RayEngine(Deadlines):
    """Base driver: subclasses implement `loop()` (the schedule of generate/score/train/sync);
    its actor calls and their deadlines come from `calls.Deadlines`."""

    name = "ray"

    def __init__(self, cfg, files, ckpt=None):
        self.cfg, self.files, self.ckpt = cfg, files, ckpt  # ckpt: io.checkpoint.Checkpoint to resume
        self.t0 = time.time()
        self.actors: dict[str, Any] = {}
        self.pg = None
        self.owns_ray, self.tmpdir, self.reaper = False, None, None
        self.cpu = CpuClock()
        self.cpu_step = self.cpu_total = 0.0
        self.steps_done = 0
        self.ref_version = 0
        self.staleness: list[int] = []
        self.sync = {"pack_s": 0.0, "load_s": 0.0, "bytes": 0, "loads": 0}
        self.sync_version = self.sync_struct = 0
        self.last_val = None
        self.warmstart: dict = {}
        self.t_first = self.t_last = 0.0  # perf_counter() when the steps start
        self.bar = None
        self.setup_error: Optional[EngineError] = None  # a failure in start() (launch.py)
        self.stops = None  # stops.StopSignals of run_engine, checked per wait slice

    # ================================================================ Ray lifecycle
    def start_ray(self) -> None:
        """Start a private cluster (or join --ray_address, or use this process's); a stop signal meanwhile
        is acted on once `ray.init` returns (stops.ray_starting), with `owns_ray` set for `stop()`."""
        os.environ.setdefault("RAY_AUTH_MODE", "disabled")
        import ray  # noqa: PLC0415

        if ray.is_initialized():
            return
        quiet: dict[str, Any] = {"logging_level": "ERROR", "log_to_driver": False}
        self.owns_ray = True
        with ray_starting(self.stops):
            if self.cfg.ray_address:
                ray.init(address=self.cfg.ray_address, **quiet)
            else:
                self.tmpdir = tempfile.mkdtemp(prefix="nrb_ray_", dir="/tmp")  # a private cluster: its reaper
                self.reaper = Reaper(self.tmpdir)  # outlives a kill -9 of this driver
                with session_env(self.tmpdir):
                    ray.init(num_cpus=os.cpu_count() or 1, include_dashboard=False, _temp_dir=self.tmpdir, **quiet)

    def stop(self) -> None:
        """Kill our actors, drop the placement group, shut Ray down if we started or joined it; then
        the reaper of a private cluster sweeps what is left. Safe again, and after a cut-short start."""
        try:
            self._stop_ray()
        finally:
            self.actors, self.pg, self.owns_ray = {}, None, False
            if self.reaper is not None:
                self.reaper.finish()
                self.reaper = None

    def _stop_ray(self) -> None:
        ray = sys.modules.get("ray")
        if ray is None or not hasattr(ray, "is_initialized"):
            return  # never imported (or its import was cut short): nothing runs
        if ray.is_initialized():
            for h in self.actors.values():
                try:
                    ray.kill(h, no_restart=True)
                except Exception:  # noqa: BLE001  (already dead)
                    pass
            if self.pg is not None:
                from ray.util.placement_group import remove_placement_group  # noqa: PLC0415

                remove_placement_group(self.pg)
        if self.owns_ray:
            try:
                ray.shutdown()  # also a half-done ray.init's processes
            except Exception:  # noqa: BLE001  (a start cut short; the reaper sweeps the rest)
                pass
            if self.tmpdir:
                shutil.rmtree(self.tmpdir, ignore_errors=True)

    def place(self, n_actors: int, pack: bool) -> None:
        """CPUs per actor; for `pack`, a STRICT_PACK placement group with one bundle per actor."""
        import ray  # noqa: PLC0415

        cpus = ray.cluster_resources().get("CPU", 1.0)
        self.cpus_per_actor = math.floor(1000 * min(1.0, cpus / n_actors)) / 1000
        self.bundles = iter(range(n_actors))
        if pack:
            from ray.util.placement_group import placement_group  # noqa: PLC0415

            self.pg = placement_group([{"CPU": self.cpus_per_actor}] * n_actors, strategy="STRICT_PACK")
            self.get(self.pg.ready(), "placement group (all actors on one node)", setup=True)

    def spawn(self, cls, name: str, *args):
        import ray  # noqa: PLC0415

        opts: dict = {"num_cpus": self.cpus_per_actor, "max_restarts": 0}
        if self.pg is not None:
            from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy  # noqa: PLC0415

            opts["scheduling_strategy"] = PlacementGroupSchedulingStrategy(
                placement_group=self.pg, placement_group_bundle_index=next(self.bundles)
            )
        else:
            opts["scheduling_strategy"] = "SPREAD"
        handle = ray.remote(cls).options(**opts).remote(*args)
        self.actors[name] = handle
        return handle

    def setup(self, n_generators: int) -> None:
        """All actors spawned at once (process starts overlap the learner's warm start), then the
        generators and the reference scorer start from the learner's version-0 payload."""
        cfg = self.cfg
        self.ref_place = place = cfg.ref_placement if cfg.variant == "A" else "learner"  # B: nothing to place
        self.place(1 + n_generators + (place == "own_actor"), pack=self.name == "ray_colocated")
        fault = os.environ.get(FAULT_ENV) or None
        self.learner = self.spawn(Learner, "learner", cfg, self.t0, place != "learner", self.ckpt is not None)
        restored = (
            None
            if self.ckpt is None
            # actor calls run in order: restored before its payload
            else self.learner.restore.remote(os.path.abspath(self.ckpt.path))
        )
        payload_ref = self.learner.init_payload.remote()
        self.gens = [
            self.spawn(Generator, f"generator/{i}", cfg, i, self.t0, place == "generator", fault)
            for i in range(n_generators)
        ]
        self.scorer = self.spawn(ReferenceScorer, "reference", cfg, self.t0) if place == "own_actor" else None
        if restored is not None:
            self.absorb(self.get(restored, f"learner restore ({self.ckpt.path})", setup=True))
        payload = self.get(payload_ref, "learner init (build, warm start)", setup=True)
        self.absorb(payload)
        self.warmstart = payload["warmstart"]
        self.last_val = self.warmstart.get("val_reward")
        if self.ckpt is not None:
            self.restore_driver(self.ckpt)
        else:  # resumed: the step-0 row is in metrics.jsonl already
            self.files.metrics.write(payload["initial_metrics"])
        self.write_records(payload)
        names = [f"generator/{i}" for i in range(n_generators)]
        self.holders = {"generator": list(self.gens), "own_actor": [self.scorer]}.get(place, [])
        self.holder_names = {"generator": names, "own_actor": ["reference"]}.get(place, [])
        starts = {
            h.start.remote(payload_ref): self.call(f"{name} start", setup=True)
            for name, h in zip(names + ["reference"], self.gens + [self.scorer])
            if h is not None
        }
        while starts:
            self.absorb(self.wait_any(starts)[2])

    def restore_driver(self, ckpt) -> None:
        """The driver's side of a resume (engines/checkpoints.Checkpointing, mixed in before this class)."""
        raise NotImplementedError

    # ================================================================ bookkeeping
    def absorb(self, result: dict) -> None:
        """Spans to timeline.jsonl, CPU seconds into this step's account."""
        for s in result.get("spans", ()):
            self.files.timeline.write(s)
        self.cpu_step += result.get("cpu_s", 0.0)

    def write_records(self, result: dict) -> None:
        for e in result.get("events", ()):
            self.files.events.write(e)
        for s in result.get("samples", ()):
            self.files.samples.write(s)

    def add_sync(self, pub: Optional[dict] = None, ack: Optional[dict] = None) -> None:
        if pub is not None:
            self.sync["pack_s"] += pub["pack_s"]
            self.sync["bytes"] += pub["bytes"]
        if ack is not None:
            self.sync["load_s"] += ack["load_s"]
            self.sync["loads"] += 1
            self.sync_version = max(self.sync_version, ack["version"])
            self.sync_struct = max(self.sync_struct, ack["struct_version"])

    def write_step(self, res: dict, info: dict) -> dict:
        """The learner's step metrics plus the driver's keys -> metrics.jsonl (one flushed line)."""
        cfg = self.cfg
        now = time.perf_counter()
        dt = now - self.t_last
        self.t_last = now
        self.steps_done += 1
        step = self.steps_done
        m = dict(res["metrics"])
        cpu = self.cpu_step + self.cpu.lap()
        self.cpu_step, self.cpu_total = 0.0, self.cpu_total + cpu
        stale = step - 1 - info["version"]
        self.staleness.append(stale)
        n = cfg.batch_size * cfg.group_size
        tokens = m.get("count/tokens_policy", 0) + m.get("count/tokens_ref", 0)
        m.update(
            {
                "version": info["version"],
                "learner_version": step - 1,
                "staleness": stale,
                "time/learner_step": m.get("time/step", 0.0),
                "time/step": dt,
                "time/rollout": info["gen_s"],
                "time/sync": self.sync["pack_s"] + self.sync["load_s"],
                "sync/pack_s": self.sync["pack_s"],
                "sync/load_s": self.sync["load_s"],
                "sync/bytes": self.sync["bytes"],
                "sync/loads": self.sync["loads"],
                "sync/version": self.sync_version,
                "sync/struct_version": self.sync_struct,
                "perf/samples_per_s": n / max(dt, 1e-9),
                "perf/tokens_per_s": tokens / max(dt, 1e-9),
                "perf/cpu_s": cpu,
                "perf/cpu_s_total": self.cpu_total,
            }
        )
        if "ref_version" in info:
            m["ref_version"] = info["ref_version"]
            m["time/ref"] = info["ref_s"]
        self.sync = {"pack_s": 0.0, "load_s": 0.0, "bytes": 0, "loads": 0}
        self.write_records(res)
        self.files.metrics.write(m)
        self.last_val = m.get("reward/val", self.last_val)
        if self.bar is not None:
            self.bar.update(1)
            self.bar.set_postfix(reward=f"{m['reward/mean']:.3f}", stale=stale, refresh=False)
        return m

    def propagate_ref(self, update: Optional[dict], step: int) -> list:
        """Send a learner reference reset to every holder; returns (ref, Call) acks to check."""
        if update is None:
            return []
        self.ref_version = update["ref_version"]
        return [
            (
                h.reset_ref.remote(update, step),
                self.call(f"{name} reference reset (step {step})", "ref_ack", update["ref_version"]),
            )
            for h, name in zip(self.holders, self.holder_names)
        ]

    def check_ref_ack(self, ack: dict, call: Call) -> None:
        if ack["ref_version"] != call.data:
            raise EngineError(f"{call.what}: holder at reference version {ack['ref_version']}, expected {call.data}")

    @staticmethod
    def merge_score(info: dict, meta: dict) -> None:
        """info <- a (re)scoring's ref_version, counts and time; the forward of a sampling-time
        score that it replaces (stale reference) still happened and stays counted."""
        counts, secs = dict(meta["ref_counts"]), meta["ref_s"]
        if "ref_counts" in info:
            counts = {k: v + info["ref_counts"].get(k, 0) for k, v in counts.items()}
            secs += info["ref_s"]
        info.update(ref_version=meta["ref_version"], ref_counts=counts, ref_s=secs)

    def rescore(self, holder_idx: int, batch_ref, step: int):
        """(meta ref, scored batch ref) from a holder that has the current reference version."""
        holder = self.holders[holder_idx]
        meta_ref, scored = holder.score.options(num_returns=2).remote(batch_ref, step)
        return meta_ref, scored, self.call(f"{self.holder_names[holder_idx]} score (step {step})", "score")

    # ================================================================ the run
    def loop(self) -> None:
        raise NotImplementedError

    def start(self) -> None:
        """Ray, the actors, the learner's warm start, the generators' start; their records go to
        `self.files` (launch.py holds them in memory until the run's files open)."""
        self.start_ray()
        self.setup(self.n_generators())

    def run(self) -> dict:
        """The steps, after `start()`, with the run's files open; returns the summary."""
        from noma_prorl_bench.io.run_dir import progress  # noqa: PLC0415

        self.bar = progress(self.cfg, self.cfg.steps)
        self.cpu_setup = self.cpu_step + self.cpu.lap()  # Ray start, actors, warm start
        self.cpu_total, self.cpu_step = self.cpu_setup, 0.0
        self.t_first = self.t_last = time.perf_counter()
        self.t_first_wall = time.time()
        self.loop()
        train_s = time.perf_counter() - self.t_first
        n = self.cfg.batch_size * self.cfg.group_size * self.steps_done
        return {
            "complete": True,
            "steps": self.steps_done,
            "engine": self.name,
            "final_val_reward": self.last_val,
            "warmstart_val_reward": self.warmstart.get("val_reward"),
            "warmstart_seconds": self.warmstart.get("seconds"),
            "train_seconds": train_s,
            "samples": n,
            "samples_per_s": n / max(train_s, 1e-9),
            "cpu_seconds": self.cpu_total,
            "cpu_seconds_setup": self.cpu_setup,
            "setup_seconds": self.t_first_wall - self.t0,
            "staleness_hist": {str(k): v for k, v in sorted(Counter(self.staleness).items())},
            "max_staleness_seen": max(self.staleness, default=0),
            **({} if self.ckpt is None else {"resumed_from_step": self.ckpt.step}),
        }

    def n_generators(self) -> int:
        return 1
