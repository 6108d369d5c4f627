"""Validation of a `RunConfig`: the first invalid value or combination raises `ConfigError`
naming its flag (argparse-style, exit code 2); nothing is written before validation passes.
"""

from __future__ import annotations

import difflib
import math
import re
import typing
from dataclasses import fields
from typing import Optional

from noma_prorl_bench.config.choices import REPORT_TO
from noma_prorl_bench.config.fields import RunConfig


class ConfigError(ValueError):
    """A bad flag value or combination: `flag` names the offending flag."""

    def __init__(self, flag: str, message: str):
        super().__init__(f"argument --{flag}: {message}")
        self.flag = flag


def suggest(word: str, options, cutoff: float = 0.5) -> str:
    """' (did you mean X?)' for the closest option to a misspelt word, else ''. Leading dashes are
    left out of the comparison (they would make any two flags look alike)."""
    options = list(options)
    close = [o for o in options if o.startswith(word) and len(word.lstrip("-")) >= 3]
    if not close:
        bare = {o.lstrip("-"): o for o in options}
        close = [bare[c] for c in difflib.get_close_matches(word.lstrip("-"), list(bare), n=1, cutoff=cutoff)]
    return f" (did you mean {close[0]}?)" if close else ""


#: Settings of TRL (GRPOConfig, PPOConfig, RLOOConfig) and verl (a dotted path, looked up by its last
#: part) -> (our flag with that meaning, whose name it is, what differs). An unknown flag or --config key
#: found here is still refused (exit 2); the message names ours. Names that equal ours need no entry.
FOREIGN_NAMES: dict[str, tuple[str, str, str]] = {
    # TRL
    "learning_rate": ("lr", "TRL's", ""),
    "num_generations": ("group_size", "TRL's", "samples per prompt"),
    "rloo_k": ("group_size", "TRL's", "samples per prompt"),
    "max_completion_length": ("max_new_tokens", "TRL's", ""),
    "response_length": ("max_new_tokens", "TRL's", ""),
    "per_device_train_batch_size": (
        "micro_batch",
        "TRL's",
        "rows per forward/backward; prompts per step are --batch_size",
    ),
    "gradient_accumulation_steps": (
        "micro_batch",
        "TRL's",
        "ours gives the rows per accumulated piece of a minibatch, not their count",
    ),
    "epsilon": ("clip_eps", "TRL's", "both bounds unless --eps_high is given"),
    "cliprange": ("clip_eps", "TRL's", ""),
    "epsilon_high": ("eps_high", "TRL's", ""),
    "num_iterations": ("ppo_epochs", "TRL's", "updates per rollout batch"),
    "num_ppo_epochs": ("ppo_epochs", "TRL's", ""),
    "num_mini_batches": ("minibatches", "TRL's", ""),
    "loss_type": ("loss_agg", "TRL's", "how the token losses are reduced; the surrogate is --loss"),
    "scale_rewards": ("adv", "TRL's", "grpo divides by the group's reward std, dr_grpo does not"),
    "importance_sampling_level": ("loss", "TRL's", "sequence-level ratios are --loss gspo"),
    "max_steps": ("steps", "TRL's", ""),
    "lr_scheduler_type": ("lr_schedule", "TRL's", ""),
    "ref_model_sync_steps": ("reset_every", "TRL's", "counted in RL steps, not optimizer steps"),
    "ref_model_mixup_alpha": ("ref_mix_alpha", "TRL's", "with --ref_update polyak"),
    "sync_ref_model": ("preset", "TRL's", "--preset trl_sync, or --reset_every N --ref_update polyak"),
    "save_steps": ("save_every", "TRL's", ""),
    "eval_steps": ("eval_every", "TRL's", ""),
    "output_dir": ("outdir", "TRL's", ""),
    "gradient_checkpointing": ("grad_checkpoint", "TRL's", ""),
    "bf16": ("dtype", "TRL's", "--dtype bf16_mixed"),
    "optim": ("optimizer", "TRL's", ""),
    "mask_truncated_completions": ("overlong", "TRL's", "--overlong filter"),
    "vllm_importance_sampling_cap": ("tis_cap", "TRL's", ""),
    "init_kl_coef": ("beta", "TRL's", "the KL coefficient; its initial value with --target_kl"),
    "kl_coef": ("beta", "TRL's and verl's", "the KL coefficient, also with --kl_in reward"),
    "adap_kl_ctrl": ("target_kl", "TRL's", "the adaptive controller is on when --target_kl > 0"),
    "target": ("target_kl", "TRL's", ""),
    "horizon": ("kl_horizon", "TRL's and verl's", ""),
    "kl_penalty": ("kl_estimator", "TRL's and verl's", ""),
    # verl
    "train_batch_size": ("batch_size", "verl's", "prompts per step"),
    "max_response_length": ("max_new_tokens", "verl's", ""),
    "n": ("group_size", "verl's", "rollout.n, samples per prompt"),
    "ppo_mini_batch_size": ("minibatches", "verl's", "ours is their count: train_batch_size / ppo_mini_batch_size"),
    "ppo_micro_batch_size_per_gpu": ("micro_batch", "verl's", "rows per forward/backward"),
    "ppo_micro_batch_size": ("micro_batch", "verl's", "rows per forward/backward"),
    "clip_ratio": ("clip_eps", "verl's", ""),
    "clip_ratio_low": ("eps_low", "verl's", ""),
    "clip_ratio_high": ("eps_high", "verl's", ""),
    "clip_ratio_c": ("dual_clip_c", "verl's", ""),
    "loss_agg_mode": ("loss_agg", "verl's", ""),
    "loss_mode": ("loss", "verl's", ""),
    "use_kl_loss": ("kl_in", "verl's", "--kl_in loss (the default)"),
    "use_kl_in_reward": ("kl_in", "verl's", "--kl_in reward"),
    "kl_loss_coef": ("beta", "verl's", "the KL coefficient"),
    "kl_loss_type": ("kl_estimator", "verl's", "low_var_kl is k3"),
    "adv_estimator": ("adv", "verl's", ""),
    "total_training_steps": ("steps", "verl's", ""),
    "save_freq": ("save_every", "verl's", ""),
    "test_freq": ("eval_every", "verl's", ""),
    "default_local_dir": ("outdir", "verl's", ""),
    "logger": ("report_to", "verl's", ""),
    "grad_clip": ("max_grad_norm", "verl's", ""),
    "lr_warmup_steps": ("warmup_steps", "verl's", ""),
    "warmup_style": ("lr_schedule", "verl's", ""),
    "enable_gradient_checkpointing": ("grad_checkpoint", "verl's", ""),
    "lora_rank": ("initial_rank", "verl's", "with --enable_growth 1"),
    # OpenRLHF (PPO with a critic)
    "critic_learning_rate": ("critic_lr", "OpenRLHF's", "with --adv gae"),
    "value_clip": ("cliprange_value", "OpenRLHF's", "with --adv gae"),
    "lambd": ("lam", "OpenRLHF's", "GAE lambda, with --adv gae"),
    "target_modules": ("adapter_targets", "verl's", "with --enable_growth 1"),
}
#: TRL / verl names with no flag of ours that means the same, though one of ours looks alike (TRL's
#: max_prompt_length truncates prompts in tokens; --max_prompt_chars only bounds a jsonl file's prompts):
#: refused with no suggestion rather than a misleading one
NO_EQUIVALENT = ("max_prompt_length", "max_length", "logging_steps", "whiten_rewards")
#: verl's top-level config sections: a nested verl config is not one of ours
VERL_SECTIONS = ("actor_rollout_ref", "algorithm", "data", "trainer", "critic", "reward_model")


def suggest_name(word: str, options, prefix: str = "--") -> str:
    """What to add to the refusal of an unknown flag (prefix '--') or --config key (prefix ''): ours
    when `word` is a TRL or verl name (FOREIGN_NAMES; a verl dotted path by its last part, which may
    also be one of ours), that a verl config section is not ours, else suggest()'s closest name."""
    bare = word.lstrip("-").replace("-", "_")
    last = bare.rsplit(".", 1)[-1]
    if last in FOREIGN_NAMES:
        flag, whose, note = FOREIGN_NAMES[last]
        return f" ({word} is {whose} name; ours is {prefix}{flag}{': ' + note if note else ''})"
    if bare.startswith("critic.") and last == "lr":  # verl's critic.optim.lr is not the policy's --lr
        return f" (ours is {prefix}critic_lr, with --adv gae: our names are flat, without a section path)"
    if last != bare and f"{prefix}{last}" in options:
        return f" (ours is {prefix}{last}: our names are flat, without a section path)"
    if last in NO_EQUIVALENT:
        return ""
    if bare in VERL_SECTIONS:
        return f" ({word} is a verl config section; ours are flat names, listed in docs/flags.md)"
    return suggest(prefix + bare, options, cutoff=0.6)


def _positive(cfg, names):
    for n in names:
        if getattr(cfg, n) <= 0:
            raise ConfigError(n, f"must be a positive integer, got {getattr(cfg, n)}")


def _nonneg(cfg, names):
    for n in names:
        if getattr(cfg, n) < 0:
            raise ConfigError(n, f"must be >= 0, got {getattr(cfg, n)}")


def validate(cfg: RunConfig, explicit: Optional[set] = None) -> None:
    """Raise ConfigError on the first invalid value or combination."""
    if not cfg.outdir:
        raise ConfigError("outdir", "is required")
    _choices(cfg)
    _positive(
        cfg,
        [
            "steps",
            "threads",
            "batch_size",
            "group_size",
            "ppo_epochs",
            "minibatches",
            "eval_every",
            "n_val",
            "hidden",
            "d_model",
            "n_layers",
            "n_heads",
            "kl_horizon",
        ],
    )
    if cfg.warmstart_steps < -1:
        raise ConfigError("warmstart_steps", f"must be >= 0, or -1 for auto, got {cfg.warmstart_steps}")
    _nonneg(
        cfg,
        [
            "eval_samples",
            "max_new_tokens",
            "warmup_steps",
            "weight_decay",
            "max_grad_norm",
            "beta",
            "target_kl",
            "tis_cap",
            "reset_every",
            "reset_kl_above",
            "reset_kl_min_gap",
            "reset_on_stall",
            "stall_min_delta",
            "dual_clip_c",
        ],
    )
    _check_memory(cfg)
    _validate_report_to(cfg)
    if cfg.lr <= 0:
        raise ConfigError("lr", f"must be > 0, got {cfg.lr}")
    if cfg.warmstart_lr <= 0:
        raise ConfigError("warmstart_lr", f"must be > 0, got {cfg.warmstart_lr}")
    if not cfg.temperature > 0:
        raise ConfigError("temperature", f"must be > 0, got {cfg.temperature}")
    horizon = cfg.steps * cfg.ppo_epochs * cfg.minibatches
    if cfg.warmup_steps > horizon:
        raise ConfigError(
            "warmup_steps",
            f"counts optimizer steps and must be <= the run's {horizon} (--steps x "
            f"--ppo_epochs x --minibatches; a longer warmup never reaches --lr), "
            f"got {cfg.warmup_steps}",
        )
    if cfg.clip_eps != -1.0 and not 0.0 < cfg.clip_eps < 1.0:
        raise ConfigError("clip_eps", f"must be -1 (the loss's default) or in (0, 1), got {cfg.clip_eps}")
    for n in ("eps_low", "eps_high"):
        v = getattr(cfg, n)
        if v != -1.0 and not 0.0 < v < 1.0 and not (n == "eps_high" and v >= 1.0):
            raise ConfigError(n, f"must be -1 (use --clip_eps) or in (0, 1), got {v}")
    if cfg.eps_low != -1.0 and cfg.eps_low >= 1.0:
        raise ConfigError("eps_low", f"must be < 1, got {cfg.eps_low}")
    if cfg.dual_clip_c != 0.0 and cfg.dual_clip_c <= 1.0:
        raise ConfigError("dual_clip_c", f"must be 0 (off) or > 1, got {cfg.dual_clip_c}")
    if cfg.tis_cap != 0.0 and cfg.tis_cap < 1.0:
        raise ConfigError("tis_cap", f"must be 0 (off) or >= 1, got {cfg.tis_cap}")
    if not 0.0 <= cfg.soft_factor <= 1.0:
        raise ConfigError("soft_factor", f"must be in [0, 1], got {cfg.soft_factor}")
    if not 0.0 < cfg.ref_mix_alpha <= 1.0:
        raise ConfigError("ref_mix_alpha", f"must be in (0, 1], got {cfg.ref_mix_alpha}")
    for n in ("plots", "dynamic_sampling", "reset_opt_step", "reset_lr_schedule", "reset_kl_coef", "enable_growth"):
        if getattr(cfg, n) not in (0, 1):
            raise ConfigError(n, f"invalid choice: {getattr(cfg, n)} (choose from 0, 1)")
    if cfg.minibatches > cfg.batch_size * cfg.group_size:
        raise ConfigError("minibatches", f"must be <= batch_size*group_size = {cfg.batch_size * cfg.group_size}")
    if cfg.group_size < 2:
        raise ConfigError(
            "group_size",
            f"must be >= 2 for --adv {cfg.adv} (advantages are group functions rewards[B,G] with an unbiased std)",
        )
    model = cfg.model
    if not (model in ("gru", "transformer") or (model.startswith("hf:") and len(model) > 3)):
        raise ConfigError("model", f"invalid choice: {model!r} (choose from gru, transformer, hf:PATH)")
    if cfg.d_model % cfg.n_heads != 0:
        raise ConfigError("n_heads", f"must divide --d_model {cfg.d_model}, got {cfg.n_heads}")
    if cfg.task in ("keyword_inclusion", "arithmetic") and not model.startswith("hf:"):
        raise ConfigError("task", f"{cfg.task} is a text task and needs --model hf:PATH")
    _validate_rg_task(cfg)
    _validate_user_task(cfg)
    _validate_variant(cfg, explicit or set())
    _validate_growth(cfg)
    _validate_reliability(cfg)
    _validate_engine(cfg)
    _validate_critic(cfg)


TASKS = ("reverse_digits", "parity", "sort_digits", "keyword_inclusion", "arithmetic")


USER_TASK = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")  # module.path:factory
JSONL_LIMITS = ("max_task_bytes", "max_line_bytes", "max_prompt_chars", "max_answer_chars")  # bounds on the file
JSONL_FLAGS = tuple(
    (n, getattr(RunConfig, n)) for n in ("prompt_field", "answer_field", "reward_fn", "reward_tol", *JSONL_LIMITS)
)
REWARD_FNS = ("exact", "numeric", "regex")


def _validate_rg_task(cfg: RunConfig) -> None:
    """--task NAME, rg:NAME (reasoning-gym, HF models only), jsonl:PATH or module.path:factory,
    and the flags that apply only to some of them."""
    rg, jsonl = cfg.task.startswith("rg:"), cfg.task.startswith("jsonl:")
    factory = bool(USER_TASK.match(cfg.task)) and not rg and not jsonl
    if not (cfg.task in TASKS or (rg and len(cfg.task) > 3) or (jsonl and len(cfg.task) > 6) or factory):
        raise ConfigError(
            "task",
            f"invalid choice: {cfg.task!r}{suggest(cfg.task, TASKS)} (choose from "
            f"{', '.join(TASKS)}, rg:NAME, jsonl:PATH, module.path:factory)",
        )
    if rg and not cfg.model.startswith("hf:"):
        raise ConfigError("task", f"{cfg.task} is a reasoning-gym text task and needs --model hf:PATH")
    if not rg:
        for n, default in (("answer_extraction", "lenient"), ("format_reward", 0.0)):
            if getattr(cfg, n) != default:
                raise ConfigError(n, f"only applies to --task rg:NAME (got --task {cfg.task})")
    if not (rg or factory) and cfg.task_kwargs:
        raise ConfigError(
            "task_kwargs", f"only applies to --task rg:NAME or module.path:factory (got --task {cfg.task})"
        )
    if cfg.format_reward < 0:
        raise ConfigError("format_reward", f"must be >= 0, got {cfg.format_reward}")
    if cfg.task_kwargs:
        import json  # noqa: PLC0415

        try:
            kw = json.loads(cfg.task_kwargs)
        except ValueError as e:
            raise ConfigError("task_kwargs", f"is not valid JSON ({e}): {cfg.task_kwargs!r}") from None
        if not isinstance(kw, dict):
            raise ConfigError("task_kwargs", f"must be a JSON object, got {cfg.task_kwargs!r}")


def _validate_report_to(cfg: RunConfig) -> None:
    """--report_to: none, or a comma list of tensorboard, csv, wandb (each once)."""
    items = [t.strip() for t in cfg.report_to.split(",")]
    for t in items:
        if t not in REPORT_TO:
            raise ConfigError(
                "report_to",
                f"invalid choice: {t!r}{suggest(t, REPORT_TO)} (choose from "
                f"{', '.join(REPORT_TO)}, or a comma list such as csv,wandb)",
            )
    if len(items) > 1 and "none" in items or len(set(items)) < len(items):
        raise ConfigError("report_to", f"none stands alone and each name comes once, got {cfg.report_to!r}")


def _validate_user_task(cfg: RunConfig) -> None:
    """The jsonl:PATH-only flags; --reward_fn's name; the engines a user task runs on."""
    jsonl = cfg.task.startswith("jsonl:")
    for n, default in JSONL_FLAGS:
        if not jsonl and getattr(cfg, n) != default:
            raise ConfigError(n, f"only applies to --task jsonl:PATH (got --task {cfg.task})")
    if cfg.reward_fn not in REWARD_FNS and not USER_TASK.match(cfg.reward_fn):
        raise ConfigError(
            "reward_fn",
            f"invalid choice: {cfg.reward_fn!r}{suggest(cfg.reward_fn, REWARD_FNS)} "
            f"(choose from {', '.join(REWARD_FNS)}, MODULE:FUNCTION)",
        )
    if cfg.reward_fn != "numeric" and cfg.reward_tol != 1e-6:
        raise ConfigError("reward_tol", f"only applies to --reward_fn numeric (got --reward_fn {cfg.reward_fn})")
    if not cfg.reward_tol >= 0:
        raise ConfigError("reward_tol", f"must be >= 0, got {cfg.reward_tol}")
    _positive(cfg, JSONL_LIMITS)


def _validate_ray_checkpoints(cfg: RunConfig) -> None:
    """--save_every / --resume with a Ray engine: with the reference in the learner, ray_colocated
    checkpoints at round ends and ray_async after draining its batches in flight (docs/ray.md);
    the rest is refused with the reason."""
    flag = "resume" if cfg.resume else "save_every"
    if cfg.variant == "A" and cfg.ref_placement != "learner":
        raise ConfigError(
            flag,
            f"--engine {cfg.engine} checkpoints only with --ref_placement learner (the "
            f"reference held by the {cfg.ref_placement} actor is not saved)",
        )
    if cfg.engine == "ray_colocated" and cfg.save_every % cfg.steps_per_rollout:
        raise ConfigError(
            "save_every",
            f"--engine ray_colocated checkpoints at the end of a rollout round: "
            f"--save_every must be a multiple of --steps_per_rollout "
            f"{cfg.steps_per_rollout}, got {cfg.save_every}",
        )


def _validate_engine(cfg: RunConfig) -> None:
    """Engine flags only where they act (a flag the chosen engine ignores is an error)."""
    d = RunConfig()
    only = {
        "steps_per_rollout": ("ray_colocated",),
        "max_staleness": ("ray_async",),
        "num_generators": ("ray_async",),
        "ref_placement": ("ray_colocated", "ray_async"),
        "ray_address": ("ray_colocated", "ray_async"),
        "actor_timeout": ("ray_colocated", "ray_async"),
        "weight_sync": ("ray_colocated", "ray_async"),
    }
    for n, engines in only.items():
        if getattr(cfg, n) != getattr(d, n) and cfg.engine not in engines:
            raise ConfigError(n, f"applies to --engine {' or '.join(engines)}, not {cfg.engine}")
    _positive(cfg, ["steps_per_rollout", "num_generators"])
    _nonneg(cfg, ["max_staleness"])
    if not cfg.actor_timeout > 0:
        raise ConfigError("actor_timeout", f"must be > 0 seconds, got {cfg.actor_timeout}")
    if cfg.weight_sync == "nccl":
        raise ConfigError(
            "weight_sync", "nccl needs CUDA GPUs (one per actor) and is not implemented in this build; use object_store"
        )
    if cfg.engine == "local":
        return
    if cfg.device == "cuda":
        raise ConfigError("device", f"--engine {cfg.engine} places its actors on CPUs in this build; use --device cpu")
    if cfg.report_to != "none":
        raise ConfigError(
            "report_to",
            f"--engine {cfg.engine} writes metrics.jsonl only in this build (use --engine local, or --report_to none)",
        )
    if cfg.save_every or cfg.resume:
        _validate_ray_checkpoints(cfg)
    if cfg.ref_placement != "learner":
        if cfg.variant == "B":
            raise ConfigError("ref_placement", "Variant B (--variant B) has no reference model to place")
        if cfg.ref_compute != "cached":
            raise ConfigError(
                "ref_placement",
                f"{cfg.ref_placement} scores logp_ref once per batch outside the "
                f"learner (A1); use --ref_compute cached (got {cfg.ref_compute})",
            )
        if cfg.kl_estimator == "full":
            raise ConfigError(
                "ref_placement",
                "--kl_estimator full needs the reference logits in the learner; use --ref_placement learner",
            )
        if cfg.enable_growth:
            raise ConfigError(
                "ref_placement",
                "--enable_growth grows pi_ref together with the policy inside the learner; use --ref_placement learner",
            )


def _validate_variant(cfg: RunConfig, explicit: set) -> None:
    if cfg.variant == "B":
        if cfg.ref_compute != "cached" and "ref_compute" in explicit:
            raise ConfigError(
                "ref_compute",
                f"{cfg.ref_compute} needs a reference model; Variant B (--variant B) "
                "has none. Drop --ref_compute or use --variant A",
            )
        for n in ("reset_every", "reset_kl_above", "reset_on_stall"):
            if getattr(cfg, n):
                raise ConfigError(n, "reference resets need a reference model; Variant B (--variant B) has none")
        if cfg.kl_estimator == "k2" and cfg.k2_mode == "ref_over_old":
            raise ConfigError("k2_mode", "ref_over_old needs a reference model; Variant B (--variant B) has none")
        if cfg.preset not in ("none", "smollm2_demo"):
            raise ConfigError("preset", "reset presets need a reference model; Variant B (--variant B) has none")
    if cfg.kl_in == "reward" and cfg.kl_estimator in ("full", "k3_ratio"):
        raise ConfigError(
            "kl_estimator",
            f"{cfg.kl_estimator} is only available with --kl_in loss (full needs "
            "logits; k3_ratio's ratio pi/pi_old is 1 at rollout time, use k3)",
        )
    if cfg.kl_in != "reward" and cfg.kl_reward_form != "token":
        raise ConfigError("kl_reward_form", f"only applies to --kl_in reward (got --kl_in {cfg.kl_in})")
    if cfg.target_kl > 0 and cfg.kl_horizon <= 0.2 * cfg.batch_size * cfg.group_size:
        raise ConfigError(
            "kl_horizon",
            f"must exceed 0.2 * batch_size * group_size = "
            f"{0.2 * cfg.batch_size * cfg.group_size:g} samples with --target_kl "
            f"(each step moves beta by up to 20% * N / horizon), got {cfg.kl_horizon}",
        )
    if cfg.kl_in == "reward" and cfg.variant == "B":
        raise ConfigError(
            "kl_in",
            "reward subtracts beta*KL(pi_old || pi_ref) from the rewards and needs a "
            "reference model; Variant B (--variant B) has none. Use --kl_in loss or --variant A",
        )
    if cfg.kl_in == "reward" and cfg.ref_compute == "naive_epoch":
        raise ConfigError(
            "kl_in",
            "reward needs logp_ref for the whole batch before the advantages, but "
            "--ref_compute naive_epoch computes it per minibatch. "
            "Use --ref_compute cached or ring",
        )
    if cfg.k2_mode != "theta_over_ref" and cfg.kl_estimator != "k2":
        raise ConfigError("k2_mode", f"{cfg.k2_mode} only applies to --kl_estimator k2 (got {cfg.kl_estimator})")
    _validate_loss(cfg)
    if cfg.target_kl > 0 and cfg.beta <= 0:
        raise ConfigError("beta", "the adaptive KL controller (--target_kl) needs an initial --beta > 0")


GROWTH_FLAGS = (
    "grow_every",
    "rank_step",
    "initial_rank",
    "max_rank",
    "grow_on",
    "grow_patience",
    "growth_migration",
    "adapter_targets",
    "lora_alpha",
)


def _validate_growth(cfg: RunConfig) -> None:
    """Growth flags: only with --enable_growth 1, and each --grow_on needs its own trigger."""
    defaults = RunConfig()
    if not cfg.enable_growth:
        for n in GROWTH_FLAGS:
            if getattr(cfg, n) != getattr(defaults, n):
                raise ConfigError(n, "only applies with --enable_growth 1")
        return
    _positive(cfg, ["initial_rank", "rank_step", "grow_patience"])
    _nonneg(cfg, ["grow_every"])
    if cfg.max_rank < cfg.initial_rank:
        raise ConfigError("max_rank", f"must be >= --initial_rank {cfg.initial_rank}, got {cfg.max_rank}")
    if not cfg.lora_alpha > 0:
        raise ConfigError("lora_alpha", f"must be > 0, got {cfg.lora_alpha}")
    if not [t for t in cfg.adapter_targets.split(",") if t.strip()]:
        raise ConfigError("adapter_targets", "needs at least one module name")
    if cfg.grow_on == "schedule" and cfg.grow_every <= 0:
        raise ConfigError("grow_every", "--grow_on schedule needs --grow_every N > 0")
    if cfg.grow_on != "schedule" and cfg.grow_every:
        raise ConfigError("grow_every", f"only applies to --grow_on schedule (got --grow_on {cfg.grow_on})")
    if cfg.grow_on != "stall" and cfg.grow_patience != defaults.grow_patience:
        raise ConfigError("grow_patience", f"only applies to --grow_on stall (got --grow_on {cfg.grow_on})")
    if cfg.grow_on == "reset":
        if cfg.variant == "B":
            raise ConfigError("grow_on", "reset grows at reference resets; Variant B (--variant B) has none")
        if not (cfg.reset_every or cfg.reset_kl_above or cfg.reset_on_stall):
            raise ConfigError(
                "grow_on",
                "reset needs a reset trigger: --reset_every, --reset_kl_above, "
                "--reset_on_stall or a --preset that sets one",
            )


FLOAT32_MAX = 3.4028234663852886e38
FLOAT32_TINY = 1.1754943508222875e-38  # numpy.finfo(numpy.float32).tiny (no numpy import before the parser answers)
#: float flags that must be > 0 (the others take 0 for off or none)
POSITIVE_FLOATS = ("lr", "warmstart_lr", "temperature", "actor_timeout", "ref_mix_alpha", "lora_alpha")
INT64_MAX = 2**63 - 1
# integers whose huge values would only fail later (torch seeds must stay < 2**64, and the
# trainer derives its streams as seed * 1000 + k; thread counts beyond the machine's are useless)
INT_MAX = {"seed": 10**15, "threads": 1024, "ppo_epochs": 10_000}


def _validate_reliability(cfg: RunConfig) -> None:
    """Checkpoint flags, and values that would only fail (or poison the run) later: a negative
    seed (NumPy rejects it mid-run), NaN or infinite floats, floats that are 0 or subnormal in float32
    but not 0 (a --lr or --temperature of 1e-45: no float flag means anything there)."""
    _nonneg(cfg, ["seed", "save_every"])
    if cfg.keep_checkpoints < 1:
        raise ConfigError(
            "keep_checkpoints", f"must be >= 1 (the newest checkpoint is always kept), got {cfg.keep_checkpoints}"
        )
    if cfg.resume and cfg.overwrite:
        raise ConfigError("resume", "continues the run in --outdir and --overwrite starts a new one: pass one of them")
    hints = typing.get_type_hints(RunConfig)
    for f in fields(RunConfig):
        v = getattr(cfg, f.name)
        if hints[f.name] is float and not math.isfinite(v):
            raise ConfigError(f.name, f"must be a finite number, got {v}")
        if hints[f.name] is float and abs(v) > FLOAT32_MAX:  # tensors are float32: it would become inf
            raise ConfigError(f.name, f"must be within the float32 range (|x| <= {FLOAT32_MAX:.4g}), got {v:g}")
        if hints[f.name] is float and 0 < abs(v) < FLOAT32_TINY:  # it would become 0 (or lose its digits)
            allowed = f">= {FLOAT32_TINY:.4g}" if f.name in POSITIVE_FLOATS else f"0 or >= {FLOAT32_TINY:.4g} in size"
            raise ConfigError(
                f.name,
                f"must be {allowed}, float32's smallest normal number (tensors are float32, "
                f"where {v:g} is 0 or subnormal), got {v:g}",
            )
        if hints[f.name] is int and not isinstance(v, bool) and abs(v) > INT_MAX.get(f.name, INT64_MAX):
            raise ConfigError(f.name, f"must be <= {INT_MAX.get(f.name, INT64_MAX)}, got {v}")


def _choices(cfg: RunConfig) -> None:
    """A choice field (a Literal in config/fields.py) holds one of its choices: the CLI's argparse
    checks them, this checks the Python API (make_config) and a config.json read back, argparse's way."""
    hints = typing.get_type_hints(RunConfig)
    for f in fields(RunConfig):
        allowed = typing.get_args(hints[f.name]) if typing.get_origin(hints[f.name]) is typing.Literal else ()
        v = getattr(cfg, f.name)
        if allowed and v not in allowed:
            raise ConfigError(
                f.name, f"invalid choice: {v!r} (choose from {', '.join(map(str, allowed))}){suggest(str(v), allowed)}"
            )


def _validate_loss(cfg: RunConfig) -> None:
    """Loss flags that the chosen --loss would ignore are errors, not no-ops."""
    if cfg.dual_clip_c and cfg.loss in ("cispo", "reinforce", "noclip"):
        raise ConfigError(
            "dual_clip_c", f"applies to the clipped surrogates (grpo_clip, dapo, gspo), not --loss {cfg.loss}"
        )
    for n in ("clip_eps", "eps_low", "eps_high"):
        if getattr(cfg, n) != -1.0 and cfg.loss in ("reinforce", "noclip"):
            raise ConfigError(n, f"--loss {cfg.loss} has no clip; drop the flag or pick a clipped loss")
    if cfg.eps_low != -1.0 and cfg.loss == "cispo":
        raise ConfigError(
            "eps_low",
            "--loss cispo truncates the IS weight from above only (MiniMax-M1): "
            "set --eps_high (or --clip_eps), not --eps_low",
        )


def _check_memory(cfg: RunConfig) -> None:
    """--micro_batch, --logprob_chunk, --grad_checkpoint, --shared_prompt, --decode_weights, --compile_decode."""
    _nonneg(cfg, ["micro_batch", "logprob_chunk"])
    for n in ("grad_checkpoint", "logprob_chunk"):
        if getattr(cfg, n) and cfg.model == "gru":
            raise ConfigError(n, "needs --model transformer or hf:PATH (the GRU has no blocks or separate head)")
    if cfg.dtype == "bf16_mixed" and cfg.model == "gru":
        raise ConfigError(
            "dtype", "bf16_mixed needs --model transformer or hf:PATH; use float32 or bfloat16 with the GRU"
        )
    if cfg.shared_prompt and not cfg.model.startswith("hf:"):
        raise ConfigError("shared_prompt", f"needs --model hf:PATH, not {cfg.model}")
    if cfg.decode_weights == "packed" and not cfg.model.startswith("hf:"):
        raise ConfigError("decode_weights", f"packed needs --model hf:PATH, not {cfg.model} (use auto or plain)")
    if cfg.decode_weights == "packed" and cfg.device == "cuda":
        raise ConfigError("decode_weights", "packed is for CPU matmul libraries, not --device cuda (use auto or plain)")
    if cfg.shared_prompt and cfg.grad_checkpoint:
        raise ConfigError(
            "shared_prompt",
            "cannot be used with --grad_checkpoint (transformers keeps no KV cache under checkpointing); drop one",
        )
    if cfg.compile_decode != "off" and cfg.model != "transformer":
        raise ConfigError(
            "compile_decode",
            f"compiles our transformer's decode step: needs --model transformer, not {cfg.model} (use off)",
        )
    if cfg.logprob_chunk and cfg.kl_estimator == "full":
        raise ConfigError(
            "logprob_chunk",
            "cannot be used with --kl_estimator full, which needs the whole "
            "[n, T, V] logits; use 0 or another estimator",
        )


CRITIC_FLAGS = ("gamma", "lam", "whiten_adv", "vf_coef", "cliprange_value", "critic_lr", "critic_reset")


def _validate_critic(cfg: RunConfig) -> None:
    """--adv gae and its flags: the flags only with it, each in range, and the combinations it supports."""
    defaults = RunConfig()
    if cfg.adv != "gae":
        for n in CRITIC_FLAGS:
            if getattr(cfg, n) != getattr(defaults, n):
                raise ConfigError(n, f"only applies with --adv gae (got --adv {cfg.adv})")
        return
    for n in ("gamma", "lam"):
        if not 0.0 <= getattr(cfg, n) <= 1.0:
            raise ConfigError(n, f"must be in [0, 1], got {getattr(cfg, n)}")
    if cfg.whiten_adv not in (0, 1):
        raise ConfigError("whiten_adv", f"invalid choice: {cfg.whiten_adv} (choose from 0, 1)")
    if not cfg.vf_coef > 0:
        raise ConfigError("vf_coef", f"must be > 0 with --adv gae, got {cfg.vf_coef}")
    if cfg.cliprange_value < 0:
        raise ConfigError("cliprange_value", f"must be >= 0 (0: unclipped), got {cfg.cliprange_value}")
    if not (cfg.critic_lr > 0 or cfg.critic_lr == -1):
        raise ConfigError("critic_lr", f"must be > 0, or -1 for --lr, got {cfg.critic_lr}")
    if cfg.engine != "local":
        raise ConfigError("adv", f"gae (a critic) runs with --engine local only, not {cfg.engine}")
    if cfg.enable_growth and cfg.max_rank > cfg.initial_rank:
        raise ConfigError(
            "adv",
            "gae with growing adapters is not supported (the critic's adapters do not grow): "
            "use --max_rank equal to --initial_rank",
        )
    if cfg.critic_reset != "keep" and cfg.variant == "B":
        raise ConfigError("critic_reset", "acts at reference resets; Variant B (--variant B) has none")
