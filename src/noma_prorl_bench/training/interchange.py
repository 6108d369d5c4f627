"""Training-state interchange with an external engine (NOMA): safetensors files + a JSON sidecar.

A state directory holds (schema version 1; documented in docs/growth.md):

``params.safetensors``  ``param/<dotted name>`` for every parameter of the model (frozen ones
                        too) and ``buffer/<dotted name>`` for every persistent buffer.
``optim.safetensors``   ``optim/<dotted param name>/<state key>`` for every optimizer-state tensor
                        with at least one dimension (``exp_avg``, ``exp_avg_sq``, ``momentum_buffer``,
                        ``entry_cohort`` of a grown Adam parameter: training/adam_cohorts.py ...).
``batch.safetensors``   ``batch/<key>``: ``tokens[N, L]`` int64, ``mask[N, T]``, ``logp_old[N, T]``,
                        ``logp_ref[N, T]`` (absent in Variant B), ``advantages[N]`` (``[N, T]`` with
                        ``--kl_in reward --kl_reward_form token``), plus any
                        other tensor the caller passes.
``meta.json``           everything scalar: schema version, optimizer class, defaults and param
                        groups (hyperparameters + member parameter names), 0-d / python-scalar
                        optimizer state such as ``step`` (value + dtype) and ``cohort_steps`` (a
                        list, dtype null), adapter rank, parameter
                        shapes/dtypes, batch keys and the caller's ``scalars``.

``export_state`` then ``import_state`` into a model and optimizer of the same architecture and
class reproduces the next update bit for bit (tested). If the directory's adapter rank is larger
than the model's, the model is first grown (``growth.grow_adapters``, ``preserve``).
"""

from __future__ import annotations

import json
import os
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from noma_prorl_bench.models.lora import adapter_rank
from noma_prorl_bench.training.growth import grow_adapters

SCHEMA_VERSION = 1
BATCH_KEYS = ("tokens", "mask", "logp_old", "logp_ref", "advantages")
FILES = ("params.safetensors", "optim.safetensors", "batch.safetensors", "meta.json")


# ----------------------------------------------------------------------------- json helpers


def _to_json(v):
    """Group hyperparameters -> JSON: tuples become lists, tensors ``{"tensor": value}``."""
    if torch.is_tensor(v):
        return {"tensor": v.item() if v.numel() == 1 else v.tolist(), "dtype": str(v.dtype)[6:]}
    if isinstance(v, (tuple, list)):
        return [_to_json(x) for x in v]
    return v


def _from_json(v, like):
    """Inverse of ``_to_json``, guided by the value the target optimizer currently holds."""
    if isinstance(v, dict) and "tensor" in v:
        return torch.tensor(v["tensor"], dtype=getattr(torch, v["dtype"]))
    if isinstance(v, list):
        return tuple(v) if isinstance(like, tuple) else v
    return v


def _cpu(t: torch.Tensor) -> torch.Tensor:
    return t.detach().to("cpu").clone().contiguous()  # safetensors refuses shared storage


def _param_names(model: nn.Module) -> dict[int, str]:
    return {id(p): n for n, p in model.named_parameters()}


# ----------------------------------------------------------------------------- export


def _optim_meta(model: nn.Module, optimizer: torch.optim.Optimizer) -> tuple[dict, dict]:
    names = _param_names(model)
    groups = [
        {"params": [names[id(p)] for p in g["params"]], **{k: _to_json(v) for k, v in g.items() if k != "params"}}
        for g in optimizer.param_groups
    ]
    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, Any] = {}
    for p, state in optimizer.state.items():
        for key, val in state.items():
            if torch.is_tensor(val) and val.dim() > 0:
                tensors[f"optim/{names[id(p)]}/{key}"] = _cpu(val)
            elif torch.is_tensor(val):
                scalars.setdefault(names[id(p)], {})[key] = {"value": val.item(), "dtype": str(val.dtype)[6:]}
            else:
                scalars.setdefault(names[id(p)], {})[key] = {"value": val, "dtype": None}
    meta = {
        "class": type(optimizer).__name__,
        "defaults": {k: _to_json(v) for k, v in optimizer.defaults.items()},
        "param_groups": groups,
        "state_scalars": scalars,
    }
    return meta, tensors


def export_state(
    out_dir: str,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    batch: dict[str, torch.Tensor | None],
    scalars: dict,
) -> dict[str, str]:
    """Write the four files of the schema into ``out_dir``; returns ``{file name: path}``.
    ``batch`` values may be None (skipped, e.g. ``logp_ref`` in Variant B); ``scalars`` must be
    JSON-serialisable (step counts, hyperparameters, KL coefficient, prompt length ...)."""
    os.makedirs(out_dir, exist_ok=True)
    params = {f"param/{n}": _cpu(p) for n, p in model.named_parameters()}
    persistent = set(model.state_dict().keys())
    params.update({f"buffer/{n}": _cpu(b) for n, b in model.named_buffers() if n in persistent})
    optim_meta, optim_tensors = _optim_meta(model, optimizer)
    batch_t = {f"batch/{k}": _cpu(v) for k, v in batch.items() if v is not None}
    meta = {
        "schema_version": SCHEMA_VERSION,
        "torch_version": torch.__version__,
        "adapter_rank": adapter_rank(model),
        "params": {
            n: {"shape": list(p.shape), "dtype": str(p.dtype)[6:], "requires_grad": p.requires_grad}
            for n, p in model.named_parameters()
        },
        "optimizer": optim_meta,
        "batch": {k[6:]: {"shape": list(v.shape), "dtype": str(v.dtype)[6:]} for k, v in batch_t.items()},
        "scalars": scalars,
    }
    paths = {f: os.path.join(out_dir, f) for f in FILES}
    save_file(params, paths["params.safetensors"])
    save_file(optim_tensors, paths["optim.safetensors"])
    save_file(batch_t, paths["batch.safetensors"])
    with open(paths["meta.json"], "w") as fh:
        json.dump(meta, fh, indent=1, sort_keys=True)
    return paths


# ----------------------------------------------------------------------------- import


@torch.no_grad()
def _load_params(model: nn.Module, tensors: dict[str, torch.Tensor]) -> None:
    targets: dict[str, torch.Tensor] = {f"param/{n}": p for n, p in model.named_parameters()}
    persistent = set(model.state_dict().keys())
    targets.update({f"buffer/{n}": b for n, b in model.named_buffers() if n in persistent})
    if set(targets) != set(tensors):
        raise ValueError(
            f"parameter names differ: missing {sorted(set(targets) - set(tensors))}, "
            f"unexpected {sorted(set(tensors) - set(targets))}"
        )
    for key, t in tensors.items():
        dst = targets[key]
        if dst.shape != t.shape or dst.dtype != t.dtype:
            raise ValueError(f"{key}: file has {tuple(t.shape)} {t.dtype}, model {tuple(dst.shape)} {dst.dtype}")
        dst.copy_(t)  # in place: optimizer references stay valid


def _load_optimizer(
    model: nn.Module, optimizer: torch.optim.Optimizer, meta: dict, tensors: dict[str, torch.Tensor]
) -> None:
    if meta["class"] != type(optimizer).__name__:
        raise ValueError(f"state is for {meta['class']}, optimizer is {type(optimizer).__name__}")
    names = _param_names(model)
    by_name = {n: p for n, p in model.named_parameters()}
    if len(meta["param_groups"]) != len(optimizer.param_groups):
        raise ValueError("number of param groups differs")
    for saved, group in zip(meta["param_groups"], optimizer.param_groups):
        if saved["params"] != [names.get(id(p)) for p in group["params"]]:
            raise ValueError(f"param group members differ: {saved['params']}")
        for k, v in saved.items():
            if k != "params":
                group[k] = _from_json(v, group.get(k))
    optimizer.state.clear()
    for key, t in tensors.items():
        name, skey = key[len("optim/") :].rsplit("/", 1)
        optimizer.state[by_name[name]][skey] = t.to(by_name[name].device)
    for name, entries in meta["state_scalars"].items():
        for skey, e in entries.items():
            val = e["value"] if e["dtype"] is None else torch.tensor(e["value"], dtype=getattr(torch, e["dtype"]))
            optimizer.state[by_name[name]][skey] = val


def import_state(
    in_dir: str, model: nn.Module, optimizer: torch.optim.Optimizer
) -> tuple[dict[str, torch.Tensor | None], dict]:
    """Restore parameters, buffers and optimizer state (hyperparameters included) written by
    ``export_state`` into ``model``/``optimizer`` in place; returns ``(batch, scalars)`` with every
    key of ``BATCH_KEYS`` present (None where absent). Raises on any name/shape/class mismatch."""
    with open(os.path.join(in_dir, "meta.json")) as fh:
        meta = json.load(fh)
    if meta["schema_version"] != SCHEMA_VERSION:
        raise ValueError(f"schema version {meta['schema_version']} != {SCHEMA_VERSION}")
    rank, have = meta["adapter_rank"], adapter_rank(model)
    if rank != have:
        if not 0 < have < rank:
            raise ValueError(f"adapter rank {have} cannot be grown to the saved rank {rank}")
        grown = grow_adapters(model, optimizer, rank, mode="preserve")
        assert grown is optimizer
    _load_params(model, load_file(os.path.join(in_dir, "params.safetensors")))
    _load_optimizer(model, optimizer, meta["optimizer"], load_file(os.path.join(in_dir, "optim.safetensors")))
    raw = load_file(os.path.join(in_dir, "batch.safetensors"))
    batch: dict[str, torch.Tensor | None] = {k: None for k in BATCH_KEYS}
    batch.update({k[len("batch/") :]: v for k, v in raw.items()})
    return batch, meta["scalars"]
