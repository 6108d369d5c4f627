"""A run on disk: the run directory, metric sinks and the counter/timer facility, checkpoints
(one state tree), resume, and the NOMA training-state interchange."""
