"""Reading one grid or atlas suite folder as a map (analysis/gridmap.py draws and writes it).

A suite's suite.json names arms b{beta}-{treatment}; its task is the `task` field of its runs'
config.json (one task per suite, one suite per task). A cell holds the suite report's own numbers
(`report.suite_rows`, then `atlas.effect_cells`) for reset + keep vs no reset and each other
treatment vs keep, with the pairs it rests on beside the pairs suite.json lists. Files are read
with `safe_files` (no link followed, never a FIFO or device).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from noma_prorl_bench.analysis.atlas import effect_cells, parse_arms
from noma_prorl_bench.analysis.report import suite_rows
from noma_prorl_bench.analysis.runlog import load_runs
from noma_prorl_bench.io import safe_files
from noma_prorl_bench.io.machine import describe

#: the optimizer treatments compared with keep, in the map's order
OTHERS = ("hard", "soft", "asym", "step")


@dataclass
class SuiteMap:
    """One suite read as a map: its task, K, cells {(beta, treatment): cell} in grid order, and
    where it ran (machine lines with their run counts)."""

    name: str
    task: str
    k: int
    cells: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    machines: list[tuple[str, int]] = field(default_factory=list)
    runs: int = 0
    listed: int = 0
    preset: str = ""
    commit: str = ""


def _read_json(path: Path, what: str) -> Any:
    try:
        return json.loads(safe_files.read_bytes(str(path)))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, RecursionError, UnicodeDecodeError, safe_files.RunDirRefused) as err:
        raise ValueError(f"{path}: {what} is unreadable ({' '.join(str(err).split())[:120]})") from err


def _plain_name(name: object) -> bool:
    return isinstance(name, str) and bool(name) and Path(name).name == name and name not in (".", "..")


def _listed(root: Path) -> tuple[dict, dict[str, set[str]], dict[str, dict[str, str]]]:
    """(suite.json, arm -> the pairs it lists, the grid {beta: {treatment: arm}}); ValueError
    without a suite.json listing runs or without grid arms."""
    suite = _read_json(root / "suite.json", "suite.json")
    runs_listed = suite.get("runs") if isinstance(suite, dict) else None
    if not isinstance(runs_listed, list) or not all(isinstance(r, dict) for r in runs_listed):
        raise ValueError(f"{root}: no suite.json listing runs (a suite folder written by `prorl-bench suite`)")
    pairs: dict[str, set[str]] = {}
    for r in runs_listed:
        if isinstance(r.get("arm"), str):
            pairs.setdefault(r["arm"], set()).add(json.dumps(r.get("pair")))
    grid = parse_arms(dict.fromkeys(pairs))
    if grid is None:
        raise ValueError(
            f"{root}: no grid arms (suite.json must name arms b{{beta}}-{{treatment}} with a `none` arm, "
            "as the grid and atlas presets do)"
        )
    return suite, pairs, grid


def _machine_line(record: Any) -> str:
    if not isinstance(record, dict):
        return "no machine record"
    try:
        return describe(record)
    except (AttributeError, TypeError, ValueError):
        return "unreadable machine record"


def read_suite(root: str | Path) -> SuiteMap:
    """The map of one suite folder; ValueError (one line) for a missing folder, one without a
    suite.json naming grid arms, one with no written run, or runs of several tasks."""
    root = Path(root)
    if not root.is_dir():
        raise ValueError(f"{root}: no such directory")
    suite, pairs, grid = _listed(root)
    settings = _read_json(root / "settings.json", "settings.json") or {}
    if not isinstance(settings, dict):
        raise ValueError(f"{root}: settings.json must hold a JSON object")
    names = [r.get("name") for r in suite["runs"]]
    dirs = [
        root / n
        for n in names
        if _plain_name(n) and (root / n / "config.json").is_file() and (root / n / "metrics.jsonl").is_file()
    ]
    if not dirs:
        raise ValueError(f"{root}: none of the runs its suite.json lists has been written yet")
    runs = load_runs(dirs, root)  # no run reached through a link inside the suite
    _, _, k, arms, rows = suite_rows(runs, settings, suite)  # the report's own numbers
    tasks = sorted({str(r.config.get("task")) for r in runs})
    if len(tasks) != 1:
        raise ValueError(f"{root}: its runs are of several tasks ({', '.join(tasks)[:200]}); one suite per task")
    done = [r for members in arms.values() for r in members.values()]
    out = SuiteMap(
        name=root.resolve().name,
        task=tasks[0],
        k=k,
        runs=len(done),
        listed=len(names),
        preset=str(suite.get("preset", "")),
        commit=str(settings.get("commit", "")),
        machines=Counter(_machine_line(r.config.get("machine")) for r in done).most_common(),
    )
    found = effect_cells(arms, rows, k)
    for beta, ts in grid.items():
        for t in ("keep", *OTHERS):
            if t in ts:
                base = "none" if t == "keep" else "keep"
                n_listed = len(pairs.get(ts[t], set()) & pairs.get(ts.get(base, ""), set()))
                out.cells[(beta, t)] = _cell(beta, t, ts, rows, found.get((beta, t)), n_listed)
    return out


def _cell(beta: str, t: str, ts: dict[str, str], rows: list[dict], cell: dict | None, n_listed: int) -> dict:
    """One map cell: `atlas.effect_cells`' numbers for treatment t vs its baseline (none for keep,
    keep for the others) at `beta`, with the tested row's name and family; not tested (NaN, no
    verdict) when that comparison was not made (an arm not run yet)."""
    base = "none" if t == "keep" else "keep"
    row = next(
        (r for r in rows if r["metric"] == "score" and r["arm"] == ts[t] and r["baseline"] == ts.get(base)), None
    )
    if cell is None or row is None or cell["tested"] != f"{t} vs {base}":
        cell = dict(diff=math.nan, ci95=[math.nan, math.nan], n=0, verdict=None, p_holm=math.nan, mde80=math.nan)
    return dict(
        beta=beta,
        treatment=t,
        baseline=base,
        comparison=row["name"]
        if row
        else f"beta {beta}: reset-{t} vs " + ("no reset" if t == "keep" else "reset-keep"),
        family=row["family"] if row else None,
        diff=cell["diff"],
        ci95=list(cell["ci95"]),
        p=row["p"] if cell["verdict"] is not None and row else math.nan,  # raw sign-flip p: the wider families
        p_holm=cell["p_holm"],
        verdict=cell["verdict"],
        mde80=cell["mde80"],
        n_pairs=cell["n"],
        n_listed=n_listed,
    )


def read_suites(dirs: Sequence[str | Path]) -> list[SuiteMap]:
    """Every DIR's map (read_suite); ValueError when two suites are of the same task."""
    maps = [read_suite(d) for d in dirs]
    seen: dict[str, str] = {}
    for m, d in zip(maps, dirs):
        if m.task in seen:
            raise ValueError(f"{d}: task {m.task[:80]!r} is also {seen[m.task]}'s; one suite per task")
        seen[m.task] = str(d)
    return maps
