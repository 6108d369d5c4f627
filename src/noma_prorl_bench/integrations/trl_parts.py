"""What ResetGRPOTrainer (integrations/trl.py) does besides TRL's own calls: the refusal at
construction, the torch optimizer under accelerate's wrapper, the PEFT "ref" adapter, the
reference's identity (its checksum, tied tensors once), its hard copy or Polyak update and a
reset's logged metrics. Imports neither trl nor transformers.
"""

from __future__ import annotations

import hashlib
from typing import Any

import torch

from noma_prorl_bench.config.specs import ResetSpec

SUPPORTED_OPTIM = ("adamw_torch", "adamw_torch_fused")  # torch Adam/AdamW: t kept per parameter
SUPPORTED_OPTIMIZERS = (torch.optim.Adam, torch.optim.AdamW)


def refusal(args: Any, cfg: ResetSpec, optimizers: Any, eval_dataset: Any) -> str | None:
    """Why this setup cannot be treated exactly (one line), or None."""
    if not args.beta:
        return "beta=0.0: TRL builds no reference model, so there is nothing to reset; set GRPOConfig(beta=...) > 0"
    if args.sync_ref_model:
        return (
            "sync_ref_model=True: TRL's SyncRefModelCallback would reset the reference too; use "
            "ResetConfig.from_preset('trl_sync') instead"
        )
    if args.fp16:
        return "fp16=True: a grad scaler would undo a fresh optimizer state; use bf16 or fp32"
    if args.deepspeed or args.fsdp:
        return "DeepSpeed/FSDP: sharded or offloaded optimizer state is not supported (untested)"
    if getattr(args, "use_liger_kernel", False) or getattr(args, "use_liger_loss", False):
        return "use_liger_kernel: Liger's fused loss path is not supported"
    opt = optimizers[0] if optimizers else None
    if opt is not None:
        if type(opt) not in SUPPORTED_OPTIMIZERS or any("step" in g for g in opt.param_groups):
            return (
                f"optimizer {type(opt).__name__}: only torch.optim.Adam/AdamW (per-parameter step) are treated exactly"
            )
    else:
        name = getattr(args.optim, "value", args.optim)
        if name not in SUPPORTED_OPTIM:
            return f"optim={name!r}: allowed {', '.join(SUPPORTED_OPTIM)} (8-bit, fused-group-step, Adafactor: refused)"
    if cfg.needs_eval:
        strategy = getattr(args.eval_strategy, "value", args.eval_strategy)
        if strategy == "no" or eval_dataset is None:
            return "reset_on_stall / reset_to='best' read eval_reward: pass an eval_dataset and eval_strategy='steps'"
    return None


def torch_optimizer(opt: Any) -> torch.optim.Optimizer:
    """The torch optimizer under accelerate's AcceleratedOptimizer (or `opt` itself)."""
    while not isinstance(opt, torch.optim.Optimizer) and hasattr(opt, "optimizer"):
        opt = opt.optimizer
    return opt


def reference_checksum(tensors: dict[str, torch.Tensor]) -> str:
    """sha256 over names, dtypes, shapes and bytes, in name order: the reference's identity."""
    h = hashlib.sha256()
    for name in sorted(tensors):
        t = tensors[name].detach().cpu().contiguous()
        h.update(f"{name}:{t.dtype}:{tuple(t.shape)};".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def unique_targets(pairs: list[tuple[str, torch.Tensor, torch.Tensor]]) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    """Drop entries whose destination is a tensor already listed (tied weights): mixed once."""
    seen, out = set(), []
    for name, dst, src in pairs:
        key = (dst.untyped_storage().data_ptr(), dst.storage_offset(), tuple(dst.shape))
        if key not in seen:
            seen.add(key)
            out.append((name, dst, src))
    return out


def log_reset(metrics: dict[str, list], event: dict[str, Any]) -> None:
    """A reset's values into TRL's per-step metrics (`reset/step`, `reset/kl_before`, ...)."""
    m = metrics
    m["reset/step"] = [float(event["step"])]
    for key in (
        "kl_before",
        "kl_after",
        "m_norm_before",
        "m_norm_after",
        "v_norm_before",
        "v_norm_after",
        "ref_forward_seqs",
        "seconds",
    ):
        if event[key] is not None:
            m[f"reset/{key}"].append(float(event[key]))


def add_ref_adapter(policy: Any) -> None:
    """A frozen "ref" adapter equal to "default" (TRL's reference whenever one exists)."""
    if "ref" not in policy.peft_config:
        # the new adapter's random init is overwritten below; keep the global RNG where TRL left it
        with torch.random.fork_rng(devices=range(torch.cuda.device_count())):
            policy.add_adapter("ref", policy.peft_config["default"])
        policy.set_adapter("default")
        named = dict(policy.named_parameters())
        with torch.no_grad():
            for name, p in named.items():
                if ".ref." in name:
                    p.copy_(named[name.replace(".ref.", ".default.")])
    for name, p in policy.named_parameters():
        if ".ref." in name:
            p.requires_grad_(False)
    if not any(".ref." in n for n, _ in policy.named_parameters()):
        raise ValueError("ResetGRPOTrainer: the PEFT model has no 'ref' adapter parameters to reset")


@torch.no_grad()
def update_reference(pairs: list[tuple[str, torch.Tensor, torch.Tensor]], cfg: ResetSpec, peft: bool) -> dict[str, Any]:
    """Hard copy or Polyak mix of each (name, reference, policy) pair into the reference, in place."""
    n = 0
    for _, dst, src in pairs:
        src = src.to(dst.device)
        if cfg.ref_update == "polyak" and dst.is_floating_point():
            dst.mul_(1.0 - cfg.ref_mix_alpha).add_(src.to(dst.dtype), alpha=cfg.ref_mix_alpha)
        else:
            dst.copy_(src)
        n += 1
    alpha = cfg.ref_mix_alpha if cfg.ref_update == "polyak" else None
    return {
        "ref_update": cfg.ref_update,
        "ref_mix_alpha": alpha,
        "ref_tensors": n,
        "ref_kind": "peft_ref_adapter" if peft else "full_model",
    }
