"""Peak memory of the real-model demo's evaluation pieces, each in a fresh process (peak RSS =
ru_maxrss): the greedy validation pass at several prompts-per-call (`evaluate(batch=...)`, with
a digest of its texts: the same greedy outputs at every batch), and the drift monitor (kl/to_init,
kl/to_prev on 64 prompts) with and without its row chunking.

    .venv/bin/python benchmarks/micro/eval_memory.py [--model DIR] [--n_val 200] [--batches 200,32] [--pieces eval,monitor]

Prints one line per piece: the process's peak RSS after loading (model and task; the monitor
piece: after the whole set-up, warm-start evaluation included) and after the piece, in MiB, and
for the evaluation the mean reward and a sha256 of its texts. Needs the converted SmolLM2 model
(`prorl-bench get-model smollm2-135m-instruct`) and reasoning-gym.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "src"))


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _cfg(model: str, n_val: int):
    from noma_prorl_bench.config import make_config

    return make_config({"outdir": "-", "preset": "smollm2_demo", "model": f"hf:{model}", "n_val": n_val, "quiet": True})


def eval_piece(model: str, n_val: int, batch: int) -> dict:
    """Load the policy and task as the Trainer does, then one greedy pass, `batch` prompts per call."""
    import torch

    from noma_prorl_bench.config.specs import RunSpecs
    from noma_prorl_bench.models.build import build_policy
    from noma_prorl_bench.rollout.sampling import evaluate
    from noma_prorl_bench.tasks import make_task

    torch.set_num_threads(1)
    cfg = _cfg(model, n_val)
    task = make_task(cfg.task, n_val=n_val, spec=RunSpecs.from_config(cfg).task)
    policy, tok = build_policy(cfg)
    val_set = task.validation_set()
    out = {"piece": f"eval, batch {batch}", "after_setup_mb": rss_mb()}
    val, texts, _ = evaluate(policy, task, tok, val_set, cfg.max_new_tokens, None, batch=batch)
    out.update(peak_mb=rss_mb(), val=val, texts_sha256=hashlib.sha256("\x00".join(texts).encode()).hexdigest())
    return out


def monitor_piece(model: str, chunked: bool) -> dict:
    import torch

    from noma_prorl_bench.training import monitors
    from noma_prorl_bench.training.trainer import Trainer

    torch.set_num_threads(1)
    if not chunked:
        monitors.MONITOR_CHUNK_ELEMENTS = 2**62
    t = Trainer.from_config(_cfg(model, 64)).start()  # loads the model and evaluates 64 prompts before RL
    out = {"piece": f"monitor {'chunked' if chunked else 'unchunked'}", "after_setup_mb": rss_mb()}
    t.monitors.before_step(1)
    t.monitors.drift.measure(t.policy)
    out["peak_mb"] = rss_mb()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--model", default=os.path.expanduser("~/.cache/noma_prorl_bench/models/smollm2-135m-instruct-q4_1-dequant")
    )
    ap.add_argument("--n_val", type=int, default=200)
    ap.add_argument("--batches", default="", help="prompts per generate call, comma list (default: n_val,32)")
    ap.add_argument("--pieces", default="eval,monitor", help="comma list of eval, monitor")
    ap.add_argument("--piece", help=argparse.SUPPRESS)
    ap.add_argument("--batch", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--unchunked", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.piece:
        r = eval_piece(a.model, a.n_val, a.batch) if a.piece == "eval" else monitor_piece(a.model, not a.unchunked)
        print(json.dumps(r))
        return
    runs = []
    if "eval" in a.pieces.split(","):
        runs += [["--piece", "eval", "--batch", b] for b in (a.batches or f"{a.n_val},32").split(",")]
    if "monitor" in a.pieces.split(","):
        runs += [["--piece", "monitor"], ["--piece", "monitor", "--unchunked"]]
    res = []
    for extra in runs:
        r = subprocess.run(
            [sys.executable, __file__, "--model", a.model, "--n_val", str(a.n_val), *extra],
            capture_output=True,
            text=True,
        )
        if r.returncode:
            sys.exit(f"{' '.join(extra)} failed:\n{r.stderr[-2000:]}")
        res.append(json.loads(r.stdout.strip().splitlines()[-1]))
        x = res[-1]
        tail = f", val {x['val']:.4f}, texts sha256 {x['texts_sha256'][:12]}" if "val" in x else ""
        print(
            f"{x['piece']:18s} peak RSS after set-up {x['after_setup_mb']:7.0f} MiB, after the piece "
            f"{x['peak_mb']:7.0f} MiB{tail}",
            flush=True,
        )
    digests = {x["texts_sha256"] for x in res if "texts_sha256" in x}
    if digests:
        print(f"n_val {a.n_val}: greedy texts identical at every batch: {'yes' if len(digests) == 1 else 'NO'}")
    mon = {x["piece"]: x["peak_mb"] for x in res if x["piece"].startswith("monitor")}
    if len(mon) == 2:
        print(f"monitor peak, chunked / unchunked: {mon['monitor chunked'] / mon['monitor unchunked']:.2f}")


if __name__ == "__main__":
    main()
