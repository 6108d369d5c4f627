"""Other libraries' names for our flags (TRL, verl, OpenRLHF): an unknown flag or --config key that
is one of theirs is still refused (exit 2), and the message names ours."""

from __future__ import annotations

from noma_prorl_bench.config.errors import suggest

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
