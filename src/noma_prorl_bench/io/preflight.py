"""Checks before a run writes anything: the outdir can be created and written, the optional
packages the flags need are installed, and the run's estimated peak memory (io/memory.py) fits.

Each returns an error message naming its flag (the caller prints it and exits 2), or None.
Nothing is left behind: the writability probe removes what it created.
"""

from __future__ import annotations

import importlib.util
import os
import tempfile
from typing import Optional

from noma_prorl_bench.config import RunConfig
from noma_prorl_bench.config.shell import pip_install
from noma_prorl_bench.config.specs import RunSpecs

# flag value -> (module it imports, the pip extra that installs it)
EXTRAS = {
    "ray": ("ray", "ray"),
    "hf": ("transformers", "hf"),
    "tensorboard": ("tensorboard", "tensorboard"),
    "wandb": ("wandb", "wandb"),
}


def outdir_error(outdir: str) -> Optional[str]:
    """Can --outdir be created (or, if it exists, written)? Probed by creating the missing
    directories and a temporary file, then removing them."""
    path = os.path.abspath(outdir)
    missing = []
    while not os.path.exists(path):
        missing.append(path)
        path = os.path.dirname(path)
    try:
        for d in reversed(missing):
            os.mkdir(d)
        with tempfile.NamedTemporaryFile(dir=os.path.abspath(outdir), prefix=".probe_"):
            pass
    except OSError as e:
        return f"argument --outdir: cannot create or write {outdir!r} ({e.strerror or e})"
    finally:
        for d in missing:
            try:
                os.rmdir(d)
            except OSError:
                pass
    return None


def missing_dependency(cfg: RunConfig) -> Optional[str]:
    """The first optional package the flags need that is not installed."""
    needs: list[tuple[str, str, str]] = []
    if cfg.engine != "local":
        needs.append(("engine", cfg.engine, "ray"))
    if cfg.model.startswith("hf:"):
        needs.append(("model", "hf:PATH", "hf"))
    for target in ("tensorboard", "wandb"):
        if target in [t.strip() for t in getattr(cfg, "report_to", "none").split(",")]:
            needs.append(("report_to", target, target))
    for flag, value, extra in needs:
        module, pip_extra = EXTRAS[extra]
        if importlib.util.find_spec(module) is None:
            return (
                f"argument --{flag}: {value} needs the {module!r} package, which is not installed "
                f"({pip_install('-e', repr(f'.[{pip_extra}]'))}, or bash scripts/setup.sh)"
            )
    return None


# ---------------------------------------------------------------------------- memory
def estimated_bytes(cfg: RunConfig) -> int:
    """The estimated peak resident memory: baseline + max(held + the largest phase, warm start)."""
    from noma_prorl_bench.io.memory import estimate  # noqa: PLC0415

    return estimate(RunSpecs.from_config(cfg)).total


def machine_bytes() -> int:
    """Physical memory, or the cgroup limit when it is lower."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(path) as f:
                limit = f.read().strip()
            if limit.isdigit():
                total = min(total, int(limit))
        except OSError:
            pass
    return total


#: what to do about the flag a memory refusal names (otherwise: lower it)
MEMORY_ADVICE = {
    "model": "use a smaller model, or --enable_growth 1 (LoRA adapters on a frozen base)",
    "batch_size": "lower --batch_size, or set --micro_batch (rows per forward/backward)",
    "group_size": "lower --group_size, or set --micro_batch (rows per forward/backward)",
    "kl_estimator": "use another --kl_estimator (full keeps the [N, T, V] logits)",
    "reset_to": "use --reset_to current (best keeps one more copy of the policy)",
    "warmstart_steps": "use --warmstart_steps 0 or a smaller model",
}


def memory_error(cfg: RunConfig) -> Optional[str]:
    """Refuse a run whose estimated peak memory exceeds the machine's, naming the flag whose terms
    make up the largest part of the estimate (the model width for a large model, not --n_val) and
    what to do about it."""
    from noma_prorl_bench.io.memory import estimate, gib, parts_text  # noqa: PLC0415

    try:
        est = estimate(RunSpecs.from_config(cfg))
    except (ValueError, OSError, RuntimeError, ImportError, TypeError, AttributeError):
        return None  # no meta-device description of this model: the run's own checks decide
    have = machine_bytes()
    if est.total <= have:
        return None
    flag = est.largest_flag()
    return (
        f"argument --{flag}: this run needs about {gib(est.total)} ({parts_text(est)}; batch_size="
        f"{cfg.batch_size} x group_size={cfg.group_size}, n_val={cfg.n_val}, sequences of the task's longest "
        f"prompt, {est.prompt_tokens:,} tokens, + {est.response_tokens:,} response tokens), more than this "
        f"machine's {have / 2**30:.1f} GiB; {MEMORY_ADVICE.get(flag, f'lower --{flag}')}"
    )
