"""Flags that name code (``--task module.path:factory``, ``--reward_fn module.path:function``) and
the rule for them: code is imported only when the person running the command names it on the
command line.

A run's config.json, a checkpoint's state, a suite directory and a ``--config`` file may come from
someone else; a ``module:function`` spec read from one of them is refused (``refuse_code_from``:
one line naming the spec, the file and how to allow it, exit 2, nothing imported or written)
unless the same spec is also given as a flag now. Built-in tasks (``copy``, ``rg:NAME``,
``jsonl:PATH`` ...) and reward names (``exact``, ``numeric``, ``regex``) are data, not code, and
unaffected.

>>> names_code("task", "my_tasks:make"), names_code("task", "rg:chain_sum"), names_code("task", "jsonl:a.jsonl")
(True, False, False)
>>> names_code("reward_fn", "my_rewards:score"), names_code("reward_fn", "numeric")
(True, False)
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping

from noma_prorl_bench.config.errors import ConfigError

#: the flags whose value may name a Python callable to import
CODE_FLAGS = ("task", "reward_fn")
#: ``module.path:name`` (``rg:`` and ``jsonl:`` are task families, not modules)
SPEC = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
NOT_MODULES = ("rg", "jsonl")


def names_code(flag: str, value: object) -> bool:
    """True when `value` of `--flag` names a callable to import."""
    if flag not in CODE_FLAGS or not isinstance(value, str):
        return False
    if flag == "reward_fn":
        return ":" in value
    return bool(SPEC.match(value)) and value.split(":")[0] not in NOT_MODULES


def refuse_code_from(values: Mapping, source: str, command_line: Mapping) -> None:
    """ConfigError when `values` (read from `source`, a file) name code that the command line
    (`command_line`: the flags given now) does not name itself. A flag given now with another
    value replaces the file's, so nothing of the file's is imported then either."""
    for flag in CODE_FLAGS:
        spec = values.get(flag)
        if not names_code(flag, spec) or flag in command_line:
            continue
        raise ConfigError(
            flag,
            f"{source} names code to import ({flag} {spec!r}); code named in a file is never "
            f"imported: to run it, name it on the command line: --{flag} {shlex.quote(str(spec))}",
        )


def drop_script_dir() -> None:
    """Under ``python -m noma_prorl_bench.X`` Python puts the current directory first on the import
    path; take it off again (unless PYTHONPATH names it, or ``python -P`` already kept it off), so
    that a file in the directory a command is started from (a run directory from someone else)
    is never imported by being there, whether as a task module or as a library's name."""
    import os  # noqa: PLC0415
    import sys  # noqa: PLC0415

    if getattr(sys.flags, "safe_path", False) or not sys.path:  # python -P (3.11+)
        return
    here = os.path.realpath(os.getcwd())
    given = {os.path.realpath(p or ".") for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p}
    if sys.path[0] in ("", ".") or os.path.realpath(sys.path[0]) == here:
        if here not in given:
            del sys.path[0]
