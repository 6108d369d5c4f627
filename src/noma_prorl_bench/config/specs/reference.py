"""Where logp_ref comes from (`ReferenceSpec`: Variant A's reference model and how often it scores,
or Variant B's none)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from noma_prorl_bench.config.choices import RefCompute
from noma_prorl_bench.config.specs.base import Spec, copy_of, sub
from noma_prorl_bench.config.specs.model import ModelSpec
from noma_prorl_bench.config.specs.rollout import ShapeSpec

#: --ref_compute -> the variant code of reports (A0 / A1 / A2; Variant B has no reference).
REF_CODES: dict[str, str] = {"naive_epoch": "A0", "cached": "A1", "ring": "A2"}


@dataclass(frozen=True)
class ReferenceSpec(Spec):
    """The reference (rollout/reference.make_reference)."""

    SECTION: ClassVar[str] = "KL and reference"

    variant: Literal["A", "B"] = "A"
    """A: explicit KL to a reference policy (needs logp_ref). B: no reference model at all; the penalty anchors to logp_old (a different objective)."""
    ref_compute: RefCompute = "cached"
    """How logp_ref is obtained (Variant A): naive_epoch (A0: recomputed for every minibatch in every epoch), cached (A1: once per rollout batch), ring (A2: once per batch into a preallocated buffer, minibatches are views)."""
    shape: ShapeSpec = sub(ShapeSpec)
    logprob_chunk: int = copy_of(ModelSpec, "logprob_chunk")

    @property
    def mode(self) -> str:
        """--ref_compute, or "none" for Variant B (no reference model: the anchor is pi_old)."""
        return "none" if self.variant == "B" else self.ref_compute

    @property
    def rows(self) -> int:
        """N = B*G sequences per step (the ring buffer's rows)."""
        return self.shape.rows

    @property
    def label(self) -> str:
        """A0/A1/A2/B label used in reports."""
        return "B" if self.variant == "B" else REF_CODES[self.ref_compute]
