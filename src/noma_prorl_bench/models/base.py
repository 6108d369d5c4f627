"""The policy protocol and log-probability helpers shared by every policy.

Legend: N sequences, P prompt length, T response length, L = P + T, V vocabulary.

Every policy is an nn.Module with `vocab_size` and three methods:
    forward(tokens[N, L]) -> logits[N, L, V]                 teacher forcing
    prefill(tokens[N, P]) -> (logits_last[N, V], state)      start incremental decoding
    decode(tok[N], state) -> (logits[N, V], state)           one incremental step
Log-probabilities are always float32 and use logits / temperature.
"""

from __future__ import annotations

import contextlib
from typing import Any, Protocol

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint


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


def autocast(model):
    """The forward's precision context: bf16 autocast when the policy has `compute_dtype`
    (`--dtype bf16_mixed`: float32 weights, bf16 matmuls), else a no-op."""
    dt = getattr(model, "compute_dtype", None)
    if dt is None:
        return contextlib.nullcontext()
    return torch.autocast(policy_device(model).type, dtype=dt)


def policy_device(model) -> torch.device:
    """The device of a policy's parameters (cpu for a parameterless callable)."""
    params = model.parameters() if isinstance(model, nn.Module) else ()
    for p in params:
        return p.device
    return torch.device("cpu")


def frozen_parameters(model: nn.Module) -> dict[str, torch.Tensor]:
    """{state-dict name: tensor} of the parameters that never train (``requires_grad=False``: a
    LoRA policy's frozen base). Copies of the policy (the reference, drift-monitor and best-policy
    snapshots) alias these tensors instead of cloning them, so a frozen base is held once; every
    holder treats them as read-only. A tensor under several names (a tied head) is listed under
    each. Empty for fully trained policies (the toy models)."""
    return {n: p.detach() for n, p in model.named_parameters(remove_duplicate=False) if not p.requires_grad}


def same_tensor(a: torch.Tensor, b: torch.Tensor) -> bool:
    """True when `a` and `b` are views of the same memory with the same layout (an alias)."""
    return (
        a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
        and a.storage_offset() == b.storage_offset()
        and a.shape == b.shape
        and a.stride() == b.stride()
        and a.dtype == b.dtype
        and a.device == b.device
    )


def response_logits(model: nn.Module, tokens: torch.Tensor, P: int) -> torch.Tensor:
    """tokens[N, L] -> logits[N, T, V] (float32) at the positions that predict the response.

    Policies with `slice_logits` (HF models) or `shared_prompt` on are asked for the last T + 1 positions only
    (`keep_last`), so the output head never materialises the prompt's [N, P-1, V] logits
    (on a 150k vocabulary that is most of the forward's memory)."""
    T = tokens.shape[1] - P
    shares = getattr(model, "shared_prompt", False)  # --shared_prompt: each distinct prompt runs once
    if slices_logits(model) or shares:  # (models/hf.py, models/gru.py)
        shared = {"prompt_len": P} if shares else {}
        logits = model(tokens, keep_last=T + 1, **shared)  # [N, T+1, V]: positions P-1 .. L-1
        return logits[:, :-1].float()  # [N, T, V]
    logits = model(tokens)  # [N, L, V]
    return logits[:, P - 1 : -1].float()  # [N, T, V]: position P-1+t predicts token P+t


def distinct_prompts(tokens: torch.Tensor, P: int) -> tuple[torch.Tensor, torch.Tensor] | None:
    """--shared_prompt's grouping: (the distinct prompt prefixes tokens[:, :P-1] [U, P-1], each row's
    index into them [N]), or None when P < 2 or every row's prompt is its own."""
    if P < 2:
        return None
    uniq, inverse = torch.unique(tokens[:, : P - 1], dim=0, return_inverse=True)  # [U, P-1], [N]
    return None if uniq.shape[0] == tokens.shape[0] else (uniq, inverse)


def fed_tokens(model: Any, tokens: torch.Tensor, P: int) -> int:
    """Token positions a teacher-forced pass of `model` over tokens[N, L] (prompt length P) runs
    through the model, for the exact counters: N x L, or with --shared_prompt (models/hf.py)
    U x (P - 1) + N x (L - P + 1) for the batch's U distinct prompts."""
    groups = getattr(model, "prompt_groups", None)  # None when the switch is off or no prompt is shared
    g = groups(tokens, P) if groups is not None else None
    if g is None:
        return tokens.numel()
    N, L = tokens.shape
    return int(g[0].shape[0]) * (P - 1) + N * (L - P + 1)


def logprobs_from_logits(logits: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """logits[N, T, V], targets[N, T] -> log pi(target)[N, T] under logits / temperature."""
    logp_all = F.log_softmax(logits.float() / temperature, dim=-1)
    return logp_all.gather(-1, targets.unsqueeze(-1)).squeeze(-1)


def entropy_from_logits(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """logits[..., V] -> entropy[...] of softmax(logits / temperature)."""
    logp = F.log_softmax(logits.float() / temperature, dim=-1)
    return -(logp.exp() * logp).sum(-1)


def response_logprobs(
    model: nn.Module, tokens: torch.Tensor, P: int, temperature: float = 1.0, with_entropy: bool = False
):
    """One teacher-forced forward: -> (logp[N, T], entropy[N, T] | None, logits[N, T, V])."""
    logits = response_logits(model, tokens, P)  # [N, T, V]
    # one float32 log-softmax over the vocabulary serves both the gather and the entropy: the same
    # tensor logprobs_from_logits and entropy_from_logits would each compute, so the same bits
    logp_all = F.log_softmax(scaled_float(logits, temperature), dim=-1)  # [N, T, V]
    logp = logp_all.gather(-1, tokens[:, P:].unsqueeze(-1)).squeeze(-1)  # [N, T]
    ent = None
    if with_entropy:
        ent = entropy_of_logp(logp_all)  # [N, T]
    return logp, ent, logits


def scaled_float(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """float32 logits / temperature, the same bits as `logits.float() / temperature`; when `.float()`
    has made a copy (bf16 logits) the division happens in that copy, saving a second [..., V]
    tensor (autograd allows it: neither the cast nor the division needs its output for backward)."""
    z = logits.float()
    return z.div_(temperature) if z is not logits else z / temperature


@torch.no_grad()
def entropy_of_logp(logp_all: torch.Tensor) -> torch.Tensor:
    """logp_all[..., V] (a log-softmax) -> entropy[...]: -(exp(logp) * logp).sum(-1), the product
    formed in the exp's own buffer (the same bits, one [..., V] tensor fewer)."""
    return -(logp_all.exp().mul_(logp_all)).sum(-1)


# ----------------------------------------------------------------------------- --logprob_chunk


def chunks_logprobs(model) -> bool:
    """True for policies that split their forward into `hidden_states` and `logits_from_hidden`
    (transformer, HF): the ones `chunked_response_logprobs` can serve."""
    return hasattr(model, "hidden_states") and hasattr(model, "logits_from_hidden")


def _chunk_logp(model, h: torch.Tensor, targets: torch.Tensor, temperature: float, with_entropy: bool):
    """h[n, C], targets[n] -> (logp[n], entropy[n] or an empty tensor): one chunk's head,
    float32 log-softmax, gather; the [n, V] logits die with the call."""
    logits = scaled_float(model.logits_from_hidden(h), temperature)  # [n, V]
    logp_all = F.log_softmax(logits, dim=-1)  # [n, V]
    logp = logp_all.gather(-1, targets[:, None]).squeeze(-1)  # [n]
    if not with_entropy:
        return logp, logp.new_zeros(0)
    return logp, entropy_of_logp(logp_all)


def chunked_response_logprobs(
    model: Any, tokens: torch.Tensor, P: int, temperature: float = 1.0, with_entropy: bool = False, chunk: int = 1024
):
    """`response_logprobs` without the [N, T, V] float32 logits: -> (logp[N, T], entropy | None, None).

    The trunk runs once (hidden states [N, T, C]); the output head, log-softmax and gather run on
    `chunk` token positions at a time. With autograd on, each chunk is a non-reentrant
    `torch.utils.checkpoint`, so backward recomputes that chunk's logits instead of keeping
    them: peak logits memory is chunk x V, not N x T x V (TRL's selective log-softmax and
    Liger's fused linear cross-entropy rest on the same idea). Same numbers as the unchunked
    path up to float rounding (the head's matmul sees other shapes)."""
    N, L = tokens.shape
    T = L - P
    shared = {"prompt_len": P} if getattr(model, "shared_prompt", False) else {}  # --shared_prompt
    h = model.hidden_states(tokens, keep_last=T + 1, **shared)[:, :-1]  # [N, T, C]: positions P-1 .. L-2
    flat_h = h.reshape(N * T, h.shape[-1])  # [N*T, C]
    flat_y = tokens[:, P:].reshape(N * T)  # [N*T]
    logps, ents = [], []
    for i in range(0, N * T, chunk):
        args = (model, flat_h[i : i + chunk], flat_y[i : i + chunk], temperature, with_entropy)
        if torch.is_grad_enabled() and flat_h.requires_grad:
            lp, ent = checkpoint(_chunk_logp, *args, use_reentrant=False)
        else:
            lp, ent = _chunk_logp(*args)
        logps.append(lp)
        ents.append(ent)
    logp = torch.cat(logps).view(N, T)  # [N, T]
    ent = torch.cat(ents).view(N, T) if with_entropy else None
    return logp, ent, None


def policy_logprobs(
    model: nn.Module, tokens: torch.Tensor, P: int, temperature: float = 1.0, with_entropy: bool = False, chunk: int = 0
):
    """Every log-prob pass of a run goes through here (`--logprob_chunk` = `chunk`): the learner's
    forward, the reference forward (A0/A1/A2), the pre-update recompute for --tis_cap, the warm
    start and the delta_logp monitor. -> (logp[N, T], entropy[N, T] | None, logits[N, T, V] | None).

    chunk > 0: `chunked_response_logprobs` (no [N, T, V] logits; the third item is None);
    0: `response_logprobs` (one forward, the logits returned)."""
    if chunk > 0:
        if not chunks_logprobs(model):
            raise ValueError(
                f"chunked log-probs need a policy with hidden_states/logits_from_hidden, not {type(model).__name__}"
            )
        return chunked_response_logprobs(model, tokens, P, temperature, with_entropy=with_entropy, chunk=chunk)
    return response_logprobs(model, tokens, P, temperature, with_entropy=with_entropy)
