"""Rollout: the Collector stage (collector.py), sampling with behaviour log-probs (sampling.py), reference strategies A0/A1/A2/B (reference.py)."""
