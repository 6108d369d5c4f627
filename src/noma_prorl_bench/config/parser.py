"""The command line generated from `RunConfig` (itself generated from the spec tree): one flag per
field, its help the owning spec's docstring of the field, grouped by that spec's section.

`build_parser()` turns the dataclass into an argparse parser; `parse_config(argv)` applies a
preset, then the explicit flags, validates (each spec checks itself, then validate.py's rules
across specs) and returns a `RunConfig`.
"""

from __future__ import annotations

import argparse
import re
import typing
from dataclasses import fields
from typing import Any, Literal, Optional, cast

from noma_prorl_bench._version import __version__
from noma_prorl_bench.config.errors import ConfigError, suggest
from noma_prorl_bench.config.fields import field_docs, field_sections
from noma_prorl_bench.config.files import with_config_file, with_origin
from noma_prorl_bench.config.foreign import FOREIGN_NAMES, suggest_name
from noma_prorl_bench.config.run_config import RunConfig
from noma_prorl_bench.config.specs.growth import GROWTH_FLAGS
from noma_prorl_bench.config.validate import validate


def _choices(tp) -> Optional[list]:
    if typing.get_origin(tp) is Literal:
        return list(typing.get_args(tp))
    return None


# --help groups: (a spec's section, title), in the order a newcomer reads them
HELP_GROUPS = [
    ("task and model", "task and model"),
    ("sampling", "RL: sampling"),
    ("optimisation", "RL: optimisation"),
    ("loss", "RL: loss and advantages"),
    ("KL and reference", "KL and reference"),
    ("resets", "reference resets"),
    ("growth", "topology growth"),
    ("engines", "engines (Ray)"),
    ("run and outputs", "output and run"),
    ("reliability", "checkpoints and reliability"),
]


class Parser(argparse.ArgumentParser):
    """argparse with "did you mean" for misspelt flags and choices (difflib), and our name for a
    TRL or verl one (foreign.FOREIGN_NAMES)."""

    def error(self, message: str):
        m = re.search(r"unrecognized arguments: (\S+)", message)
        if m and m.group(1).startswith("-"):
            flag = m.group(1).split("=")[0]
            message = f"argument {flag}: unrecognized flag{suggest_name(flag, self._option_string_actions)}"
        m = re.search(r"ambiguous option: (--[\w.-]+)", message)
        if m and m.group(1).lstrip("-").replace("-", "_") in FOREIGN_NAMES:  # --n (verl's rollout.n)
            message += suggest_name(m.group(1), self._option_string_actions)
        m = re.search(r"argument (--\w+): invalid choice: '([^']*)'", message)
        if m and m.group(1) in self._option_string_actions:
            message += suggest(m.group(2), map(str, self._option_string_actions[m.group(1)].choices or []))
        super().error(message)


class _ForeignPrefix(argparse.Action):
    """A TRL or verl name that is a prefix of one of ours (TRL's --cliprange, the policy's clip, of
    --cliprange_value): refused with our name for it instead of being taken as an abbreviation."""

    def __call__(self, parser, namespace, values, option_string=None):
        flag = str(option_string)
        parser.error(f"argument {flag}: unrecognized flag{suggest_name(flag, parser._option_string_actions)}")


def build_parser(prog: str = "python -m noma_prorl_bench.run") -> argparse.ArgumentParser:
    """An argparse parser with one flag per RunConfig field, grouped by the owning spec's section
    (defaults suppressed so the caller can tell explicit flags from defaults, which presets need)."""
    p = Parser(
        prog=prog,
        argument_default=argparse.SUPPRESS,
        usage="%(prog)s [-h] [--version] --outdir OUTDIR [options]",
        description="Train one KL-regularised RL run (PPO/GRPO family) and write config.json, "
        "metrics.jsonl and events.jsonl to --outdir. Flags by section below; "
        "docs/flags.md has them as a table.",
    )
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    p.add_argument(
        "--config",
        metavar="FILE",
        help="flag values from a YAML, TOML or JSON file whose keys are the "
        "flags' names (a run's own config.json works); flags given here override it",
    )
    groups = {sec: p.add_argument_group(title) for sec, title in HELP_GROUPS}
    docs, sections = field_docs(), field_sections()
    hints = typing.get_type_hints(RunConfig)
    for f in fields(RunConfig):
        tp, helptext = hints[f.name], docs.get(f.name, "")
        if f.name == "preset":
            from noma_prorl_bench.config.presets import describe_all  # noqa: PLC0415  (the presets' own text, one per preset)

            helptext += " " + " || ".join(describe_all().splitlines())
        g = groups.get(sections.get(f.name, ""), p)
        flag = f"--{f.name}"
        choices = _choices(tp)
        if tp is bool:
            g.add_argument(flag, action="store_true", help=helptext)
        elif choices is not None:
            g.add_argument(flag, type=type(choices[0]), choices=choices, help=helptext + f" (default: {f.default})")
        else:
            g.add_argument(flag, type=tp, help=helptext + f" (default: {f.default!r})", metavar=f.name.upper())
    ours = [f"--{f.name}" for f in fields(RunConfig)]
    for name in FOREIGN_NAMES:
        flag = f"--{name}"
        if flag not in p._option_string_actions and any(o.startswith(flag) for o in ours):
            p.add_argument(flag, action=_ForeignPrefix, nargs="?", help=argparse.SUPPRESS)
    return p


def parse_config(argv: Optional[list[str]] = None, prog: str = "python -m noma_prorl_bench.run") -> RunConfig:
    """Parse argv into a validated RunConfig (preset first, explicit flags win). Exits 2 on error."""
    parser = build_parser(prog)
    ns = vars(parser.parse_args(argv))
    origins: dict = {}
    try:
        return make_config(with_config_file(ns, origins))
    except ConfigError as e:
        parser.error(str(with_origin(e, origins)))
        raise  # unreachable


def make_config(explicit: dict) -> RunConfig:
    """Build and validate a RunConfig from explicitly given values (preset applied first). (The run
    entry then fits a jsonl:PATH task's n_val to its file when --n_val is not given: run.py.)"""
    values = {}
    preset = explicit.get("preset", "none")
    if preset != "none":
        from noma_prorl_bench.config import presets  # noqa: PLC0415  (small module, only needed with presets)

        values.update(presets.preset_values(preset))
        if values.get("enable_growth") and explicit.get("enable_growth") in (0, False):
            # the user turned the preset's adapters off (full fine-tune): its growth-only values go too
            values = {k: v for k, v in values.items() if k not in GROWTH_FLAGS}
    values.update(explicit)
    unknown = set(values) - {f.name for f in fields(RunConfig)}
    if unknown:
        raise ConfigError(sorted(unknown)[0], "unknown field")
    cfg = RunConfig(**cast(dict[str, Any], values))
    validate(cfg, set(explicit))
    return cfg
