"""A run on disk: run directory, metric sinks and counters, checkpoints (one state tree), resume."""
