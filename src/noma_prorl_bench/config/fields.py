"""The flat view of the spec tree: what `RunConfig` (config/run_config.py, generated) adds to its
fields, and each flag's help, section and default, read from the spec that owns it.

`RunConfig` has one field per flag (the name, type and default its spec declares) and is what the
command line fills, config.json holds and a `--resume` compares; the properties below are the
specs' resolved values (config.json's `derived`), computed by the owning spec.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from noma_prorl_bench.config.specs import (
    CriticSpec,
    ObjectiveSpec,
    ReferenceSpec,
    WarmStartSpec,
    build,
    flag_docs,
    flag_sections,
    owner,
)
from noma_prorl_bench.config.specs.base import default_of
from noma_prorl_bench.config.specs.model import WARMSTART_AUTO_STEPS
from noma_prorl_bench.config.specs.objective import CLIP_EPS_DEFAULT, DAPO_EPS_HIGH, GSPO_EPS, kl_metric_key
from noma_prorl_bench.config.specs.reference import REF_CODES
from noma_prorl_bench.config.specs.run import RESUME_SAFE_FIELDS

__all__ = [
    "CLIP_EPS_DEFAULT",
    "DAPO_EPS_HIGH",
    "GSPO_EPS",
    "REF_CODES",
    "RESUME_SAFE_FIELDS",
    "WARMSTART_AUTO_STEPS",
    "FlatConfig",
    "field_default",
    "field_docs",
    "field_sections",
    "kl_metric_key",
]


class FlatConfig:
    """Base of the generated RunConfig: the resolved values, each from the spec that owns them."""

    @property
    def eps_lo(self) -> float:
        """Effective lower clip range."""
        return build(ObjectiveSpec, self).eps_lo

    @property
    def eps_hi(self) -> float:
        """Effective upper clip range."""
        return build(ObjectiveSpec, self).eps_hi

    @property
    def clip_used(self) -> dict:
        """The clip bounds the chosen loss applies (ObjectiveSpec.clip_used)."""
        return build(ObjectiveSpec, self).clip_used

    @property
    def loss_agg_resolved(self) -> str:
        """--loss_agg after resolving auto."""
        return build(ObjectiveSpec, self).loss_agg_resolved

    @property
    def critic_lr_resolved(self) -> float:
        """--critic_lr after resolving -1 (--lr)."""
        return build(CriticSpec, self).critic_lr_resolved

    @property
    def warmstart_steps_resolved(self) -> int:
        """Warm-start steps after resolving -1 (auto)."""
        return build(WarmStartSpec, self).warmstart_steps_resolved

    @property
    def variant_label(self) -> str:
        """A0/A1/A2/B label used in reports."""
        return build(ReferenceSpec, self).label

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)  # type: ignore[call-overload]


def field_default(name: str) -> Any:
    """The default value of flag `name` (for modules that bound by a flag's default)."""
    return default_of(owner(name), name)


def field_docs() -> dict[str, str]:
    """Every flag's help text (the string literal under its field in the owning spec)."""
    return flag_docs()


def field_sections() -> dict[str, str]:
    """Every flag's `--help` section ("resets", ...), from the owning spec."""
    return flag_sections()
