"""The rollout stage: B prompts x G samples, scored, as one `RolloutBatch` plus its metrics.

Legend: B prompts, G samples per prompt, N = B*G, P prompt length, T response length.
`Collector` runs the local engine's sampling and the Ray generators' alike; `HandedCollector`
serves batches sampled elsewhere (the Ray learner). DAPO group assembly lives here too.
"""

from __future__ import annotations

from typing import Optional, Protocol

import numpy as np
import torch
from torch import Tensor

from noma_prorl_bench.algorithms import dapo
from noma_prorl_bench.config.specs import RolloutSpec
from noma_prorl_bench.io.metrics import Counters, Metrics
from noma_prorl_bench.rollout.sampling import RolloutBatch, collect

DS_MAX_EXTRA_ROUNDS = 3  # --dynamic_sampling: at most 3 extra rollout rounds of B prompts per step


class BatchSource(Protocol):
    """What the step asks for its batch: `collect() -> (batch, metrics)`."""

    def collect(self) -> tuple[RolloutBatch, Metrics]: ...


class Collector:
    """Samples with the policy from the task: the prompt stream `data_rng`, the token stream
    `sample_gen`; every policy forward is counted in `counters`."""

    def __init__(
        self,
        task,
        tok,
        policy,
        *,
        batch_size: int,
        group_size: int,
        T_max: int,
        P: Optional[int],
        temperature: float,
        dynamic_sampling: bool,
        data_rng: np.random.Generator,
        sample_gen: torch.Generator,
        counters: Counters,
        sample_draw: str = "exponential",
    ):
        self.task, self.tok, self.policy = task, tok, policy
        self.sample_draw = sample_draw
        self.B, self.G, self.T_max, self.P = batch_size, group_size, T_max, P
        self.temperature, self.dynamic_sampling = temperature, bool(dynamic_sampling)
        self.data_rng, self.sample_gen, self.counters = data_rng, sample_gen, counters

    @classmethod
    def from_spec(
        cls,
        spec: RolloutSpec,
        task,
        tok,
        policy,
        T_max: int,
        P: Optional[int],
        data_rng,
        sample_gen,
        counters: Counters,
    ) -> "Collector":
        return cls(
            task,
            tok,
            policy,
            batch_size=spec.shape.batch_size,
            group_size=spec.shape.group_size,
            T_max=T_max,
            P=P,
            temperature=spec.shape.temperature,
            dynamic_sampling=bool(spec.dynamic_sampling),
            data_rng=data_rng,
            sample_gen=sample_gen,
            counters=counters,
            sample_draw=spec.sample_draw,
        )

    def collect(self) -> tuple[RolloutBatch, Metrics]:
        """B prompts x G samples, scored. --dynamic_sampling 1 (DAPO): while fewer than B groups
        have a nonzero reward spread, sample another round of B prompts (at most
        DS_MAX_EXTRA_ROUNDS extra), then keep B groups (assemble_groups)."""
        rounds = [self.sample_round()]
        if not self.dynamic_sampling:
            return rounds[0], {}
        n_informative = int(informative_groups(rounds[0], self.G).sum())
        while n_informative < self.B and len(rounds) <= DS_MAX_EXTRA_ROUNDS:
            rounds.append(self.sample_round())
            n_informative += int(informative_groups(rounds[-1], self.G).sum())
        return assemble_groups(rounds, self.B, self.G, self.tok.pad_id)

    def sample_round(self) -> RolloutBatch:
        """One round of B fresh prompts x G samples; every policy forward is counted."""
        examples = self.task.sample(self.data_rng, self.B)
        batch, gs = collect(
            self.policy,
            self.task,
            self.tok,
            examples,
            self.G,
            self.T_max,
            self.temperature,
            self.sample_gen,
            self.P,
            draw=self.sample_draw,
        )
        self.counters.add("policy_fwd_rollout", gs.fwd_calls)
        self.counters.add("tokens_policy", gs.tokens)
        return batch


class HandedCollector:
    """A batch sampled elsewhere (a Ray generator), handed in with its info before the step:
    its rollout counters go to `counters`, its logp_ref to a remote reference (`receive`)."""

    def __init__(self, counters: Counters, reference=None):
        self.counters, self.reference = counters, reference
        self._handed: Optional[tuple[RolloutBatch, dict]] = None

    def hand(self, batch: RolloutBatch, info: dict) -> None:
        self._handed = (batch, info)

    def collect(self) -> tuple[RolloutBatch, Metrics]:
        if self._handed is None:
            raise RuntimeError("HandedCollector.collect without a handed-in batch")
        batch, info = self._handed
        self._handed = None
        for k, v in info["counts"].items():
            self.counters.add(k.removeprefix("count/"), v)
        if self.reference is not None:
            self.reference.receive(batch.logp_ref, info["ref_version"], info["ref_counts"], info["ref_s"])
        return batch, dict(info["rollout_metrics"])


def informative_groups(batch: RolloutBatch, G: int) -> Tensor:
    """Keep-mask [B'] of the groups of `batch` whose task rewards are not all equal."""
    keep, _ = dapo.dynamic_sampling_mask(batch.rewards.view(-1, G))  # [B']
    return keep


def assemble_groups(rounds: list[RolloutBatch], B: int, G: int, pad_id: int) -> tuple[RolloutBatch, Metrics]:
    """DAPO dynamic sampling: a batch of exactly B groups out of one or more rollout rounds.

    Groups whose G task rewards have zero spread carry no group-relative advantage and are
    dropped; the first B informative groups (in sampling order) are kept. If fewer than B
    exist (the trainer stops after DS_MAX_EXTRA_ROUNDS extra rounds), the remaining slots are
    filled with dropped groups in sampling order, so every step keeps the shape [B*G, ...]
    (those groups then contribute only KL/entropy terms, as without dynamic sampling).
    Rounds may differ in P (text tasks) and T: prompts are left-padded and responses
    right-padded with PAD (mask 0, logp_old 0), which changes no logprob (the toy tasks have a
    fixed P; HF policies mask leading PADs).
    """
    picks: list[tuple[int, int]] = []
    fill: list[tuple[int, int]] = []
    n_zero = 0
    for r, b in enumerate(rounds):
        for g, k in enumerate(informative_groups(b, G).tolist()):
            (picks if k else fill).append((r, g))
            n_zero += not k
    n_fill = max(0, B - len(picks))
    chosen = picks[:B] + fill[:n_fill]  # B (round, group)
    P = max(b.prompt_len for b in rounds)
    T = max(b.T for b in rounds)
    parts = [_padded_group(rounds[r], g, G, P, T, pad_id) for r, g in chosen]
    cols = list(zip(*parts))
    batch = RolloutBatch(
        tokens=torch.cat(cols[0]),
        mask=torch.cat(cols[1]),
        logp_old=torch.cat(cols[2]),
        rewards=torch.cat(cols[3]),
        truncated=torch.cat(cols[4]),
        group=torch.arange(B, device=rounds[0].group.device).repeat_interleave(G),
        prompt_len=P,
        prompts=sum(cols[5], []),
        answers=sum(cols[6], []),
        responses=sum(cols[7], []),
        version=rounds[0].version,
    )
    metrics = {
        "dapo/dropped_groups": float(n_zero - n_fill),
        "dapo/filler_groups": float(n_fill),
        "dapo/extra_rounds": float(len(rounds) - 1),
        "dapo/reward_mean_sampled": float(torch.cat([b.rewards for b in rounds]).mean()),
    }
    return batch, metrics


def _padded_group(b: RolloutBatch, g: int, G: int, P: int, T: int, pad_id: int) -> tuple:
    """Group g of round b as (tokens [G, P+T], mask, logp_old, rewards, truncated, prompts, answers,
    responses): prompts left-padded to P, responses right-padded to T with PAD (mask 0, logp_old 0)."""
    rows = list(range(g * G, (g + 1) * G))  # G row indices
    p_pad, t_pad = P - b.prompt_len, T - b.T
    tok = b.tokens[rows]  # [G, L_r]
    tok = torch.cat([tok.new_full((G, p_pad), pad_id), tok, tok.new_full((G, t_pad), pad_id)], 1)  # [G, P+T]
    zeros = b.mask.new_zeros(G, t_pad)
    return (
        tok,
        torch.cat([b.mask[rows], zeros], 1),
        torch.cat([b.logp_old[rows], zeros], 1),
        b.rewards[rows],
        b.truncated[rows],
        [b.prompts[i] for i in rows],
        [b.answers[i] for i in rows],
        [b.responses[i] for i in rows],
    )
