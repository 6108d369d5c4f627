"""The policy (`ModelSpec`: architecture, device, precision, memory switches) and its supervised
warm start (`WarmStartSpec`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from noma_prorl_bench.config.choices import CompileDecode
from noma_prorl_bench.config.errors import ConfigError
from noma_prorl_bench.config.specs.base import Spec, copy_of
from noma_prorl_bench.config.specs.run import RunLevelSpec
from noma_prorl_bench.config.specs.task import TaskSpec

# --warmstart_steps -1 (auto) per model: enough that RL starts "sometimes right" (val ~0.2-0.4 on
# reverse_digits); the transformer needs more steps than the GRU to get there, and from a worse
# start its RL collapsed (measured: 50 steps -> val 0.08 then collapse; 100 -> 0.21 then 0.92).
WARMSTART_AUTO_STEPS = {"gru": 50, "transformer": 100}


@dataclass(frozen=True)
class ModelSpec(Spec):
    """The policy builder's flags (models.build.build_policy) and the precision record."""

    SECTION: ClassVar[str] = "task and model"

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
    """hf:PATH and gru: teacher-forced log-prob passes (the learner's forward and backward, the reference forward, the pre-update recompute, the monitors' log-probs) encode each distinct prompt of the batch once and share its keys and values with the rows that carry it (a group's G samples), then run only the prompt's last token and the responses: in the demo regime (chat prompts of 53-55 tokens, G 4, <= 32 response tokens) about half the token positions per pass; the GRU runs each distinct prompt's first P - 1 tokens once and starts its rows from that hidden state. The same function; not the same bits (float rounding), so off keeps every recorded run reproducible. Not with --grad_checkpoint (transformers drops the cache under checkpointing); models whose every layer attends to the whole sequence (not sliding-window ones)."""
    decode_weights: Literal["auto", "packed", "plain"] = "auto"
    """The sampler's Linears on CPU. packed: each decode step multiplies by weights packed once for the matmul library (MKL's packed GEMM for float32, oneDNN's prepacked matmul for bf16; a frozen base is packed once per run, merged or trained weights again when they change), instead of F.linear repacking every weight inside every call: the same bits (a shape uses the packed op only after it returned the Linear's own bits on a probe on this machine), SmolLM2-135M's decode-step matmuls 1.3x (float32) / 1.4x (bf16) faster on an Intel Xeon with AMX, and the packed copy held while a run lasts (SmolLM2: +1.0 GiB in float32, about twice the Linear weights; +0.23 GiB in bf16; the memory estimate's packed_weights term; docs/performance.md). plain: the Linears' own forward. auto: packed for hf:PATH on CPU, plain otherwise (packed needs hf:PATH and is refused with --device cuda; CUDA tensors always take F.linear)."""
    compile_decode: CompileDecode = "off"
    """--model transformer: run the sampler's single-token decode step through torch.compile over the preallocated KV cache with static shapes (position as a tensor, attention over the whole cache under a mask), compiled once per rollout shape (batch rows, cache length), not per token. default: inductor's default mode; reduce-overhead: CUDA graphs on a CUDA device (on CPU it runs as default). The first rollout pays the compilation (tens of seconds on CPU). Same tokens and logp_old as off up to float rounding; off: the eager step (docs/performance.md)."""
    task: str = copy_of(TaskSpec, "task")  # hf:PATH with rg:NAME: the chat template

    @property
    def is_hf(self) -> bool:
        return self.model.startswith("hf:")

    def check(self) -> None:
        self.positive("hidden", "d_model", "n_layers", "n_heads")
        self._check_memory()
        model = self.model
        if not (model in ("gru", "transformer") or (self.is_hf and len(model) > 3)):
            raise ConfigError("model", f"invalid choice: {model!r} (choose from gru, transformer, hf:PATH)")
        if self.d_model % self.n_heads != 0:
            raise ConfigError("n_heads", f"must divide --d_model {self.d_model}, got {self.n_heads}")

    def _check_memory(self) -> None:
        """--logprob_chunk, --grad_checkpoint, --shared_prompt, --decode_weights, --compile_decode."""
        self.nonneg("logprob_chunk")
        for n in ("grad_checkpoint", "logprob_chunk"):
            if getattr(self, n) and self.model == "gru":
                raise ConfigError(n, "needs --model transformer or hf:PATH (the GRU has no blocks or separate head)")
        if self.dtype == "bf16_mixed" and self.model == "gru":
            raise ConfigError(
                "dtype", "bf16_mixed needs --model transformer or hf:PATH; use float32 or bfloat16 with the GRU"
            )
        if self.shared_prompt and not (self.is_hf or self.model == "gru"):
            raise ConfigError("shared_prompt", f"needs --model hf:PATH or gru, not {self.model}")
        if self.decode_weights == "packed" and not self.is_hf:
            raise ConfigError("decode_weights", f"packed needs --model hf:PATH, not {self.model} (use auto or plain)")
        if self.decode_weights == "packed" and self.device == "cuda":
            raise ConfigError(
                "decode_weights", "packed is for CPU matmul libraries, not --device cuda (use auto or plain)"
            )
        if self.shared_prompt and self.grad_checkpoint:
            raise ConfigError(
                "shared_prompt",
                "cannot be used with --grad_checkpoint (transformers keeps no KV cache under checkpointing); drop one",
            )
        if self.compile_decode != "off" and self.model != "transformer":
            raise ConfigError(
                "compile_decode",
                f"compiles our transformer's decode step: needs --model transformer, not {self.model} (use off)",
            )


@dataclass(frozen=True)
class WarmStartSpec(Spec):
    """The supervised warm start (training/warmstart.py) and its evaluation's progress bar."""

    SECTION: ClassVar[str] = "task and model"

    warmstart_steps: int = -1
    """Supervised warm-start steps before RL so the policy is sometimes right (0 disables; cost reported in events). Targets: the task's demonstration(example) when it has one (text tasks), else the answer. -1 (auto): 50 for gru, 100 for transformer, 0 for hf:PATH (a pretrained model needs none, and --warmstart_lr would damage it); the resolved count is config.json's derived.warmstart_steps."""
    warmstart_lr: float = 3e-3
    """Learning rate of the supervised warm start."""
    model: str = copy_of(ModelSpec, "model")
    seed: int = copy_of(RunLevelSpec, "seed")
    logprob_chunk: int = copy_of(ModelSpec, "logprob_chunk")
    quiet: bool = copy_of(RunLevelSpec, "quiet")

    @property
    def warmstart_steps_resolved(self) -> int:
        """Warm-start steps after resolving -1 (auto): 0 for hf:PATH models, else per model."""
        if self.warmstart_steps >= 0:
            return self.warmstart_steps
        return WARMSTART_AUTO_STEPS.get(self.model, 0)

    def check(self) -> None:
        if self.warmstart_steps < -1:
            raise ConfigError("warmstart_steps", f"must be >= 0, or -1 for auto, got {self.warmstart_steps}")
        if self.warmstart_lr <= 0:
            raise ConfigError("warmstart_lr", f"must be > 0, got {self.warmstart_lr}")
