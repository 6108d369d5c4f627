"""Rollout: G sampled responses per prompt with behaviour log-probs (sampling.py) and the
reference log-probs under A0 / A1 / A2 / B (reference.py)."""
