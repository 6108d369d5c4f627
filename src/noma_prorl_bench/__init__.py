"""noma_prorl_bench: a harness for KL-regularised RL post-training of language models.

It makes three things measurable and switchable: the cost of the reference forward
(A0 naive_epoch / A1 cached / A2 ring / B no reference), the semantics of a reference
reset (which policy becomes the reference and what happens to the optimizer), and
topology growth (adapter rank growth with optimizer-state migration).

Public API (imported on first use, so `import noma_prorl_bench` stays light):

    from noma_prorl_bench import Config, train, load_run
    run_dir = train(Config(outdir="runs/A1", steps=50))    # same files as the CLI
    run = load_run(run_dir)                                # metrics, events, config

The course building-block API (`compute_grpo_clip_loss`, `masked_mean`, ...) is in
`noma_prorl_bench.grpo` and re-exported here under the same names.
"""

from noma_prorl_bench._version import __version__

_LAZY = {
    "Config": ("noma_prorl_bench.config", "RunConfig"),
    "RunConfig": ("noma_prorl_bench.config", "RunConfig"),
    "ConfigError": ("noma_prorl_bench.config", "ConfigError"),
    "train": ("noma_prorl_bench.engines.local", "train"),
    "load_run": ("noma_prorl_bench.analysis.runlog", "load_run"),
}
_COURSE = (
    "compute_group_normalized_rewards",
    "compute_naive_policy_gradient_loss",
    "compute_grpo_clip_loss",
    "compute_policy_gradient_loss",
    "masked_mean",
    "masked_normalize",
    "grpo_microbatch_train_step",
    "sft_microbatch_train_step",
    "compute_entropy",
    "get_response_log_probs",
    "tokenize_prompt_and_output",
    "r1_zero_reward_fn",
    "keyword_inclusion_reward_fn",
)
_LAZY.update({name: ("noma_prorl_bench.grpo", name) for name in _COURSE})

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'noma_prorl_bench' has no attribute {name!r}")
    import importlib

    module, attr = _LAZY[name]
    value = getattr(importlib.import_module(module), attr)
    globals()[name] = value
    return value
