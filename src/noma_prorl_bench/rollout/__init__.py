"""Rollout: sampled responses with behaviour log-probs (sampling.py), reference log-probs A0/A1/A2/B."""
