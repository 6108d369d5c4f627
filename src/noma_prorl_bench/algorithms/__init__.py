"""Algorithms as pure functions (tensors in, values and metrics out): advantages, per-token losses
and reductions, KL estimators and the KL term, DAPO filters, reward shaping and loss masks."""
