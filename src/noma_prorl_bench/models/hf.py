"""Hugging Face causal LMs from a local directory as policies (``--model hf:PATH``).

``load_hf_policy(path, device, dtype)`` loads ``AutoModelForCausalLM`` and ``AutoTokenizer``
with ``local_files_only=True`` (never the hub) and returns ``(HFPolicy, HFTokenizerAdapter)``.
Errors a user can fix (missing path, no ``config.json``, not a causal LM, no tokenizer) are
``ValueError`` with a one-line message; the CLI turns them into exit code 2.

``HFPolicy`` implements the Policy protocol of docs/ARCHITECTURE.md on top of the HF model:

* Left padding. ``attention_mask = (tokens != pad_id).cumsum(1) > 0`` masks the leading PADs
  only (a PAD or EOS inside the response is an ordinary, attended token), and
  ``position_ids = clamp(mask.cumsum(1) - 1, min=0)`` starts every prompt at position 0.
  ``forward``, ``prefill`` and ``decode`` build them the same way, so incremental decoding
  equals the teacher-forced forward (tested for Llama and Qwen2 with left padding).
* KV cache. ``prefill(tokens, capacity)`` (the sampler passes ``P + T - 1``) runs the prompt
  in one batched forward into a transformers ``StaticCache`` preallocated for ``capacity``
  positions; each ``decode`` writes one column in place and attends through a preallocated
  ``[N, capacity]`` boolean mask (prompt PADs and unwritten columns off). Without
  ``capacity``, or with a non-SDPA attention, the model's ``DynamicCache`` is used instead
  (its mask grown by one column per step). Models load with ``attn_implementation="sdpa"``
  (their default attention if the architecture has no SDPA path).
  The static-cache code lives in ``models/hf_cache.py``; the tokenizer adapter in
  ``models/hf_tokenizer.py``.
* Precision. The model computes in its dtype (``float32`` or ``bfloat16``), or under bf16
  autocast (``bf16_mixed``: float32 trainable weights; the trainer stores frozen ``nn.Linear``
  weights in bf16, ``models/precision.py``); every model call runs under that autocast, and
  returned logits are upcast to float32, so all log-probabilities downstream are float32.
* No dropout. Every ``*dropout*`` / ``*_pdrop`` config field is set to 0 before loading and
  every ``nn.Dropout`` has ``p = 0``; ``train()`` and ``eval()`` therefore compute the same
  function and the trainer may leave the module in either mode.

Shapes: N sequences, L full length, P prompt length, S tokens seen so far, V logits width.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import torch
import torch.nn as nn

from noma_prorl_bench.models.base import autocast, distinct_prompts
from noma_prorl_bench.models.hf_cache import StaticHFState, decode_static, prefill_static, repeat_static
from noma_prorl_bench.models.hf_tokenizer import HFTokenizerAdapter
from noma_prorl_bench.models.precision import TEACHER_ATTENTION, register_teacher_attention

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
register_teacher_attention()  # an unpickled bf16_mixed policy (a Ray actor's) names it in its config


# ----------------------------------------------------------------------------- masks and positions


def left_pad_mask(tokens: torch.Tensor, pad_id: int) -> torch.Tensor:
    """tokens[N, L] -> mask[N, L] (long): 0 on leading PADs, 1 from the first real token on."""
    return ((tokens != pad_id).long().cumsum(1) > 0).long()


def positions_from_mask(mask: torch.Tensor) -> torch.Tensor:
    """mask[N, L] -> position_ids[N, L]: 0 at the first real token, PADs clamped to 0."""
    return (mask.cumsum(1) - 1).clamp(min=0)


# ----------------------------------------------------------------------------- policy


@dataclass
class HFState:
    """Decoding state: the model's KV cache, the attention mask so far and the next positions."""

    cache: Any  # transformers Cache (DynamicCache)
    mask: torch.Tensor  # [N, S] long
    next_pos: torch.Tensor  # [N] position id of the next token


class HFPolicy(nn.Module):
    """A Hugging Face causal LM behind the Policy protocol (forward / prefill / decode)."""

    slice_logits = True  # models.base.response_logits asks for the response positions only
    frozen_bf16 = True  # bf16_mixed: the trainer stores frozen Linear weights in bf16 (models/precision.py)
    shared_prompt = False  # --shared_prompt: teacher-forced passes encode each distinct prompt once
    decode_weights = "packed"  # --decode_weights: the sampler's CPU Linears on packed weights (models/packed.py)

    def __init__(self, model: Any, pad_id: int):
        super().__init__()
        self.model = model  # a transformers PreTrainedModel
        self.pad_id = int(pad_id)
        self.compute_dtype: torch.dtype | None = None  # --dtype bf16_mixed: bf16 autocast over float32 weights
        self._ckpt = False  # --grad_checkpoint is on (set_grad_checkpoint)
        head = self.model.get_output_embeddings()
        self.vocab_size = int(head.weight.shape[0]) if head is not None else int(self.model.config.vocab_size)
        disable_dropout(self.model)

    def forward(self, tokens: torch.Tensor, keep_last: int = 0, prompt_len: int = 0) -> torch.Tensor:
        """Teacher forcing: tokens[N, L] -> float32 logits[N, L, V].

        ``keep_last=k > 0`` returns only the last k positions [N, k, V] (HF ``logits_to_keep``),
        which avoids materialising [N, L, V] for a long prompt and a large vocabulary.
        ``prompt_len=P`` with ``shared_prompt`` on and k <= L - P + 1: each distinct prompt is
        encoded once (`_shared_prompt_cache`).
        """
        with autocast(self):
            out = self.model(**self._trunk_inputs(tokens, prompt_len, keep_last), logits_to_keep=keep_last)
        return out.logits.float()  # [N, L or k, V]

    def hidden_states(self, tokens: torch.Tensor, keep_last: int = 0, prompt_len: int = 0) -> torch.Tensor:
        """tokens[N, L] -> the decoder's final (normed) hidden states [N, L or k, C]
        (``prompt_len`` as in `forward`)."""
        with autocast(self):
            out = self.model.base_model(**self._trunk_inputs(tokens, prompt_len, keep_last))
        h = out.last_hidden_state  # [N, L or L - P + 1, C]
        return h[:, -keep_last:] if keep_last > 0 else h

    def _trunk_inputs(self, tokens: torch.Tensor, prompt_len: int, keep_last: int) -> dict[str, Any]:
        """The decoder's keyword inputs for a teacher-forced pass over tokens[N, L]: the whole
        sequence, or with --shared_prompt tokens[:, P-1:] on the shared prompt cache (the mask
        still covers all L positions; call under the policy's autocast)."""
        mask = left_pad_mask(tokens, self.pad_id)
        pos = positions_from_mask(mask)
        shared = self._shared_prompt_cache(tokens, prompt_len, keep_last)
        if shared is None:
            return {"input_ids": tokens, "attention_mask": mask, "position_ids": pos, "use_cache": False}
        cache, start = shared
        return {
            "input_ids": tokens[:, start:],
            "attention_mask": mask,
            "position_ids": pos[:, start:],
            "past_key_values": cache,
            "use_cache": True,
        }

    def prompt_groups(self, tokens: torch.Tensor, P: int) -> tuple[torch.Tensor, torch.Tensor] | None:
        """--shared_prompt: `base.distinct_prompts` of the rows, or None when the switch is off."""
        return distinct_prompts(tokens, P) if self.shared_prompt else None

    def _shared_prompt_cache(self, tokens: torch.Tensor, P: int, keep_last: int) -> tuple[Any, int] | None:
        """--shared_prompt: rows that share a prompt (a group's G samples) share its encoding.

        The first P - 1 prompt tokens of each distinct prompt run once through the model (no
        output head) into a ``DynamicCache``; its keys and values are gathered to the N rows
        (``index_select``: in backward each row's gradient is added into its prompt's entries), and
        the caller runs tokens[:, P-1:] (the prompt's last token and the response, the positions
        whose outputs a log-prob pass needs) on that cache. The same function as the whole forward;
        not the same bits (the prompt's matmuls and attention see other shapes). -> (cache, P - 1),
        or None for the whole forward: the switch is off, no prompt length or a short one, the
        caller wants outputs from the prompt (keep_last 0 or > L - P + 1), or every prompt differs."""
        if keep_last <= 0 or keep_last > tokens.shape[1] - P + 1:
            return None
        groups = self.prompt_groups(tokens, P)
        if groups is None:
            return None
        uniq, inverse = groups
        start = P - 1
        umask = left_pad_mask(uniq, self.pad_id)  # = mask[:, :P-1] of the prompt's rows (leading PADs only)
        out = self.model.base_model(
            input_ids=uniq, attention_mask=umask, position_ids=positions_from_mask(umask), use_cache=True
        )
        cache = out.past_key_values
        cache.batch_select_indices(inverse)  # [U, ...] -> [N, ...] per layer (differentiable gather)
        return cache, start

    def logits_from_hidden(self, h: torch.Tensor) -> torch.Tensor:
        """h[..., C] -> logits[..., V]: the output embedding (and Gemma-2-style soft-capping)."""
        with autocast(self):
            logits = self.model.get_output_embeddings()(h)
        cap = getattr(self.model.config, "final_logit_softcapping", None)
        return logits if not cap else torch.tanh(logits / cap) * cap

    def set_grad_checkpoint(self, on: bool) -> None:
        """--grad_checkpoint: the model's own switch (non-reentrant torch.utils.checkpoint per layer;
        transformers >= 5.x names it activation_checkpointing_*, older ones gradient_checkpointing_*)."""
        m = self.model
        self._ckpt = bool(on)
        if hasattr(m, "activation_checkpointing_enable"):
            (
                m.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
                if on
                else m.activation_checkpointing_disable()
            )
        elif on:
            m.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        else:
            m.gradient_checkpointing_disable()

    def set_shared_prompt(self, on: bool) -> None:
        """--shared_prompt: teacher-forced passes encode each distinct prompt once
        (`_shared_prompt_cache`). Raises ValueError for a model with sliding-window layers (its
        cache keeps a window, not the whole prompt)."""
        if on:
            cfg = self.model.config
            layer_types = getattr(cfg, "layer_types", None) or []
            sliding = [t for t in layer_types if t != "full_attention"]
            if sliding or (getattr(cfg, "sliding_window", None) and getattr(cfg, "use_sliding_window", True)):
                raise ValueError(
                    f"{cfg.model_type} has sliding-window attention layers; shared prompts need "
                    "every layer to attend to the whole sequence (drop the flag)"
                )
        self.shared_prompt = bool(on)

    def prefill(self, tokens: torch.Tensor, capacity: int | None = None) -> tuple[torch.Tensor, Any]:
        """tokens[N, P] (left-padded) -> (float32 logits of the last position [N, V], state).

        With ``capacity`` (the sampler passes P + T - 1) and SDPA attention, the KV cache is a
        transformers ``StaticCache`` allocated once for ``capacity`` positions and written in
        place; otherwise the model's ``DynamicCache`` (grown by concatenation every step)."""
        mask = left_pad_mask(tokens, self.pad_id)
        pos = positions_from_mask(mask)
        if capacity is not None and self._sdpa():
            return prefill_static(self, tokens, mask, pos, capacity)
        with autocast(self), self._no_ckpt():
            out = self.model(input_ids=tokens, attention_mask=mask, position_ids=pos, use_cache=True, logits_to_keep=1)
        return out.logits[:, -1].float(), HFState(out.past_key_values, mask, pos[:, -1] + 1)

    def decode(self, tok: torch.Tensor, state: Any) -> tuple[torch.Tensor, Any]:
        """One step: tok[N] -> (float32 logits[N, V], state with one more cached position)."""
        if isinstance(state, StaticHFState):
            return decode_static(self, tok, state)
        mask = torch.cat([state.mask, state.mask.new_ones(state.mask.shape[0], 1)], dim=1)  # [N, S+1]
        attn = mask
        if self._sdpa():
            # One query row: the [N, 1, 1, S+1] boolean mask (True = attend) that transformers'
            # sdpa_mask would build from `mask`, built here once instead of per call (HF returns a
            # 4D mask as is); same mask, same logits, ~20% less time per decode on small models.
            attn = mask.bool()[:, None, None, :]
        with autocast(self), self._no_ckpt():
            out = self.model(
                input_ids=tok[:, None],
                attention_mask=attn,
                position_ids=state.next_pos[:, None],
                past_key_values=state.cache,
                use_cache=True,
            )
        return out.logits[:, -1].float(), HFState(out.past_key_values, mask, state.next_pos + 1)

    def repeat_state(self, state: Any, G: int) -> Any:
        """A prefill state of B rows -> the state of N = B*G rows (row i -> rows G*i .. G*i+G-1):
        the sampler prefills each distinct prompt once and shares its KV cache with its G samples."""
        if isinstance(state, StaticHFState):
            return repeat_static(state, G, compiled=getattr(self, "_compiled", False))
        state.cache.batch_repeat_interleave(G)
        return HFState(state.cache, state.mask.repeat_interleave(G, 0), state.next_pos.repeat_interleave(G, 0))

    @contextlib.contextmanager
    def _no_ckpt(self):
        """Sampling with --grad_checkpoint on: HF layers in training mode with checkpointing drop
        the KV cache (use_cache=False), so prefill/decode run the model in eval mode (no dropout
        anywhere, so the function is the same) and restore the mode afterwards."""
        training = self.model.training
        if self._ckpt and training:
            self.model.eval()
        try:
            yield
        finally:
            if self._ckpt and training:
                self.model.train()

    def _sdpa(self) -> bool:
        return getattr(self.model.config, "_attn_implementation", None) in ("sdpa", TEACHER_ATTENTION)

    def _static_step(self, ids, attn, pos, cache) -> torch.Tensor:
        """One decode forward on the StaticCache -> logits[N, 1, V] (compiled by `compile_decode`)."""
        return self.model(
            input_ids=ids, attention_mask=attn, position_ids=pos, past_key_values=cache, use_cache=True
        ).logits

    def compile_decode(self, mode: str = "reduce-overhead") -> None:
        """CUDA only, opt-in, NOT RUN so far (no GPU was available): compile the static-cache
        decode step with ``torch.compile(mode="reduce-overhead")`` (CUDA graphs over fixed shapes
        and the StaticCache's fixed addresses, which ``repeat_state`` re-marks). Measure with
        ``benchmarks/micro/sampler.py --compile`` on a GPU before relying on it (docs/performance.md)."""
        if next(self.model.parameters()).device.type != "cuda":
            raise ValueError("compile_decode needs the model on a CUDA device (CUDA graphs)")
        setattr(self, "_static_step", torch.compile(self._static_step, mode=mode, dynamic=False))  # this instance
        self._compiled = True


def disable_dropout(model: nn.Module) -> int:
    """Set p = 0 on every nn.Dropout in ``model``; returns how many modules were touched."""
    n = 0
    for m in model.modules():
        if isinstance(m, nn.Dropout):
            m.p = 0.0
            n += 1
    return n


# ----------------------------------------------------------------------------- loading


def resolve_dtype(dtype: str | torch.dtype) -> torch.dtype:
    """'float32' | 'bfloat16' | 'float16' | 'bf16_mixed' | torch.dtype -> the parameters' torch.dtype
    (bf16_mixed keeps float32 parameters; its bf16 compute is the policy's ``compute_dtype``)."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype == "bf16_mixed":
        return torch.float32
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r} (choose from {', '.join(DTYPES)})")
    return DTYPES[dtype]


def _first_line(e: Exception) -> str:
    lines = str(e).strip().splitlines()
    return lines[0] if lines else type(e).__name__


def check_model_dir(path: str | Path):
    """Validate ``path`` and return ``(path, config)`` (dropouts zeroed); ValueError on user
    errors. The path checks come before importing transformers."""
    p = Path(path).expanduser()
    if not p.exists():
        raise ValueError(f"hf model path does not exist: {p}")
    if not p.is_dir():
        raise ValueError(f"hf model path is not a directory: {p}")
    if not (p / "config.json").is_file():
        raise ValueError(f"no config.json in {p}: not a Hugging Face model directory")
    from transformers import AutoConfig
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

    try:
        config = AutoConfig.from_pretrained(p, local_files_only=True, trust_remote_code=False)  # no code from p
    except Exception as e:  # noqa: BLE001  (malformed or unknown config: report, don't trace)
        raise ValueError(f"cannot read the model config in {p}: {_first_line(e)}") from e
    if type(config) not in MODEL_FOR_CAUSAL_LM_MAPPING:
        raise ValueError(
            f"{p} holds a {config.model_type!r} model, which is not a causal LM (AutoModelForCausalLM cannot load it)"
        )
    for key, value in config.to_dict().items():
        if isinstance(value, float) and ("dropout" in key or key.endswith("_pdrop")):
            setattr(config, key, 0.0)
    return p, config


def load_hf_policy(
    path: str | Path,
    device: str | torch.device = "cpu",
    dtype: str | torch.dtype = "float32",
    chat: bool = False,
) -> tuple[HFPolicy, HFTokenizerAdapter]:
    """Load a local HF causal LM and its tokenizer -> (HFPolicy on ``device``, adapter).

    ``device``: 'cpu' | 'cuda' | 'auto' | torch.device. ``dtype``: parameter dtype, or
    'bf16_mixed' (float32 parameters, bf16 autocast compute); logits are float32 regardless. Never contacts
    the hub. ValueError for a missing path, a directory
    without ``config.json``, a model that is not a causal LM, or a missing tokenizer.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch_dtype = resolve_dtype(dtype)
    p, config = check_model_dir(path)
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        tokenizer = AutoTokenizer.from_pretrained(p, local_files_only=True, trust_remote_code=False)
    except Exception as e:  # noqa: BLE001
        raise ValueError(f"cannot load a tokenizer from {p}: {_first_line(e)}") from e

    def load(**kw):
        return AutoModelForCausalLM.from_pretrained(
            p, config=config, dtype=torch_dtype, local_files_only=True, trust_remote_code=False, **kw
        )

    try:
        try:
            model = load(attn_implementation="sdpa")
        except ValueError:  # an architecture without SDPA support: its default attention
            model = load()
    except OSError as e:  # missing or unreadable weight files
        raise ValueError(f"cannot load model weights from {p}: {_first_line(e)}") from e
    cast(Any, model).to(device)
    model.eval()
    adapter = HFTokenizerAdapter(tokenizer, chat=chat)
    policy = HFPolicy(model, adapter.pad_id)
    if dtype == "bf16_mixed":
        policy.compute_dtype = torch.bfloat16
    return policy, adapter
