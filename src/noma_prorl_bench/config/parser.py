"""The command line generated from `RunConfig`: one flag per field, its docstring as help.

`build_parser()` turns the dataclass into an argparse parser; `parse_config(argv)` applies a
preset, then the explicit flags, validates (validate.py) and returns a `RunConfig`.
"""
from __future__ import annotations

import argparse
import typing
from dataclasses import fields
from typing import Literal, Optional

from noma_prorl_bench.config.fields import NOT_YET, RunConfig, field_docs
from noma_prorl_bench.config.validate import ConfigError, validate


def _choices(tp) -> Optional[list]:
    if typing.get_origin(tp) is Literal:
        return list(typing.get_args(tp))
    return None


def build_parser(prog: str = "python -m noma_prorl_bench.run") -> argparse.ArgumentParser:
    """An argparse parser with one flag per RunConfig field (defaults suppressed so the
    caller can tell explicit flags from defaults, which presets need)."""
    p = argparse.ArgumentParser(
        prog=prog, argument_default=argparse.SUPPRESS, usage="%(prog)s [-h] --outdir OUTDIR [options]",
        description="Train one KL-regularised RL run (PPO/GRPO family) and write config.json, "
                    "metrics.jsonl and events.jsonl to --outdir.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    docs = field_docs()
    hints = typing.get_type_hints(RunConfig)
    for f in fields(RunConfig):
        tp, helptext = hints[f.name], docs.get(f.name, "")
        if f.name in NOT_YET:
            helptext += f" [not supported yet: {NOT_YET[f.name]}]"
        if f.name == "preset":
            from noma_prorl_bench.config.presets import describe_all  # noqa: PLC0415  (the presets' own text, one per preset)
            helptext += " " + " || ".join(describe_all().splitlines())
        flag = f"--{f.name}"
        choices = _choices(tp)
        if tp is bool:
            p.add_argument(flag, action="store_true", help=helptext)
        elif choices is not None:
            p.add_argument(flag, type=type(choices[0]), choices=choices, help=helptext + f" (default: {f.default})")
        else:
            p.add_argument(flag, type=tp, help=helptext + f" (default: {f.default!r})", metavar=f.name.upper())
    return p


def parse_config(argv: Optional[list[str]] = None, prog: str = "python -m noma_prorl_bench.run") -> RunConfig:
    """Parse argv into a validated RunConfig (preset first, explicit flags win). Exits 2 on error."""
    parser = build_parser(prog)
    ns = vars(parser.parse_args(argv))
    try:
        return make_config(ns)
    except ConfigError as e:
        parser.error(str(e))
        raise  # unreachable


def make_config(explicit: dict) -> RunConfig:
    """Build and validate a RunConfig from explicitly given values (preset applied first)."""
    values = {}
    preset = explicit.get("preset", "none")
    if preset != "none":
        from noma_prorl_bench.config import presets  # noqa: PLC0415  (small module, only needed with presets)
        values.update(presets.PRESETS[preset])
    values.update(explicit)
    unknown = set(values) - {f.name for f in fields(RunConfig)}
    if unknown:
        raise ConfigError(sorted(unknown)[0], "unknown field")
    cfg = RunConfig(**values)
    validate(cfg, set(explicit))
    return cfg
