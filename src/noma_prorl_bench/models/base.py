"""The policy protocol and log-probability helpers shared by every policy.

Legend: N sequences, P prompt length, T response length, L = P + T, V vocabulary.

Every policy is an nn.Module with `vocab_size` and three methods:
    forward(tokens[N, L]) -> logits[N, L, V]                 teacher forcing
    prefill(tokens[N, P]) -> (logits_last[N, V], state)      start incremental decoding
    decode(tok[N], state) -> (logits[N, V], state)           one incremental step
Log-probabilities are always float32 and use logits / temperature.
"""
from __future__ import annotations

from typing import Any, Protocol

import torch
import torch.nn.functional as F
from torch import nn


class Policy(Protocol):
    vocab_size: int

    def forward(self, tokens: torch.Tensor) -> torch.Tensor: ...

    def prefill(self, tokens: torch.Tensor) -> tuple[torch.Tensor, Any]: ...

    def decode(self, tok: torch.Tensor, state: Any) -> tuple[torch.Tensor, Any]: ...


def slices_logits(model) -> bool:
    """True for policies that set `slice_logits = True`: `model(tokens, keep_last=k)` returns
    only the last k positions' logits, and `response_logits` should ask for them (HF models,
    whose vocabularies are large). The toy policies keep the full forward, whose float
    rounding the recorded toy results were made with (slicing the head's input changes the
    matmul shape and hence the last bits)."""
    return bool(getattr(model, "slice_logits", False))


def policy_device(model) -> torch.device:
    """The device of a policy's parameters (cpu for a parameterless callable)."""
    params = model.parameters() if isinstance(model, nn.Module) else ()
    for p in params:
        return p.device
    return torch.device("cpu")


def response_logits(model: nn.Module, tokens: torch.Tensor, P: int) -> torch.Tensor:
    """tokens[N, L] -> logits[N, T, V] (float32) at the positions that predict the response.

    Policies with `slice_logits` (HF models) are asked for the last T + 1 positions only
    (`keep_last`), so the output head never materialises the prompt's [N, P-1, V] logits
    (on a 150k vocabulary that is most of the forward's memory)."""
    T = tokens.shape[1] - P
    if slices_logits(model):
        logits = model(tokens, keep_last=T + 1)   # [N, T+1, V]: positions P-1 .. L-1
        return logits[:, :-1].float()             # [N, T, V]
    logits = model(tokens)                        # [N, L, V]
    return logits[:, P - 1:-1].float()            # [N, T, V]: position P-1+t predicts token P+t


def logprobs_from_logits(logits: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """logits[N, T, V], targets[N, T] -> log pi(target)[N, T] under logits / temperature."""
    logp_all = F.log_softmax(logits.float() / temperature, dim=-1)
    return logp_all.gather(-1, targets.unsqueeze(-1)).squeeze(-1)


def entropy_from_logits(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """logits[..., V] -> entropy[...] of softmax(logits / temperature)."""
    logp = F.log_softmax(logits.float() / temperature, dim=-1)
    return -(logp.exp() * logp).sum(-1)


def response_logprobs(model: nn.Module, tokens: torch.Tensor, P: int, temperature: float = 1.0,
                      with_entropy: bool = False):
    """One teacher-forced forward: -> (logp[N, T], entropy[N, T] | None, logits[N, T, V])."""
    logits = response_logits(model, tokens, P)                          # [N, T, V]
    logp = logprobs_from_logits(logits, tokens[:, P:], temperature)     # [N, T]
    ent = None
    if with_entropy:
        with torch.no_grad():
            ent = entropy_from_logits(logits, temperature)              # [N, T]
    return logp, ent, logits
