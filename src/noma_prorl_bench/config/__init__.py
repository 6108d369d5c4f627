"""Run configuration: the spec tree (specs/, each flag declared once in the spec that owns it), the
flat `RunConfig` generated from it (run_config.py), the command line generated from it
(parser.py), the rules that span two specs (validate.py) and named presets (presets.py)."""

from noma_prorl_bench.config.errors import ConfigError
from noma_prorl_bench.config.fields import (
    DAPO_EPS_HIGH,
    REF_CODES,
    RESUME_SAFE_FIELDS,
    WARMSTART_AUTO_STEPS,
    field_docs,
    kl_metric_key,
)
from noma_prorl_bench.config.parser import build_parser, make_config, parse_config
from noma_prorl_bench.config.run_config import RunConfig
from noma_prorl_bench.config.specs.growth import GROWTH_FLAGS
from noma_prorl_bench.config.validate import validate

__all__ = [
    "DAPO_EPS_HIGH",
    "GROWTH_FLAGS",
    "REF_CODES",
    "RESUME_SAFE_FIELDS",
    "WARMSTART_AUTO_STEPS",
    "ConfigError",
    "RunConfig",
    "build_parser",
    "field_docs",
    "kl_metric_key",
    "make_config",
    "parse_config",
    "validate",
]
