"""``--config FILE``: flag values from a YAML, TOML or JSON file whose keys are the flags' names.

Explicit flags override the file; the file overrides the preset it names. A run's own
``config.json`` is a valid file: the keys the run adds beside its fields (``derived``, ``run_id``,
``versions``, ``machine``, ``argv``, ``resumes``) and ``resume`` are skipped, so
``run --config runs/A1/config.json --outdir runs/A1_again`` repeats run A1. Values are checked
against each field's type (an int for an int flag, one of the choices for a choice flag); a JSON
object or YAML mapping is accepted for ``task_kwargs``. An unknown key fails with the closest
flag name. Every problem is a ``ConfigError`` naming ``--config`` (the CLI exits 2). A
``module:function`` task or reward function in the file is refused unless the command line names
it too (config/code_specs.py: code is never imported because a file says so).

>>> coerce("steps", 40, int), coerce("lr", 1, float), coerce("task_kwargs", {"a": 1}, str)
(40, 1.0, '{"a": 1}')
"""

from __future__ import annotations

import json
import os
import typing
from dataclasses import fields
from typing import Any, Literal

from noma_prorl_bench.config.code_specs import refuse_code_from
from noma_prorl_bench.config.errors import ConfigError, suggest
from noma_prorl_bench.config.foreign import suggest_name
from noma_prorl_bench.config.run_config import RunConfig

#: keys a run writes into config.json beside its fields; skipped when read back as --config
RUN_RECORD_KEYS = ("derived", "versions", "argv", "resumes", "run_id", "machine")
EXTENSIONS = (".yaml", ".yml", ".toml", ".json")


def _parse(path: str) -> Any:
    ext = os.path.splitext(path)[1].lower()
    if ext not in EXTENSIONS:
        raise ConfigError(
            "config", f"{path!r}: unknown extension {ext or '(none)'!r} (choose from {', '.join(EXTENSIONS)})"
        )
    try:
        if ext == ".json":
            with open(path, encoding="utf-8") as f:
                return json.load(f)
        if ext == ".toml":
            import tomllib  # noqa: PLC0415  (Python 3.11+)

            with open(path, "rb") as f:
                return tomllib.load(f)
        import yaml  # noqa: PLC0415

        with open(path, encoding="utf-8") as f:
            return yaml.safe_load(f)
    except OSError as e:
        raise ConfigError("config", f"cannot read {path!r}: {e.strerror or e}") from e
    except ImportError as e:
        raise ConfigError(
            "config", f"reading {ext} files needs {e.name} (pip install pyyaml; TOML needs Python 3.11+)"
        ) from e
    except ValueError as e:  # json.JSONDecodeError, tomllib.TOMLDecodeError, yaml.YAMLError (below)
        raise ConfigError("config", f"{path!r} does not parse: {e}") from e
    except Exception as e:  # noqa: BLE001  yaml.YAMLError is not a ValueError
        raise ConfigError("config", f"{path!r} does not parse: {e}") from e


def coerce(name: str, value: Any, tp) -> Any:
    """value as the field's type, or ConfigError."""
    bad = ConfigError("config", f"key {name!r}: expected {getattr(tp, '__name__', tp)}, got {value!r}")
    if typing.get_origin(tp) is Literal:
        choices = typing.get_args(tp)
        if value not in choices:
            raise ConfigError(
                "config",
                f"key {name!r}: invalid choice {value!r}"
                f"{suggest(str(value), map(str, choices))}"
                f" (choose from {', '.join(map(str, choices))})",
            )
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise bad
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise bad
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise bad
        return float(value)
    if tp is str:
        if name == "task_kwargs" and isinstance(value, dict):
            return json.dumps(value)
        if not isinstance(value, str):
            raise bad
        return value
    return value


def load_config_file(path: str) -> dict:
    """The flag values a --config file sets (checked, typed); ConfigError on any problem."""
    data = _parse(path)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError("config", f"{path!r} must hold a mapping of flag names to values, got {type(data).__name__}")
    run_record = any(k in data for k in RUN_RECORD_KEYS)
    hints = typing.get_type_hints(RunConfig)
    names = [f.name for f in fields(RunConfig)]
    out = {}
    for key, value in data.items():
        key = str(key)
        if run_record and (key in RUN_RECORD_KEYS or key == "resume"):
            continue
        if key not in hints:
            raise ConfigError("config", f"unknown key {key!r} in {path}{suggest_name(key, names, prefix='')}")
        if key == "resume" and value:
            raise ConfigError("config", "resume is not a setting: pass --outdir DIR --resume on the command line")
        out[key] = coerce(key, value, hints[key])
    return out


def with_config_file(explicit: dict) -> dict:
    """The parsed flags with ``config`` (a path) replaced by the file's values under them."""
    explicit = dict(explicit)
    path = explicit.pop("config", None)
    if path is None:
        return explicit
    if explicit.get("resume"):
        raise ConfigError(
            "config", "cannot be combined with --resume (a resumed run takes its config from its checkpoint)"
        )
    values = load_config_file(path)
    refuse_code_from(values, f"the config file {path!r}", explicit)  # module:function only from the command line
    return {**values, **explicit}
