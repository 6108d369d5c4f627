"""``--config FILE``: flag values from a YAML, TOML or JSON file whose keys are the flags' names.

Explicit flags override the file; the file overrides the preset it names. A run's own
``config.json`` is a valid file: the keys the run adds beside its fields (``derived``, ``run_id``,
``versions``, ``machine``, ``argv``, ``resumes``) and ``resume`` are skipped, so
``run --config runs/A1/config.json --outdir runs/A1_again`` repeats run A1. Only the command line
chooses where a run writes and what it replaces: ``outdir``, ``overwrite`` and ``resume``
(DESTINATION_KEYS) in a file are refused naming the key and the file (a run's own config.json
records them; there they are skipped like the other record keys). A relative ``jsonl:PATH`` task
is read relative to the file's folder (a run's config.json records its path as the run used it).
An error about a value the file set says so (`with_origin`: the key and the file). Values are checked
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
import math
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
#: keys that choose where a run writes or what it destroys: only the command line sets them
DESTINATION_KEYS = ("outdir", "overwrite", "resume")


#: a config file's bounds: its size (user_files.CONFIG_LIMIT), how deep its values nest, and how many
#: values its YAML aliases expand to (an alias bomb: 900 bytes that expand to a billion values)
MAX_DEPTH = 64
MAX_VALUES = 100_000


def _yaml_loader():
    """yaml.SafeLoader that refuses nesting deeper than MAX_DEPTH while it composes, and (after)
    a document whose aliases refer to themselves or expand to more than MAX_VALUES values."""
    import yaml  # noqa: PLC0415

    class BoundedLoader(yaml.SafeLoader):
        depth = 0

        def compose_node(self, parent, index):
            self.depth += 1
            try:
                if self.depth > MAX_DEPTH:
                    raise ValueError(f"its values nest deeper than {MAX_DEPTH} levels")
                return super().compose_node(parent, index)
            finally:
                self.depth -= 1

    return BoundedLoader


def _expanded_size(node, sizes: dict, open_: set) -> int:
    """How many values a composed YAML node stands for once every alias is expanded (iterative
    depth is bounded by MAX_DEPTH); ValueError on a node inside itself (a recursive alias)."""
    key = id(node)
    if key in sizes:
        return sizes[key]
    if key in open_:
        raise ValueError("an alias refers to the value it is inside (a recursive alias)")
    open_.add(key)
    value = node.value if isinstance(node.value, list) else []
    children = [c for item in value for c in (item if isinstance(item, tuple) else (item,))]
    total = 1
    for child in children:
        total += _expanded_size(child, sizes, open_)
        if total > MAX_VALUES:
            raise ValueError(f"its aliases expand to more than {MAX_VALUES:,} values")
    open_.discard(key)
    sizes[key] = total
    return total


def _parse(path: str) -> Any:
    from noma_prorl_bench.config import user_files  # noqa: PLC0415

    ext = os.path.splitext(path)[1].lower()
    if ext not in EXTENSIONS:
        raise ConfigError(
            "config", f"{path!r}: unknown extension {ext or '(none)'!r} (choose from {', '.join(EXTENSIONS)})"
        )
    try:
        raw = user_files.read_input(path, user_files.CONFIG_LIMIT)  # a regular file, bounded: never a FIFO
        if ext == ".json":
            return json.loads(raw.decode("utf-8"))
        if ext == ".toml":
            import tomllib  # noqa: PLC0415  (Python 3.11+)

            return tomllib.loads(raw.decode("utf-8"))
        loader = _yaml_loader()(raw.decode("utf-8"))
        try:
            node = loader.get_single_node()
            if node is None:
                return None
            _expanded_size(node, {}, set())
            return loader.construct_document(node)
        finally:
            loader.dispose()
    except user_files.InputFileError as e:
        raise ConfigError("config", f"cannot read {e}") from e
    except OSError as e:
        raise ConfigError("config", f"cannot read {path!r}: {e.strerror or e}") from e
    except ImportError as e:
        raise ConfigError(
            "config", f"reading {ext} files needs {e.name} (pip install pyyaml; TOML needs Python 3.11+)"
        ) from e
    except RecursionError as e:
        raise ConfigError("config", f"{path!r} does not parse: its values nest too deep") from e
    except Exception as e:  # noqa: BLE001  ValueError (JSON, TOML, UTF-8, the bounds above), yaml.YAMLError
        why = " ".join(str(e).replace('in "<unicode string>", ', "").split())  # YAML's marks span lines
        raise ConfigError("config", f"{path!r} does not parse: {why[:300]}") from e


#: the Python types a JSON value is made of (task_kwargs must be one: the task's builder gets it as JSON)
_JSON_TYPES = (str, int, float, bool, type(None))


def _json_value_error(value: Any, where: str, depth: int = 0) -> str | None:
    """What makes `value` not a JSON value (a date, bytes, a set, a non-string key, nesting too deep), else None."""
    if depth > MAX_DEPTH:
        return f"{where} nests deeper than {MAX_DEPTH} levels"
    if isinstance(value, _JSON_TYPES):
        if isinstance(value, float) and not math.isfinite(value):
            return f"{where} is {value!r}, not a finite number"
        return None
    if isinstance(value, list):
        return next((e for i, v in enumerate(value) if (e := _json_value_error(v, f"{where}[{i}]", depth + 1))), None)
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                return f"{where} has the key {k!r} ({type(k).__name__}), not a string"
            err = _json_value_error(v, f"{where}.{k}", depth + 1)
            if err:
                return err
        return None
    return f"{where} is a {type(value).__name__} ({str(value)[:40]!r}), not a JSON value (quote it to pass a string)"


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
            err = _json_value_error(value, "task_kwargs")
            if err:
                raise ConfigError("config", f"key {name!r}: {err}")
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
        if run_record and (key in RUN_RECORD_KEYS or key in DESTINATION_KEYS):
            continue  # where that run was written: this run's destination comes from the command line
        if key not in hints:
            raise ConfigError("config", f"unknown key {key!r} in {path}{suggest_name(key, names, prefix='')}")
        if key in DESTINATION_KEYS:
            what = "resume is not a setting: " if key == "resume" else ""
            raise ConfigError(
                "config",
                f"{what}key {key!r} in {path}: only the command line chooses where a run writes or what it "
                f"replaces; remove the key and pass --{key}{' DIR' if key == 'outdir' else ''} instead",
            )
        try:
            out[key] = coerce(key, value, hints[key])
        except ConfigError as e:
            raise ConfigError("config", f"{str(e).removeprefix('argument --config: ')} (in {path})") from e
        if key == "task" and not run_record:
            out[key] = _beside(path, out[key])
    return out


def _beside(path: str, task: str) -> str:
    """A relative ``jsonl:PATH`` task named in the config file at `path`, as a path relative to
    that file's folder (as a config file's relative paths are read by any tool that reads one)."""
    if not task.startswith("jsonl:"):
        return task
    rel = task[len("jsonl:") :]
    if not rel or os.path.isabs(os.path.expanduser(rel)):
        return task
    return "jsonl:" + os.path.join(os.path.dirname(path), rel)


def with_origin(err: ConfigError, origins: dict) -> ConfigError:
    """`err` with the file it came from when its flag's value was set by a --config file (`origins`:
    key -> the file, from `with_config_file`), else `err` itself."""
    path = origins.get(err.flag)
    if path is None:
        return err
    where = f"the value of key {err.flag!r} in the config file {path!r}"
    if err.flag == "task":
        where += " (a relative jsonl:PATH is read from that file's folder)"
    out = ConfigError(err.flag, f"{str(err).removeprefix(f'argument --{err.flag}: ')} [{where}]")
    out.__cause__ = err
    return out


def with_config_file(explicit: dict, origins: dict | None = None) -> dict:
    """The parsed flags with ``config`` (a path) replaced by the file's values under them; `origins`
    (when given) receives key -> the file's path for every value the file set (for `with_origin`)."""
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
    if origins is not None:
        origins.update({k: path for k in values if k not in explicit})
    return {**values, **explicit}
