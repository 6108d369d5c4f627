"""The supervised warm start that runs before RL (moved out of trainer.py to keep it readable).

Teacher forcing on correct responses (the task's `demonstration(example)` when it has one, else
the answer) so RL starts from a policy that is sometimes right. `--warmstart_steps -1` resolves
to 50 (gru), 100 (transformer) or 0 (hf:PATH); its own Adam (lr `--warmstart_lr`) is thrown away
afterwards, so RL's optimizer starts fresh.
"""

from __future__ import annotations

import numpy as np
import torch

from noma_prorl_bench.config.specs import WarmStartSpec
from noma_prorl_bench.models.base import policy_logprobs
from noma_prorl_bench.models.startup import lean_optimizer


def demonstration_batch(
    task, tok, rng: np.random.Generator, n: int, P: int | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """n sampled examples as (tokens [n, P' + T], response mask [n, T]), right-padded responses;
    P' = P, or the longest prompt of the batch when P is None (HF tokenizers: left-padded)."""
    demo = getattr(task, "demonstration", None)
    ex = task.sample(rng, n)
    prompts = tok.encode_prompts([e.prompt for e in ex], P)  # [n, P]
    answers = [tok.encode_answer(demo(e) if demo else e.answer) for e in ex]
    T = max(len(a) for a in answers)
    ans = torch.full((len(ex), T), tok.pad_id, dtype=torch.long)
    mask = torch.zeros(len(ex), T)
    for i, a in enumerate(answers):
        ans[i, : len(a)] = torch.tensor(a)
        mask[i, : len(a)] = 1.0
    return torch.cat([prompts, ans], 1), mask  # [n, P + T], [n, T]


def supervised_warm_start(policy, task, tok, spec: WarmStartSpec, P: int | None, device) -> int:
    """`spec.warmstart_steps_resolved` Adam steps of mean response NLL on batches of 64; returns
    the number of steps. Seeded by (spec.seed, 3), so the warm start is the same for every arm."""
    rng = np.random.default_rng([spec.seed, 3])
    opt = lean_optimizer(torch.optim.Adam)(policy.parameters(), lr=spec.warmstart_lr)
    n_steps = spec.warmstart_steps_resolved
    for _ in range(n_steps):
        tokens, mask = demonstration_batch(task, tok, rng, 64, P)
        tokens, mask = tokens.to(device), mask.to(device)
        prompt_len = tokens.shape[1] - mask.shape[1]  # P, or this batch's
        logp, _, _ = policy_logprobs(policy, tokens, prompt_len, chunk=spec.logprob_chunk)
        loss = -(logp * mask).sum() / mask.sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    policy.zero_grad(set_to_none=True)  # no stale grads (frozen params would keep them)
    return n_steps
