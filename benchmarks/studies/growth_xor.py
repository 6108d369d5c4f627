"""NOMA-XOR-style growth benchmark: a 2-unit hidden layer trained, grown to 16 mid-run, under the
four optimizer-state migration modes of ``noma_prorl_bench.training.growth`` (preserve/reset/naive/noma_flat).

Model ``x[N, 2] -> Linear(2, H) -> tanh -> Linear(H, C) -> logits[N, C]``, full-batch Adam on
cross-entropy. At ``--grow_at`` the hidden layer grows ``H: 2 -> 16`` with ``realloc_params``:
rows of ``fc1.weight`` / entries of ``fc1.bias`` (seeded U(-1/sqrt(2), 1/sqrt(2)), identical in
every mode) and zero columns of ``fc2.weight`` (so the function is unchanged at growth, except
under ``noma_flat`` whose flat-prefix copy scrambles ``fc2.weight [C, H]`` when C > 1). Phase 1 is
trained once per seed and branched, so all modes start from the same state. Baselines: ``nogrow``
(stays at 2 units) and ``scratch16`` (16 units from step 0, same seed; its steps are counted from
its own start). Ablation ``reset_lr_x3``: ``reset`` with a 3x post-growth lr, to test how much of
``preserve``'s lead comes from the larger early steps its zero-moment new entries take.

Run (one thread; docs/growth/xor/report.md records a sweep's wall time):
    PYTHONPATH=src python benchmarks/studies/growth_xor.py
    PYTHONPATH=src python benchmarks/studies/growth_xor.py --task xor --seeds 5
Prints the resolved config and a table; writes ``--fig`` (default docs/figures/growth_xor.png)
and ``--json`` (default runs/growth_xor.json: per-seed curves and metrics).
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn

from noma_prorl_bench.training import adam_cohorts
from noma_prorl_bench.training.growth import MODES, make_init, realloc_params

H0, H1 = 2, 16


def make_data(task: str, n_per_class: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``spiral``: 3 interleaved arms (CS231n-style, noise 0.2); ``xor``: 4 Gaussian blobs at the
    corners of [-1, 1]^2 labelled by XOR of the signs (std 0.35). Returns x[N, 2], y[N]."""
    g = torch.Generator().manual_seed(10_000 + seed)
    if task == "spiral":
        xs, ys = [], []
        for c in range(3):
            r = torch.linspace(0.0, 1.0, n_per_class)
            t = torch.linspace(c * 4.0, (c + 1) * 4.0, n_per_class) + 0.2 * torch.randn(n_per_class, generator=g)
            xs.append(torch.stack([r * torch.sin(t), r * torch.cos(t)], 1))
            ys.append(torch.full((n_per_class,), c))
        return torch.cat(xs) * 2.0, torch.cat(ys)
    if task == "xor":
        corners = torch.tensor([[-1.0, -1.0], [-1.0, 1.0], [1.0, -1.0], [1.0, 1.0]])
        x = corners.repeat_interleave(n_per_class, 0) + 0.35 * torch.randn(4 * n_per_class, 2, generator=g)
        y = torch.tensor([0, 1, 1, 0]).repeat_interleave(n_per_class)
        return x, y
    raise ValueError(task)


class MLP(nn.Module):
    def __init__(self, hidden: int, classes: int):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(2, hidden), nn.Linear(hidden, classes)

    def forward(self, x):  # x[N, 2] -> logits[N, C]
        return self.fc2(torch.tanh(self.fc1(x)))


def grow_hidden(model: MLP, opt, mode: str, seed: int):
    """Grow the hidden layer 2 -> 16 under ``mode``; returns the optimizer to use from now on."""
    g = torch.Generator().manual_seed(20_000 + seed)  # same new values in every mode
    init = make_init("kaiming", fan_in=2, generator=g)
    classes = model.fc2.out_features
    plan = {"fc1.weight": ((H1, 2), init), "fc1.bias": ((H1,), init), "fc2.weight": ((classes, H1), None)}
    return realloc_params(model, opt, plan, mode)


def train(model, opt, x, y, steps: int) -> list[float]:
    """Full-batch steps; returns the loss seen at each step (before its update)."""
    losses = []
    for _ in range(steps):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def drop_cohorts(opt) -> None:
    """Reproduce the earlier ``preserve``, before per-entry step counts: new entries share the tensor's step count."""
    for st in opt.state.values():
        st.pop(adam_cohorts.COHORT, None)
        st.pop(adam_cohorts.COUNTS, None)


def run_seed(args, seed: int, lr: float | None = None) -> dict:
    lr = args.lr if lr is None else lr
    x, y = make_data(args.task, args.n_per_class, seed)
    classes = int(y.max()) + 1
    torch.manual_seed(seed)
    model = MLP(H0, classes)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    pre = train(model, opt, x, y, args.grow_at)
    snap_m, snap_o = copy.deepcopy(model.state_dict()), copy.deepcopy(opt.state_dict())
    with torch.no_grad():
        before = F.cross_entropy(model(x), y).item()
    out = {"pre": pre, "before_growth": before, "modes": {}}
    variants = [(m, m, 1.0) for m in (*MODES, "nogrow")]
    if args.shared_step_arm:  # the old preserve: new entries inherit the shared step
        variants.insert(1, ("preserve_shared_step", "preserve", 1.0))
    if args.reset_lr_scale:  # ablation: reset, then a larger post-growth lr
        variants.append((f"reset_lr_x{args.reset_lr_scale:g}", "reset", args.reset_lr_scale))
    for label, mode, lr_scale in variants:
        m = MLP(H0, classes)
        m.load_state_dict(snap_m)
        o = torch.optim.Adam(m.parameters(), lr=lr)
        o.load_state_dict(copy.deepcopy(snap_o))  # load_state_dict aliases: copy first
        if mode != "nogrow":
            o = grow_hidden(m, o, mode, seed)
        if label == "preserve_shared_step":
            drop_cohorts(o)
        for group in o.param_groups:
            group["lr"] = lr * lr_scale
        with torch.no_grad():
            at_growth = F.cross_entropy(m(x), y).item()
            new0 = new_block(m)
        curve = train(m, o, x, y, args.probe_steps)
        with torch.no_grad():  # mean |update| per step on the new entries, in units of the base lr
            rel = ((new_block(m) - new0).abs().mean() / (args.probe_steps * lr)).item() if new0.numel() else None
        curve += train(m, o, x, y, args.post_steps - args.probe_steps)
        out["modes"][label] = {"curve": curve, "at_growth": at_growth, "new_step_rel": rel}
    torch.manual_seed(seed)
    m = MLP(H1, classes)
    o = torch.optim.Adam(m.parameters(), lr=lr)
    out["modes"]["scratch16"] = {"curve": train(m, o, x, y, args.post_steps), "at_growth": None, "new_step_rel": None}
    return out


def new_block(m: MLP) -> torch.Tensor:
    """The grown entries (rows 2: of fc1.weight and fc1.bias, columns 2: of fc2.weight), flat."""
    return torch.cat([m.fc1.weight[H0:].flatten(), m.fc1.bias[H0:], m.fc2.weight[:, H0:].flatten()])


def summarize(results: list[dict], args) -> dict:
    """Per mode: steps after growth to loss <= target, spike, final loss (over seeds)."""
    table = {}
    for mode in results[0]["modes"]:
        hits, spikes, finals, jumps = [], [], [], []
        for r in results:
            rec, before = r["modes"][mode], r["before_growth"]
            c = rec["curve"]
            hit = next((i for i, v in enumerate(c) if v <= args.target), None)
            hits.append(hit)
            spikes.append(None if rec["at_growth"] is None else max(c[: args.spike_window]) - before)
            finals.append(c[-1])
            jumps.append(None if rec["at_growth"] is None else rec["at_growth"] - before)
        reached = [h for h in hits if h is not None]
        rels = [r["modes"][mode]["new_step_rel"] for r in results]
        table[mode] = {
            "steps_to_target": hits,
            "reached": len(reached),
            "finals": finals,
            "spikes": spikes,
            "jumps": jumps,
            "new_step_rel": rels,
            "mean": statistics.mean(reached) if reached else math.nan,
            "std": statistics.stdev(reached) if len(reached) > 1 else math.nan,
            "median": statistics.median(reached) if reached else math.nan,
        }
    return table


def print_table(table: dict, n: int, args) -> None:
    print(
        f"\nsteps after growth to train loss <= {args.target}  ({n} seeds; mean +- std over seeds that "
        f"reached it; 'scratch16' counts from its own step 0)"
    )
    print(
        "| mode | reached | mean +- std | median | min..max | jump at growth | max rise in "
        f"{args.spike_window} steps | new-entry step / lr, first {args.probe_steps} | final loss mean +- std |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for mode, r in table.items():
        hits = [h for h in r["steps_to_target"] if h is not None]
        rng = f"{min(hits)}..{max(hits)}" if hits else "-"
        jumps = [j for j in r["jumps"] if j is not None]
        jump = f"{statistics.mean(jumps):+.4f}" if jumps else "-"
        fin_sd = statistics.stdev(r["finals"]) if len(r["finals"]) > 1 else 0.0
        rels = [v for v in r["new_step_rel"] if v is not None]
        rel = f"{statistics.mean(rels):.2f}" if rels else "-"
        spikes = [v for v in r["spikes"] if v is not None]
        spike = f"{statistics.mean(spikes):+.4f}" if spikes else "-"
        stat = f"{r['mean']:.0f} +- {r['std']:.0f} | {r['median']:.0f}" if hits else "- | -"
        print(
            f"| {mode} | {r['reached']}/{n} | {stat} | {rng} | {jump} | {spike} | {rel} "
            f"| {statistics.mean(r['finals']):.4f} +- {fin_sd:.4f} |"
        )


def plot(results: list[dict], args) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = {"preserve": "C0", "reset": "C1", "naive": "C3", "noma_flat": "C2", "nogrow": "0.5", "scratch16": "C4"}
    colors.update({k: "C5" for k in results[0]["modes"] if k.startswith("reset_lr")})
    g, fig = args.grow_at, plt.figure(figsize=(14, 4.2))
    axes = fig.subplots(1, 2)
    pre = torch.tensor([r["pre"] for r in results])  # [S, grow_at]
    for ax, zoom in zip(axes, (False, True)):
        lo = g - 50 if zoom else 0
        hi = g + (args.zoom if zoom else args.post_steps)
        steps = torch.arange(lo, g)
        ax.plot(steps, pre[:, lo:].median(0).values, color="k", lw=1.4, label="2 units (shared phase 1)")
        ax.fill_between(steps, pre[:, lo:].min(0).values, pre[:, lo:].max(0).values, color="k", alpha=0.1)
        for mode, col in colors.items():
            c = torch.tensor([r["modes"][mode]["curve"] for r in results])[:, : hi - g]  # [S, steps]
            steps = torch.arange(g, g + c.shape[1])
            label = "scratch16 (own step 0 drawn at growth)" if mode == "scratch16" else mode
            ax.plot(steps, c.median(0).values, "--" if mode == "naive" else "-", color=col, lw=1.4, label=label)
            ax.fill_between(steps, c.min(0).values, c.max(0).values, color=col, alpha=0.12)
        ax.axvline(g, color="k", lw=0.8, ls=":")
        ax.axhline(args.target, color="k", lw=0.5, ls="--")
        ax.set_yscale("log")
        ax.set_xlabel("step (growth 2 -> 16 hidden units at the dotted line)")
        ax.set_ylabel("train cross-entropy")
        ax.set_title(
            ("zoom: first %d steps after growth" % args.zoom)
            if zoom
            else f"{args.task}: median and min-max over {len(results)} seeds"
        )
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="center right", fontsize=8)
    fig.tight_layout(rect=(0, 0, 0.81, 1))
    os.makedirs(os.path.dirname(args.fig) or ".", exist_ok=True)
    fig.savefig(args.fig, dpi=120)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--task", default="spiral", choices=["spiral", "xor"])
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--n_per_class", type=int, default=100)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--grow_at", type=int, default=1000)
    p.add_argument("--post_steps", type=int, default=1500)
    p.add_argument("--probe_steps", type=int, default=20)
    p.add_argument(
        "--reset_lr_scale",
        type=float,
        default=3.0,
        help="add a 'reset' run whose post-growth lr is scaled by this (0: off)",
    )
    p.add_argument("--target", type=float, default=0.1)
    p.add_argument("--spike_window", type=int, default=100)
    p.add_argument("--zoom", type=int, default=400)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--fig", default="docs/figures/growth_xor.png")
    p.add_argument("--json", default="runs/growth_xor.json")
    p.add_argument("--from_json", default=None, help="re-print and re-plot a saved run; no training")
    p.add_argument(
        "--lrs", default=None, help="comma-separated learning rates: run every lr x seed, write --out_dir report"
    )
    p.add_argument("--out_dir", default="docs/growth/xor", help="with --lrs: report.md, summary.json, PNG")
    p.add_argument(
        "--shared_step_arm",
        type=int,
        default=1,
        help="1: add 'preserve_shared_step', the earlier preserve, before per-entry step counts (new entries share the step)",
    )
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.lrs:
        return main_lrs(args)
    if args.from_json:
        with open(args.from_json) as fh:
            saved = json.load(fh)
        args = argparse.Namespace(**{**saved["config"], "fig": args.fig})
        print_table(summarize(saved["results"], args), args.seeds, args)
        plot(saved["results"], args)
        return
    print("command: PYTHONPATH=src python " + " ".join(["benchmarks/studies/growth_xor.py", *sys.argv[1:]]))
    print("config:", json.dumps(vars(args), sort_keys=True))
    t0 = time.perf_counter()
    results = [run_seed(args, s) for s in range(args.seeds)]
    table = summarize(results, args)
    print_table(table, args.seeds, args)
    print(f"\nwall time {time.perf_counter() - t0:.1f} s, torch {torch.__version__}, {args.threads} thread(s)")
    plot(results, args)
    os.makedirs(os.path.dirname(args.json) or ".", exist_ok=True)
    with open(args.json, "w") as fh:
        json.dump(
            {
                "config": vars(args),
                "torch": torch.__version__,
                "results": results,
                "table": {m: {k: v for k, v in r.items()} for m, r in table.items()},
            },
            fh,
        )
    print(f"wrote {args.fig} and {args.json}")


def main_lrs(args) -> None:
    """Every lr x seed (paired: all arms of a seed branch from one phase 1), then the report."""
    if args.from_json:
        from growth_xor_report import write_report  # benchmarks/ is on sys.path as a script

        with open(args.from_json) as fh:
            saved = json.load(fh)
        write_report(saved, args.out_dir)
        return
    cmd = "PYTHONPATH=src python " + " ".join(["benchmarks/studies/growth_xor.py", *sys.argv[1:]])
    print("command:", cmd, flush=True)
    lrs = [float(v) for v in args.lrs.split(",")]
    from growth_xor_report import _commit  # the commit the run started from

    commit = _commit()
    t0, runs = time.perf_counter(), {}
    for lr in lrs:
        runs[f"{lr:g}"] = []
        for s in range(args.seeds):
            runs[f"{lr:g}"].append(run_seed(args, s, lr))
            print(f"lr {lr:g} seed {s} done ({time.perf_counter() - t0:.0f} s)", flush=True)
        print_table(summarize(runs[f"{lr:g}"], args), args.seeds, args)
    from growth_xor_report import _commit, machine

    saved = {
        "config": {k: v for k, v in vars(args).items()},
        "command": cmd,
        "torch": torch.__version__,
        "commit": commit,
        "machine": machine(),
        "wall_s": time.perf_counter() - t0,
        "runs": runs,
    }
    os.makedirs(os.path.dirname(args.json) or ".", exist_ok=True)
    with open(args.json, "w") as fh:
        json.dump(saved, fh)
    from growth_xor_report import write_report

    write_report(saved, args.out_dir)


if __name__ == "__main__":
    main()
