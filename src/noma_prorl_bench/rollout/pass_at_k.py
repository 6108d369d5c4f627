"""pass@k on the validation set (`--eval_samples K`): K sampled completions per prompt.

For a prompt with n samples of which c are correct, the unbiased estimator of the chance that
at least one of k samples drawn without replacement is correct is (Chen et al. 2021, "Evaluating
Large Language Models Trained on Code", eq. 1)

    pass@k = 1 - C(n - c, k) / C(n, k),

computed as 1 - prod_{i = n-c+1}^{n} (1 - k / i) (no large binomials); `reward/val_pass@k` is its
mean over the validation prompts, for k = 1, 2, 4, ... up to K (and K itself). A sample is
correct when it earns the full reward: `reward_parts(...)["correct"] >= 1` for tasks that split
their reward (rg:), else `reward(...) >= 1`.

>>> round(pass_at_k(5, 2, 2), 4)   # 1 - C(3,2)/C(5,2) = 1 - 3/10
0.7
>>> pass_at_k(4, 0, 2), pass_at_k(4, 3, 2)
(0.0, 1.0)
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import torch

from noma_prorl_bench.models.base import policy_device
from noma_prorl_bench.rollout.sampling import GenStats, generate


def pass_at_k(n: int, c: int, k: int) -> float:
    """1 - C(n-c, k) / C(n, k): the unbiased pass@k of one prompt with c correct of n samples."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def ks_for(K: int) -> list[int]:
    """1, 2, 4, ... <= K, and K itself."""
    ks, k = [], 1
    while k <= K:
        ks.append(k)
        k *= 2
    return ks if ks[-1] == K else ks + [K]


def is_correct(task, response: str, answer: str) -> bool:
    parts = getattr(task, "reward_parts", None)
    return (parts(response, answer)["correct"] if parts else task.reward(response, answer)) >= 1.0


def sampled_pass_at_k(
    policy,
    task,
    tok,
    examples,
    K: int,
    max_new_tokens: int,
    temperature: float,
    generator: torch.Generator,
    prompt_len: Optional[int] = None,
    chunk: int = 256,
    draw: str = "exponential",
) -> tuple[dict[str, float], GenStats]:
    """({"reward/val_pass@k": mean over prompts}, GenStats) from K samples per example, at most
    `chunk` sequences per generate call (whole prompts: the K copies of a prompt stay together)."""
    per = max(1, chunk // K)
    correct, stats = [], GenStats()
    for i in range(0, len(examples), per):
        ex = examples[i : i + per]
        ids = tok.encode_prompts([e.prompt for e in ex], prompt_len).to(policy_device(policy))
        ids = ids.repeat_interleave(K, dim=0)  # [len(ex) * K, P]
        resp, _, _, _, st = generate(
            policy,
            ids,
            max_new_tokens,
            temperature,
            tok.eos_id,
            tok.pad_id,
            generator=generator,
            group_size=K,
            draw=draw,
        )
        stats.fwd_calls += st.fwd_calls
        stats.tokens += st.tokens
        texts = [tok.decode(r) for r in resp.tolist()]
        for j, e in enumerate(ex):
            correct.append(sum(is_correct(task, s, e.answer) for s in texts[j * K : (j + 1) * K]))
    return ({f"reward/val_pass@{k}": float(np.mean([pass_at_k(K, c, k) for c in correct])) for k in ks_for(K)}, stats)
