"""Policies: GRU (default), transformer with KV cache, Hugging Face causal LMs; LoRA adapters.

`models.build.build_policy(cfg, max_len)` builds the policy of a RunConfig. This package file
imports nothing, so `prorl-bench get-model --help` (models/get_model.py) answers without torch.
"""
