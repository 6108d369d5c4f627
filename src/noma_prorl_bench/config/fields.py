"""One run configuration: every field documented, the CLI generated from it.

`RunConfig` is the single source of truth for a run. Each field's docstring (the string
literal under it) is its `--help` text; `Literal[...]` annotations become `choices`.
The parser (parser.py) is built from these fields; validation lives in validate.py and the
named presets in presets.py.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import re
import textwrap
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

# Fields that may differ between a run and its `--resume` (checkpoint.resume_config refuses any
# other change). None of them changes what the next step computes, except `steps` (a longer run:
# the cosine-schedule horizon follows it) and `threads` (float reductions may round differently).
#: --ref_compute -> the variant code of reports (A0 / A1 / A2; Variant B has no reference).
REF_CODES: dict[str, str] = {"naive_epoch": "A0", "cached": "A1", "ring": "A2"}

RESUME_SAFE_FIELDS: tuple[str, ...] = (
    "outdir",
    "overwrite",
    "resume",
    "quiet",
    "report_to",
    "steps",
    "threads",
    "plots",
    "save_every",
    "keep_checkpoints",
    "on_nan",
)


# --warmstart_steps -1 (auto) per model: enough that RL starts "sometimes right" (val ~0.2-0.4 on
# reverse_digits); the transformer needs more steps than the GRU to get there, and from a worse
# start its RL collapsed (measured: 50 steps -> val 0.08 then collapse; 100 -> 0.21 then 0.92).
WARMSTART_AUTO_STEPS = {"gru": 50, "transformer": 100}
DAPO_EPS_HIGH = 0.28  # Yu et al. 2025 (DAPO) clip-higher upper range
CLIP_EPS_DEFAULT = 0.2  # PPO/GRPO clip range when no clip flag is given
GSPO_EPS = (3e-4, 4e-4)  # Zheng et al. 2025 (GSPO): sequence-ratio clip range (low, high)

#: --kl_estimator value -> the metric key of the per-token KL that enters the loss (and that
#: --target_kl, --reset_kl_above and the reports read). The one place these strings are mapped;
#: algorithms/kl_term.KLTerm and analysis/runlog use it.
KL_METRIC_KEYS = {
    "simple": "kl/k1",
    "k1": "kl/k1",
    "k2": "kl/k2",
    "k3": "kl/k3",
    "k3_ratio": "kl/k3_ratio",
    "full": "kl/full",
}


def kl_metric_key(kl_estimator: str) -> str:
    """Metric key of the KL estimate a --kl_estimator puts in the loss (kl/k3 if unknown)."""
    return KL_METRIC_KEYS.get(str(kl_estimator).lower(), "kl/k3")


@dataclass
class RunConfig:
    """Resolved configuration of one training run (written to OUTDIR/config.json)."""

    # ---------------------------------------------------------------- run and outputs
    outdir: str = ""
    """Output directory (config.json, metrics.jsonl, events.jsonl, plots/). Required."""
    overwrite: bool = False
    """Allow writing into a non-empty existing --outdir (its run files are replaced)."""
    quiet: bool = False
    """No progress bars on stderr (ours, and third-party ones such as transformers' weight loading)."""
    report_to: str = "none"
    """Also send every metrics.jsonl record, same keys, to: tensorboard (OUTDIR/tb/, view with `tensorboard --logdir OUTDIR/tb`; needs the tensorboard package, pip install -e '.[tensorboard]'), csv (OUTDIR/metrics.csv, one column per key), wandb (Weights & Biases, OUTDIR/wandb/, config = the run's config; offline unless WANDB_MODE says otherwise, project $WANDB_PROJECT or prorl-bench; needs pip install -e '.[wandb]'), a comma list of them (csv,wandb), or none. metrics.jsonl is always written; on --resume each is rebuilt from it."""
    seed: int = 0
    """Seed for model init, prompt sampling and rollout sampling (runs are bit-reproducible)."""
    steps: int = 400
    """Number of RL steps (one step = sample, score, reference, ppo_epochs x minibatches updates)."""
    threads: int = 1
    """torch intra-op threads for this process (1 is fastest for the toy models and is deterministic)."""
    plots: int = 0
    """1: write per-run plots under OUTDIR/plots/ at the end of the run."""
    eval_every: int = 10
    """Evaluate every N steps: greedy validation reward, drift monitors (kl/to_init, kl/to_prev), samples."""
    n_val: int = 256
    """Number of held-out validation prompts (fixed across seeds). With --task jsonl:PATH and no --n_val: a fifth of the file's distinct prompts, at most 256 (or the preset's value), at least 1 and leaving one for training; the value used is config.json's n_val."""
    eval_samples: int = 0
    """K > 0: at each evaluation also sample K completions per validation prompt (at --temperature) and log reward/val_pass@k for k = 1, 2, 4, ..., K with the unbiased estimator of Chen et al. 2021, 1 - C(n-c, k)/C(n, k) (a sample is correct when it earns the full reward), beside the greedy reward/val. Costs K sampled generations per prompt per evaluation. 0: off."""

    # ---------------------------------------------------------------- task and model
    task: str = "reverse_digits"
    """Verifiable task. Toy tasks: reverse_digits, parity, sort_digits (char vocabulary). Text tasks (HF models): keyword_inclusion, arithmetic, and rg:NAME, any reasoning-gym dataset (e.g. rg:basic_arithmetic, rg:chain_sum; needs pip install reasoning-gym==0.1.25): prompts from its generator (validation disjoint from training), wrapped in the model's chat template, reward = the dataset's score_answer on the extracted answer (docs/real_model.md). Your own: module.path:factory, an importable callable returning a Task (kwargs from --task_kwargs), or jsonl:PATH, one {"prompt", "answer"} object per line, reward by --reward_fn (docs/tasks.md)."""
    task_kwargs: str = ""
    """rg:NAME and module.path:factory only: a JSON object. rg:NAME: the reasoning-gym dataset's config fields (difficulty), passed to create_dataset, e.g. '{"min_terms": 2, "max_terms": 2, "max_digits": 2}'. module.path:factory: keyword arguments of the factory. Empty: the defaults."""
    prompt_field: str = "prompt"
    """jsonl:PATH only: the key of each line's prompt."""
    answer_field: str = "answer"
    """jsonl:PATH only: the key of each line's reference answer."""
    reward_fn: str = "exact"
    """jsonl:PATH only: the reward in [0, 1]. exact: stripped response == answer; numeric: the last number in the response within --reward_tol of the answer; regex: the answer is a regular expression matching the whole stripped response; MODULE:FUNCTION: an importable FUNCTION(response, answer) returning a number or a dict with "reward"."""
    reward_tol: float = 1e-6
    """jsonl:PATH with --reward_fn numeric only: the absolute tolerance."""
    max_task_bytes: int = 256 * 2**20
    """jsonl:PATH only: the largest task file read, in bytes (its size is checked before it is opened)."""
    max_line_bytes: int = 2**20
    """jsonl:PATH only: the longest line of the task file, in bytes (read at most this much per line). A line's JSON may nest at most 64 levels deep."""
    max_prompt_chars: int = 16384
    """jsonl:PATH only: the longest prompt, in characters (the memory estimate sizes sequences by the longest prompt)."""
    max_answer_chars: int = 4096
    """jsonl:PATH only: the longest answer, in characters (the response cap, --max_new_tokens when not given, is the longest answer plus one)."""
    answer_extraction: AnswerExtraction = "lenient"
    """rg:NAME only: how the answer is read from a response before score_answer. tag: the inside of the last <answer></answer> (none: reward 0). lenient: the tag if present, else the last number (numeric answers) or the last non-empty line."""
    format_reward: float = 0.0
    """rg:NAME only: weight w of the format reward; reward = correct + w * format, where format = 1 iff the response has exactly one non-empty <answer></answer>. Both parts are logged separately (reward/correct, reward/format) whatever w is."""
    model: str = "gru"
    """Policy: gru | transformer | hf:PATH (a local Hugging Face causal-LM directory)."""
    hidden: int = 128
    """GRU hidden size (and embedding size)."""
    d_model: int = 64
    """Transformer width (--model transformer)."""
    n_layers: int = 2
    """Transformer layers (--model transformer)."""
    n_heads: int = 4
    """Transformer attention heads (--model transformer)."""
    device: Literal["cpu", "cuda", "auto"] = "cpu"
    """Device: cpu, cuda, or auto (cuda when available)."""
    dtype: Literal["float32", "bfloat16", "bf16_mixed", "auto"] = "float32"
    """Model precision (log-probabilities, KL and losses are always computed in float32). float32; bfloat16: pure bf16 parameters and Adam state, no master weights, so updates much smaller than 1e-4 of a weight are rounded away (lr 1e-6 full fine-tuning does nothing; docs/models.md); bf16_mixed: trainable parameters (master weights) and optimizer state in float32, forwards and backwards under bf16 autocast (bf16 matmuls); with hf:PATH the frozen nn.Linear weights (a LoRA run's base, and a frozen output head tied to the embedding, as its own copy) are stored in bf16 once instead of being re-cast every call, the sampler decodes through LoRA adapters merged into those weights (W + s B A), teacher-forced passes (learner, reference, critic) compute attention in float32 and each layer's two norms hand their Linears one bf16 copy (docs/performance.md); auto: bf16_mixed for hf:PATH where the hardware has bf16 units (CUDA bf16, or an x86 CPU with avx512_bf16/amx_bf16, an arm CPU with bf16), else float32 (a fallback). The dtype used and why is the `precision` event in events.jsonl and config.json's derived.dtype / derived.dtype_reason. Without bf16 units bf16 is emulated: correct but slower than float32."""
    grad_checkpoint: bool = False
    """Activation (gradient) checkpointing in training forwards: transformer per block (torch.utils.checkpoint, non-reentrant), hf:PATH through the model's gradient_checkpointing_enable. Less memory, about one extra forward of compute; same gradients (not for gru)."""
    logprob_chunk: int = 0
    """Compute log-probs (and the learner's entropy) this many token positions at a time (output head + float32 log-softmax per chunk, recomputed in backward), so no [n, T, V] float32 logits tensor of a whole batch exists at once. Applies to every log-prob pass: the learner's forward, the reference forward (A0/A1/A2, and the Ray reference actor), the pre-update recompute of --tis_cap, the warm start and the policy/delta_logp monitor; not to sampling (one [N, V] row per token) nor to the kl/to_init, kl/to_prev monitors (exact full-vocabulary KL). 0: one piece. transformer and hf:PATH only; not with --kl_estimator full (which needs the logits)."""
    shared_prompt: bool = False
    """hf:PATH: teacher-forced log-prob passes (the learner's forward and backward, the reference forward, the pre-update recompute, the monitors' log-probs) encode each distinct prompt of the batch once and share its keys and values with the rows that carry it (a group's G samples), then run only the prompt's last token and the responses: in the demo regime (chat prompts of 53-55 tokens, G 4, <= 32 response tokens) about half the token positions per pass. The same function; not the same bits (float rounding), so off keeps every recorded run reproducible. Not with --grad_checkpoint (transformers drops the cache under checkpointing); models whose every layer attends to the whole sequence (not sliding-window ones)."""
    decode_weights: Literal["auto", "packed", "plain"] = "auto"
    """The sampler's Linears on CPU. packed: each decode step multiplies by weights packed once for the matmul library (MKL's packed GEMM for float32, oneDNN's prepacked matmul for bf16; a frozen base is packed once per run, merged or trained weights again when they change), instead of F.linear repacking every weight inside every call: the same bits (a shape uses the packed op only after it returned the Linear's own bits on a probe on this machine), SmolLM2-135M's decode-step matmuls 1.3x (float32) / 1.4x (bf16) faster on an Intel Xeon with AMX, and the packed copy held while a run lasts (SmolLM2: +1.0 GiB in float32, about twice the Linear weights; +0.23 GiB in bf16; the memory estimate's packed_weights term; docs/performance.md). plain: the Linears' own forward. auto: packed for hf:PATH on CPU, plain otherwise (packed needs hf:PATH and is refused with --device cuda; CUDA tensors always take F.linear)."""
    compile_decode: CompileDecode = "off"
    """--model transformer: run the sampler's single-token decode step through torch.compile over the preallocated KV cache with static shapes (position as a tensor, attention over the whole cache under a mask), compiled once per rollout shape (batch rows, cache length), not per token. default: inductor's default mode; reduce-overhead: CUDA graphs on a CUDA device (on CPU it runs as default). The first rollout pays the compilation (tens of seconds on CPU). Same tokens and logp_old as off up to float rounding; off: the eager step (docs/performance.md)."""
    micro_batch: int = 0
    """Rows (sequences) per forward/backward inside a minibatch; the gradients of the micro-batches are accumulated into one optimizer step equal to the whole minibatch's (gradient accumulation). 0: the whole minibatch at once."""
    warmstart_steps: int = -1
    """Supervised warm-start steps before RL so the policy is sometimes right (0 disables; cost reported in events). Targets: the task's demonstration(example) when it has one (text tasks), else the answer. -1 (auto): 50 for gru, 100 for transformer, 0 for hf:PATH (a pretrained model needs none, and --warmstart_lr would damage it); the resolved count is config.json's derived.warmstart_steps."""
    warmstart_lr: float = 3e-3
    """Learning rate of the supervised warm start."""

    # ---------------------------------------------------------------- sampling
    batch_size: int = 16
    """Prompts per step (B)."""
    group_size: int = 8
    """Samples per prompt (G); N = B*G sequences per step."""
    temperature: float = 1.0
    """Sampling temperature; log-probs of policy, reference and behaviour all use logits/temperature."""
    sample_draw: SampleDraw = "exponential"
    """How the sampler draws each token from softmax(logits / temperature) (training rollouts and --eval_samples; greedy evaluation draws nothing). exponential: torch.multinomial's exponential race (one exponential variate per vocabulary entry per row, the same draw as transformers' generate; every earlier run used it). inverse_cdf: one float64 uniform variate per row, searched in the row's cumulative distribution (float32 sums within blocks of 256 entries, float64 across them). The same distribution, a different use of the seeded generator: the tokens of a seed differ between the two. With a large vocabulary inverse_cdf is much cheaper (SmolLM2, 49,152 entries, 16 rows: 0.8 vs 14 ms per token; docs/performance.md)."""
    max_new_tokens: int = 0
    """Response length cap T (0: the task's default)."""

    # ---------------------------------------------------------------- optimisation
    lr: float = 1e-3
    """Learning rate of the RL optimizer."""
    optimizer: Literal["adam", "adamw"] = "adam"
    """torch.optim.Adam or AdamW."""
    weight_decay: float = 0.0
    """Weight decay (AdamW)."""
    max_grad_norm: float = 1.0
    """Gradient clipping by global norm (0 disables)."""
    lr_schedule: LRSchedule = "constant"
    """Learning-rate schedule (after warmup)."""
    warmup_steps: int = 0
    """Linear LR warmup, in optimizer steps."""
    ppo_epochs: int = 2
    """PPO epochs over each rollout batch (E)."""
    minibatches: int = 2
    """Minibatches per epoch (M); each is one optimizer step. Minibatches are contiguous slices of the batch, visited in a shuffled order each epoch."""

    # ---------------------------------------------------------------- loss
    adv: Adv = "grpo"
    """Advantage estimator over rewards[B,G] (maxrl: (r - mean_g) / (mean_g + eps); rft: the raw rewards). gae: PPO with a critic, a value model (a copy of the policy after the warm start with a linear value head on its final hidden states, its own Adam) and per-token GAE(--gamma, --lam) advantages; the clipped value loss, times --vf_coef, joins the policy loss (docs/losses.md)."""
    gamma: float = 1.0
    """--adv gae only: discount gamma in [0, 1] of the per-token rewards (the task reward at the last response token)."""
    lam: float = 0.95
    """--adv gae only: GAE lambda in [0, 1] (1: Monte-Carlo returns minus values; 0: the one-step TD residual)."""
    whiten_adv: int = 1
    """--adv gae only: 1: whiten the GAE advantages over the batch's response tokens (masked mean 0, std 1), as TRL's PPOTrainer and OpenRLHF do; 0: raw."""
    vf_coef: float = 0.1
    """--adv gae only: value-loss coefficient c_v > 0 in loss = policy loss + beta*KL + c_v * value loss (TRL's vf_coef)."""
    cliprange_value: float = 0.2
    """--adv gae only: value clip range: value loss 0.5*max((V-R)^2, (clip(V, V_old-c, V_old+c)-R)^2) per token (TRL/OpenAI baselines); 0: unclipped 0.5*(V-R)^2."""
    critic_lr: float = -1.0
    """--adv gae only: base learning rate of the critic's Adam, which follows the policy's --lr_schedule and --warmup_steps (its gradients are clipped by --max_grad_norm on their own). -1: --lr; the value used is config.json's derived.critic_lr."""
    critic_reset: CriticReset = "keep"
    """--adv gae only: the critic at a reference reset. keep: weights and Adam state untouched; follow: its Adam and LR schedule get the policy's --opt_reset treatment (with --soft_factor, --reset_opt_step, --reset_lr_schedule); reinit: the critic is re-initialised from the current policy (value head zeroed), its Adam state cleared and its schedule restarted."""
    loss: Loss = "grpo_clip"
    """Per-token policy loss (noclip: -ratio * A, unclipped)."""
    clip_eps: float = -1.0
    """PPO/GRPO clip range epsilon (eps_low = eps_high = clip_eps unless those are given). -1: 0.2, except with --loss gspo, where no clip flag at all means the GSPO paper's 3e-4 (low) / 4e-4 (high) on the sequence ratio. The values used are config.json's derived.eps_low / derived.eps_high."""
    eps_low: float = -1.0
    """Lower clip range (ratio >= 1 - eps_low); -1 means --clip_eps."""
    eps_high: float = -1.0
    """Upper clip range (ratio <= 1 + eps_high); -1 means --clip_eps, except with --loss dapo where it means DAPO's clip-higher 0.28 (and with --loss gspo and no clip flag, 4e-4). With --loss cispo it is the only bound: the IS weight is truncated at 1 + eps_high (MiniMax-M1)."""
    dual_clip_c: float = 0.0
    """Dual-clip constant c > 1 for negative advantages (Ye et al. 2020); 0 disables."""
    loss_agg: LossAgg = "auto"
    """How the per-token loss matrix is reduced to a scalar. auto: seq-mean-token-mean (a mean over sequences, as the GSPO paper) with --loss gspo, token-mean otherwise; the value used is config.json's derived.loss_agg."""
    tis_cap: float = 0.0
    """Truncated importance sampling cap C between sampler and learner logprobs; 0 disables."""
    dynamic_sampling: int = 0
    """1: DAPO dynamic sampling (drop groups with zero reward spread, refill from oversampled prompts)."""
    overlong: Literal["none", "filter", "shape"] = "none"
    """DAPO overlong handling: mask truncated responses from the loss, or soft length shaping of rewards."""

    # ---------------------------------------------------------------- KL and reference
    variant: Literal["A", "B"] = "A"
    """A: explicit KL to a reference policy (needs logp_ref). B: no reference model at all; the penalty anchors to logp_old (a different objective)."""
    ref_compute: RefCompute = "cached"
    """How logp_ref is obtained (Variant A): naive_epoch (A0: recomputed for every minibatch in every epoch), cached (A1: once per rollout batch), ring (A2: once per batch into a preallocated buffer, minibatches are views)."""
    beta: float = 0.05
    """KL coefficient (initial value when --target_kl is set)."""
    kl_estimator: KLEstimator = "k3"
    """Estimator in the loss (r = pi_anchor/pi_theta). k3 = r - 1 - log r (default; GRPO's, verl's default low_var_kl): its value estimates KL(pi||anchor) but its in-loss gradient is that of the reverse KL(anchor||pi). k3_ratio = (pi_theta/pi_old) * k3: same value on-policy, gradient of KL(pi||anchor) (TRL 1.16's default use_bias_correction_kl when beta > 0; slime). simple = k1 = logp_theta - logp_anchor: zero expected gradient, so with it Variant A, Variant B and every reset give identical updates (see README). k2 = 0.5*(log r)^2 (see --k2_mode): gradient of KL(pi||anchor). full = exact KL over the vocabulary. k1/k2/k3 are logged every step (docs/losses.md)."""
    k2_mode: Literal["theta_over_ref", "ref_over_old"] = "theta_over_ref"
    """k2 ratio. theta_over_ref: differentiable 0.5*(log pi_theta/pi_ref)^2. ref_over_old: the ProRL-v2 blog's x = exp(clamp(log pi_ref/pi_old)) as written; it is constant in theta inside a rollout, so as a loss term it adds no gradient (its value is logged as kl/ref_over_old_k2 every step either way)."""
    kl_in: Literal["loss", "reward"] = "loss"
    """Place the KL penalty in the loss (beta * KL_t added to each token's loss), or in the reward (see --kl_reward_form), computed between logp_old and logp_ref at rollout time."""
    kl_reward_form: Literal["token", "sequence"] = "token"
    """--kl_in reward only. token (default): REINFORCE++ (Hu 2025) as OpenRLHF does it: -beta*KL_t on every token, return-to-go, so token t's advantage sees r - beta*sum_{s>=t} KL_s (group baselines act on the outcome reward first; reinforce_pp whitens the token returns over the batch); advantages become per token [N, T]. sequence: r - beta*sum_t KL_t, one shaped reward per sequence before the advantage estimator (TRL 1.16 RLOOTrainer's form)."""
    target_kl: float = 0.0
    """Adaptive KL controller target (Ziegler et al. 2019); 0 keeps beta fixed."""
    kl_horizon: int = 10000
    """Adaptive KL controller horizon, in samples: after each step beta *= 1 + clip(kl/target - 1, -0.2, 0.2) * N / horizon with N = batch_size*group_size sequences (Ziegler et al. 2019; TRL, OpenRLHF). Must exceed 0.2*N so beta stays positive."""

    # ---------------------------------------------------------------- resets
    preset: Literal["none", "prorl_v1", "prorl_v2", "trl_sync", "noma_soft", "smollm2_demo"] = "none"
    """Preset, applied first; explicit flags override what it sets. Reset-semantics presets (docs/resets.md, "Presets") and smollm2_demo, the real-model demo (docs/real_model.md: SmolLM2-135M-Instruct, dequantised Q4_1, after prorl-bench get-model smollm2-135m-instruct; LoRA on q,k,v,o; rg:basic_arithmetic). Each sets:"""
    reset_every: int = 0
    """Periodic reference reset every N steps (0: never)."""
    reset_kl_above: float = 0.0
    """Reset after a step whose mean KL to pi_ref, by the --kl_estimator in use (kl/k1 for simple, kl/k2, kl/k3, kl/k3_ratio, kl/full), exceeds X (0: off)."""
    reset_kl_min_gap: int = 20
    """A KL-spike reset needs at least this many steps since the previous reset of any reason (or the start)."""
    reset_on_stall: int = 0
    """Reset after PATIENCE validations without improvement (0: off)."""
    stall_min_delta: float = 0.0
    """Improvement over the best validation reward that counts as progress."""
    reset_to: ResetTo = "current"
    """Reset target: the current policy (ProRL v2) or the best checkpoint by validation reward (ProRL v1; the policy is restored too)."""
    ref_update: RefUpdate = "hard"
    """Reference update rule at a reset: hard copy or Polyak mix ref <- a*pi + (1-a)*ref."""
    ref_mix_alpha: float = 0.6
    """Polyak mixing weight a (TRL sync_ref_model uses 0.6)."""
    opt_reset: OptReset = "keep"
    """Adam moments at a reset: keep; hard (moments, step, schedule cleared); soft (m,v *= soft_factor); asym (m *= soft_factor, v kept)."""
    soft_factor: float = 0.2
    """Factor for --opt_reset soft/asym, in [0, 1]."""
    reset_opt_step: int = 0
    """1: reset Adam's step count at a reset (bias correction restarts)."""
    reset_lr_schedule: int = 0
    """1: restart the LR schedule (warmup) at a reset."""
    reset_kl_coef: int = 0
    """1: reset the adaptive KL coefficient to its initial value at a reset."""

    # ---------------------------------------------------------------- growth (docs/growth.md)
    enable_growth: int = 0
    """1: after the warm start, wrap the --adapter_targets layers in LoRA adapters (W x + s B A x, s = lora_alpha / initial_rank fixed) and FREEZE the base model: only the adapters train, so RL capacity is the adapter rank. The rank grows during training (--grow_on); the reference (Variant A) is a copy of the adapted policy."""
    grow_every: int = 0
    """Grow the adapter rank after every N-th step (--grow_on schedule; required > 0 there, must stay 0 otherwise). Never after the last step."""
    rank_step: int = 4
    """Rank added at each growth (capped at --max_rank)."""
    initial_rank: int = 4
    """Adapter rank at the start."""
    max_rank: int = 64
    """Adapter rank cap; growth stops there (equal to --initial_rank: fixed-rank adapters, no growth)."""
    grow_on: Literal["schedule", "reset", "stall"] = "schedule"
    """When to grow: schedule (every --grow_every steps); reset (right after each reference reset, which needs a reset trigger: --reset_every, --reset_kl_above, --reset_on_stall or a preset); stall (after --grow_patience validations without beating the best by --stall_min_delta)."""
    grow_patience: int = 3
    """--grow_on stall: validations (every --eval_every steps) without improvement before a growth; the count then restarts."""
    growth_migration: GrowthMigration = "preserve"
    """Optimizer state at growth: preserve (old block of every Adam moment copied, new block zero, step kept); reset (same optimizer, all state cleared); naive (new parameters and a new optimizer: state lost, the common PyTorch mistake; the LR scheduler is rebuilt at the same step); noma_flat (NOMA's flat-prefix copy of values and moments: scrambles B [out, r])."""
    adapter_targets: str = "head"
    """Comma-separated nn.Linear names that get adapters: exact dotted names (head), dotted suffixes (q_proj matches blocks.*.attn.q_proj) or globs (*proj)."""
    lora_alpha: float = 16.0
    """Adapter scale numerator: s = lora_alpha / initial_rank, fixed when the rank grows (so growth leaves the policy unchanged)."""

    # ---------------------------------------------------------------- engines
    engine: Literal["local", "ray_colocated", "ray_async"] = "local"
    """Execution engine: local (one process, no Ray); ray_colocated (Generator and Learner actors on one node, generate -> train -> sync in turn); ray_async (generation of the next batches overlaps training, bounded by --max_staleness). See docs/ray.md."""
    ref_placement: Literal["learner", "generator", "own_actor"] = "learner"
    """Ray engines, Variant A: where pi_ref scores logp_ref. learner: inside the learner's update (as the local engine); generator: on the rollout workers right after sampling; own_actor: a separate ReferenceScorer actor. Remote placements compute it once per batch (needs --ref_compute cached)."""
    steps_per_rollout: int = 1
    """ray_colocated, K: the generator samples K step-batches with one policy version, then the learner takes K steps (one per batch, each ppo_epochs x minibatches clipped updates, logp_old from the sampling version) before the next weight sync. With --ppo_epochs 1 --minibatches 1 this is K optimizer steps per rollout; K=1 equals --engine local."""
    max_staleness: int = 1
    """ray_async, S: a batch sampled by policy version w is trained at learner version <= w + S; the driver delays generation (never discards) to keep it. 0 = synchronous."""
    num_generators: int = 1
    """ray_async: Generator actors sampling in parallel (at most max(1, --max_staleness) sample at once: S batches may run ahead of the one in training)."""
    ray_address: str = ""
    """Ray engines: join an existing cluster at this address (e.g. auto, or HOST:6379 after `ray start --head`); empty starts a private local one."""
    actor_timeout: float = 120.0
    """Ray engines: seconds an actor call may take before the actor is declared hung; a dead or hung actor ends the run with exit code 1."""
    weight_sync: Literal["object_store", "nccl"] = "object_store"
    """Ray engines: weight transport from learner to generators. object_store (numpy arrays, CPU); nccl needs CUDA GPUs (one per actor) and is not available in this build."""

    # ---------------------------------------------------------------- reliability
    save_every: int = 0
    """Checkpoint every N steps under OUTDIR/checkpoints/ (and at the end, and on SIGINT/SIGTERM/SIGHUP/SIGUSR1 with --engine local); 0: only at the end."""
    keep_checkpoints: int = 2
    """Keep the last N checkpoints."""
    resume: bool = False
    """Continue the run in --outdir from its last complete checkpoint (its config; flags given now may only change the fields in RESUME_SAFE_FIELDS, see docs/reliability.md)."""
    on_nan: Literal["skip", "stop"] = "skip"
    """On NaN/Inf in loss, gradients, logprobs or KL the update is not applied; then skip: go on with the next minibatch, stop: end the run (exit code 3)."""

    # ---------------------------------------------------------------- derived helpers
    @property
    def _gspo_paper_clip(self) -> bool:
        """--loss gspo with no clip flag at all: the GSPO paper's 3e-4 / 4e-4."""
        return self.loss == "gspo" and self.clip_eps < 0 and self.eps_low < 0 and self.eps_high < 0

    @property
    def eps_lo(self) -> float:
        """Effective lower clip range."""
        if self.eps_low >= 0:
            return self.eps_low
        if self._gspo_paper_clip:
            return GSPO_EPS[0]
        return self.clip_eps if self.clip_eps >= 0 else CLIP_EPS_DEFAULT

    @property
    def eps_hi(self) -> float:
        """Effective upper clip range."""
        if self.eps_high >= 0:
            return self.eps_high
        if self.loss == "dapo":
            return DAPO_EPS_HIGH
        if self._gspo_paper_clip:
            return GSPO_EPS[1]
        return self.clip_eps if self.clip_eps >= 0 else CLIP_EPS_DEFAULT

    @property
    def clip_used(self) -> dict:
        """The clip bounds the chosen loss actually applies (config.json derived): None where the loss
        has no such bound (reinforce, noclip: none; cispo: only eps_high, the IS-weight truncation)."""
        lo = None if self.loss in ("reinforce", "noclip", "cispo") else self.eps_lo
        hi = None if self.loss in ("reinforce", "noclip") else self.eps_hi
        return {"eps_low": lo, "eps_high": hi}

    @property
    def loss_agg_resolved(self) -> str:
        """--loss_agg after resolving auto (seq-mean-token-mean for gspo, else token-mean)."""
        if self.loss_agg != "auto":
            return self.loss_agg
        return "seq-mean-token-mean" if self.loss == "gspo" else "token-mean"

    @property
    def critic_lr_resolved(self) -> float:
        """--critic_lr after resolving -1 (--lr)."""
        return self.lr if self.critic_lr < 0 else self.critic_lr

    @property
    def warmstart_steps_resolved(self) -> int:
        """Warm-start steps after resolving -1 (auto): 0 for hf:PATH models, else per model."""
        if self.warmstart_steps >= 0:
            return self.warmstart_steps
        return WARMSTART_AUTO_STEPS.get(self.model, 0)

    @property
    def variant_label(self) -> str:
        """A0/A1/A2/B label used in reports."""
        if self.variant == "B":
            return "B"
        return REF_CODES[self.ref_compute]

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def field_default(name: str):
    """The default value of RunConfig field `name` (for modules that bound by a flag's default)."""
    return next(f.default for f in dataclasses.fields(RunConfig) if f.name == name)


# ------------------------------------------------------------------------ field docs
def field_sections(cls=RunConfig) -> dict[str, str]:
    """The section of each field: the title of the last `# ---- title` comment above it in the
    source (e.g. "resets"; a parenthesised note is dropped). `--help` groups flags by these."""
    out, section = {}, "other"
    for line in inspect.getsource(cls).splitlines():
        m = re.match(r"\s*# -{8,}\s*(.+?)\s*$", line)
        if m:
            section = m.group(1).split("(")[0].strip()
            continue
        m = re.match(r"    ([a-z_][a-z0-9_]*)\s*:", line)
        if m:
            out[m.group(1)] = section
    return out


def field_docs(cls=RunConfig) -> dict[str, str]:
    """Attribute docstrings (the string literal under each field), parsed from the source."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    cls_def = tree.body[0]
    assert isinstance(cls_def, ast.ClassDef)
    body: list[ast.stmt | None] = list(cls_def.body)
    docs: dict[str, str] = {}
    for node, nxt in zip(body, body[1:] + [None]):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            if isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant):
                docs[node.target.id] = " ".join(str(nxt.value.value).split())
    return docs
