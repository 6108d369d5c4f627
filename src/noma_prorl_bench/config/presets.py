"""Reset-semantics presets (`--preset`): named bundles of RunConfig reset fields, with sources.

Each preset maps RunConfig field names to values; the config applies the preset first and
explicit CLI flags win (`apply_preset`). Every preset sets all the switches that decide
*when* a reset happens and *what* it does (triggers, target, reference rule, optimizer
side); the numeric knobs of a switch (ref_mix_alpha, soft_factor, stall_min_delta) are set
where the preset uses them. Numbers a source does not give are our choices and are labelled
so in `describe_preset`. Steps are RL steps (one rollout batch each); docs/resets.md has the
full table.
"""

from __future__ import annotations

from typing import Any

# Fields a preset may set (all are RunConfig fields).
RESET_FIELDS = (
    "reset_every",
    "reset_kl_above",
    "reset_kl_min_gap",
    "reset_on_stall",
    "stall_min_delta",
    "reset_to",
    "ref_update",
    "ref_mix_alpha",
    "opt_reset",
    "soft_factor",
    "reset_opt_step",
    "reset_lr_schedule",
    "reset_kl_coef",
)
# Fields every preset sets explicitly, so no preset's behaviour depends on a default.
SWITCH_FIELDS = (
    "reset_every",
    "reset_kl_above",
    "reset_on_stall",
    "reset_to",
    "ref_update",
    "opt_reset",
    "reset_opt_step",
    "reset_lr_schedule",
    "reset_kl_coef",
)

PRESETS: dict[str, dict[str, object]] = {
    # ProRL v1 paper: reset when validation stalls, back to the best checkpoint, reference
    # hard-copied, optimizer re-initialised (moments, step, schedule, KL coefficient).
    "prorl_v1": {
        "reset_every": 0,
        "reset_kl_above": 0.0,
        "reset_on_stall": 3,
        "stall_min_delta": 0.0,
        "reset_to": "best",
        "ref_update": "hard",
        "opt_reset": "hard",
        "reset_opt_step": 1,
        "reset_lr_schedule": 1,
        "reset_kl_coef": 1,
    },
    # ProRL v2 blog: reference <- current policy every ~200-500 steps or on stalled
    # validation / KL spikes; optimizer state not cleared.
    "prorl_v2": {
        "reset_every": 200,
        "reset_kl_above": 0.0,
        "reset_on_stall": 3,
        "stall_min_delta": 0.0,
        "reset_to": "current",
        "ref_update": "hard",
        "opt_reset": "keep",
        "reset_opt_step": 0,
        "reset_lr_schedule": 0,
        "reset_kl_coef": 0,
    },
    # TRL sync_ref_model (from TR-DPO): ref <- 0.6 pi + 0.4 ref every 512 steps, optimizer untouched.
    "trl_sync": {
        "reset_every": 512,
        "reset_kl_above": 0.0,
        "reset_on_stall": 0,
        "reset_to": "current",
        "ref_update": "polyak",
        "ref_mix_alpha": 0.6,
        "opt_reset": "keep",
        "reset_opt_step": 0,
        "reset_lr_schedule": 0,
        "reset_kl_coef": 0,
    },
    # This project's soft washout: prorl_v2's periodic cadence, moments scaled by 0.2.
    "noma_soft": {
        "reset_every": 200,
        "reset_kl_above": 0.0,
        "reset_on_stall": 0,
        "reset_to": "current",
        "ref_update": "hard",
        "opt_reset": "soft",
        "soft_factor": 0.2,
        "reset_opt_step": 0,
        "reset_lr_schedule": 0,
        "reset_kl_coef": 0,
    },
}

PRESET_SOURCES: dict[str, str] = {
    "prorl_v1": "ProRL paper, Liu et al. 2025, arXiv:2505.24864 (reference reset with optimizer "
    "re-initialisation; reset to the best checkpoint when validation stalls). "
    "Patience 3 is our choice: the paper gives no number",
    "prorl_v2": "NVIDIA ProRL v2 blog, Aug 2025, developer.nvidia.com/blog/scaling-llm-reinforcement-"
    "learning-with-prolonged-training-using-prorl-v2 (every 200-500 steps or on KL spikes / "
    "stalled validation; optimizer kept). 200 is the low end of that range; patience 3 is ours; "
    "KL-spike resets are off because the blog gives no threshold: add --reset_kl_above X",
    "trl_sync": "TRL GRPOConfig/DPOConfig sync_ref_model with ref_model_mixup_alpha=0.6, "
    "ref_model_sync_steps=512 (SyncRefModelCallback; TR-DPO, Gorbatovski et al. 2024, "
    "arXiv:2404.09656). TRL counts optimizer steps; here 512 RL steps",
    "noma_soft": "This project's soft washout (docs/design.md): prorl_v2's cadence with Adam "
    "moments m, v scaled by 0.2 instead of kept; not a published recipe",
}


# Run presets: whole-run recipes (any RunConfig field), not reset semantics. smollm2_demo is the
# real-model demo of docs/real_model.md; the model directory is what `prorl-bench get-model
# smollm2-135m-instruct` prints by default (SmolLM2-135M-Instruct, dequantised Q4_1 weights).
SMOLLM2_DIR = "~/.cache/noma_prorl_bench/models/smollm2-135m-instruct-q4_1-dequant"
RUN_PRESETS: dict[str, dict[str, object]] = {
    "smollm2_demo": {
        "model": f"hf:{SMOLLM2_DIR}",
        "task": "rg:basic_arithmetic",
        "task_kwargs": '{"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 2}',
        "answer_extraction": "lenient",
        "format_reward": 0.0,
        "enable_growth": 1,
        "initial_rank": 8,
        "max_rank": 8,
        "grow_on": "stall",
        "lora_alpha": 16.0,
        "adapter_targets": "q_proj,k_proj,v_proj,o_proj",
        # lr 2e-4, not 1e-3: at 1e-3 the wedge runs (docs/real_model.md) reached mean k3 KL 0.57 to a
        # reference reset one step earlier (4 updates) and 974 after 8 updates with rank 4 (scale 4).
        # 16 steps x 4 prompts x 4 samples: +0.037 [+0.005, +0.071] greedy correct on 200 validation
        # prompts over 10 seeds, all up (docs/real_model/demo.md); ~10 min per seed, 2 seeds sharing 2 cores.
        "lr": 2e-4,
        "batch_size": 4,
        "group_size": 4,
        "max_new_tokens": 32,
        "temperature": 0.7,
        "ppo_epochs": 1,
        "minibatches": 1,
        "beta": 0.01,
        "steps": 16,
        "eval_every": 16,
        "n_val": 200,
    },
}
RUN_PRESET_SOURCES: dict[str, str] = {
    "smollm2_demo": "This project's real-model demo (docs/real_model.md): LoRA rank 8 on the attention "
    "projections, base frozen; sized for ~30 min on 2 CPU cores. Needs prorl-bench get-model "
    "smollm2-135m-instruct first. Not the fast path, so that docs/real_model/demo.json reproduces bit for "
    "bit: add --dtype auto --sample_draw inverse_cdf --shared_prompt for the faster step (bf16 where the CPU "
    "has bf16 units; the same learning: docs/real_model/bf16_fast; speed per CPU type: docs/performance.md)",
}


def preset_values(name: str) -> dict[str, object]:
    """The fields preset ``name`` sets (reset presets and run presets)."""
    return dict(PRESETS.get(name) or RUN_PRESETS[name])


def apply_preset(preset_values: dict[str, Any], explicit: dict[str, Any]) -> dict[str, Any]:
    """Merge a preset with explicitly given flags; explicit values win. Returns a new dict."""
    unknown = set(preset_values) - set(RESET_FIELDS)
    if unknown:
        raise KeyError(f"preset sets unknown fields: {sorted(unknown)}")
    return {**preset_values, **explicit}


def describe_preset(name: str) -> str:
    """One line: the preset's name, every field it sets, and its source."""
    if name not in PRESETS and name not in RUN_PRESETS:
        raise KeyError(f"unknown preset {name!r}; choose from {sorted(PRESETS) + sorted(RUN_PRESETS)}")
    sets = ", ".join(f"{k}={v}" for k, v in preset_values(name).items())
    return f"{name}: {sets}. Source: {PRESET_SOURCES.get(name) or RUN_PRESET_SOURCES[name]}."


def describe_all() -> str:
    """All presets, one line each (for --help epilogs and the README)."""
    return "\n".join(describe_preset(name) for name in [*PRESETS, *RUN_PRESETS])
