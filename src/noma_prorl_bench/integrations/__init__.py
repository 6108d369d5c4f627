"""Plug-ins that bring this project's semantics into other trainers (optional extras).

- `integrations.trl`: reference resets and optimizer-state transforms for TRL's `GRPOTrainer`
  (docs/trl.md); needs the `trl` extra.
"""
