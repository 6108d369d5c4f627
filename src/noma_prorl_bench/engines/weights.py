"""Weights as numpy arrays for the Ray object store: exact round trips, structure signatures.

`pack_state(module_or_state)` turns a state dict into `WeightPack` (numpy arrays by name; a
bfloat16 tensor travels as its int16 bit pattern, since numpy has no bfloat16), so a put into
the object store is one pickle-5 buffer per tensor and a get is zero-copy (read-only arrays
backed by shared memory). `load_state(module, pack)` copies the arrays into the module's
existing tensors in place; float32 -> numpy -> float32 is bit-exact, so a generator holding
the learner's pack samples exactly what the learner's own policy would.

`structure(module)` is the (name, shape, dtype) signature of a state dict. When it changes
(adapter growth adds tensors or ranks), loading arrays is impossible; the sender then also
ships the module itself (pickled once per structure version) and the receiver replaces its copy.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

Signature = tuple  # ((name, shape, dtype-string), ...)


@dataclass
class WeightPack:
    """A state dict as numpy arrays (what goes through the object store)."""

    arrays: dict[str, np.ndarray]
    bf16: frozenset = field(default_factory=frozenset)  # names stored as int16 bit patterns

    @property
    def nbytes(self) -> int:
        return int(sum(a.nbytes for a in self.arrays.values()))


def _state(module_or_state) -> dict[str, torch.Tensor]:
    return module_or_state.state_dict() if isinstance(module_or_state, nn.Module) else module_or_state


def structure(module_or_state) -> Signature:
    """((name, shape, dtype), ...) of the state dict, in its order."""
    return tuple((k, tuple(t.shape), str(t.dtype)) for k, t in _state(module_or_state).items())


def pack_state(module_or_state) -> WeightPack:
    """State dict -> WeightPack (CPU numpy views; the object-store put makes the copy)."""
    arrays, bf16 = {}, set()
    for k, t in _state(module_or_state).items():
        t = t.detach().cpu()
        if t.dtype == torch.bfloat16:
            t = t.view(torch.int16)
            bf16.add(k)
        arrays[k] = t.numpy()
    return WeightPack(arrays, frozenset(bf16))


def unpack_state(pack: WeightPack) -> dict[str, torch.Tensor]:
    """WeightPack -> {name: tensor} sharing the arrays' memory (read-only: copy before writing)."""
    out = {}
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        for k, a in pack.arrays.items():
            t = torch.from_numpy(a)
            out[k] = t.view(torch.bfloat16) if k in pack.bf16 else t
    return out


@torch.no_grad()
def load_state(module: nn.Module, pack: WeightPack) -> None:
    """Copy a WeightPack into `module`'s tensors in place; the structure must match exactly."""
    src = unpack_state(pack)
    dst = module.state_dict()
    if structure(dst) != structure(src) and set(dst) == set(src):
        bad = [k for k in dst if dst[k].shape != src[k].shape or dst[k].dtype != src[k].dtype][:3]
        raise ValueError(f"weight pack does not match the module (shape/dtype differ: {bad})")
    if set(dst) != set(src):
        raise ValueError(f"weight pack keys differ from the module's: {sorted(set(dst) ^ set(src))[:5]}")
    for k, t in dst.items():
        t.copy_(src[k])
