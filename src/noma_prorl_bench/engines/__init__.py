"""Engines that drive the Trainer: local (one process) and Ray (colocated, asynchronous).

`local.py` is `--engine local` (`build_trainer`, `run`, `train`). The Ray engines
(`--engine ray_colocated | ray_async`) are Generator / Learner / ReferenceScorer actors driven
by one controller; see docs/ray.md.

  local.py      the local engine: build the Trainer, run its steps, checkpoints, summary
  weights.py    state dicts as numpy arrays for the object store (exact), structure signatures
  timeline.py   per-actor stage spans -> timeline.jsonl -> plots/timeline.png (Gantt)
  actors.py     Generator, ReferenceScorer, the CPU clock and object-store access they share
  learner_actor.py  Learner (a Trainer inside): steps, weight packs, checkpoints
  driver.py     Ray lifecycle, placement, start-up, per-step metrics (RayEngine)
  calls.py      actor calls with deadlines: dead, hung or raising actors -> EngineError
  launch.py     `run_engine(cfg)`: output files, failure and signal handling, summary, plot
  stops.py      stop signals in the driver -> EngineStopped (also through Ray's blocking calls)
  reaper.py     kills a private Ray cluster's processes and removes its temp dir if the driver dies
  remote_ref.py the learner's stand-in for the reference when it lives in another actor
  colocated.py  generate K batches -> K steps -> sync, in turn (--steps_per_rollout K)
  async_.py     generation overlaps training, FIFO batches, --max_staleness S enforced

Ray is imported only when a Ray engine runs; the local engine never needs it.
"""

from noma_prorl_bench.engines.calls import EngineError
from noma_prorl_bench.engines.launch import run_engine
from noma_prorl_bench.engines.stops import EngineStopped

__all__ = ["EngineError", "EngineStopped", "run_engine"]
