"""Algorithms as pure functions: advantages, per-token losses and reductions, KL terms, DAPO filters.

Tensors in, `(value, metrics)` out; no model, optimizer or I/O inside (objective.py holds the
reward shaping and loss masks between scoring and the optimizer step)."""
