"""A tiny GRU language model: embedding -> GRU -> Linear `head` (no dropout).

The seed's default policy. `prefill`/`decode` carry the GRU hidden state, so incremental
sampling costs O(T) and equals the teacher-forced forward to float tolerance.
"""

from __future__ import annotations

import torch
from torch import nn

from noma_prorl_bench.models.base import distinct_prompts


class GRUPolicy(nn.Module):
    """tokens[N, L] -> logits[N, L, V]."""

    shared_prompt = False  # --shared_prompt: teacher-forced passes run each distinct prompt once

    def __init__(self, vocab_size: int, hidden: int = 128, layers: int = 1):
        super().__init__()
        self.vocab_size = vocab_size
        self.embed = nn.Embedding(vocab_size, hidden)
        self.gru = nn.GRU(hidden, hidden, num_layers=layers, batch_first=True)
        self.head = nn.Linear(hidden, vocab_size)

    def forward(self, tokens: torch.Tensor, keep_last: int = 0, prompt_len: int = 0) -> torch.Tensor:
        """Teacher forcing -> logits[N, L, V]; with ``keep_last=k > 0`` the last k positions [N, k, V]
        (``prompt_len`` as in `hidden_states`)."""
        return self.head(self.hidden_states(tokens, keep_last, prompt_len))

    def hidden_states(self, tokens: torch.Tensor, keep_last: int = 0, prompt_len: int = 0) -> torch.Tensor:
        """tokens[N, L] -> the GRU's outputs [N, L or k, H] (the head's input; the critic's value head
        reads them). No `logits_from_hidden`: --logprob_chunk stays transformer/HF only.

        --shared_prompt with ``prompt_len=P`` and 0 < k <= L - P + 1: the first P - 1 tokens of each
        distinct prompt run once, their final hidden state is gathered to the rows that carry that
        prompt (``index_select``: in backward each row's gradient is added into its prompt's), and
        tokens[:, P-1:] run from it. The same function as the whole pass; not the same bits (the
        prompt's matmuls see other shapes)."""
        groups = self.prompt_groups(tokens, prompt_len) if 0 < keep_last <= tokens.shape[1] - prompt_len + 1 else None
        if groups is None:
            h, _ = self.gru(self.embed(tokens))  # [N, L, H]
        else:
            uniq, inverse = groups  # [U, P-1], [N]
            _, state = self.gru(self.embed(uniq))  # [layers, U, H]
            h, _ = self.gru(self.embed(tokens[:, prompt_len - 1 :]), state.index_select(1, inverse))  # [N, L-P+1, H]
        return h[:, -keep_last:] if keep_last > 0 else h

    def prompt_groups(self, tokens: torch.Tensor, P: int) -> tuple[torch.Tensor, torch.Tensor] | None:
        """--shared_prompt: `base.distinct_prompts` of the rows, or None when the switch is off."""
        return distinct_prompts(tokens, P) if self.shared_prompt else None

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
