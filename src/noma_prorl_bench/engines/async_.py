"""`--engine ray_async`: disaggregated generators sample the next batches while the learner trains.

Schedule (the driver alone decides; actors run what they are sent):

  * Batches are launched one at a time on idle generators and trained strictly in launch
    order (FIFO), one learner step each: batch i (0-based) is trained by step i+1, on the
    learner's version i.
  * Before launching batch i on generator g, the driver sends g the newest published weights
    (version v_done = steps finished) if g is older, so the batch is sampled by version v_done
    and will be trained with staleness i - v_done.
  * `--max_staleness S`: batch i is launched only when i - v_done <= S; otherwise the
    generator waits (idle in the timeline) until the learner finishes a step. Nothing is ever
    discarded: the wait keeps the bound by construction, and the driver re-checks
    `staleness <= S` on every batch before it trains (a violation is an internal error).
    S = 0 is synchronous on-policy training (no overlap); S = 1 overlaps one generation with
    one update ("one version behind"); more generators help only when S > 1 (at most S + 1
    batches are in the pipeline).
  * `--num_generators N`: generator 0 continues the learner's RNG streams, the others have
    their own.

Weight sync: every learner step publishes its weights to the object store; a generator loads
the newest version right before its next launch. Reference resets are sent to every reference
holder as they happen (queued behind their current call); a batch scored by an older
reference version is re-scored before it trains. With `--ref_placement own_actor` each batch
is scored as soon as it is sampled, while the learner is still busy.

Checkpoints (`--save_every N` and at the end; `--ref_placement learner`): after step s the
driver *drains* (finishes and handles every call in flight without launching or training
anything new), then the learner saves its Trainer (checkpoints.py) with generator 0's streams,
and `extra` holds the batches in flight (launch indices s.., at most S, sampled and not
discarded), the launch counter, generators 1..'s streams and the sync counters not yet
reported. A resume puts those batches back as ready at their indices (they train at their
saved version and staleness) and starts every generator at version s. With N = 1 and S <= 1
the schedule is fixed by the config (batch i is sampled by version max(0, i - S)) and a resume
reproduces the uninterrupted run; otherwise it depends on timing and a resume keeps the
invariants (docs/ray.md "Checkpoints and resume").
"""

from __future__ import annotations

from collections import deque
from dataclasses import fields

from noma_prorl_bench.engines.calls import EngineError
from noma_prorl_bench.engines.checkpoints import Checkpointing
from noma_prorl_bench.engines.driver import RayEngine
from noma_prorl_bench.rollout.sampling import RolloutBatch


class AsyncEngine(Checkpointing, RayEngine):
    name = "ray_async"

    def n_generators(self) -> int:
        return self.cfg.num_generators

    def loop(self) -> None:
        cfg = self.cfg
        self.place_ref = self.ref_place
        step = self.steps_done  # > 0 on resume
        self.gen_version = [step] * len(self.gens)  # weights version sent to each generator (a resume
        self.idle = deque(range(len(self.gens)))  # starts them all from the learner's version)
        self.pending: dict = {}  # object ref -> Call
        self.batches: dict[int, dict] = {}  # launch index -> {"ref", "info", "ready", "gen"}
        self.launched = self.next_train = self.v_done = step
        self.training, self.pub = False, None
        if self.ckpt is not None:
            self.restore_pipeline(self.ckpt.extra)
        while self.steps_done < cfg.steps:
            self.launch_generations()
            if self.start_update():
                continue
            self.handle_next()
        if self.steps_done != self.saved:
            self.save_checkpoint("final")

    def handle_next(self) -> None:
        """Wait for the first pending call to finish and handle its result."""
        ref, call, val = self.wait_any(self.pending)
        self.absorb(val)
        getattr(self, f"on_{call.kind}")(call, val)

    # ---------------------------------------------------------------- decisions
    def launch_generations(self) -> None:
        """Launch batch `launched` on idle generators while it would train within S versions."""
        while self.idle and self.launched < self.cfg.steps and self.launched - self.v_done <= self.cfg.max_staleness:
            g, step = self.idle.popleft(), self.launched + 1
            if self.gen_version[g] < self.v_done:
                ack = self.gens[g].set_weights.remote(self.pub, step)
                self.pending[ack] = self.call(
                    f"generator/{g} weight sync (version {self.v_done})", "sync", (g, self.v_done)
                )
                self.gen_version[g] = self.v_done
            meta_ref, batch_ref = self.gens[g].generate.options(num_returns=2).remote(1, step)
            self.pending[meta_ref] = self.call(f"generator/{g} generate (step {step})", "gen", (g, self.launched))
            self.batches[self.launched] = {"ref": batch_ref, "ready": False, "gen": g}
            self.launched += 1

    def start_update(self) -> bool:
        """Hand the next batch (FIFO) to an idle learner; True when something was submitted."""
        b = self.batches.get(self.next_train)
        if self.training or b is None or not b["ready"]:
            return False
        info, step = b["info"], self.next_train + 1
        if self.place_ref != "learner" and info["ref_version"] != self.ref_version:
            self.start_score(b, step)  # a reset since it was scored: re-score first
            return True
        if step - 1 - info["version"] > self.cfg.max_staleness or self.v_done != self.next_train:
            raise EngineError(
                f"internal: a batch of version {info['version']} would train at version "
                f"{self.v_done} (step {step}), beyond --max_staleness {self.cfg.max_staleness}"
            )
        del self.batches[self.next_train]
        ref = self.learner.train_step.remote(b["ref"], info, step < self.cfg.steps)
        self.pending[ref] = self.call(f"learner train (step {step})", "train", info)
        self.training, self.next_train = True, self.next_train + 1
        return True

    def start_score(self, b: dict, step: int) -> None:
        """Score (own_actor) or re-score (stale reference) batch b on a holder that is current."""
        holder = b["gen"] if self.place_ref == "generator" else 0
        b["ready"] = False
        meta_ref, scored, call = self.rescore(holder, b["ref"], step)
        call.data, b["ref"] = step - 1, scored
        self.pending[meta_ref] = call

    # ---------------------------------------------------------------- results
    def on_gen(self, call, val: dict) -> None:
        g, idx = call.data
        info = dict(val["batches"][0])
        if info["version"] != self.gen_version[g]:
            raise EngineError(f"{call.what}: sampled with version {info['version']}, expected {self.gen_version[g]}")
        self.batches[idx]["info"] = info
        self.idle.append(g)
        if self.place_ref == "own_actor":
            self.start_score(self.batches[idx], idx + 1)
        else:
            self.batches[idx]["ready"] = True

    def on_score(self, call, val: dict) -> None:
        b = self.batches[call.data]
        self.merge_score(b["info"], val)
        b["ready"] = True

    def on_train(self, call, val: dict) -> None:
        self.training, self.v_done = False, self.v_done + 1
        if val["pub"] is not None:
            self.pub = val["pub"]
            self.add_sync(pub=self.pub)
        for ref, c in self.propagate_ref(val["ref_update"], self.v_done):
            self.pending[ref] = c
        self.write_step(val, call.data)
        every = self.cfg.save_every
        if every and self.steps_done % every == 0 and self.steps_done < self.cfg.steps:
            self.save_checkpoint("periodic")

    def on_sync(self, call, val: dict) -> None:
        if val["version"] != call.data[1]:
            raise EngineError(f"{call.what}: the generator is at version {val['version']}")
        self.add_sync(ack=val)

    def on_ref_ack(self, call, val: dict) -> None:
        self.check_ref_ack(val, call)

    # ---------------------------------------------------------------- checkpoints
    def save_checkpoint(self, reason: str, extra=None, rng=None) -> None:
        """Drain, then save: every call in flight (generations, weight syncs, scores, reset acks)
        is finished and handled without launching or training anything new, so the learner is
        at a step boundary and the batches already launched (at most S) are sampled; they are
        saved with their info, plus every generator's sampling streams and the pipeline counters."""
        while self.pending:
            self.handle_next()
        step = self.steps_done
        rngs = [
            self.get(g.rng_state.remote(), f"generator/{i} sampling state (step {step})")
            for i, g in enumerate(self.gens)
        ]
        inflight = [
            {
                "index": i,
                "info": b["info"],
                "gen": b["gen"],
                "batch": batch_state(self.get(b["ref"], f"batch {i + 1} (in flight at step {step})")),
            }
            for i, b in sorted(self.batches.items())
        ]
        extra = {
            "launched": self.launched,
            "inflight": inflight,
            "gen_rng": rngs[1:],
            "sync_pending": dict(self.sync),
            **(extra or {}),
        }
        super().save_checkpoint(reason, extra, rngs[0])

    def restore_pipeline(self, extra: dict) -> None:
        """Resume: the saved batches in flight become ready batches (same launch indices, so they
        train at the saved staleness), generators 1.. continue their saved sampling streams
        (generator 0's came with the learner's payload)."""
        import ray  # noqa: PLC0415

        self.launched = int(extra.get("launched", self.steps_done))
        indices = [int(d["index"]) for d in extra.get("inflight", [])]
        if indices != list(range(self.steps_done, self.launched)):
            raise EngineError(
                f"checkpoint at step {self.steps_done} is inconsistent: batches in flight {indices}, "
                f"launched {self.launched}"
            )
        for d in extra.get("inflight", []):
            self.batches[int(d["index"])] = {
                "ref": ray.put(RolloutBatch(**d["batch"])),
                "info": dict(d["info"]),
                "ready": True,
                "gen": int(d["gen"]),
            }
        self.sync.update(extra.get("sync_pending", {}))
        states = extra.get("gen_rng", [])
        if len(states) != len(self.gens) - 1:
            raise EngineError(
                f"the checkpoint has sampling states for {len(states) + 1} generators, this run has "
                f"{len(self.gens)} (--num_generators)"
            )
        for i, state in enumerate(states, start=1):
            self.absorb(self.get(self.gens[i].set_rng.remote(state), f"generator/{i} sampling state", setup=True))


def batch_state(batch: RolloutBatch) -> dict:
    """A RolloutBatch as a tree of tensors and plain values (io.checkpoint encodes it)."""
    return {f.name: getattr(batch, f.name) for f in fields(batch)}
