"""Micro-batching with gradient accumulation (`--micro_batch`) and the training log-prob path
(`--logprob_chunk`) of `Learner.minibatch_step`.

Legend: n rows (sequences) of one minibatch, m rows of one micro-batch, T response length.

A minibatch of n rows is split into micro-batches of at most `--micro_batch` rows; each runs
forward, loss and backward on its own, so only one micro-batch's activations exist at a time,
and the gradients add up in `.grad` before the single optimizer step. Exactness: every loss
aggregation (`losses.aggregate`) is linear in the per-token loss matrix for a fixed mask, so
the minibatch loss equals the sum over micro-batches of `aggregate` applied to the minibatch's
[n, T] matrix holding that micro-batch's rows and zeros elsewhere (`aggregate_in`): the
normalisers (token count, sequence count, N * T_max) stay the minibatch's. The per-token
tensors come back detached and are concatenated, so the logged metrics are the minibatch's
too; the loss function's own metrics (clip fractions, ...) are averaged with weights = response
tokens per micro-batch (exact for token means such as clip/frac).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from noma_prorl_bench.algorithms import losses as loss_lib
from noma_prorl_bench.models.base import policy_logprobs


def slices(sl: slice, micro_batch: int) -> list[slice]:
    """The rows of minibatch `sl` in consecutive pieces of at most `micro_batch` rows (0: one piece)."""
    if micro_batch <= 0 or sl.stop - sl.start <= micro_batch:
        return [sl]
    return [slice(a, min(a + micro_batch, sl.stop)) for a in range(sl.start, sl.stop, micro_batch)]


def aggregate_in(x: Tensor, mask_ctx: Tensor, rows: slice, ctx: slice, agg: str, norm_const: float) -> Tensor:
    """`losses.aggregate` of the minibatch `ctx` (mask_ctx[n, T]) for a matrix that holds x[m, T] in
    `rows` and zeros elsewhere; summed over a partition of `ctx` into `rows`, equals the
    minibatch's aggregate of the whole matrix (linearity)."""
    if rows == ctx:
        return loss_lib.aggregate(x, mask_ctx, agg, norm_const=norm_const)
    before, after = rows.start - ctx.start, ctx.stop - rows.stop
    T = x.shape[1]
    full = torch.cat([x.new_zeros(before, T), x, x.new_zeros(after, T)])  # [n, T]
    return loss_lib.aggregate(full, mask_ctx, agg, norm_const=norm_const)


def logprobs(policy, tokens: Tensor, P: int, temperature: float, chunk: int):
    """The learner's forward -> (logp[m, T], entropy[m, T], logits[m, T, V] or None with `chunk` > 0)."""
    return policy_logprobs(policy, tokens, P, temperature, with_entropy=True, chunk=chunk)


@dataclass
class Part:
    """What one micro-batch leaves behind after its backward (all detached)."""

    loss: Tensor  # scalar: its share of the minibatch loss
    logp: Tensor  # [m, T]
    ent: Tensor  # [m, T]
    pg: Tensor  # [m, T]
    kl: dict  # {name: [m, T]}
    kl_tok: Tensor  # [m, T]
    metrics: dict  # the loss function's own metrics
    n_tok: float  # response tokens (loss mask) in this micro-batch


def join(parts: list[Part]) -> tuple[Tensor, Tensor, Tensor, Tensor, dict, Tensor, dict]:
    """-> (loss, logp[n, T], ent[n, T], pg[n, T], kl {name: [n, T]}, kl_tok[n, T], metrics)."""
    if len(parts) == 1:
        p = parts[0]
        return p.loss, p.logp, p.ent, p.pg, p.kl, p.kl_tok, p.metrics
    cat = torch.cat
    w = [max(p.n_tok, 0.0) for p in parts]
    tot = sum(w) or 1.0
    metrics = {k: sum(wi * float(p.metrics[k]) for wi, p in zip(w, parts)) / tot for k in parts[0].metrics}
    kl = {k: cat([p.kl[k] for p in parts]) for k in parts[0].kl}
    return (
        torch.stack([p.loss for p in parts]).sum(),
        cat([p.logp for p in parts]),
        cat([p.ent for p in parts]),
        cat([p.pg for p in parts]),
        kl,
        cat([p.kl_tok for p in parts]),
        metrics,
    )
