"""Shared test set-up: one torch thread, src/ importable, small-run helpers."""
import os
import sys

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.path.join(ROOT, "src")
if SRC not in sys.path:
    sys.path.insert(0, SRC)
os.environ.setdefault("PYTHONPATH", SRC)
torch.set_num_threads(1)

# Flags that make a run take a second or two: tiny batch, short warm start.
FAST = ["--steps", "3", "--batch_size", "4", "--group_size", "4", "--warmstart_steps", "5", "--n_val", "16",
        "--eval_every", "2", "--quiet"]


@pytest.fixture
def fast_flags():
    return list(FAST)
