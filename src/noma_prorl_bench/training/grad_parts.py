"""--grad_parts_every: the gradients of the loss's two parts, measured beside the update.

The per-token loss is pg + beta * KL term (algorithms/objective.py). Every K steps, on the update's
last minibatch, each part's share of the minibatch loss gets its own backward pass over the same
graph (`torch.autograd.grad` with the graph retained, before the update's own backward), so the
parameters' `.grad`, the optimizer step and every other metric keep their bits. Logged: the norm of
each part's gradient over the policy's trainable parameters, their ratio and their cosine (the
direction the KL pulls against the policy gradient). With the KL in the reward (--kl_in reward) the
KL part of the loss is zero: its gradient is inside the policy-gradient part's.
"""

from __future__ import annotations

from typing import Optional

import torch


class GradParts:
    """Sums of the parts' gradients over the micro-batches of one minibatch, flattened."""

    def __init__(self, params):
        self.params = [p for p in params if p.requires_grad]
        self.sums: dict[str, Optional[torch.Tensor]] = {"pg": None, "kl": None}

    def add(self, name: str, loss: torch.Tensor) -> None:
        """`loss`: this micro-batch's share of part `name` of the minibatch loss (a scalar)."""
        if not loss.requires_grad:  # e.g. the KL part with --kl_in reward: a zero gradient
            return
        grads = torch.autograd.grad(loss, self.params, retain_graph=True, allow_unused=True)
        flat = torch.cat(
            [(g if g is not None else torch.zeros_like(p)).reshape(-1) for g, p in zip(grads, self.params)]
        )
        prev = self.sums[name]
        self.sums[name] = flat if prev is None else prev + flat

    def metrics(self) -> dict[str, float]:
        """grad/pg_norm, grad/kl_norm; grad/kl_over_pg and grad/cos_pg_kl where both norms are > 0."""
        size = sum(p.numel() for p in self.params)
        pg, kl = (s if s is not None else torch.zeros(size) for s in (self.sums["pg"], self.sums["kl"]))
        n_pg, n_kl = float(pg.norm()), float(kl.norm())
        out = {"grad/pg_norm": n_pg, "grad/kl_norm": n_kl}
        if n_pg > 0 and n_kl > 0:
            out["grad/kl_over_pg"] = n_kl / n_pg
            out["grad/cos_pg_kl"] = float(torch.dot(pg, kl)) / (n_pg * n_kl)
        return out
