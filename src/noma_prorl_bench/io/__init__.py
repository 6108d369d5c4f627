"""A run on disk: run directory, metric sinks and counters, checkpoints (one state tree), resume.

Also the NOMA training-state interchange (interchange.py)."""
