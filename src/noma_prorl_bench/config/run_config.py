"""The flat run configuration: one field per flag, generated from the spec tree (config/specs/).

Do not edit: declare a flag in the spec that owns it and run `python -m noma_prorl_bench.config.generate`.
Each field's help, choices and checks are its spec's; the resolved values are config/fields.FlatConfig's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from noma_prorl_bench.config.choices import (
    Adv,
    AnswerExtraction,
    CompileDecode,
    CriticReset,
    GrowthMigration,
    KLEstimator,
    Loss,
    LossAgg,
    LRSchedule,
    OptReset,
    RefCompute,
    RefUpdate,
    ResetTo,
    SampleDraw,
)
from noma_prorl_bench.config.fields import FlatConfig


@dataclass
class RunConfig(FlatConfig):
    """Resolved configuration of one training run (written to OUTDIR/config.json)."""

    # RunLevelSpec (config/specs/run.py)
    outdir: str = ""
    overwrite: bool = False
    quiet: bool = False
    report_to: str = "none"
    seed: int = 0
    steps: int = 400
    threads: int = 1
    plots: int = 0
    preset: Literal["none", "prorl_v1", "prorl_v2", "trl_sync", "noma_soft", "smollm2_demo"] = "none"

    # TaskSpec (config/specs/task.py)
    n_val: int = 256
    task: str = "reverse_digits"
    task_kwargs: str = ""
    prompt_field: str = "prompt"
    answer_field: str = "answer"
    reward_fn: str = "exact"
    reward_tol: float = 1e-06
    max_task_bytes: int = 268435456
    max_line_bytes: int = 1048576
    max_prompt_chars: int = 16384
    max_answer_chars: int = 4096
    answer_extraction: AnswerExtraction = "lenient"
    format_reward: float = 0.0
    max_new_tokens: int = 0

    # ModelSpec (config/specs/model.py)
    model: str = "gru"
    hidden: int = 128
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    device: Literal["cpu", "cuda", "auto"] = "cpu"
    dtype: Literal["float32", "bfloat16", "bf16_mixed", "auto"] = "float32"
    grad_checkpoint: bool = False
    logprob_chunk: int = 0
    shared_prompt: bool = False
    decode_weights: Literal["auto", "packed", "plain"] = "auto"
    compile_decode: CompileDecode = "off"

    # OptimizerSpec (config/specs/optimizer.py)
    micro_batch: int = 0
    lr: float = 0.001
    optimizer: Literal["adam", "adamw"] = "adam"
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    lr_schedule: LRSchedule = "constant"
    warmup_steps: int = 0
    ppo_epochs: int = 2
    minibatches: int = 2
    on_nan: Literal["skip", "stop"] = "skip"

    # WarmStartSpec (config/specs/model.py)
    warmstart_steps: int = -1
    warmstart_lr: float = 0.003

    # ShapeSpec (config/specs/rollout.py)
    batch_size: int = 16
    group_size: int = 8
    temperature: float = 1.0

    # RolloutSpec (config/specs/rollout.py)
    sample_draw: SampleDraw = "exponential"
    dynamic_sampling: int = 0

    # ObjectiveSpec (config/specs/objective.py)
    adv: Adv = "grpo"
    loss: Loss = "grpo_clip"
    clip_eps: float = -1.0
    eps_low: float = -1.0
    eps_high: float = -1.0
    dual_clip_c: float = 0.0
    loss_agg: LossAgg = "auto"
    tis_cap: float = 0.0
    overlong: Literal["none", "filter", "shape"] = "none"
    beta: float = 0.05
    target_kl: float = 0.0
    kl_horizon: int = 10000
    grad_parts_every: int = 0

    # CriticSpec (config/specs/critic.py)
    gamma: float = 1.0
    lam: float = 0.95
    whiten_adv: int = 1
    vf_coef: float = 0.1
    cliprange_value: float = 0.2
    critic_lr: float = -1.0
    critic_reset: CriticReset = "keep"

    # ReferenceSpec (config/specs/reference.py)
    variant: Literal["A", "B"] = "A"
    ref_compute: RefCompute = "cached"

    # KLSpec (config/specs/objective.py)
    kl_estimator: KLEstimator = "k3"
    k2_mode: Literal["theta_over_ref", "ref_over_old"] = "theta_over_ref"
    kl_in: Literal["loss", "reward"] = "loss"
    kl_reward_form: Literal["token", "sequence"] = "token"

    # ResetSpec (config/specs/resets.py)
    reset_every: int = 0
    reset_kl_above: float = 0.0
    reset_kl_min_gap: int = 20
    reset_on_stall: int = 0
    stall_min_delta: float = 0.0
    reset_to: ResetTo = "current"
    ref_update: RefUpdate = "hard"
    ref_mix_alpha: float = 0.6
    opt_reset: OptReset = "keep"
    soft_factor: float = 0.2
    reset_opt_step: int = 0
    reset_lr_schedule: int = 0
    reset_kl_coef: int = 0

    # GrowthSpec (config/specs/growth.py)
    enable_growth: int = 0
    grow_every: int = 0
    rank_step: int = 4
    initial_rank: int = 4
    max_rank: int = 64
    grow_on: Literal["schedule", "reset", "stall"] = "schedule"
    grow_patience: int = 3
    growth_migration: GrowthMigration = "preserve"
    adapter_targets: str = "head"
    lora_alpha: float = 16.0

    # EngineSpec (config/specs/engine.py)
    engine: Literal["local", "ray_colocated", "ray_async"] = "local"
    ref_placement: Literal["learner", "generator", "own_actor"] = "learner"
    steps_per_rollout: int = 1
    max_staleness: int = 1
    num_generators: int = 1
    ray_address: str = ""
    actor_timeout: float = 120.0
    weight_sync: Literal["object_store", "nccl"] = "object_store"

    # CheckpointSpec (config/specs/run.py)
    save_every: int = 0
    keep_checkpoints: int = 2
    resume: bool = False

    # EvalSpec (config/specs/evaluation.py)
    eval_every: int = 10
    eval_samples: int = 0
