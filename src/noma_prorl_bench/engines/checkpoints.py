"""The driver's side of Ray-engine checkpoints, shared by `ray_colocated` and `ray_async`.

A Ray checkpoint is the local engine's checkpoint (io/checkpoint.py) of the learner's Trainer
(policy, reference, optimizer, LR scheduler, adaptive-KL controller, reset and growth state, RNG
states), written by the learner on its own node, with

  * generator 0's sampling streams (prompt sampler, rollout sampler) in place of the learner's
    own, which a learner never uses (batches are handed in): a resume gives them back to
    generator 0 through the learner's start payload;
  * the driver's counters in `extra`: `last_val`, `sync_version`, `sync_struct` (the policy and
    structure versions the generators last acknowledged), the per-step `staleness` history
    (summary.json's histogram counts the whole run) and the engine's name; each engine adds its
    own (ray_async: the batches in flight, async_.py).

Resuming sets the driver's step count to the checkpoint's and restores those counters; the
learner loads the Trainer state (`Learner.restore`) before it builds the start payload. See
docs/ray.md "Checkpoints and resume".
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:  # the engine this is mixed into (a subclass of both)
    from noma_prorl_bench.engines.driver import RayEngine

    _Engine = RayEngine
else:
    _Engine = object


class Checkpointing(_Engine):
    """Mixin for a RayEngine: `save_checkpoint(reason)` and `restore_driver(ckpt)`."""

    saved = -1  # the step of the last checkpoint written or resumed from

    def save_checkpoint(self, reason: str, extra: Optional[dict] = None, rng: Optional[dict] = None) -> None:
        """The learner saves its Trainer at the driver's step with generator 0's sampling streams
        (`rng`, asked from generator 0 when not given) and the driver's counters plus `extra`."""
        step = self.steps_done
        if rng is None:
            rng = self.get(self.gens[0].rng_state.remote(), f"generator/0 sampling state (step {step})")
        extra = {
            "last_val": self.last_val,
            "sync_version": self.sync_version,
            "sync_struct": self.sync_struct,
            "staleness": list(self.staleness),
            "engine": self.name,
            **(extra or {}),
        }
        res = self.get(
            self.learner.save_checkpoint.remote(
                os.path.abspath(self.cfg.outdir), self.cfg.keep_checkpoints, extra, rng
            ),
            f"learner checkpoint (step {step})",
        )
        self.absorb(res)
        self.saved = step
        self.files.events.write(
            {
                "step": step,
                "event": "checkpoint",
                "reason": reason,
                "path": os.path.relpath(res["path"], os.path.abspath(self.cfg.outdir)),
            }
        )

    def restore_driver(self, ckpt) -> None:
        """The driver's side of a resume: step count, sync counters, staleness history, last val."""
        extra = ckpt.extra
        self.steps_done = self.saved = ckpt.step
        self.sync_version, self.sync_struct = int(extra.get("sync_version", 0)), int(extra.get("sync_struct", 0))
        self.staleness = [int(s) for s in extra.get("staleness", [])]
        self.last_val = extra.get("last_val", self.last_val)
