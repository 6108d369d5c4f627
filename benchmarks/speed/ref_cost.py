"""A0 / A1 / A2 / B step times side by side, with the cost-model prediction for A0/A1.

Run:  PYTHONPATH=src python benchmarks/speed/ref_cost.py [--steps 30] [--reps 3] [--ppo_epochs 4] [--minibatches 4]

Each variant trains the same default task with the same seed and settings; runs alternate
(A0, A1, A2, B, A0, ...) so machine noise hits them alike, one torch thread per process.
Reported per variant: median step time and median stage times over all measured steps
(the first 3 steps of each run are warm-up and dropped), reference forwards per step.

Cost model (docs/ARCHITECTURE.md, docs/design.md): step ~ rollout + n_ref * f_ref + train, with
f_ref the time of one full-batch reference forward. From A1's measured stages:
    predicted A0 / A1 = (rollout + E*M * f_ref/(E*M)*... ) -- see `predict_ratio`.
A0 runs E*M minibatch forwards, each over N/M sequences, so its total reference work is E
full-batch forwards: predicted A0 step = A1 step + (E - 1) * f_ref (per-call overhead aside).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "src"))

import torch  # noqa: E402

from noma_prorl_bench.config import make_config  # noqa: E402
from noma_prorl_bench.training.trainer import Trainer  # noqa: E402

VARIANTS = {
    "A0 naive_epoch": {"variant": "A", "ref_compute": "naive_epoch"},
    "A1 cached": {"variant": "A", "ref_compute": "cached"},
    "A2 ring": {"variant": "A", "ref_compute": "ring"},
    "B no-ref": {"variant": "B"},
}
STAGES = ("time/rollout", "time/ref", "time/train", "time/step")


def run_once(overrides: dict, args) -> list[dict]:
    cfg = make_config(
        {
            "outdir": "/dev/null",
            "steps": args.steps,
            "seed": args.seed,
            "quiet": True,
            "ppo_epochs": args.ppo_epochs,
            "minibatches": args.minibatches,
            "eval_every": 10**6,
            "threads": 1,
            **overrides,
        }
    )
    trainer = Trainer.from_config(cfg).start()
    return [trainer.train_step() for _ in range(args.steps)][3:]


def predict_ratio(a1: dict, E: int) -> float:
    """Predicted A0/A1 step-time ratio from A1's median stage times.

    A1 does one full-batch reference forward (f_ref = A1 time/ref). A0 does E*M forwards on
    N/M sequences each, i.e. E full batches' worth: A0 ~ A1 + (E - 1) * f_ref.
    """
    base = a1["time/rollout"] + a1["time/ref"] + a1["time/train"]
    return (base + (E - 1) * a1["time/ref"]) / base


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--ppo_epochs", type=int, default=4)
    ap.add_argument("--minibatches", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    samples: dict[str, list[dict]] = {k: [] for k in VARIANTS}
    for rep in range(args.reps):
        for name, ov in VARIANTS.items():
            samples[name].extend(run_once(ov, args))
            print(f"rep {rep + 1}/{args.reps} {name}: done", file=sys.stderr)
    med = {name: {k: statistics.median(r[k] for r in rs) for k in STAGES} for name, rs in samples.items()}
    refs = {name: statistics.median(r["count/ref_fwd"] for r in rs) for name, rs in samples.items()}
    E, M = args.ppo_epochs, args.minibatches
    print(
        f"\nsettings: default task/model, E={E} ppo_epochs, M={M} minibatches, {args.steps} steps x "
        f"{args.reps} alternating reps (first 3 steps of each run dropped), 1 torch thread, "
        f"torch {torch.__version__}"
    )
    print(f"{'variant':<16}{'ref fwd/step':>13}{'step ms':>10}{'rollout':>10}{'ref':>10}{'train':>10}{'vs A1':>8}")
    a1 = med["A1 cached"]["time/step"]
    for name, m in med.items():
        print(
            f"{name:<16}{refs[name]:>13.0f}{1e3 * m['time/step']:>10.2f}{1e3 * m['time/rollout']:>10.2f}"
            f"{1e3 * m['time/ref']:>10.2f}{1e3 * m['time/train']:>10.2f}{m['time/step'] / a1:>8.3f}"
        )
    measured = med["A0 naive_epoch"]["time/step"] / a1
    print(
        f"\nA0/A1 step-time ratio: measured {measured:.3f}, cost-model prediction {predict_ratio(med['A1 cached'], E):.3f}"
        f" (A1 + (E-1) * f_ref, f_ref = A1's median time/ref)"
    )
    print(f"B/A1 step-time ratio: {med['B no-ref']['time/step'] / a1:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
