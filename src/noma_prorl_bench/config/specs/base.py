"""What every spec shares: how its fields are declared, the checks every flag value gets, and how a
spec is built from a flat `RunConfig`.

A spec field is one of three kinds:
- a flag the spec **owns** (`name: type = default` and the string literal under it, its `--help`;
  a `Literal[...]` annotation is its choice list; `flag(default, section=...)` files it under
  another `--help` section than the spec's `SECTION`). Each flag has exactly one owner: its
  default, help, choices and checks live there and nowhere else;
- a **copy** of a flag owned by another spec (`copy_of(Owner, "name")`), for a stage that reads it
  (the evaluation reads the run's `steps`): no default, help or check of its own;
- a **sub-spec** (`sub(Spec)`): specs compose (every stage that needs the rollout's shape holds the
  one `ShapeSpec`; the critic holds the run's `OptimizerSpec` and `ResetSpec`).

A spec checks itself when it is made (`Spec.__post_init__`: choices, then the number checks every
float and int flag gets, then its own `check`), so a spec made in Python (the TRL plug-in's
`ResetConfig` is `ResetSpec`) is refused the same way as the command line. Rules that combine the
flags of two specs are config/validate.py's.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import math
import textwrap
import typing
from typing import Any, TypeVar

from noma_prorl_bench.config.errors import ConfigError, suggest

S = TypeVar("S")

FLOAT32_MAX = 3.4028234663852886e38
FLOAT32_TINY = 1.1754943508222875e-38  # numpy.finfo(numpy.float32).tiny (no numpy import before the parser answers)
#: float flags that must be > 0 (the others take 0 for off or none)
POSITIVE_FLOATS = ("lr", "warmstart_lr", "temperature", "actor_timeout", "ref_mix_alpha", "lora_alpha")
INT64_MAX = 2**63 - 1
# integers whose huge values would only fail later (torch seeds must stay < 2**64, and the
# trainer derives its streams as seed * 1000 + k; thread counts beyond the machine's are useless)
INT_MAX = {"seed": 10**15, "threads": 1024, "ppo_epochs": 10_000}


def flag(default: Any, *, section: str) -> Any:
    """An owned flag filed under `section` of `--help` instead of its spec's SECTION."""
    return dataclasses.field(default=default, metadata={"section": section})


def copy_of(owner: type, name: str) -> Any:
    """A field holding the value of `owner`'s flag `name` (its default when the spec is made alone)."""
    return dataclasses.field(default=default_of(owner, name), metadata={"copy_of": owner.__name__})


def sub(cls: type) -> Any:
    """A field holding a whole spec (by default that spec's defaults)."""
    return dataclasses.field(default_factory=cls, metadata={"spec": cls})


def default_of(cls: type, name: str) -> Any:
    """The default of `cls`'s field `name`."""
    return next(f.default for f in dataclasses.fields(cls) if f.name == name)


def owned_fields(cls: type) -> list[dataclasses.Field]:
    """The flags `cls` owns, in declaration order (no copies, no sub-specs)."""
    return [f for f in dataclasses.fields(cls) if "copy_of" not in f.metadata and "spec" not in f.metadata]


_HINTS: dict[type, dict[str, Any]] = {}


def hints(cls: type) -> dict[str, Any]:
    """`cls`'s field types, resolved (once per class)."""
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def choices_of(tp: Any) -> tuple:
    """The values of a `Literal[...]` type, else ()."""
    return typing.get_args(tp) if typing.get_origin(tp) is typing.Literal else ()


class Spec:
    """Base of every spec: checks itself when made (see the module's docstring)."""

    SECTION: typing.ClassVar[str] = "other"

    def __post_init__(self) -> None:
        check_choices(self)
        check_numbers(self)
        self.check()

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)  # type: ignore[call-overload]

    def check(self) -> None:
        """The spec's own rules (ConfigError naming the flag on the first that fails)."""

    def positive(self, *names: str) -> None:
        for n in names:
            if getattr(self, n) <= 0:
                raise ConfigError(n, f"must be a positive integer, got {getattr(self, n)}")

    def nonneg(self, *names: str) -> None:
        for n in names:
            if getattr(self, n) < 0:
                raise ConfigError(n, f"must be >= 0, got {getattr(self, n)}")

    def binary(self, *names: str) -> None:
        for n in names:
            if getattr(self, n) not in (0, 1):
                raise ConfigError(n, f"invalid choice: {getattr(self, n)} (choose from 0, 1)")

    def changed(self, name: str) -> bool:
        """Whether flag `name` differs from its default."""
        return bool(getattr(self, name) != default_of(type(self), name))


def check_choices(spec: Any) -> None:
    """A choice flag holds one of its choices (argparse checks the command line; this checks the
    Python API, a config.json read back and a spec made in Python), argparse's way."""
    for f in owned_fields(type(spec)):
        allowed = choices_of(hints(type(spec))[f.name])
        v = getattr(spec, f.name)
        if allowed and v not in allowed:
            raise ConfigError(
                f.name, f"invalid choice: {v!r} (choose from {', '.join(map(str, allowed))}){suggest(str(v), allowed)}"
            )


def check_numbers(spec: Any) -> None:
    """Values that would only fail (or poison the run) later: NaN or infinite floats, floats that are
    0 or subnormal in float32 but not 0 (a --lr or --temperature of 1e-45: no float flag means
    anything there), integers beyond what their use can take."""
    for f in owned_fields(type(spec)):
        tp, v = hints(type(spec))[f.name], getattr(spec, f.name)
        if tp is int and not isinstance(v, int) or tp is float and not isinstance(v, (int, float)):
            raise ConfigError(f.name, f"must be {'an integer' if tp is int else 'a number'}, got {v!r}")
        if tp is float:
            if not math.isfinite(v):
                raise ConfigError(f.name, f"must be a finite number, got {v}")
            if abs(v) > FLOAT32_MAX:  # tensors are float32: it would become inf
                raise ConfigError(f.name, f"must be within the float32 range (|x| <= {FLOAT32_MAX:.4g}), got {v:g}")
            if 0 < abs(v) < FLOAT32_TINY:  # it would become 0 (or lose its digits)
                tiny = f"{FLOAT32_TINY:.4g}"
                allowed = f">= {tiny}" if f.name in POSITIVE_FLOATS else f"0 or >= {tiny} in size"
                raise ConfigError(
                    f.name,
                    f"must be {allowed}, float32's smallest normal number (tensors are float32, "
                    f"where {v:g} is 0 or subnormal), got {v:g}",
                )
        if tp is int and not isinstance(v, bool) and abs(v) > INT_MAX.get(f.name, INT64_MAX):
            raise ConfigError(f.name, f"must be <= {INT_MAX.get(f.name, INT64_MAX)}, got {v}")


def build(cls: type[S], cfg: Any, made: dict | None = None) -> S:
    """The spec `cls` of a flat config `cfg` (a RunConfig, or anything with its attributes): owned
    flags and copies read by name, sub-specs built the same way and shared (`made`: one instance
    per spec class)."""
    made = {} if made is None else made
    if cls not in made:
        kw = {}
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            kw[f.name] = build(f.metadata["spec"], cfg, made) if "spec" in f.metadata else getattr(cfg, f.name)
        made[cls] = cls(**kw)
    return made[cls]


def spec_docs(cls: type) -> dict[str, str]:
    """The help of each flag `cls` owns: the string literal under the field, from the source."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    cls_def = tree.body[0]
    assert isinstance(cls_def, ast.ClassDef)
    body: list[ast.stmt | None] = list(cls_def.body)
    docs: dict[str, str] = {}
    for node, nxt in zip(body, body[1:] + [None]):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            if isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant):
                docs[node.target.id] = " ".join(str(nxt.value.value).split())
    return docs


def spec_sections(cls: type) -> dict[str, str]:
    """The `--help` section of each flag `cls` owns."""
    return {f.name: f.metadata.get("section") or cls.SECTION for f in owned_fields(cls)}  # type: ignore[attr-defined]
