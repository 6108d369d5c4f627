"""Per-stage specs: the frozen slices of a `RunConfig` that each stage of a run reads.

`RunSpecs.from_config(cfg)` is built once (by `Trainer.from_config` and the engines' entries);
every stage then receives its own spec, never the whole config: the task and model builders
(`TaskSpec`, `ModelSpec`), the warm start, the collector (`RolloutSpec`), the reference
(`ReferenceSpec`), the loss side of the learner (`ObjectiveSpec`, whose `kl` is the `KLSpec`
of algorithms/kl_term.KLTerm), its optimizer (`OptimizerSpec`), the critic of --adv gae
(`CriticSpec`), the reset and growth managers (`ResetSpec`, `GrowthSpec`) and the evaluation
(`EvalSpec`).

A spec field is named as the `RunConfig` attribute it copies (the flag, or a resolved property
such as `eps_lo` or `loss_agg_resolved`), so `--x` is `spec.x` wherever it is read; values are
copied unchanged. Derived values that combine fields are properties of the spec.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, TypeVar

S = TypeVar("S")


def take(cls: type[S], cfg: Any, **given: Any) -> S:
    """An instance of the spec dataclass `cls`: the fields in `given` as given, every other one read
    from `cfg`'s attribute of that name."""
    names = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
    return cls(**{n: getattr(cfg, n) for n in names if n not in given}, **given)


@dataclass(frozen=True)
class TaskSpec:
    """The task builder's fields (tasks.make_task; the jsonl:PATH and rg:NAME options)."""

    task: str
    n_val: int
    task_kwargs: str
    prompt_field: str
    answer_field: str
    reward_fn: str
    reward_tol: float
    max_task_bytes: int
    max_line_bytes: int
    max_prompt_chars: int
    max_answer_chars: int
    answer_extraction: str
    format_reward: float
    max_new_tokens: int


@dataclass(frozen=True)
class ModelSpec:
    """The policy builder's fields (models.build.build_policy) and the precision record."""

    model: str
    task: str  # hf:PATH with rg:NAME: the chat template
    hidden: int
    d_model: int
    n_layers: int
    n_heads: int
    device: str
    dtype: str
    grad_checkpoint: bool
    shared_prompt: bool
    decode_weights: str
    compile_decode: str


@dataclass(frozen=True)
class WarmStartSpec:
    """The supervised warm start (training/warmstart.py) and its evaluation's progress bar."""

    warmstart_steps_resolved: int
    warmstart_lr: float
    seed: int
    logprob_chunk: int
    quiet: bool


@dataclass(frozen=True)
class RolloutSpec:
    """The collector (rollout/collector.py): B prompts x G samples at a temperature, DAPO refill."""

    batch_size: int
    group_size: int
    temperature: float
    dynamic_sampling: int
    sample_draw: str


@dataclass(frozen=True)
class ReferenceSpec:
    """Where logp_ref comes from (rollout/reference.make_reference)."""

    variant: str
    ref_compute: str
    temperature: float
    logprob_chunk: int
    batch_size: int
    group_size: int

    @property
    def mode(self) -> str:
        """--ref_compute, or "none" for Variant B (no reference model: the anchor is pi_old)."""
        return "none" if self.variant == "B" else self.ref_compute

    @property
    def rows(self) -> int:
        """N = B*G sequences per step (the ring buffer's rows)."""
        return self.batch_size * self.group_size


@dataclass(frozen=True)
class KLSpec:
    """The KL term (algorithms/kl_term.KLTerm): estimator (simple spelled k1), k2 ratio, placement,
    reward form, anchor (pi_ref for Variant A, pi_old for Variant B)."""

    estimator: str
    k2_mode: str
    placement: str
    reward_form: str
    anchor: str

    @classmethod
    def from_config(cls, cfg: Any) -> KLSpec:
        return cls(
            estimator="k1" if cfg.kl_estimator == "simple" else cfg.kl_estimator,
            k2_mode=cfg.k2_mode,
            placement=cfg.kl_in,
            reward_form=cfg.kl_reward_form,
            anchor="old" if cfg.variant == "B" else "ref",
        )


@dataclass(frozen=True)
class ObjectiveSpec:
    """Advantages and the per-token loss: estimator, policy loss and its clip bounds (resolved),
    aggregation (resolved), TIS, overlong handling, the KL term and its coefficient."""

    adv: str
    loss: str
    eps_lo: float
    eps_hi: float
    dual_clip_c: float
    loss_agg_resolved: str
    tis_cap: float
    overlong: str
    beta: float
    target_kl: float
    kl_horizon: int
    temperature: float
    logprob_chunk: int
    batch_size: int
    group_size: int
    kl: KLSpec


@dataclass(frozen=True)
class CriticSpec:
    """PPO with a critic (--adv gae; algorithms/critic.py, training/critic.py): GAE, the clipped
    value loss and its coefficient, the critic's optimizer with the policy's LR schedule, and its
    treatment at a reference reset (`follow` reads the policy's --opt_reset, --soft_factor,
    --reset_opt_step, --reset_lr_schedule)."""

    adv: str
    gamma: float
    lam: float
    whiten_adv: int
    vf_coef: float
    cliprange_value: float
    critic_lr_resolved: float
    critic_reset: str
    max_grad_norm: float
    opt_reset: str
    soft_factor: float
    reset_opt_step: int
    reset_lr_schedule: int
    lr_schedule: str  # the policy's schedule, followed by the critic's Adam (optim_state.run_scheduler)
    warmup_steps: int
    steps: int
    ppo_epochs: int
    minibatches: int

    @property
    def enabled(self) -> bool:
        """True for --adv gae: the run has a critic."""
        return self.adv == "gae"


@dataclass(frozen=True)
class OptimizerSpec:
    """The RL optimizer, its LR schedule (optim_state.run_scheduler reads lr_schedule, warmup_steps
    and the horizon steps x ppo_epochs x minibatches) and the update loop's shape and guards."""

    optimizer: str
    lr: float
    weight_decay: float
    max_grad_norm: float
    lr_schedule: str
    warmup_steps: int
    steps: int
    ppo_epochs: int
    minibatches: int
    micro_batch: int
    on_nan: str


@dataclass(frozen=True)
class ResetSpec:
    """Reference resets: triggers, target, reference rule and what happens to the optimizer side."""

    reset_every: int
    reset_kl_above: float
    reset_kl_min_gap: int
    reset_on_stall: int
    stall_min_delta: float
    reset_to: str
    ref_update: str
    ref_mix_alpha: float
    opt_reset: str
    soft_factor: float
    reset_opt_step: int
    reset_lr_schedule: int
    reset_kl_coef: int


@dataclass(frozen=True)
class GrowthSpec:
    """LoRA adapters and their rank growth (training/growth_loop.py)."""

    enable_growth: int
    grow_every: int
    rank_step: int
    initial_rank: int
    max_rank: int
    grow_on: str
    grow_patience: int
    stall_min_delta: float
    growth_migration: str
    adapter_targets: str
    lora_alpha: float
    seed: int
    steps: int


@dataclass(frozen=True)
class EvalSpec:
    """Evaluation: when, pass@k samples, the drift monitors' log-prob pass."""

    eval_every: int
    steps: int
    eval_samples: int
    temperature: float
    sample_draw: str
    logprob_chunk: int
    seed: int


@dataclass(frozen=True)
class RunSpecs:
    """Every stage's spec of one run, plus the run-wide seed, thread count and step count."""

    seed: int
    threads: int
    steps: int
    task: TaskSpec
    model: ModelSpec
    warm_start: WarmStartSpec
    rollout: RolloutSpec
    reference: ReferenceSpec
    objective: ObjectiveSpec
    optimizer: OptimizerSpec
    critic: CriticSpec
    resets: ResetSpec
    growth: GrowthSpec
    evaluation: EvalSpec

    @classmethod
    def from_config(cls, cfg: Any) -> RunSpecs:
        """The specs of a (validated) RunConfig."""
        return cls(
            seed=cfg.seed,
            threads=cfg.threads,
            steps=cfg.steps,
            task=take(TaskSpec, cfg),
            model=take(ModelSpec, cfg),
            warm_start=take(WarmStartSpec, cfg),
            rollout=take(RolloutSpec, cfg),
            reference=take(ReferenceSpec, cfg),
            objective=take(ObjectiveSpec, cfg, kl=KLSpec.from_config(cfg)),
            optimizer=take(OptimizerSpec, cfg),
            critic=take(CriticSpec, cfg),
            resets=take(ResetSpec, cfg),
            growth=take(GrowthSpec, cfg),
            evaluation=take(EvalSpec, cfg),
        )


#: every spec class, for the test that ties each field to a RunConfig attribute
SPECS = (
    TaskSpec,
    ModelSpec,
    WarmStartSpec,
    RolloutSpec,
    ReferenceSpec,
    ObjectiveSpec,
    OptimizerSpec,
    CriticSpec,
    ResetSpec,
    GrowthSpec,
    EvalSpec,
)
