"""Run configuration: `RunConfig` fields (fields.py), the generated CLI (parser.py),
validation (validate.py) and named presets (presets.py)."""

from noma_prorl_bench.config.fields import (
    DAPO_EPS_HIGH,
    KL_METRIC_KEYS,
    REF_CODES,
    RESUME_SAFE_FIELDS,
    WARMSTART_AUTO_STEPS,
    RunConfig,
    field_docs,
    kl_metric_key,
)
from noma_prorl_bench.config.parser import build_parser, make_config, parse_config
from noma_prorl_bench.config.validate import GROWTH_FLAGS, ConfigError, validate

__all__ = [
    "DAPO_EPS_HIGH",
    "GROWTH_FLAGS",
    "KL_METRIC_KEYS",
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
