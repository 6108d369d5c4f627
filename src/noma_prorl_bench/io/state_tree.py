"""A stateful owner's state as a tree of named parts, and that tree as JSON plus tensors.

`state_tree` builds the tree a stateful owner saves (the Trainer names its parts in
`Trainer.state_dict()`): `step`, `components` (each part's own `state_dict()`, in load order),
`generators` (torch / NumPy Generator states), `scalars` (JSON-able values) and the global
Python, NumPy and torch RNG states. `load_state_tree` loads them back; this module knows no
Trainer attribute. `encode` / `decode` turn any such tree into a JSON-able tree whose tensors
are stored apart (flat names: policy/<param>, optimizer/state/<idx>/exp_avg, ...), as the
checkpoint files of io/checkpoint.py hold them.
"""

from __future__ import annotations

import random
from typing import Any, Callable

import numpy as np
import torch


class CheckpointError(Exception):
    """An unreadable, foreign or mismatching checkpoint (reported without a traceback)."""


# ============================================================================ state tree <-> JSON + tensors
def _join(path: str, key: Any) -> str:
    return f"{path}/{key}" if path else str(key)


def encode(obj: Any, path: str, tensors: dict[str, torch.Tensor], seen: dict) -> Any:
    """JSON-able tree for `obj`; tensors go to `tensors` under their path (aliases share one)."""
    if isinstance(obj, torch.Tensor):
        t = obj.detach()
        key = (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape), tuple(t.stride()), t.dtype)
        if key in seen:  # same tensor twice (tied weights): store once
            return {"__t__": seen[key]}
        dev = str(t.device)
        t = t.cpu()
        if not t.is_contiguous() or t.untyped_storage().nbytes() != t.numel() * t.element_size():
            t = t.clone(memory_format=torch.contiguous_format)  # safetensors wants whole storages
        storages = seen.setdefault(None, set())  # storages already in `tensors`
        if t.untyped_storage().data_ptr() in storages:
            t = t.clone()
        storages.add(t.untyped_storage().data_ptr())
        tensors[path] = t
        seen[key] = path
        return {"__t__": path} if dev == "cpu" else {"__t__": path, "dev": dev}
    if isinstance(obj, dict):
        if all(isinstance(k, str) and not k.startswith("__") for k in obj):
            return {k: encode(v, _join(path, k), tensors, seen) for k, v in obj.items()}
        return {
            "__dict__": [
                [encode(k, _join(path, "key"), tensors, seen), encode(v, _join(path, k), tensors, seen)]
                for k, v in obj.items()
            ]
        }
    if isinstance(obj, tuple):
        return {"__tuple__": [encode(v, _join(path, i), tensors, seen) for i, v in enumerate(obj)]}
    if isinstance(obj, list):
        return [encode(v, _join(path, i), tensors, seen) for i, v in enumerate(obj)]
    if isinstance(obj, np.ndarray):
        return {"__nd__": obj.tolist(), "dtype": str(obj.dtype)}
    if isinstance(obj, np.generic):
        return obj.item()
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    raise CheckpointError(f"cannot checkpoint {path!r}: unsupported type {type(obj).__name__}")


def decode(obj: Any, tensors: dict[str, torch.Tensor]) -> Any:
    """Inverse of `encode`: tensors come back from `tensors` (on their saved device if present)."""
    if isinstance(obj, list):
        return [decode(v, tensors) for v in obj]
    if not isinstance(obj, dict):
        return obj
    if "__t__" in obj:
        if obj["__t__"] not in tensors:
            raise CheckpointError(f"tensors.safetensors lacks tensor {obj['__t__']!r}")
        t = tensors[obj["__t__"]]
        dev = obj.get("dev")
        return t.to(dev) if dev and dev.startswith("cuda") and torch.cuda.is_available() else t
    if "__dict__" in obj:
        return {decode(k, tensors): decode(v, tensors) for k, v in obj["__dict__"]}
    if "__tuple__" in obj:
        return tuple(decode(v, tensors) for v in obj["__tuple__"])
    if "__nd__" in obj:
        return np.asarray(obj["__nd__"], dtype=obj["dtype"])
    return {k: decode(v, tensors) for k, v in obj.items()}


# ============================================================================ a state tree of named parts
def state_tree(
    step: int, components: dict[str, Any], generators: dict[str, Any], scalars: dict[str, Any]
) -> dict[str, Any]:
    """The checkpoint tree of named parts: each component's `state_dict()` (in load order), each
    torch / NumPy Generator's state, JSON-able scalars, and the global RNG states."""
    state: dict[str, Any] = {
        "step": int(step),
        "components": {n: obj.state_dict() for n, obj in components.items()},
        "generators": {},
        "scalars": dict(scalars),
        "global_rng": {
            "python": random.getstate(),
            "numpy": np.random.get_state(legacy=False),
            "torch": torch.get_rng_state(),
        },
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["global_rng"]["cuda"] = torch.cuda.get_rng_state_all()
    for name, g in generators.items():
        if isinstance(g, torch.Generator):
            state["generators"][name] = {"torch": g.get_state()}
        elif isinstance(g, np.random.Generator):
            state["generators"][name] = {"numpy": g.bit_generator.state}
        else:
            raise CheckpointError(f"cannot checkpoint generator {name!r}: {type(g).__name__}")
    return state


def load_state_tree(
    state: dict[str, Any], components: Callable[[], dict[str, Any]], generators: dict[str, Any]
) -> dict[str, Any]:
    """Load `state` (from `state_tree`) into the named parts; returns its scalars.

    `components()` is asked again before each part (loading one may replace another, e.g. a
    growth that rebuilds the optimizer); a missing, extra or misfitting part raises CheckpointError."""
    names = list(components())
    if set(names) != set(state["components"]):
        raise CheckpointError(
            f"checkpoint components {sorted(state['components'])} do not match this run's {sorted(names)}"
        )
    for name in names:  # the owner's load order
        try:
            components()[name].load_state_dict(state["components"][name])
        except (RuntimeError, KeyError, ValueError, TypeError, IndexError) as e:
            raise CheckpointError(f"checkpoint does not fit this run's {name!r}: {str(e)[:300]}") from e
    for name, g in state["generators"].items():
        cur = generators.get(name)
        if "torch" in g and isinstance(cur, torch.Generator):
            cur.set_state(g["torch"])
        elif "numpy" in g and isinstance(cur, np.random.Generator):
            cur.bit_generator.state = g["numpy"]
        else:
            raise CheckpointError(f"checkpoint has a random generator {name!r} that this run lacks")
    rng = state["global_rng"]
    random.setstate(rng["python"])
    np.random.set_state(rng["numpy"])
    torch.set_rng_state(rng["torch"])
    if "cuda" in rng and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(rng["cuda"])
    return dict(state["scalars"])
