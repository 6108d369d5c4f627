"""Parameter growth with explicit optimizer-state migration (NOMA's `realloc`, done in PyTorch).

A grown parameter is a new tensor whose leading block ``[:s0, :s1, ...]`` (the old shape) holds
the old values and whose remaining entries come from a declared init. What happens to
everything that refers to the old tensor is a named *migration mode*:

``preserve``  every per-parameter optimizer-state tensor with the parameter's shape (``exp_avg``,
              ``exp_avg_sq``, ``max_exp_avg_sq``, ``momentum_buffer``, ``square_avg``, ``sum`` ...)
              is grown the same shape-aware way: old block copied, new block zero. Non-tensor and
              0-d state (``step``) is kept as is. The param groups point at the new tensor and the
              state is re-keyed to it; nothing refers to the old tensor any more. For Adam/AdamW
              the new entries also get their own step count (``adam_cohorts``): each of their
              updates equals a freshly created Adam's for the same gradient, and every old
              entry's update equals the one it would have had without the growth.
``reset``     the same new tensors and re-pointed param groups, then ``optimizer.state`` is
              cleared for the whole model (moments and step counts restart; ProRL-v1 style).
``naive``     new Parameters and a brand-new optimizer of the same class with the same group
              hyperparameters: the common PyTorch mistake, reproduced on purpose. All state is
              lost (and an LR scheduler bound to the old optimizer no longer drives anything).
``noma_flat`` NOMA's literal layout: old values and old moments are flattened and copied as a
              *prefix* of the flattened new tensor; the tail is the declared init (values) or zero
              (moments); ``step`` kept. In row-major storage this equals ``preserve`` only when the
              grown axis is the first one (appending rows of ``A: r x in``); when a later axis
              grows (appending columns of ``B: out x r``) old entries land in the wrong rows/cols.
              Adam cohorts as ``preserve``, laid out by flat position (the tail is the new cohort).

Gradient: a ``.grad`` present at growth is grown like the value (old block kept, new block zero);
under ``noma_flat`` it is replaced by zeros of the new shape, as NOMA's realloc does.

Public API: ``realloc_param``, ``realloc_params``, ``rebuild_optimizer``, ``grow_adapters``,
``check_no_stale_state``, ``grow_block``, ``grow_flat_prefix``, ``make_init``, ``MODES``.
"""

from __future__ import annotations

from typing import Callable, Sequence, cast

import torch
from torch import nn

from noma_prorl_bench.config.choices import GROWTH_MIGRATIONS
from noma_prorl_bench.models.lora import LoRALinear
from noma_prorl_bench.training import adam_cohorts

MODES = GROWTH_MIGRATIONS  # --growth_migration (config/choices.py)

# init_fn(shape, dtype, device) -> Tensor[shape]: values for the grown tensor (the old block is
# then written over it), so only the entries outside the old block matter.
InitFn = Callable[[torch.Size, torch.dtype, torch.device], torch.Tensor]


# ----------------------------------------------------------------------------- tensor layouts


def _check_shapes(old_shape: Sequence[int], new_shape: Sequence[int]) -> None:
    if len(old_shape) != len(new_shape):
        raise ValueError(f"growth cannot change rank: {tuple(old_shape)} -> {tuple(new_shape)}")
    if any(n < o for o, n in zip(old_shape, new_shape)):
        raise ValueError(f"growth cannot shrink: {tuple(old_shape)} -> {tuple(new_shape)}")


def grow_block(old: torch.Tensor, new_shape: Sequence[int], fill: torch.Tensor | None = None) -> torch.Tensor:
    """Shape-aware growth: ``out[:s0, :s1, ...] = old``; everything else from ``fill`` (or 0).

    Works for any number of grown axes. ``fill`` must have ``new_shape``; it is not modified.
    """
    _check_shapes(old.shape, new_shape)
    out = torch.zeros(new_shape, dtype=old.dtype, device=old.device) if fill is None else fill.clone()
    out[tuple(slice(0, s) for s in old.shape)] = old
    return out


def grow_flat_prefix(old: torch.Tensor, new_shape: Sequence[int], fill: torch.Tensor | None = None) -> torch.Tensor:
    """NOMA's realloc layout: ``out.flatten()[:old.numel()] = old.flatten()``, tail from ``fill``/0."""
    _check_shapes(old.shape, new_shape)
    out = torch.zeros(new_shape, dtype=old.dtype, device=old.device) if fill is None else fill.clone()
    out.view(-1)[: old.numel()] = old.reshape(-1)
    return out


def make_init(
    kind: str, *, fan_in: int | None = None, std: float | None = None, generator: torch.Generator | None = None
) -> InitFn:
    """Declared inits for grown entries: ``zeros``, ``normal`` (std, default 1/sqrt(fan_in)),
    ``kaiming`` (U(-1/sqrt(fan_in), 1/sqrt(fan_in)), nn.Linear's default). Draws use ``generator``
    (CPU) so that every migration mode gets the same new values for the same seed."""
    if kind == "zeros":
        return lambda shape, dtype, device: torch.zeros(shape, dtype=dtype, device=device)
    if fan_in is None and std is None:
        raise ValueError(f"init {kind!r} needs fan_in or std")
    if kind == "normal":
        s = std if std is not None else cast(int, fan_in) ** -0.5
        return lambda shape, dtype, device: (torch.randn(shape, generator=generator, dtype=torch.float32) * s).to(
            dtype=dtype, device=device
        )
    if kind == "kaiming":
        b = fan_in**-0.5 if fan_in is not None else cast(float, std)
        return lambda shape, dtype, device: (
            (torch.rand(shape, generator=generator, dtype=torch.float32) * 2 - 1) * b
        ).to(dtype=dtype, device=device)
    raise ValueError(f"unknown init {kind!r} (zeros|normal|kaiming)")


# ----------------------------------------------------------------------------- one parameter


def _resolve(module: nn.Module, name: str) -> tuple[nn.Module, str]:
    *path, leaf = name.split(".")
    for part in path:
        module = getattr(module, part)
    if leaf not in module._parameters:
        raise KeyError(f"{name!r} is not a parameter of {type(module).__name__}")
    return module, leaf


def _migrate_state(opt: torch.optim.Optimizer, old: nn.Parameter, new: nn.Parameter, grow) -> None:
    """Re-key ``opt.state[old]`` to ``new`` (growing tensors shaped like ``old``) and swap the
    entry in ``opt.param_groups``."""
    state = opt.state.pop(old, None)
    if state is not None:
        migrated = {}
        for key, val in state.items():
            if key in (adam_cohorts.COHORT, adam_cohorts.COUNTS):
                continue  # rebuilt below
            if torch.is_tensor(val) and val.dim() > 0 and val.shape == old.shape:
                migrated[key] = grow(val, new.shape)  # moments: old block, zero elsewhere
            elif torch.is_tensor(val):
                migrated[key] = val.clone()  # step (0-d): kept, never aliased
            else:
                migrated[key] = val  # None, python scalars
        if adam_cohorts.is_adam(opt) and "exp_avg" in migrated:  # new entries: own step count
            adam_cohorts.start_cohort(migrated, state, old.shape, new.shape, grow)
        opt.state[new] = migrated
    for group in opt.param_groups:
        group["params"] = [new if p is old else p for p in group["params"]]


@torch.no_grad()
def realloc_param(
    module: nn.Module,
    name: str,
    new_shape: Sequence[int],
    init_fn: InitFn | None = None,
    optimizer: torch.optim.Optimizer | None = None,
    mode: str = "preserve",
) -> nn.Parameter:
    """Grow parameter ``module.<name>`` (dotted) to ``new_shape`` and install the new Parameter.

    Values: ``preserve``/``reset``/``naive`` copy the old block in place (``grow_block``);
    ``noma_flat`` copies a flat prefix. Entries outside it come from ``init_fn`` (zeros if None).
    Optimizer: ``preserve``/``noma_flat`` migrate its state (see module doc); ``reset`` re-points
    the param groups and clears ``optimizer.state`` for all parameters; ``naive`` does not touch
    the optimizer (it is left stale: call ``rebuild_optimizer``, or use ``realloc_params``).
    """
    if mode not in MODES:
        raise ValueError(f"mode {mode!r} not in {MODES}")
    owner, leaf = _resolve(module, name)
    old = cast(nn.Parameter, owner._parameters[leaf])
    new_shape = torch.Size(new_shape)
    fill = (init_fn or make_init("zeros"))(new_shape, old.dtype, old.device)
    grow = grow_flat_prefix if mode == "noma_flat" else grow_block
    new = nn.Parameter(grow(old.detach(), new_shape, fill), requires_grad=old.requires_grad)
    if old.grad is not None:
        new.grad = torch.zeros_like(new) if mode == "noma_flat" else grow_block(old.grad, new_shape)
    owner._parameters[leaf] = new
    if optimizer is not None and mode != "naive":
        _migrate_state(optimizer, old, new, grow)
        if mode == "reset":
            optimizer.state.clear()
    return new


# ----------------------------------------------------------------------------- whole model


def rebuild_optimizer(
    optimizer: torch.optim.Optimizer, mapping: dict[nn.Parameter, nn.Parameter]
) -> torch.optim.Optimizer:
    """A new optimizer of the same class with the same groups and group hyperparameters (current
    values, e.g. a scheduled lr), params substituted through ``mapping``, and *empty state*:
    what ``type(opt)(new_model.parameters(), **same_kwargs)`` does after a growth."""
    groups = [
        {**{k: v for k, v in g.items() if k != "params"}, "params": [mapping.get(p, p) for p in g["params"]]}
        for g in optimizer.param_groups
    ]
    try:
        return type(optimizer)(groups, **optimizer.defaults)
    except TypeError:  # an optimizer whose defaults are not all constructor arguments
        return cast(Callable[..., torch.optim.Optimizer], type(optimizer))(groups)


def realloc_params(
    model: nn.Module,
    optimizer: torch.optim.Optimizer | None,
    plan: dict[str, tuple[Sequence[int], InitFn | None]],
    mode: str = "preserve",
) -> torch.optim.Optimizer | None:
    """Grow several parameters of ``model`` (``plan``: dotted name -> (new_shape, init_fn)) under
    one migration ``mode``; returns the optimizer to use from now on (a new one only for ``naive``).
    Raises if an old tensor is still reachable from the model (e.g. a tied weight)."""
    mapping: dict[nn.Parameter, nn.Parameter] = {}
    olds: dict[str, nn.Parameter] = {}
    for name, (shape, init_fn) in plan.items():
        owner, leaf = _resolve(model, name)
        olds[name] = cast(nn.Parameter, owner._parameters[leaf])
        mapping[olds[name]] = realloc_param(model, name, shape, init_fn, optimizer, mode)
    live = {id(p) for _, p in model.named_parameters(remove_duplicate=False)}
    tied = [n for n, old in olds.items() if id(old) in live]
    if tied:
        raise RuntimeError(f"old tensors still referenced by the model after growth: {tied}")
    if optimizer is not None and mode == "naive":
        return rebuild_optimizer(optimizer, mapping)
    return optimizer


def grow_adapters(
    model: nn.Module,
    optimizer: torch.optim.Optimizer | None,
    new_rank: int,
    mode: str = "preserve",
    init: str | None = None,
) -> torch.optim.Optimizer | None:
    """Grow every ``LoRALinear`` in ``model`` to ``new_rank``: append rows of ``A`` (declared init
    ``init``, default each adapter's ``a_init``, seeded per adapter and growth) and zero columns
    of ``B``. Returns the optimizer to use from now on (same object except for ``naive``)."""
    plan: dict[str, tuple[Sequence[int], InitFn | None]] = {}
    for name, mod in model.named_modules():
        if isinstance(mod, LoRALinear):
            if new_rank < mod.rank:
                raise ValueError(f"{name}: cannot shrink rank {mod.rank} -> {new_rank}")
            if new_rank == mod.rank:
                continue
            prefix = f"{name}." if name else ""
            plan[prefix + "lora_A"] = ((new_rank, mod.in_features), mod.a_rows_init(new_rank, init))
            plan[prefix + "lora_B"] = ((mod.out_features, new_rank), None)  # zeros: output unchanged
            mod.grow_count += 1
    if not plan:
        return optimizer
    return realloc_params(model, optimizer, plan, mode)


def check_no_stale_state(model: nn.Module, optimizer: torch.optim.Optimizer) -> list[str]:
    """Problems in how ``optimizer`` refers to ``model`` (empty list = clean):
    param-group entries or state keys that are not parameters of the model, state tensors whose
    shape no longer matches their parameter, and trainable model parameters in no param group."""
    names = {id(p): n for n, p in model.named_parameters(remove_duplicate=False)}
    problems, in_groups = [], set()
    for gi, group in enumerate(optimizer.param_groups):
        for j, p in enumerate(group["params"]):
            in_groups.add(id(p))
            if id(p) not in names:
                problems.append(f"param_groups[{gi}][{j}] (shape {tuple(p.shape)}) is not a model parameter")
    for p, state in optimizer.state.items():
        label = names.get(id(p))
        if label is None:
            problems.append(f"state key (shape {tuple(p.shape)}) is not a model parameter")
            continue
        if id(p) not in in_groups:
            problems.append(f"state for {label} but {label} is in no param group")
        for key, val in state.items():
            if torch.is_tensor(val) and val.dim() > 0 and val.shape != p.shape:
                problems.append(f"state[{label}][{key}] shape {tuple(val.shape)} != param {tuple(p.shape)}")
    for n, p in model.named_parameters():
        if p.requires_grad and id(p) not in in_groups:
            problems.append(f"trainable parameter {n} is in no param group")
    return problems
