"""A tiny GRU language model: embedding -> GRU -> Linear `head` (no dropout).

The seed's default policy. `prefill`/`decode` carry the GRU hidden state, so incremental
sampling costs O(T) and equals the teacher-forced forward to float tolerance.
"""

from __future__ import annotations

import torch
from torch import nn


class GRUPolicy(nn.Module):
    """tokens[N, L] -> logits[N, L, V]."""

    def __init__(self, vocab_size: int, hidden: int = 128, layers: int = 1):
        super().__init__()
        self.vocab_size = vocab_size
        self.embed = nn.Embedding(vocab_size, hidden)
        self.gru = nn.GRU(hidden, hidden, num_layers=layers, batch_first=True)
        self.head = nn.Linear(hidden, vocab_size)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h, _ = self.gru(self.embed(tokens))  # [N, L, H]
        return self.head(h)  # [N, L, V]

    def hidden_states(self, tokens: torch.Tensor, keep_last: int = 0) -> torch.Tensor:
        """tokens[N, L] -> the GRU's outputs [N, L or k, H] (the head's input; the critic's value head
        reads them). No `logits_from_hidden`: --logprob_chunk stays transformer/HF only."""
        h, _ = self.gru(self.embed(tokens))  # [N, L, H]
        return h[:, -keep_last:] if keep_last > 0 else h

    def prefill(self, tokens: torch.Tensor):
        out, state = self.gru(self.embed(tokens))  # out [N, P, H], state [layers, N, H]
        return self.head(out[:, -1]), state  # [N, V]

    @staticmethod
    def repeat_state(state: torch.Tensor, G: int) -> torch.Tensor:
        """Hidden state [layers, B, H] -> [layers, B*G, H] (row i -> rows G*i .. G*i+G-1)."""
        return state.repeat_interleave(G, 1)

    def decode(self, tok: torch.Tensor, state):
        out, state = self.gru(self.embed(tok[:, None]), state)  # [N, 1, H]
        return self.head(out[:, 0]), state  # [N, V]
