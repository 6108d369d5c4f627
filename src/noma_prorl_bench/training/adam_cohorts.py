"""Per-entry step counts for Adam/AdamW after a parameter grows (docs/growth.md sec. 2b).

``torch.optim.Adam`` keeps one ``step`` t per parameter tensor and divides the moments by
``1 - beta1^t`` and ``1 - beta2^t``. Entries appended by a growth at step t0 have zero moments but
share the tensor's t, so their first update is ``lr * (1-b1) g / (sqrt((1-b2) / (1-b2^(t0+1))) |g|)``
instead of a fresh Adam's ``lr * g / |g|`` (0.71x after 50 steps, -> (1-b1)/sqrt(1-b2) = 3.2x).

Mechanism: every entry belongs to a *cohort* with its own update count k; cohort 0 is the
tensor's original entries (k = t, the tensor's ``step``). Two keys in ``optimizer.state[p]``:

``entry_cohort``  tensor shaped like ``p`` (p's dtype: small integers are exact in any float
                  dtype): 0 for original entries, j >= 1 for the entries added by growth j.
``cohort_steps``  ``list[int]``: ``cohort_steps[j-1]`` = k_j, updates cohort j has had.

Invariant between steps, for an entry of cohort j with raw fresh-Adam moments M, V (what an
optimizer created at its birth would hold) and ``c(b, t, k) = (1 - b^t) / (1 - b^k)``:

    exp_avg = M * c(b1, t, k),  exp_avg_sq = V * c(b2, t, k),  max_exp_avg_sq = Vmax * c(b2, t, k)

so torch's bias correction ``/(1 - b^t)`` yields ``M / (1 - b1^k)``, a fresh Adam's. A global
optimizer step pre-hook (``torch.optim.optimizer.register_optimizer_step_pre_hook``, installed
on import) sees the gradient g before torch's update and rewrites each young entry's moments to

    m <- (a1'/a1) m + (a1' - 1)(1 - b1)/b1 * g,   a = c(b1, t, k), a' = c(b1, t+1, k+1)

(the same with b2 and g^2 for v; ``max_exp_avg_sq <- (a2'/a2) max_exp_avg_sq``), so that
torch's ``b1 m + (1-b1) g`` equals ``a' (b1 M + (1-b1) g)``: the invariant again, one step on.
Each update of a young entry therefore equals a fresh Adam's (first and later ones) up to float
rounding; g includes ``weight_decay * p`` for Adam (L2) and ``-grad`` under ``maximize``; AdamW's
decoupled decay ``p *= 1 - lr * wd`` is the same for every entry and needs nothing. Original
entries are never touched (bit-identical to an ungrown tensor). A cohort retires (joins cohort
0) once ``b1^k`` and ``b2^k`` are both below ``RETIRE_BELOW``: the remaining difference from
exactness is then below 1e-9 relative, under float32 resolution. Not covered: ``step(closure)``
while a cohort is young (raises: the closure recomputes g after the hook), sparse gradients,
and optimizers with other bias corrections (NAdam, RAdam, Adamax: growth keeps their state as is).
"""

from __future__ import annotations

from typing import cast

import torch
import torch.optim.optimizer as _torch_optimizer
from torch.optim.optimizer import register_optimizer_step_pre_hook

COHORT, COUNTS = "entry_cohort", "cohort_steps"
RETIRE_BELOW = 1e-9


def is_adam(optimizer) -> bool:
    """Adam and AdamW (AdamW subclasses Adam in torch >= 2.6; checked separately for older)."""
    return isinstance(optimizer, (torch.optim.Adam, torch.optim.AdamW))


def _c(b: float, t: float, k: float) -> float:
    """c(b, t, k) = (1 - b^t) / (1 - b^k): stored / raw moment of a cohort with count k."""
    return 1.0 if t == k or b == 0.0 else (1.0 - b**t) / (1.0 - b**k)


def start_cohort(state: dict, old_state: dict, old_shape, new_shape, grow) -> None:
    """Mark the entries a growth adds as a new cohort with count 0 in ``state`` (the migrated
    state; ``old_state`` the state before growth, whose cohorts are kept with the same layout
    function ``grow`` that moved the moments). Does nothing before the first step."""
    step = state.get("step")
    if step is None or float(step) == 0.0:
        return
    ref = state["exp_avg"]
    counts = list(old_state.get(COUNTS, []))
    old_cohort = old_state.get(COHORT)
    old = old_cohort if old_cohort is not None else torch.zeros(old_shape, dtype=ref.dtype, device=ref.device)
    fill = torch.full(new_shape, float(len(counts) + 1), dtype=ref.dtype, device=ref.device)
    state[COHORT] = grow(old.to(ref.dtype), new_shape, fill)
    state[COUNTS] = counts + [0]


def _effective_grad(p: torch.Tensor, group: dict, optimizer) -> torch.Tensor:
    """The g torch's Adam puts into its moments: -grad under maximize, + wd * p for L2 decay."""
    grad = cast(torch.Tensor, p.grad)  # called for parameters with a gradient only
    g = -grad if group.get("maximize", False) else grad
    decoupled = isinstance(optimizer, torch.optim.AdamW) or group.get("decoupled_weight_decay", False)
    if group.get("weight_decay", 0) and not decoupled:
        g = g + group["weight_decay"] * p.detach()
    return g


def _table(vals: list[float], like: torch.Tensor) -> torch.Tensor:
    return torch.tensor(vals, dtype=like.dtype, device=like.device)


def _correct(p: torch.Tensor, st: dict, group: dict, optimizer) -> None:
    """Rewrite the young entries' moments of ``p`` before torch's update (module doc)."""
    b1, b2 = (float(b) for b in group["betas"])
    t, counts = float(st["step"]), st[COUNTS]
    idx = st[COHORT].long()
    young = idx != 0
    g = _effective_grad(p, group, optimizer)
    for key, b, grad_term in (("exp_avg", b1, g), ("exp_avg_sq", b2, g * g), ("max_exp_avg_sq", b2, None)):
        buf = st.get(key)
        if not torch.is_tensor(buf) or b == 0.0:
            continue
        ratio, shift = [1.0], [0.0]
        for k in counts:
            a_next = _c(b, t + 1, k + 1)
            ratio.append(0.0 if k == 0 else a_next / _c(b, t, k))  # k == 0: buf is 0 there
            shift.append((a_next - 1.0) * (1.0 - b) / b)
        new = _table(ratio, buf)[idx] * buf
        if grad_term is not None:
            new = new + _table(shift, buf)[idx] * grad_term
        buf.copy_(torch.where(young, new, buf))
    st[COUNTS] = [k + 1 for k in counts]
    _retire(st, b1, b2)


def _retire(st: dict, b1: float, b2: float) -> None:
    """Fold cohorts whose bias corrections equal cohort 0's to < RETIRE_BELOW into cohort 0."""
    counts = st[COUNTS]
    keep = [j for j, k in enumerate(counts, 1) if max(b1**k, b2**k) >= RETIRE_BELOW]
    if len(keep) == len(counts):
        return
    if not keep:
        del st[COHORT], st[COUNTS]
        return
    old = st[COHORT]
    out = torch.zeros_like(old)
    for new_id, j in enumerate(keep, 1):
        out = torch.where(old == j, torch.full_like(old, float(new_id)), out)
    st[COHORT], st[COUNTS] = out, [counts[j - 1] for j in keep]


def _pre_step_hook(optimizer, args, kwargs) -> None:
    """Global step pre-hook: correct every young cohort of an Adam-family optimizer."""
    if not is_adam(optimizer) or not optimizer.state:
        return
    for group in optimizer.param_groups:
        for p in group["params"]:
            st = optimizer.state.get(p)
            if not st or COHORT not in st or p.grad is None:
                continue
            if any(a is not None for a in args[1:]) or kwargs.get("closure") is not None:  # args[0]: self
                raise RuntimeError(
                    "Adam.step(closure) is not supported while a grown parameter has young "
                    "entries (the closure recomputes the gradient after the cohort correction)"
                )
            if p.grad.is_sparse:
                raise RuntimeError("sparse gradients are not supported for grown Adam parameters")
            with torch.no_grad():
                _correct(p, st, group, optimizer)


def to_raw_moments(optimizer) -> int:
    """Divide every young entry's stored moments by c(b, t, k) (raw fresh-Adam M, V) and drop the
    cohort keys; returns how many parameters had cohorts. ``optim_state.reset_step_count`` calls
    this before setting every ``step`` to 0, so each entry restarts its bias correction from its
    own moments, as a per-entry Adam whose step were reset would."""
    n = 0
    for group in optimizer.param_groups:
        b1, b2 = (float(b) for b in group["betas"]) if "betas" in group else (0.0, 0.0)
        for p in group["params"]:
            st = optimizer.state.get(p)
            if not st or COHORT not in st:
                continue
            t, idx = float(st["step"]), st[COHORT].long()
            with torch.no_grad():
                for key, b in (("exp_avg", b1), ("exp_avg_sq", b2), ("max_exp_avg_sq", b2)):
                    buf = st.get(key)
                    if torch.is_tensor(buf) and b != 0.0:
                        inv = [1.0] + [0.0 if k == 0 else 1.0 / _c(b, t, k) for k in st[COUNTS]]
                        buf.mul_(_table(inv, buf)[idx])
            del st[COHORT], st[COUNTS]
            n += 1
    return n


# one global hook per process, even if this module is reloaded (the sentinel lives in torch's module)
if not getattr(_torch_optimizer, "_noma_prorl_cohort_hook", False):
    register_optimizer_step_pre_hook(_pre_step_hook)
    setattr(_torch_optimizer, "_noma_prorl_cohort_hook", True)
