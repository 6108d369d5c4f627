"""Checks before a run writes anything: the outdir can be created and written, the optional
packages the flags need are installed, and the batch fits in memory.

Each returns an error message naming its flag (the caller prints it and exits 2), or None.
Nothing is left behind: the writability probe removes what it created.
"""
from __future__ import annotations

import importlib.util
import json
import os
import tempfile
from typing import Optional

from noma_prorl_bench.config import RunConfig
from noma_prorl_bench.config.shell import pip_install

# flag value -> (module it imports, the pip extra that installs it)
EXTRAS = {"ray": ("ray", "ray"), "hf": ("transformers", "hf"), "tensorboard": ("tensorboard", "tensorboard"),
          "wandb": ("wandb", "wandb")}


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
    needs = []
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
            return (f"argument --{flag}: {value} needs the {module!r} package, which is not installed "
                    f"({pip_install('-e', repr(f'.[{pip_extra}]'))}, or bash scripts/setup.sh)")
    return None


# ---------------------------------------------------------------------------- memory
def _model_dims(cfg: RunConfig) -> tuple[int, int]:
    """(vocab, width) of the policy; toy vocabularies are tiny (a lower bound of 16 is used)."""
    if cfg.model.startswith("hf:"):
        try:
            with open(os.path.join(cfg.model[3:], "config.json")) as f:
                c = json.load(f)
            return int(c.get("vocab_size", 16)), int(c.get("hidden_size", c.get("n_embd", 64)))
        except (OSError, ValueError, TypeError):
            return 16, 64
    return 16, cfg.d_model if cfg.model == "transformer" else cfg.hidden


def estimate_terms(cfg: RunConfig) -> dict[str, int]:
    """A lower bound of the memory one step needs (float32), by the flag that drives each part:
    the rollout holds, for N = B*G sequences, the hidden state and logits of one position plus T
    tokens and log-probs; one minibatch update holds at least its [N/M, T] hidden states and
    logits once; `--kl_estimator full` keeps [N, T, V] logits; validation decodes --n_val
    prompts; toy models' weights, gradients and Adam moments. Deliberately low: a run refused by
    it cannot fit."""
    vocab, width = _model_dims(cfg)
    n = cfg.batch_size * cfg.group_size * (4 if cfg.dynamic_sampling else 1)
    t = max(cfg.max_new_tokens, 2)
    per_layer = 6 if cfg.model == "gru" else 12 * cfg.n_layers
    size_flag = "hidden" if cfg.model == "gru" else "d_model" if cfg.model == "transformer" else "model"
    batch_flag = "batch_size" if cfg.batch_size >= cfg.group_size else "group_size"
    return {
        batch_flag: n * (t * 12 + (width + vocab) * 4 * 2) + -(-n // cfg.minibatches) * t * (width + vocab) * 4,
        "kl_estimator": n * t * vocab * 4 if cfg.kl_estimator == "full" else 0,
        "n_val": cfg.n_val * (t * 12 + (width + vocab) * 4 * 2),
        size_flag: 0 if cfg.model.startswith("hf:") else width * width * per_layer * 4 * 4,  # weights, grad, m, v
    }


def estimated_bytes(cfg: RunConfig) -> int:
    """The sum of `estimate_terms`."""
    return sum(estimate_terms(cfg).values())


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


def memory_error(cfg: RunConfig) -> Optional[str]:
    """Refuse sizes whose estimated memory exceeds the machine's, naming the flag whose part of
    the estimate is largest (the model width for a large model, not --n_val)."""
    terms = estimate_terms(cfg)
    need, have = sum(terms.values()), machine_bytes()
    if need <= have:
        return None
    flag = max(terms, key=lambda k: terms[k])
    big = sorted(((k, v) for k, v in terms.items() if v >= 2**26), key=lambda kv: -kv[1])   # >= 0.0625 GiB
    parts = ", ".join(f"--{k}: {v / 2**30:.1f} GiB" for k, v in big)
    return (f"argument --{flag}: this run needs at least {need / 2**30:.1f} GiB ({parts}; batch_size="
            f"{cfg.batch_size} x group_size={cfg.group_size}, n_val={cfg.n_val}), more than this machine's "
            f"{have / 2**30:.1f} GiB")
