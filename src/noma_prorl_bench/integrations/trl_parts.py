"""What ResetGRPOTrainer (integrations/trl.py) does besides TRL's own calls: the refusal at
construction, the torch optimizer under accelerate's wrapper, the PEFT "ref" adapter, the
reference's identity (its checksum, tied tensors once), its hard copy or Polyak update and a
reset's logged metrics. Imports neither trl nor transformers.
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from noma_prorl_bench.config.specs import ResetSpec
from noma_prorl_bench.models.averaging import mix_states_
from noma_prorl_bench.training.elastic import ElasticReset

SUPPORTED_OPTIM = ("adamw_torch", "adamw_torch_fused")  # torch Adam/AdamW: t kept per parameter
SUPPORTED_OPTIMIZERS = (torch.optim.Adam, torch.optim.AdamW)


def refusal(args: Any, cfg: ResetSpec, optimizers: Any, eval_dataset: Any) -> str | None:
    """Why this setup cannot be treated exactly (one line), or None."""
    if not args.beta:
        return "args: GRPOConfig.beta=0.0: TRL builds no reference model, so there is nothing to reset; set beta > 0"
    if args.sync_ref_model:
        return (
            "args: GRPOConfig.sync_ref_model=True: TRL's SyncRefModelCallback would reset the reference too; use "
            "ResetConfig.from_preset('trl_sync') instead"
        )
    if args.fp16:
        return "args: GRPOConfig.fp16=True: a grad scaler would undo a fresh optimizer state; use bf16 or fp32"
    if args.deepspeed or args.fsdp:
        field = "deepspeed" if args.deepspeed else "fsdp"
        return (
            f"args: GRPOConfig.{field} (DeepSpeed/FSDP): the reset transforms whole per-parameter Adam state; "
            "sharded (DTensor) or partitioned/offloaded state is untested, so refused (use DDP: docs/trl.md)"
        )
    if getattr(args, "use_liger_kernel", False) or getattr(args, "use_liger_loss", False):
        return "args: GRPOConfig.use_liger_kernel / use_liger_loss: Liger's fused loss path is not supported"
    opt = optimizers[0] if optimizers else None
    if opt is not None:
        if type(opt) not in SUPPORTED_OPTIMIZERS or any("step" in g for g in opt.param_groups):
            return (
                f"optimizers[0]: optimizer {type(opt).__name__}: only torch.optim.Adam/AdamW (per-parameter step) "
                "are treated exactly"
            )
    else:
        name = getattr(args.optim, "value", args.optim)
        if name not in SUPPORTED_OPTIM:
            return (
                f"args: GRPOConfig.optim={name!r}: allowed {', '.join(SUPPORTED_OPTIM)} (8-bit, fused-group-step, "
                "Adafactor: refused)"
            )
    if cfg.needs_eval:
        strategy = getattr(args.eval_strategy, "value", args.eval_strategy)
        if strategy == "no" or eval_dataset is None:
            return (
                "reset_config: ResetConfig.reset_on_stall / reset_to='best' read eval_reward: pass eval_dataset=... "
                "and args=GRPOConfig(eval_strategy='steps')"
            )
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
        raise ValueError("ResetGRPOTrainer: model: the PEFT model has no 'ref' adapter parameters to reset")


@torch.no_grad()
def update_reference(
    pairs: list[tuple[str, torch.Tensor, torch.Tensor]], cfg: ResetSpec, peft: bool, rule: str | None = None
) -> dict[str, Any]:
    """Hard copy, Polyak mix (`cfg.ref_update`) or, with `rule="ema"`, the moving reference's
    ref <- tau ref + (1 - tau) pi of each (name, reference, policy) pair, in place: the mixes through
    the harness's `models.averaging.mix_states_`."""
    rule = rule or cfg.ref_update
    dst = {name: d for name, d, _ in pairs}
    src = {name: s.to(d.device, d.dtype) for name, d, s in pairs}
    if rule == "hard":
        for name, d in dst.items():
            d.copy_(src[name])
    else:
        keep, take = (
            (cfg.ref_ema_tau, 1.0 - cfg.ref_ema_tau) if rule == "ema" else (1.0 - cfg.ref_mix_alpha, cfg.ref_mix_alpha)
        )
        mix_states_(dst, src, keep, take)
    weight = (
        {"ref_ema_tau": cfg.ref_ema_tau}
        if rule == "ema"
        else {"ref_mix_alpha": cfg.ref_mix_alpha if rule == "polyak" else None}
    )
    return {
        "ref_update": rule,
        **weight,
        "ref_tensors": len(pairs),
        "ref_kind": "peft_ref_adapter" if peft else "full_model",
    }


ELASTIC_FILE = "reset_elastic.safetensors"


def save_elastic(elastic: ElasticReset, out: str) -> None:
    """Elastic Reset's initial weights and EMA (its own entries) into `out`/ELASTIC_FILE."""
    st = elastic.state_dict()
    tensors = {
        f"{part}/{k}": v.detach().cpu().clone().contiguous() for part in ("init", "ema") for k, v in st[part].items()
    }
    save_file(tensors, os.path.join(out, ELASTIC_FILE))


def load_elastic(elastic: ElasticReset, checkpoint: str) -> None:
    """The state `save_elastic` wrote, back into `elastic`."""
    saved = load_file(os.path.join(checkpoint, ELASTIC_FILE))
    parts = {p: {k.split("/", 1)[1]: v for k, v in saved.items() if k.startswith(p + "/")} for p in ("init", "ema")}
    elastic.load_state_dict({"decay": elastic.decay, **parts})


def anchors_after_step(tr: Any, step: int) -> None:
    """After optimizer step `step` of ResetGRPOTrainer `tr`: Elastic Reset's EMA update; the moving
    reference after steps N, 2N, ... (N = ref_ema_every), applied at the first generation boundary
    (as a reset) so no stale buffered reference log-probs are used; `ref/ema_updates` logged."""
    cfg = tr.reset_config
    if tr._elastic is not None:
        tr._elastic.update(tr.accelerator.unwrap_model(tr.model))
    if not cfg.moving_reference:
        return
    tr._ema_due = tr._ema_due or step % cfg.ref_ema_every == 0
    if tr._ema_due and tr._at_generation_boundary():
        update_reference(tr._ref_pairs(), cfg, tr._peft, rule="ema")
        tr._ema_updates, tr._ema_due = tr._ema_updates + 1, False
    tr._metrics["train"]["ref/ema_updates"] = [float(tr._ema_updates)]


#: the keys of the plug-in's reset_state.json (ResetGRPOTrainer._reset_state writes them)
STATE_KEYS: tuple[str, ...] = ("config", "trigger", "n_resets", "merged", "events", "pending", "best", "unlogged")
STATE_KEYS += ("optimizer_step", "ref_sha256")


def read_reset_state(path: str) -> dict[str, Any]:
    """The plug-in's reset_state.json of a TRL checkpoint, read as a run file (no link, FIFO or device;
    bounded by its size: io/safe_files.py); ValueError naming the file and the key at fault."""
    from noma_prorl_bench.io.safe_files import RunDirRefused, read_bytes  # noqa: PLC0415

    where = f"ResetGRPOTrainer: resume_from_checkpoint: {path}"
    try:
        state = json.loads(read_bytes(path))
    except FileNotFoundError:
        raise ValueError(f"{where} is missing (not saved by ResetGRPOTrainer)") from None
    except (OSError, ValueError, RecursionError, RunDirRefused) as e:
        raise ValueError(f"{where} is unreadable: {' '.join(str(e).split())[:200]}") from None
    if not isinstance(state, dict):
        raise ValueError(f"{where} does not hold a JSON object")
    missing = [k for k in STATE_KEYS if k not in state]
    if missing:
        raise ValueError(f"{where} lacks the key {missing[0]!r}")
    for key, kind in (("config", dict), ("trigger", dict), ("best", dict), ("unlogged", dict), ("events", list)):
        if not isinstance(state[key], kind):
            raise ValueError(f"{where}: key {key!r} is not a JSON {'object' if kind is dict else 'array'}")
    return state


def save_tensors(tensors: dict[str, torch.Tensor], path: str) -> None:
    """`tensors` (detached CPU copies) into the safetensors file `path`."""
    save_file({k: v.detach().cpu().clone().contiguous() for k, v in tensors.items()}, path)


def agree_on_inputs(accelerator: Any, kl: float | None, val: float | None) -> tuple[float | None, float | None]:
    """The trigger's inputs (the step's KL, the evaluation's reward) made the same on every process before
    any decides: the maximum over the processes (a KL spike seen by one resets all), None where none has
    one. TRL's own `kl` and `eval_reward` are already reduced over the processes; this makes the decision
    independent of that and of a subclass's own measurement. One process: unchanged."""
    if accelerator.num_processes <= 1:
        return kl, val
    import torch.distributed as dist  # noqa: PLC0415

    x = torch.tensor([float("-inf") if v is None else float(v) for v in (kl, val)], dtype=torch.float64)
    x = x.to(accelerator.device)
    dist.all_reduce(x, op=dist.ReduceOp.MAX)
    kl_all, val_all = (None if v == float("-inf") else v for v in x.cpu().tolist())
    return kl_all, val_all


def rank_checksums(accelerator: Any, checksum: str) -> list[str]:
    """Every process's reference checksum, in rank order; ValueError when they differ (the replicas'
    references diverged, which no checkpoint could restore)."""
    if accelerator.num_processes <= 1:
        return [checksum]
    from accelerate.utils import gather_object  # noqa: PLC0415

    sums = list(gather_object([checksum]))
    if len(set(sums)) != 1:
        bad = [r for r, s in enumerate(sums) if s != sums[0]]
        raise ValueError(f"ResetGRPOTrainer: the reference differs between processes (ranks {bad} vs rank 0)")
    return sums


def global_k3(accelerator: Any, ref: torch.Tensor, logp: torch.Tensor, mask: torch.Tensor) -> float:
    """Token mean of k3 = exp(r - p) - (r - p) - 1 over the tokens of `mask` on every process (TRL's
    pooling of its `kl`: sums and counts reduced, then divided), so each rank logs the same value."""
    d = ref - logp
    local = torch.stack([((torch.exp(d) - d - 1) * mask).sum(), mask.sum()])
    total = accelerator.reduce(local, reduction="sum") if accelerator.num_processes > 1 else local
    return float(total[0] / total[1].clamp(min=1.0))
