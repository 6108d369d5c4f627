"""Weight averaging in place: the one mixing rule of every moving anchor.

`mix_states_(dst, src, keep, take)` sets dst <- keep * dst + take * src on every floating tensor of
a state dict, as `dst.mul_(keep).add_(src, alpha=take)` (the arithmetic of TRL's
SyncRefModelCallback); integer buffers are copied. Its users and their weights:

  Polyak reset (--ref_update polyak)        keep = 1 - a,   take = a
  moving reference (--ref_update ema)       keep = tau,     take = 1 - tau
  Elastic Reset's policy EMA                keep = decay,   take = 1 - decay

A tensor under several names (tied weights) is mixed once. Entries named in `skip` (a frozen base
shared by both sides) are left as they are: there dst is src already, and mixing would only round it.
"""

from __future__ import annotations

from typing import Collection

import torch


def _key(t: torch.Tensor) -> tuple[int, int, tuple[int, ...], tuple[int, ...]]:
    return (t.untyped_storage().data_ptr(), int(t.storage_offset()), tuple(t.shape), tuple(t.stride()))


@torch.no_grad()
def mix_states_(
    dst: dict[str, torch.Tensor],
    src: dict[str, torch.Tensor],
    keep: float,
    take: float,
    skip: Collection[str] = (),
) -> int:
    """dst <- keep * dst + take * src in place, entry by entry (see the module docstring); returns
    how many distinct tensors were written. Raises KeyError when the two have different names."""
    if set(dst) != set(src):
        raise KeyError(f"state dict keys differ: {sorted(set(dst) ^ set(src))[:5]}")
    seen: set = set()
    for name, d in dst.items():
        if name in skip or _key(d) in seen:
            continue
        seen.add(_key(d))
        s = src[name].to(d.device)
        if d.is_floating_point():
            d.mul_(keep).add_(s, alpha=take)
        else:
            d.copy_(s)
    return len(seen)
