"""`--engine ray_colocated`: generate, (score), train, sync — strictly in turn, actors packed on one node.

One *round* with `--steps_per_rollout K`:

  1. the generator, at policy version v, samples K step-batches in one call (K x B prompts x G
     samples, each batch exactly what one local `Collector.collect()` draws, in order) and records
     their behaviour logprobs logp_old under version v;
  2. the learner takes K consecutive steps, step k on batch k, each the local engine's full
     update (`ppo_epochs` x `minibatches` optimizer steps with the clipped objective) with the
     ratio's denominator logp_old from version v; so step k of a round trains on data k-1
     versions old (`staleness` = k-1);
  3. the learner publishes version v+K and the generator loads it (`time/sync`).

With `--ppo_epochs 1 --minibatches 1` a round is exactly K optimizer steps per rollout round,
the seed's "take k gradient steps" setting. K = 1 is on-policy and reproduces `--engine local`
metric for metric (apart from time/perf/sync keys): same code, same RNG streams, same weights
(float32 through numpy is exact). A reference reset inside a round makes the round's remaining
batches stale for a remote reference; they are re-scored (counted in `count/ref_fwd`).
"""

from __future__ import annotations

from noma_prorl_bench.engines.calls import EngineError
from noma_prorl_bench.engines.checkpoints import Checkpointing
from noma_prorl_bench.engines.driver import RayEngine


class ColocatedEngine(Checkpointing, RayEngine):
    name = "ray_colocated"

    def loop(self) -> None:
        cfg = self.cfg
        K, gen = cfg.steps_per_rollout, self.gens[0]
        step = self.steps_done  # > 0 on resume (a round end)
        while step < cfg.steps:
            k = min(K, cfg.steps - step)
            refs = gen.generate.options(num_returns=k + 1).remote(k, step + 1)
            meta = self.get(refs[0], f"generator/0 generate (steps {step + 1}-{step + k})")
            self.absorb(meta)
            for i in range(k):
                step += 1
                info, batch_ref = dict(meta["batches"][i]), refs[1 + i]
                if info["version"] != step - 1 - i:
                    raise EngineError(f"generator/0 sampled with version {info['version']}, expected {step - 1 - i}")
                batch_ref, info = self.score_if_needed(batch_ref, info, step)
                last = i == k - 1 and step < cfg.steps
                res = self.get(self.learner.train_step.remote(batch_ref, info, last), f"learner train (step {step})")
                self.absorb(res)
                for ref, call in self.propagate_ref(res["ref_update"], step):
                    ack = self.wait_any({ref: call})[2]
                    self.absorb(ack)
                    self.check_ref_ack(ack, call)
                if res["pub"] is not None:
                    self.sync_generator(res["pub"], step)
                self.write_step(res, info)
                if i == k - 1 and cfg.save_every and step % cfg.save_every == 0 and step < cfg.steps:
                    self.save_checkpoint("periodic")
        if self.steps_done != self.saved:
            self.save_checkpoint("final")

    def score_if_needed(self, batch_ref, info: dict, step: int):
        """own_actor: score now; generator placement: re-score if a reset made the batch stale."""
        place = self.ref_place
        if place == "learner" or (place == "generator" and info["ref_version"] == self.ref_version):
            return batch_ref, info
        meta_ref, scored, call = self.rescore(0, batch_ref, step)
        meta = self.wait_any({meta_ref: call})[2]
        self.absorb(meta)
        self.merge_score(info, meta)
        return scored, info

    def sync_generator(self, pub: dict, step: int) -> None:
        self.add_sync(pub=pub)
        ack = self.get(
            self.gens[0].set_weights.remote(pub, step), f"generator/0 weight sync (version {pub['version']})"
        )
        self.absorb(ack)
        if ack["version"] != pub["version"]:
            raise EngineError(f"generator/0 at version {ack['version']} after sync, expected {pub['version']}")
        self.add_sync(ack=ack)
