"""Your own task: ``--task module.path:factory`` (docs/tasks.md).

``factory`` is any importable callable returning an object that follows the Task protocol of
``tasks/base.py``; ``--task_kwargs`` (a JSON object) is passed to it as keyword arguments, and
``--n_val`` as ``n_val=`` when the factory takes an argument of that name. The module is
imported from the Python path as it is (an installed package, or ``PYTHONPATH``); neither the
current directory nor a run directory is added to it, so a file shipped in a directory someone
else made is never imported by being there. A spec read from a file (config.json, a checkpoint,
``--config``) is imported only when the command line names it too (config/code_specs.py).

Every check raises ``ConfigError`` naming the flag (the CLI exits 2 before writing anything):
the import, the kwargs, the returned object's methods, and (``check_vocabulary``) whether a
char-vocabulary model (gru, transformer) can spell the task's prompts and answers.
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
from collections.abc import Mapping

from noma_prorl_bench.config.code_specs import names_code
from noma_prorl_bench.config.errors import ConfigError

REQUIRED = ("name", "max_new_tokens", "sample", "validation_set", "reward")


def is_factory_spec(task: str) -> bool:
    """True for ``module.path:factory`` (not ``rg:NAME`` or ``jsonl:PATH``)."""
    return names_code("task", task)


def import_attr(spec: str, flag: str):
    """``module.path:name`` -> the object; ConfigError(flag) when it cannot be had."""
    mod_name, _, attr = spec.partition(":")
    try:
        mod = importlib.import_module(mod_name)
    except Exception as e:  # noqa: BLE001  (any error of the user's module is reported, not raised)
        here = os.path.isfile(mod_name.split(".")[0] + ".py") or os.path.isdir(mod_name.split(".")[0])
        hint = " (it is in the current directory, which is not searched: PYTHONPATH=. names it)" if here else ""
        raise ConfigError(
            flag.lstrip("-"),
            f"cannot import {mod_name!r} ({type(e).__name__}: {e}); the module "
            f"must be importable from PYTHONPATH or installed{hint}",
        ) from e
    if not hasattr(mod, attr):
        raise ConfigError(flag.lstrip("-"), f"module {mod_name!r} has no attribute {attr!r}")
    return getattr(mod, attr)


def task_kwargs(text: str) -> dict:
    """--task_kwargs as a dict ({} when empty)."""
    kw = json.loads(text) if text else {}
    if not isinstance(kw, dict):
        raise ConfigError("task_kwargs", f"must be a JSON object, got {text!r}")
    return kw


def load_factory_task(spec: str, n_val: int, kwargs_json: str = ""):
    """Call the factory ``spec`` names and check what it returns."""
    factory = import_attr(spec, "--task")
    if not callable(factory):
        raise ConfigError("task", f"{spec} is not callable (it must be a function or class returning a task)")
    kwargs = task_kwargs(kwargs_json)
    params: Mapping[str, inspect.Parameter]
    try:
        params = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        params = {}
    if "n_val" in params and "n_val" not in kwargs:
        kwargs["n_val"] = n_val
    try:
        task = factory(**kwargs)
    except TypeError as e:
        raise ConfigError("task_kwargs", f"{spec}({', '.join(kwargs)}) failed: {e}") from e
    except ValueError as e:
        raise ConfigError("task", f"{spec} refused its arguments: {e}") from e
    check_protocol(task, spec)
    return task


def check_protocol(task, spec: str) -> None:
    """The object has the Task protocol's members and a non-empty validation set."""
    missing = [m for m in REQUIRED if not hasattr(task, m)]
    if missing:
        raise ConfigError(
            "task",
            f"{spec} returned {type(task).__name__}, which lacks {', '.join(missing)} "
            "(the Task protocol: docs/tasks.md)",
        )
    if not isinstance(task.max_new_tokens, int) or task.max_new_tokens < 1:
        raise ConfigError("task", f"{spec}: max_new_tokens must be a positive int, got {task.max_new_tokens!r}")
    if not task.validation_set():
        raise ConfigError("task", f"{spec}: validation_set() is empty")


def check_vocabulary(task, tok, model: str, n_train: int = 256) -> None:
    """For char-vocabulary models: every character of the validation set and of ``n_train``
    training examples (every line of a JSONL task) must be in the vocabulary of --model `model`."""
    stoi = getattr(tok, "stoi", None)
    if stoi is None:  # an HF tokenizer spells any text
        return
    import numpy as np  # noqa: PLC0415

    every = getattr(task, "all_examples", None)
    examples = every() if every else task.validation_set() + task.sample(np.random.default_rng(0), n_train)
    bad = sorted({c for e in examples for c in e.prompt + e.answer if c not in stoi})
    if bad:
        raise ConfigError(
            "task",
            f"{task.name} uses characters outside the character vocabulary of --model "
            f"{model} ({''.join(bad)!r}); that vocabulary is lowercase letters, digits and "
            f"{''.join(c for c in tok.itos[4:] if not c.isalnum())!r}. Use --model hf:PATH "
            "(any text) or map your text into it",
        )
