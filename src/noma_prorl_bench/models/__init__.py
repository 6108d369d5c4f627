"""Policies: GRU (default), transformer with KV cache, Hugging Face causal LMs; LoRA adapters.

`models.build.build_policy(spec, max_len)` builds the policy of a config/specs.ModelSpec. This package file
imports nothing, so `prorl-bench get-model --help` (models/get_model.py) answers without torch.
"""
