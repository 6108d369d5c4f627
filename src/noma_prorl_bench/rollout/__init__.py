"""Rollout: the Collector stage (collector.py), sampling (sampling.py), reference strategies A0/A1/A2/B.

`collector.py` assembles the step's batch, `sampling.py` samples with behaviour log-probs,
`reference.py` holds the reference strategies (ReferenceHolder; NoReference and the ReferenceSource
protocol in `reference_source.py`)."""
