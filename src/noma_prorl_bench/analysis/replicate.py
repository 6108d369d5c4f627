"""`prorl-bench replicate DIR [--seeds 0,1,...] [--outdir NEW] [--jobs N] [--quiet]`: re-run a
committed suite's arms on this machine and put each comparison's new answer beside the committed one.

DIR is a suite directory (its suite.json lists every run's flags) or a committed report folder
(docs/atlas, docs/suite_quick: summary.json only; its provenance names the preset, seeds and
steps, and the runs are rebuilt from the preset at this commit). `--seeds` re-runs only those
pair indices (all of DIR's by default). The runs go to NEW (default DIR-replicate) through the
suite's own machinery (`suite._run_suite`: resume, signals, settings.json with this machine, the
report), then NEW/replication.md and NEW/replication.json compare, per comparison of DIR's
summary.json:

    committed   diff [95% CI], verdict, n pairs, machine (DIR's provenance)
    new         the same from NEW's report (this machine)
    replicates  the new verdict equals the committed one (better / worse / no detectable
                difference); `overlap` says whether the two 95% intervals share a value, and
                `within` whether the committed effect lies inside the new interval

A replication on fewer seeds has less power: a committed `better` that comes back `no detectable
difference` on 3 of 10 seeds did not replicate, and its new interval says how far it is from it.
Exit code: the suite's (0 when every run finished and every check held), 2 on bad input.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path
from typing import Any, Sequence

from noma_prorl_bench.analysis.untrusted import md_text, term_text


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="prorl-bench replicate", description=__doc__.splitlines()[0])
    ap.add_argument("dir", metavar="DIR", help="a suite directory or a committed report folder (summary.json)")
    ap.add_argument("--seeds", help="comma-separated pair indices to re-run (default: all of DIR's)")
    ap.add_argument("--outdir", help="where the new runs and replication.md go (default: DIR-replicate)")
    ap.add_argument("--jobs", type=int, help="parallel runs (default: the number of cores)")
    ap.add_argument("--quiet", action="store_true", help="no progress bar")
    return ap


def _read(path: Path) -> Any:
    from noma_prorl_bench.io.safe_files import read_bytes  # noqa: PLC0415
    return json.loads(read_bytes(str(path)))


def committed_specs(ap: argparse.ArgumentParser, src: Path, summary: dict) -> tuple[str, list, dict]:
    """(preset, run specs, provenance) of the committed suite: from suite.json's flags when DIR is
    a suite directory, else rebuilt from summary.json's provenance (preset, seeds, steps)."""
    from noma_prorl_bench.matrix import PRESETS, RunSpec, expand  # noqa: PLC0415
    prov = summary.get("provenance") if isinstance(summary.get("provenance"), dict) else {}
    if (src / "suite.json").is_file():
        listed = _read(src / "suite.json")
        runs = listed.get("runs") if isinstance(listed, dict) else None
        if not isinstance(runs, list) or not all(isinstance(r, dict) and isinstance(r.get("flags"), list)
                                                 for r in runs):
            ap.error(f"argument DIR: {term_text(str(src / 'suite.json'), 200)} does not list its runs' flags")
        specs = [RunSpec(name=r["name"], flags=[str(f) for f in r["flags"]], arm=str(r["arm"]), pair=int(r["pair"]))
                 for r in runs]
        return str(listed.get("preset")), specs, prov
    preset = prov.get("preset")
    if preset not in PRESETS:
        ap.error(f"argument DIR: {term_text(str(src), 200)} has no suite.json and its summary.json names no known "
                 f"preset (got {term_text(str(preset), 40)}; choose from {', '.join(sorted(PRESETS))})")
    seeds, steps = prov.get("seeds"), prov.get("steps")
    if not (isinstance(seeds, int) and isinstance(steps, int)):
        ap.error(f"argument DIR: {term_text(str(src), 200)}'s summary.json does not record seeds and steps")
    return str(preset), expand(preset, seeds, steps), prov


def main(argv: Sequence[str] | None = None) -> int:
    ap = parser()
    args = ap.parse_args(argv)
    src = Path(args.dir)
    if not (src / "summary.json").is_file():
        ap.error(f"argument DIR: {term_text(args.dir, 200)} has no summary.json (not a suite's report folder)")
    try:
        summary = _read(src / "summary.json")
    except (OSError, ValueError, RecursionError, UnicodeDecodeError) as e:
        ap.error(f"argument DIR: {term_text(args.dir, 200)}/summary.json is unreadable ({str(e)[:100]})")
    if not isinstance(summary, dict) or not isinstance(summary.get("comparisons"), list):
        ap.error(f"argument DIR: {term_text(args.dir, 200)}/summary.json lists no comparisons")
    preset, specs, prov = committed_specs(ap, src, summary)
    pairs = sorted({s.pair for s in specs})
    if args.seeds is not None:
        try:
            chosen = sorted({int(v) for v in args.seeds.split(",") if v.strip()})
        except ValueError:
            chosen = []
        if not chosen or any(p not in pairs for p in chosen):
            ap.error(f"argument --seeds: comma-separated pair indices of DIR, from {pairs}; got {args.seeds!r}")
        specs = [s for s in specs if s.pair in chosen]
    if args.jobs is not None and args.jobs < 1:
        ap.error(f"argument --jobs: must be >= 1, got {args.jobs}")
    outdir = args.outdir or str(src).rstrip("/\\") + "-replicate"
    if os.path.abspath(outdir) == os.path.abspath(src):
        ap.error("argument --outdir: must differ from DIR (the committed runs stay as they are)")
    from noma_prorl_bench import suite  # noqa: PLC0415
    from noma_prorl_bench.io.run_procs import LocalExecutor  # noqa: PLC0415
    ns = argparse.Namespace(outdir=outdir, quiet=args.quiet, preset=preset, seeds=len({s.pair for s in specs}),
                            steps=prov.get("steps"), jobs=args.jobs, executor="local",
                            command_name="prorl-bench replicate")
    executor = LocalExecutor(args.jobs or os.cpu_count() or 1, suite.local_env())
    argv_used = list(argv if argv is not None else sys.argv[1:])
    try:
        code = suite._run_suite(ap, ns, specs, executor, argv_used)
    finally:
        executor.close()
    new_path = Path(outdir) / "summary.json"
    if not new_path.is_file():
        print("replicate: no new report (no run finished); nothing compared", file=sys.stderr)
        return code or 1
    new = _read(new_path)
    rows = compare_summaries(summary, new)
    write_replication(Path(outdir), rows, summary, new, str(src), argv_used)
    for line in _table(rows, term=True):
        print(line)
    n_same = sum(r["replicates"] for r in rows)
    print(f"replicate: {n_same} of {len(rows)} verdicts replicated; {Path(outdir) / 'replication.md'}",
          file=sys.stderr)
    return code


def _overlap(a: Sequence[float], b: Sequence[float]) -> bool | None:
    if not all(isinstance(v, (int, float)) and math.isfinite(v) for v in (*a, *b)):
        return None
    return bool(a[0] <= b[1] and b[0] <= a[1])


def compare_summaries(old: dict, new: dict) -> list[dict[str, Any]]:
    """Per comparison (name, metric) of `old`: the committed and the new effect, interval, verdict
    and pairs, and whether the verdict replicates (module docstring). A comparison the new report
    lacks (its arms were not re-run) is left out."""
    new_rows = {(c.get("name"), c.get("metric")): c for c in new.get("comparisons", []) if isinstance(c, dict)}
    out = []
    for c in old.get("comparisons", []):
        if not isinstance(c, dict) or (c.get("name"), c.get("metric")) not in new_rows:
            continue
        n = new_rows[(c.get("name"), c.get("metric"))]
        ci_old, ci_new = list(c.get("ci95") or [math.nan] * 2), list(n.get("ci95") or [math.nan] * 2)
        ci_new = [math.nan if v is None else v for v in ci_new]
        ci_old = [math.nan if v is None else v for v in ci_old]
        within = (None if not all(isinstance(v, (int, float)) and math.isfinite(v) for v in (*ci_new, c.get("diff")))
                  else bool(ci_new[0] <= c["diff"] <= ci_new[1]))
        out.append(dict(name=c.get("name"), metric=c.get("metric"), family=c.get("family"),
                        committed=dict(diff=c.get("diff"), ci95=ci_old, verdict=c.get("verdict"),
                                       n_pairs=c.get("n_pairs"), p_holm=c.get("p_holm")),
                        new=dict(diff=n.get("diff"), ci95=ci_new, verdict=n.get("verdict"),
                                 n_pairs=n.get("n_pairs"), p_holm=n.get("p_holm")),
                        replicates=c.get("verdict") == n.get("verdict"),
                        overlap=_overlap(ci_old, ci_new), within=within))
    return out


def _num(v: Any) -> str:
    return f"{v:+.3f}" if isinstance(v, (int, float)) and math.isfinite(v) else "—"


def _cell(side: dict) -> str:
    lo, hi = side["ci95"]
    return f"{_num(side['diff'])} [{_num(lo)}, {_num(hi)}] {side['verdict']} (n {side['n_pairs']})"


def _yes(v: bool | None) -> str:
    return "—" if v is None else "yes" if v else "no"


def _table(rows: list[dict], term: bool = False) -> list[str]:
    esc = (lambda s: term_text(str(s), 120)) if term else (lambda s: md_text(str(s), 120))
    lines = ["| comparison | committed | this machine | replicates | intervals overlap | committed effect in new CI |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {esc(r['name'])} | {esc(_cell(r['committed']))} | {esc(_cell(r['new']))} | "
                     f"{_yes(r['replicates'])} | {_yes(r['overlap'])} | {_yes(r['within'])} |")
    return lines


def write_replication(out: Path, rows: list[dict], old: dict, new: dict, src: str, argv: list[str]) -> None:
    """replication.json (the rows, both machines) and replication.md (answer first, then the table)."""
    from noma_prorl_bench.io.machine import kernel_differences  # noqa: PLC0415
    from noma_prorl_bench.io.safe_files import write_json, write_text  # noqa: PLC0415
    p_old, p_new = old.get("provenance") or {}, new.get("provenance") or {}
    diffs = kernel_differences(p_old.get("machine_info"), p_new.get("machine_info"))
    same = sum(r["replicates"] for r in rows)
    write_json(str(out / "replication.json"), {
        "source": src, "command": "prorl-bench replicate " + " ".join(argv), "rows": rows,
        "replicated": same, "compared": len(rows),
        "machines": {"committed": p_old.get("machine"), "new": p_new.get("machine"),
                     "kernel_differences": diffs},
        "commits": {"committed": p_old.get("commit"), "new": p_new.get("commit")}})
    lines = ["# Replication", "",
             f"**{same} of {len(rows)} verdicts replicated** on this machine "
             f"({md_text(str(p_new.get('machine')), 240)}); the committed ones were made on "
             f"{md_text(str(p_old.get('machine')), 240)}.", "",
             "A verdict *replicates* when the new run gives the same one (better / worse / no detectable "
             "difference); *intervals overlap* when the two 95% intervals share a value. Fewer seeds than the "
             "committed suite mean less power: a committed verdict that comes back `no detectable difference` "
             "on fewer seeds did not replicate here, whatever the reason.", "",
             f"Machines differ in: {', '.join(diffs) if diffs else 'nothing that selects kernels'}"
             + (" (the committed report predates machine records)" if diffs == ["unrecorded"] else "")
             + f". Commits: committed {md_text(str(p_old.get('commit')), 80)}, "
             f"new {md_text(str(p_new.get('commit')), 80)}.", ""] + _table(rows) + [""]
    write_text(str(out / "replication.md"), "\n".join(lines))
