"""Every choice list of the command line, defined once: a `Literal` type per flag (RunConfig's
annotation, hence the parser's `choices` and docs/flags.md's values column) and its tuple of values,
which the modules that implement the choices import instead of spelling them again."""

from __future__ import annotations

from typing import Literal, get_args

Adv = Literal["grpo", "dr_grpo", "rloo", "reinforce_pp", "maxrl", "rft", "gae"]
Loss = Literal["grpo_clip", "dapo", "cispo", "gspo", "reinforce", "noclip"]
LossAgg = Literal["auto", "token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"]
RefCompute = Literal["naive_epoch", "cached", "ring"]
KLEstimator = Literal["simple", "k2", "k3", "k3_ratio", "full"]
RefUpdate = Literal["hard", "polyak", "ema"]
ResetTo = Literal["current", "best", "elastic"]
OptReset = Literal["keep", "hard", "soft", "asym"]
LRSchedule = Literal["constant", "cosine"]
GrowthMigration = Literal["preserve", "reset", "naive", "noma_flat"]
CompileDecode = Literal["off", "default", "reduce-overhead"]
AnswerExtraction = Literal["lenient", "tag"]
CriticReset = Literal["keep", "follow", "reinit"]
SampleDraw = Literal["exponential", "inverse_cdf"]

ADVS: tuple[str, ...] = get_args(Adv)  # algorithms/advantages.ADVANTAGES, plus gae (algorithms/critic.py)
LOSS_NAMES: tuple[str, ...] = get_args(Loss)  # algorithms/losses.LOSSES
AGGREGATIONS: tuple[str, ...] = get_args(LossAgg)[1:]  # algorithms/losses.aggregate ("auto" resolved before)
REF_COMPUTES: tuple[str, ...] = get_args(RefCompute)  # rollout/reference.REF_MODES, plus "none" (Variant B)
KL_ESTIMATOR_CHOICES: tuple[str, ...] = get_args(KLEstimator)  # config.KL_METRIC_KEYS (simple = k1)
REF_UPDATES: tuple[str, ...] = get_args(RefUpdate)  # rollout/reference.ReferenceHolder.reset_to
RESET_TOS: tuple[str, ...] = get_args(ResetTo)  # training/reset_loop (the reset target; elastic: training/elastic.py)
OPT_RESETS: tuple[str, ...] = get_args(OptReset)  # training/optim_state.apply_reset_semantics
LR_SCHEDULES: tuple[str, ...] = get_args(LRSchedule)  # training/optim_state.make_lr_scheduler
GROWTH_MIGRATIONS: tuple[str, ...] = get_args(GrowthMigration)  # training/growth.grow_adapters
COMPILE_DECODES: tuple[str, ...] = get_args(CompileDecode)  # models/static_decode
EXTRACTIONS: tuple[str, ...] = get_args(AnswerExtraction)  # tasks/reasoning_gym
#: --report_to's names (a comma list of them, or none alone; config/validate checks it, the
#: sinks are io/metrics.report_sink's)
REPORT_TO: tuple[str, ...] = ("none", "tensorboard", "csv", "wandb")
CRITIC_RESETS: tuple[str, ...] = get_args(CriticReset)  # training/critic.Critic.on_reset
SAMPLE_DRAWS: tuple[str, ...] = get_args(SampleDraw)  # rollout/sampling.draw_tokens

#: flag -> its values, for the test that ties each list to the parser and docs/flags.md
CHOICES: dict[str, tuple[str, ...]] = {
    "adv": ADVS,
    "loss": LOSS_NAMES,
    "loss_agg": get_args(LossAgg),
    "ref_compute": REF_COMPUTES,
    "kl_estimator": KL_ESTIMATOR_CHOICES,
    "ref_update": REF_UPDATES,
    "reset_to": RESET_TOS,
    "opt_reset": OPT_RESETS,
    "lr_schedule": LR_SCHEDULES,
    "growth_migration": GROWTH_MIGRATIONS,
    "compile_decode": COMPILE_DECODES,
    "answer_extraction": EXTRACTIONS,
    "critic_reset": CRITIC_RESETS,
    "sample_draw": SAMPLE_DRAWS,
}
