"""Sampling: G responses per prompt with per-token behaviour log-probs, masks, EOS, truncation.

Legend: B prompts, G samples per prompt, N = B*G, P prompt length, T response length.

`generate` runs the policy incrementally (prefill, then one `decode` per token) under
inference_mode, samples from softmax(logits / temperature) with a dedicated torch.Generator, and
records `logp_old` = log pi_old(token) under the same temperature. The response length is
trimmed to the longest response in the batch (<= max_new_tokens), so every shape is fixed
within a step. `collect` builds a scored `RolloutBatch`.

Devices: `collect` and `evaluate` move the (CPU) prompt ids to the policy's device, and every
tensor of a RolloutBatch lives there. The sampling generator must be on that device too
(`torch.multinomial` requires it): a CPU generator for CPU runs, a CUDA one for CUDA runs.
Policies whose `prefill` takes `capacity` (the transformer's and HF's preallocated KV caches)
get `P + max_new_tokens - 1`, the positions a rollout writes (the last token is never fed back).

The loop keeps everything on the device: preallocated [N, T] buffers for tokens, logp_old and
the mask, EOS bookkeeping as tensor ops, and one host synchronisation ("all finished?") every
`sync_every` tokens (docs/performance.md). Policies with `repeat_state` (transformer, HF, GRU)
prefill each distinct prompt once and share the cache across its G samples.
"""

from __future__ import annotations

import contextlib
import inspect
from dataclasses import dataclass, field
from typing import Optional

import torch
import torch.nn.functional as F

from noma_prorl_bench.config.choices import SAMPLE_DRAWS
from noma_prorl_bench.models.base import policy_device
from noma_prorl_bench.models.lora import merged_adapters
from noma_prorl_bench.models.packed import packed_linears


@dataclass
class RolloutBatch:
    """One step's rollouts (see docs/ARCHITECTURE.md)."""

    tokens: torch.Tensor  # [N, L] prompt (left-padded) + response
    mask: torch.Tensor  # [N, T] 1.0 on generated tokens up to and including EOS
    logp_old: torch.Tensor  # [N, T] behaviour log-probs
    rewards: torch.Tensor  # [N]
    truncated: torch.Tensor  # [N] bool: no EOS within max_new_tokens
    group: torch.Tensor  # [N] prompt index 0..B-1
    prompt_len: int
    prompts: list = field(default_factory=list)
    answers: list = field(default_factory=list)
    responses: list = field(default_factory=list)
    logp_ref: Optional[torch.Tensor] = None  # [N, T]
    advantages: Optional[torch.Tensor] = None  # [N], or [N, T] (token forms, --adv gae)
    values: Optional[torch.Tensor] = None  # [N, T] the critic's values before the update (--adv gae)
    returns: Optional[torch.Tensor] = None  # [N, T] GAE returns (--adv gae)
    version: int = 0

    @property
    def n(self) -> int:
        return self.tokens.shape[0]

    @property
    def T(self) -> int:
        return self.mask.shape[1]


@dataclass
class GenStats:
    """Exact counts of one `generate` call."""

    fwd_calls: int = 0  # prefill + decode calls
    tokens: int = 0  # token positions pushed through the policy


def generate(
    policy,
    prompts: torch.Tensor,
    max_new_tokens: int,
    temperature: float,
    eos_id: int,
    pad_id: int,
    generator: Optional[torch.Generator] = None,
    greedy: bool = False,
    sync_every: Optional[int] = None,
    group_size: int = 1,
    draw: str = "exponential",
):
    """prompts[N, P] -> (response[N, T], logp_old[N, T], mask[N, T], truncated[N], GenStats).

    Runs under torch.inference_mode (no autograd bookkeeping at all; about 10% faster than
    no_grad on the small models, same numbers) and returns ordinary tensors: inference tensors
    could not be saved for backward by the losses that read logp_old and the mask.

    `sync_every` k: the host asks "has every sequence finished?" only every k tokens (the one
    device -> host synchronisation of the loop; default 1 on CPU, where it costs nothing,
    `SYNC_EVERY_CUDA` elsewhere). The response is trimmed to its last live column, so k changes
    neither the tokens nor logp_old; with k > 1 up to k - 1 extra decode steps may run after
    the last EOS, each drawing once more from `generator` (its state afterwards differs).

    Under `--dtype bf16_mixed` (a policy with a bf16 `compute_dtype`) the LoRA adapters are merged
    into their base weights for the call (`sampling_weights`): the sampled distribution is the
    learner's up to bf16 rounding (tests/unit/test_bf16_hf.py bounds |logp_old - learner logp|).

    `group_size` G: when the rows are G consecutive copies of each prompt (GRPO's groups; checked,
    not trusted), the prompt is prefilled once and its KV cache shared by the G samples: 1/G of
    the prefill work, and `GenStats.tokens` counts the B*P positions actually pushed. The logits
    equal the unshared prefill's up to float rounding (a matmul's row results may depend on the
    number of rows in the last bits); the default toy runs' trajectories are unchanged.

    `draw` (--sample_draw): how a token is drawn from the probabilities (`draw_tokens`)."""
    if draw not in SAMPLE_DRAWS:
        raise ValueError(f"draw must be one of {SAMPLE_DRAWS}, got {draw!r}")
    k = sync_every or (1 if prompts.device.type == "cpu" else SYNC_EVERY_CUDA)
    with torch.inference_mode(), sampling_weights(policy, prompts.shape[0]):
        response, logp, mask, done, stats = _sample(
            policy, prompts, max_new_tokens, temperature, eos_id, pad_id, generator, greedy, k, group_size, draw
        )
    return response.clone(), logp.clone(), mask.clone(), done.logical_not(), stats


def draw_tokens(probs: torch.Tensor, generator: Optional[torch.Generator], draw: str) -> torch.Tensor:
    """probs[N, V] (rows need not sum to 1) -> one token per row [N], drawn from probs / probs.sum(-1).

    exponential: `torch.multinomial(probs, 1)`: PyTorch draws one exponential variate E_v per entry
    and returns argmax_v probs_v / E_v (the exponential race, equivalent to Gumbel-max); this is
    what transformers' `generate` does, and it costs N x V variates per token.
    inverse_cdf: one uniform variate U per row (float64, from `generator`) and the first entry whose
    cumulative probability exceeds U x the row's total (`inverse_cdf_tokens`): N variates per token.
    (`torch.multinomial(..., replacement=True)` is no alternative: for one sample it takes the
    exponential race too.) Both draw from the same distribution (tests/unit/test_sample_draw.py
    checks the frequencies); they read the generator differently, so a seed gives other tokens."""
    if draw == "exponential":
        return torch.multinomial(probs, 1, generator=generator).squeeze(1)
    u = torch.rand(probs.shape[0], 1, generator=generator, dtype=torch.float64, device=probs.device)  # [N, 1]
    tok, total = inverse_cdf_tokens(probs, u)
    # what torch.multinomial refuses, refused alike (the caller turns it into NonFiniteLogits): a NaN
    # or Inf entry makes its row's total non-finite; one host synchronisation per token (free on
    # CPU, where the sampler asks "all finished?" every token anyway)
    if not bool((torch.isfinite(total) & (total > 0)).all()) or bool(probs.amin() < 0):
        raise RuntimeError("probability tensor contains either inf, nan or element < 0 (or a row sums to 0)")
    return tok


#: entries per block of `inverse_cdf_tokens`: float32 sums within a block, float64 across blocks
CDF_BLOCK = 256


def inverse_cdf_tokens(probs: torch.Tensor, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """probs[N, V] >= 0, u[N, 1] in [0, 1) (float64) -> (tokens [N], each row's total [N, 1] in
    float64): per row the first v with cumsum(probs)_v > u * sum(probs), so P(v) = probs_v / sum(probs)
    and a zero entry is never chosen.

    The cumulative sum is taken in two levels, because a float32 running sum over V = 49,152 entries
    rounds each boundary by up to ~V ulps of the running total, and a float64 one is 7x slower here:
    float32 sums within blocks of CDF_BLOCK entries (rounding relative to the block's mass), float64
    across the block totals. The block is found in the float64 level, the entry in its float32
    within-block sums; a residual that rounding puts at or past the end of a block (or a u x total
    that rounds up to the total) is clamped to the last entry of nonzero probability."""
    N, V = probs.shape
    pad = (-V) % CDF_BLOCK
    p = probs if probs.dtype in (torch.float32, torch.float64) else probs.float()
    p = F.pad(p, (0, pad)) if pad else p  # [N, V'] (zeros past V: never chosen)
    inner = p.reshape(N, -1, CDF_BLOCK).cumsum(-1)  # [N, nb, CDF_BLOCK]: float32 within each block
    outer = inner[..., -1].double().cumsum(-1)  # [N, nb]: float64 mass up to the end of each block
    total = outer[:, -1:]  # [N, 1]
    x = u * total  # [N, 1]
    last_block = (outer < total).sum(-1, keepdim=True)  # [N, 1]: the last block with mass
    b = torch.searchsorted(outer, x, right=True).clamp_(max=last_block)  # [N, 1]
    before = torch.where(b > 0, outer.gather(1, (b - 1).clamp(min=0)), torch.zeros_like(x))  # [N, 1]
    row = inner.gather(1, b[:, :, None].expand(N, 1, CDF_BLOCK)).squeeze(1)  # [N, CDF_BLOCK]
    r = (x - before).to(row.dtype)  # [N, 1]: the residual inside block b
    last_entry = (row < row[:, -1:]).sum(-1, keepdim=True)  # [N, 1]: its last entry of nonzero probability
    j = torch.searchsorted(row, r, right=True).clamp_(max=last_entry)  # [N, 1]
    return (b * CDF_BLOCK + j).squeeze(1), total


@contextlib.contextmanager
def sampling_weights(policy, rows: int = 0):
    """The weights the sampler decodes with: under bf16 autocast (`--dtype bf16_mixed`) each LoRA
    adapter merged into its base weight for the call (models/lora.merged_adapters: one bf16 matmul
    per adapted layer instead of three); with `decode_weights == "packed"` (HF policies,
    `--decode_weights`) every CPU Linear multiplies its `rows`-row decode batches by a weight packed
    once for the matmul library (models/packed.py), where that gives `F.linear`'s exact bits."""
    with contextlib.ExitStack() as stack:
        if getattr(policy, "compute_dtype", None) == torch.bfloat16 and isinstance(policy, torch.nn.Module):
            stack.enter_context(merged_adapters(policy))
        if rows > 0 and getattr(policy, "decode_weights", "plain") == "packed" and isinstance(policy, torch.nn.Module):
            stack.enter_context(packed_linears(policy, rows))
        yield


SYNC_EVERY_CUDA = 8
# Device types on which the sampler's [N, T] buffers are reused across rollouts (BufferPool).
REUSE_BUFFERS_ON = {"cuda"}


class BufferPool:
    """Rollout buffers kept across steps and reused when a request has the same key
    (name, shape, dtype, device): no per-step reallocation on CUDA. Callers copy out what
    they keep (`generate` returns clones), so the next rollout may overwrite a buffer."""

    def __init__(self):
        self.buffers: dict = {}

    def get(self, name: str, shape: tuple, dtype: torch.dtype, device, fill) -> torch.Tensor:
        key = (name, tuple(shape), dtype, str(device))
        buf = self.buffers.get(key)
        if buf is None:
            buf = self.buffers[key] = torch.empty(shape, dtype=dtype, device=device)
        return buf.fill_(fill)


POOL = BufferPool()


def _buffer(name: str, shape: tuple, dtype: torch.dtype, device: torch.device, fill) -> torch.Tensor:
    if device.type in REUSE_BUFFERS_ON:
        return POOL.get(name, shape, dtype, device, fill)
    return torch.full(shape, fill, dtype=dtype, device=device)


# long: the hot sampling loop in one piece: prefill, per-token draw and EOS bookkeeping share its buffers
def _sample(
    policy,
    prompts,
    max_new_tokens,
    temperature,
    eos_id,
    pad_id,
    generator,
    greedy,
    sync_every=1,
    group_size=1,
    draw="exponential",
):
    """The sampling loop of `generate` -> (response, logp_old, mask, done[N], GenStats).

    Prefill is one batched forward over the distinct prompts (with `group_size` G > 1 and rows
    that really come in G consecutive copies, each prompt once, its state then repeated G times).
    Every per-token write goes into buffers preallocated for T = max_new_tokens columns; EOS
    bookkeeping (`done`, the mask, PAD after EOS) stays on the device."""
    N, P = prompts.shape
    T = max_new_tokens
    stats = GenStats()
    G = group_size if _shares_prefix(policy, prompts, group_size) else 1
    uniq = prompts[::G]  # [N/G, P]: each distinct prompt once
    if _prefill_takes_capacity(policy):
        cap = P + max(T - 1, 0)  # positions written: P + (T - 1) decodes
        logits, state = policy.prefill(uniq, capacity=cap)  # [N/G, V]
    else:
        logits, state = policy.prefill(uniq)  # [N/G, V]
    if G > 1:
        logits, state = logits.repeat_interleave(G, 0), policy.repeat_state(state, G)  # [N, V]
    stats.fwd_calls, stats.tokens = 1, uniq.shape[0] * P
    done = torch.zeros(N, dtype=torch.bool, device=prompts.device)
    dev = prompts.device
    response = _buffer("response", (N, T), prompts.dtype, dev, pad_id)  # [N, T]
    logps = _buffer("logp_old", (N, T), torch.float32, dev, 0.0)  # [N, T]
    masks = _buffer("mask", (N, T), torch.float32, dev, 0.0)  # [N, T]
    pad = torch.full((N,), pad_id, dtype=prompts.dtype, device=prompts.device)
    t = -1
    for t in range(T):
        scaled = logits.float() if temperature == 1.0 else logits.float() / temperature  # x / 1 is x: same bits
        logp_all = F.log_softmax(scaled, dim=-1)  # [N, V]
        if greedy:
            tok = logp_all.argmax(-1)  # [N]
        else:
            try:
                tok = draw_tokens(logp_all.exp(), generator, draw)  # [N]
            except RuntimeError as e:  # "probability tensor contains either inf, nan or ..."
                bad = ~torch.isfinite(logp_all).all(-1)
                if not bool(bad.any()):
                    raise
                from noma_prorl_bench.rollout.nonfinite import NonFiniteLogits  # noqa: PLC0415

                raise NonFiniteLogits(rows=int(bad.sum())) from e
        live = ~done
        logps[:, t] = torch.where(live, logp_all.gather(1, tok[:, None]).squeeze(1), 0.0)
        tok = torch.where(live, tok, pad)
        response[:, t] = tok
        masks[:, t] = live
        done = done | (tok == eos_id)
        if t == T - 1 or ((t + 1) % sync_every == 0 and bool(done.all())):
            break
        logits, state = policy.decode(tok, state)
        stats.fwd_calls += 1
        stats.tokens += N
    used = t + 1
    if sync_every > 1 and used > 0:  # drop the columns after the last EOS
        used = int(masks[:, :used].any(0).nonzero().max()) + 1
    return response[:, :used], logps[:, :used], masks[:, :used], done, stats


def _shares_prefix(policy, prompts: torch.Tensor, G: int) -> bool:
    """True when rows come in G consecutive identical copies and the policy can repeat a state."""
    N = prompts.shape[0]
    if G <= 1 or N % G or not hasattr(policy, "repeat_state"):
        return False
    return bool(torch.equal(prompts, prompts[::G].repeat_interleave(G, 0)))


def _prefill_takes_capacity(policy) -> bool:
    try:
        return "capacity" in inspect.signature(policy.prefill).parameters
    except (TypeError, ValueError):
        return False


def collect(
    policy,
    task,
    tokenizer,
    examples,
    group_size: int,
    max_new_tokens: int,
    temperature: float,
    generator: torch.Generator,
    prompt_len: Optional[int] = None,
    draw: str = "exponential",
):
    """Sample `group_size` responses for each example and score them -> (RolloutBatch, GenStats)."""
    B, G = len(examples), group_size
    prompts = [e.prompt for e in examples for _ in range(G)]
    answers = [e.answer for e in examples for _ in range(G)]
    device = policy_device(policy)
    prompt_ids = tokenizer.encode_prompts(prompts, prompt_len).to(device)  # [N, P]
    resp, logp_old, mask, truncated, stats = generate(
        policy,
        prompt_ids,
        max_new_tokens,
        temperature,
        tokenizer.eos_id,
        tokenizer.pad_id,
        generator,
        group_size=G,
        draw=draw,
    )
    texts = [tokenizer.decode(r) for r in resp.tolist()]
    rewards = torch.tensor([task.reward(s, a) for s, a in zip(texts, answers)], dtype=torch.float32, device=device)
    batch = RolloutBatch(
        tokens=torch.cat([prompt_ids, resp], 1),
        mask=mask,
        logp_old=logp_old,
        rewards=rewards,
        truncated=truncated,
        group=torch.arange(B, device=device).repeat_interleave(G),
        prompt_len=prompt_ids.shape[1],
        prompts=prompts,
        answers=answers,
        responses=texts,
    )
    return batch, stats


#: prompts per greedy `generate` call of `evaluate`: the KV cache, prefill activations and [N, V]
#: logits scale with it (SmolLM2-135M, 200 prompts in one call: benchmarks/micro/eval_memory.py)
EVAL_BATCH = 32


@torch.no_grad()
def evaluate(
    policy,
    task,
    tokenizer,
    examples,
    max_new_tokens: int,
    prompt_len: Optional[int] = None,
    chunk: int = 256,
    bar=None,
    batch: Optional[int] = None,
):
    """Greedy decoding on `examples` -> (mean reward, responses, GenStats).

    Prompts are encoded (padded to a common length) `chunk` at a time and decoded `batch` rows per
    generate call: each row's tokens are those of a one-call evaluation of the chunk, so greedy
    outputs match it (tests/unit/test_eval_batch.py) while memory follows `batch` (None:
    EVAL_BATCH). `bar` (a tqdm bar or None) is advanced by each call's prompts."""
    total, texts, stats, batch = 0.0, [], GenStats(), batch or EVAL_BATCH
    for i in range(0, len(examples), chunk):
        ex = examples[i : i + chunk]
        ids = tokenizer.encode_prompts([e.prompt for e in ex], prompt_len).to(policy_device(policy))  # [n, P]
        for j in range(0, len(ex), batch):
            resp, _, _, _, st = generate(
                policy, ids[j : j + batch], max_new_tokens, 1.0, tokenizer.eos_id, tokenizer.pad_id, greedy=True
            )
            stats.fwd_calls += st.fwd_calls
            stats.tokens += st.tokens
            for r, e in zip(resp.tolist(), ex[j : j + batch]):
                s = tokenizer.decode(r)
                texts.append(s)
                total += task.reward(s, e.answer)
            if bar is not None:
                bar.update(len(ex[j : j + batch]))
    if bar is not None:
        bar.close()
    return total / max(len(examples), 1), texts, stats
