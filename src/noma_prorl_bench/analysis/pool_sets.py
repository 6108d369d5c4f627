"""The run sets `prorl-bench pool` combines: each DIR is one set of the same commands, run on one
machine, read as per-arm, per-pair scores and the questions its suite asks.

    a suite folder      suite.json (arms, pairs, comparisons, families) and its run directories:
                        each complete run's score (`compare.run_score`, K from settings.json),
                        the machine from the runs' config.json records (`io.machine.describe`)
    a report folder     a committed report with no runs (docs/suite_quick and its replications):
                        summary.json (questions, K, provenance) and report.md's per-seed table,
                        whose scores are printed to 0.001 (the resolution the pool then states),
                        the machine from the provenance's record, else its one-line `machine`

Every file is read through `run_files.read_text` (no link followed, never a FIFO or device) and is
data: names reach the output only through analysis/untrusted.py. A machine nothing records is
"unrecorded". Sets whose questions or K differ are not the same commands: ValueError.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from noma_prorl_bench.analysis import run_files

TABLE_RESOLUTION = 1e-3  # report.md prints a score to 3 decimals
UNRECORDED = "unrecorded"


@dataclass
class RunSet:
    """One DIR: where it ran, its scores (arm -> pair -> score), its questions and K."""

    path: str
    machine: str
    source: str  # "runs" or "report table"
    scores: dict[str, dict[str, float]]
    questions: list[dict[str, str]]
    k: int
    resolution: float = 0.0
    commits: list[str] = field(default_factory=list)
    runs: int = 0
    listed: int = 0


def _json(path: Path) -> Any:
    try:
        return json.loads(run_files.read_text(path))
    except FileNotFoundError:
        return None
    except (ValueError, RecursionError) as err:
        raise ValueError(f"{path}: unreadable ({' '.join(str(err).split())[:120]})") from err


def _machine_line(record: Any) -> str | None:
    from noma_prorl_bench.io.machine import describe  # noqa: PLC0415

    if not isinstance(record, dict):
        return None
    try:
        return describe(record)
    except (AttributeError, TypeError, ValueError):
        return None


def _questions(comparisons: Any, families: Any, checks: Any = ()) -> list[dict[str, str]]:
    skip = {frozenset(map(str, c[1:3])) for c in checks or [] if isinstance(c, list) and len(c) >= 3}
    out = []
    for c in comparisons or []:
        if isinstance(c, dict):
            if c.get("metric", "score") != "score":
                continue
            name, arm, base, fam = c.get("name"), c.get("arm"), c.get("baseline"), c.get("family")
        elif isinstance(c, list) and len(c) >= 3:
            name, arm, base = c[:3]
            fam = (families or {}).get(name) if isinstance(families, dict) else None
        else:
            continue
        if frozenset((str(arm), str(base))) in skip:
            continue
        out.append(dict(name=str(name), arm=str(arm), baseline=str(base), family=str(fam or "outcome")))
    return out


def _from_runs(root: Path, suite: dict) -> RunSet:
    from noma_prorl_bench.analysis.compare import arm_table, run_score  # noqa: PLC0415
    from noma_prorl_bench.analysis.runlog import load_runs  # noqa: PLC0415

    settings = _json(root / "settings.json") or {}
    if not isinstance(settings, dict):
        raise ValueError(f"{root}: settings.json must hold a JSON object")
    names = [r.get("name") for r in suite["runs"] if isinstance(r, dict)]
    dirs = [
        root / n
        for n in names
        if isinstance(n, str)
        and Path(n).name == n
        and n not in ("", ".", "..")
        and (root / n / "config.json").is_file()
    ]
    if not dirs:
        raise ValueError(f"{root}: none of the runs its suite.json lists has been written yet")
    k = int(settings.get("score_evals", 10))
    arms = arm_table(load_runs(dirs), suite)
    done = [r for members in arms.values() for r in members.values()]
    lines = Counter(_machine_line(r.config.get("machine")) or "" for r in done)
    lines.pop("", None)
    recorded = "; ".join(line for line, _ in lines.most_common())
    commits = sorted({str((r.config.get("versions") or {}).get("git_commit")) for r in done} - {"None"})
    return RunSet(
        path=str(root),
        machine=recorded or str(settings.get("machine") or UNRECORDED),
        source="runs",
        scores={a: {json.dumps(p): run_score(r, k) for p, r in rs.items()} for a, rs in arms.items()},
        questions=_questions(suite.get("comparisons"), suite.get("families"), suite.get("checks")),
        k=k,
        commits=commits,
        runs=len(done),
        listed=len(names),
    )


_ESCAPE = re.compile(r"\\(.)")


def _cells(line: str) -> list[str]:
    parts = re.split(r"(?<!\\)\|", line.strip())[1:-1]
    return [_ESCAPE.sub(r"\1", c.strip()) for c in parts]


def per_seed_scores(report_md: str) -> dict[str, dict[str, float]]:
    """arm -> pair -> score from a report.md's `## Per-seed numbers` table; {} without one."""
    lines = report_md.splitlines()
    try:
        start = lines.index("## Per-seed numbers")
    except ValueError:
        return {}
    rows = [ln for ln in lines[start + 1 :] if ln.startswith("|")]
    if len(rows) < 2:
        return {}
    header = _cells(rows[0])
    col = {h.split(" ")[0]: i for i, h in enumerate(header)}
    if not {"arm", "pair", "score"} <= set(col):
        return {}
    out: dict[str, dict[str, float]] = {}
    for ln in rows[2:]:
        cells = _cells(ln)
        if len(cells) != len(header):
            break
        try:
            value = float(cells[col["score"]])
        except ValueError:
            value = math.nan
        out.setdefault(cells[col["arm"]], {})[json.dumps(int(cells[col["pair"]]))] = value
    return out


def _from_report(root: Path, summary: dict) -> RunSet:
    try:
        text = run_files.read_text(root / "report.md")
    except FileNotFoundError:
        text = ""
    scores = per_seed_scores(text)
    if not scores:
        raise ValueError(f"{root}: report.md has no per-seed table (a report folder needs one, or the runs)")
    prov: dict = summary["provenance"] if isinstance(summary.get("provenance"), dict) else {}
    made: list = prov["run_commits"] if isinstance(prov.get("run_commits"), list) else [prov.get("commit")]
    score: dict = summary["score"] if isinstance(summary.get("score"), dict) else {}
    n = sum(len(v) for v in scores.values())
    return RunSet(
        path=str(root),
        machine=_machine_line(prov.get("machine_info")) or str(prov.get("machine") or UNRECORDED),
        source="report table",
        scores=scores,
        questions=_questions(summary.get("comparisons"), None),
        k=int(score.get("k", 10)),
        resolution=TABLE_RESOLUTION,
        commits=[str(c) for c in made if c],
        runs=n,
        listed=n,
    )


def read_set(path: str | Path) -> RunSet:
    """One DIR as a RunSet (module docstring); ValueError (one line) when it is neither."""
    root = Path(path)
    if not root.is_dir():
        raise ValueError(f"{root}: no such directory")
    suite = _json(root / "suite.json")
    if isinstance(suite, dict) and isinstance(suite.get("runs"), list) and suite["runs"]:
        return _from_runs(root, suite)
    summary = _json(root / "summary.json")
    if isinstance(summary, dict) and isinstance(summary.get("comparisons"), list):
        return _from_report(root, summary)
    raise ValueError(f"{root}: neither a suite folder (suite.json listing runs) nor a report folder (summary.json)")


def check_same_commands(sets: list[RunSet]) -> None:
    """ValueError unless every set asks the same questions (name, arm, baseline) with the same K."""
    first = sets[0]
    ask = [(q["name"], q["arm"], q["baseline"]) for q in first.questions]
    if not ask:
        raise ValueError(f"{first.path}: asks no question")
    for s in sets[1:]:
        if [(q["name"], q["arm"], q["baseline"]) for q in s.questions] != ask:
            raise ValueError(f"{s.path}: asks other questions than {first.path} (not the same commands)")
        if s.k != first.k:
            raise ValueError(f"{s.path}: scores over the last {s.k} evaluations, {first.path} over {first.k}")
