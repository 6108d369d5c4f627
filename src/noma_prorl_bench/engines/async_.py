"""`--engine ray_async`: disaggregated generators sample the next batches while the learner trains.

Schedule (the driver is the only place that decides; actors just run what they are sent):

  * Batches are launched one at a time on idle generators and trained strictly in launch
    order (FIFO), one learner step each. Batch i (0-based) is therefore trained by step i+1,
    on the learner's version i.
  * Before launching batch i on generator g, the driver sends g the newest published
    weights (version v_done = steps finished) if g is older, so the batch is sampled with
    version v_done and will be trained with staleness i - v_done.
  * Staleness bound `--max_staleness S`: batch i is launched only when i - v_done <= S,
    otherwise the generator waits (idle in the timeline) until the learner finishes a step.
    Nothing is ever discarded; the driver re-checks `staleness <= S` on every batch before it
    trains and treats a violation as an internal error. S = 0 is synchronous on-policy
    training (no overlap); S = 1 overlaps one generation with one update ("one version
    behind"); more generators only help when S > 1 (N <= S + 1 batches can be in flight).
  * `--num_generators N`: generator 0 continues the learner's RNG streams, the others have
    their own; with N = 1 and S = 0 the run equals `ray_colocated` with K = 1.

Weight sync: every learner step publishes its weights to the object store; a generator
loads a version only right before its next launch (its load overlaps nothing else it does).
Reference resets are sent to every reference holder as they happen (queued behind their
current call); a batch scored by an older reference version is re-scored before training.
"""
from __future__ import annotations

from collections import deque

from .driver import EngineError, RayEngine


class AsyncEngine(RayEngine):
    name = "ray_async"

    def n_generators(self) -> int:
        return self.cfg.num_generators

    def loop(self) -> None:
        cfg, S = self.cfg, self.cfg.max_staleness
        place = cfg.ref_placement if cfg.variant == "A" else "learner"
        gen_version = [0] * len(self.gens)
        idle = deque(range(len(self.gens)))
        pending: dict = {}
        batches: dict[int, dict] = {}             # launch index -> {"ref", "info", "ready", "gen"}
        launched = trained_next = v_done = 0
        training, pub = False, None
        while self.steps_done < cfg.steps:
            # ---------------------------------------------------------------- launch generations
            while idle and launched < cfg.steps and launched - v_done <= S:
                g = idle.popleft()
                if gen_version[g] < v_done:
                    pending[self.gens[g].set_weights.remote(pub, launched + 1)] = self.call(
                        f"generator/{g} weight sync (version {v_done})", "sync", (g, v_done))
                    gen_version[g] = v_done
                meta_ref, batch_ref = self.gens[g].generate.options(num_returns=2).remote(1, launched + 1)
                pending[meta_ref] = self.call(f"generator/{g} generate (step {launched + 1})", "gen", (g, launched))
                batches[launched] = {"ref": batch_ref, "ready": False, "gen": g}
                launched += 1
            # ---------------------------------------------------------------- start the next update
            nxt = batches.get(trained_next)
            if not training and nxt is not None and nxt["ready"]:
                info, step = nxt["info"], trained_next + 1
                if place != "learner" and info["ref_version"] != self.ref_version:
                    self.start_rescore(nxt, step, pending, place)
                    continue
                if step - 1 - info["version"] > S or v_done != trained_next:
                    raise EngineError(f"internal: batch of version {info['version']} would train at version "
                                      f"{v_done} (step {step}), beyond --max_staleness {S}")
                del batches[trained_next]
                ref = self.learner.train_step.remote(nxt["ref"], info, step < cfg.steps)
                pending[ref] = self.call(f"learner train (step {step})", "train", info)
                training, trained_next = True, trained_next + 1
                continue
            # ---------------------------------------------------------------- wait for anything
            ref, call, val = self.wait_any(pending)
            self.absorb(val)
            if call.kind == "gen":
                g, idx = call.data
                info = dict(val["batches"][0])
                if info["version"] != gen_version[g]:
                    raise EngineError(f"{call.what}: sampled with version {info['version']}, expected {gen_version[g]}")
                batches[idx]["info"] = info
                idle.append(g)
                if place == "own_actor":
                    self.start_rescore(batches[idx], idx + 1, pending, place)
                else:
                    batches[idx]["ready"] = True
            elif call.kind == "score":
                b = batches[call.data]
                self.merge_score(b["info"], val)
                b["ready"] = True
            elif call.kind == "train":
                training, v_done = False, v_done + 1
                if val["pub"] is not None:
                    pub = val["pub"]
                    self.add_sync(pub=pub)
                for r, c in self.propagate_ref(val["ref_update"], v_done):
                    pending[r] = c
                self.write_step(val, call.data)
            elif call.kind == "sync":
                if val["version"] != call.data[1]:
                    raise EngineError(f"{call.what}: generator at version {val['version']}")
                self.add_sync(ack=val)
            elif call.kind == "ref_ack":
                self.check_ref_ack(val, call)

    def start_rescore(self, b: dict, step: int, pending: dict, place: str) -> None:
        """Score (own_actor) or re-score (stale reference) batch b on a current holder."""
        holder = b["gen"] if place == "generator" else 0
        idx = step - 1
        b["ready"] = False
        meta_ref, scored, call = self.rescore(holder, b["ref"], step)
        call.data = idx
        b["ref"] = scored
        pending[meta_ref] = call
