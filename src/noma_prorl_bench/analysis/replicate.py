"""`prorl-bench replicate DIR [--seeds 0,1,...] [--arms A,...] [--outdir NEW] [--jobs N] [--quiet]`: re-run a
committed suite's arms on this machine and put each comparison's new answer beside the committed one
(the command is suite.replicate_main; this module compares the two reports and writes them).

DIR is a suite directory (its suite.json lists every run's flags) or a committed report folder
(docs/atlas, docs/suite_quick: summary.json only; its provenance names the preset, seeds and
steps, and the runs are rebuilt from the preset at this commit). `--seeds` re-runs only those
pair indices (all of DIR's by default), `--arms` only those arms (Holm's families then hold only
the re-run comparisons: replication.md names each smaller family). The runs go to NEW (default
DIR-replicate) through the
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

import math
from collections import Counter
from pathlib import Path
from typing import Any, Sequence

from noma_prorl_bench.analysis.tables import markdown_table
from noma_prorl_bench.analysis.untrusted import md_text, term_text


def _overlap(a: Sequence[float], b: Sequence[float]) -> bool | None:
    if not all(isinstance(v, (int, float)) and math.isfinite(v) for v in (*a, *b)):
        return None
    return bool(a[0] <= b[1] and b[0] <= a[1])


def compare_summaries(old: dict, new: dict) -> list[dict[str, Any]]:
    """Per comparison (name, metric) of `old`: the committed and the new effect, interval, verdict
    and pairs, and whether the verdict replicates (module docstring). A comparison the new report
    lacks (its arms were not re-run) is left out."""
    new_rows = _unique(new.get("comparisons", []))
    committed = list(_unique(old.get("comparisons", [])).values())  # a comparison listed twice counts once
    sizes_old = Counter(c.get("family") for c in committed)
    sizes_new = Counter(c.get("family") for c in new_rows.values())
    out = []
    for c in committed:
        if (str(c.get("name")), str(c.get("metric"))) not in new_rows:
            continue
        n = new_rows[(str(c.get("name")), str(c.get("metric")))]
        ci_old, ci_new = list(c.get("ci95") or [math.nan] * 2), list(n.get("ci95") or [math.nan] * 2)
        ci_new = [math.nan if v is None else v for v in ci_new]
        ci_old = [math.nan if v is None else v for v in ci_old]
        within = (
            None
            if not all(isinstance(v, (int, float)) and math.isfinite(v) for v in (*ci_new, c.get("diff")))
            else bool(ci_new[0] <= c["diff"] <= ci_new[1])
        )
        out.append(
            dict(
                name=c.get("name"),
                metric=c.get("metric"),
                family=c.get("family"),
                committed=_side(c, ci_old, sizes_old),
                new=_side(n, ci_new, sizes_new),
                replicates=c.get("verdict") == n.get("verdict"),
                overlap=_overlap(ci_old, ci_new),
                within=within,
            )
        )
    return out


def _unique(comparisons: Any) -> dict[tuple, dict]:
    """The comparisons of a summary.json by (name, metric), the first of each kept (a list, else none)."""
    out: dict[tuple, dict] = {}
    for c in comparisons if isinstance(comparisons, list) else []:
        if isinstance(c, dict):
            out.setdefault((str(c.get("name")), str(c.get("metric"))), c)
    return out


def _side(c: dict, ci: list, sizes: Counter) -> dict:
    """One summary's side of a compared row: its effect, interval, verdict and family size."""
    return dict(
        diff=c.get("diff"),
        ci95=ci,
        verdict=c.get("verdict"),
        n_pairs=c.get("n_pairs"),
        p_holm=c.get("p_holm"),
        family_size=sizes[c.get("family")],
    )


def _num(v: Any) -> str:
    return f"{v:+.3f}" if isinstance(v, (int, float)) and math.isfinite(v) else "—"


def _cell(side: dict) -> str:
    lo, hi = side["ci95"]
    return f"{_num(side['diff'])} [{_num(lo)}, {_num(hi)}] {side['verdict']} (n {side['n_pairs']})"


def _yes(v: bool | None) -> str:
    return "—" if v is None else "yes" if v else "no"


def _table(rows: list[dict], term: bool = False) -> list[str]:
    esc = (lambda s: term_text(str(s), 120)) if term else (lambda s: md_text(str(s), 120))
    header = [
        "comparison",
        "committed",
        "this machine",
        "replicates",
        "intervals overlap",
        "committed effect in new CI",
    ]
    cells = [
        [esc(r["name"]), esc(_cell(r["committed"])), esc(_cell(r["new"])), _yes(r["replicates"]), _yes(r["overlap"])]
        + [_yes(r["within"])]
        for r in rows
    ]
    return markdown_table(header, cells)


def _trained_at(prov: dict) -> Any:
    """The commit the new runs were trained at: the runs' own (one, or a list when they differ),
    else the report's."""
    made = prov.get("run_commits")
    if isinstance(made, list) and made:
        return made[0] if len(made) == 1 else made
    return prov.get("commit")


def _machines_line(diffs: list[str]) -> str:
    """How the two machines differ, or that the committed runs do not say."""
    if diffs == ["unrecorded"]:
        return (
            "Machines: the committed runs carry no machine record (they predate machine records), so the files "
            "cannot say whether the two machines differ; compare the committed suite's documentation"
        )
    return f"Machines differ in: {', '.join(diffs) if diffs else 'nothing that selects kernels'}"


def write_replication(out: Path, rows: list[dict], old: dict, new: dict, src: str, argv: list[str]) -> None:
    """replication.json (the rows, both machines) and replication.md (answer first, then the table)."""
    from noma_prorl_bench.analysis.report import portable  # noqa: PLC0415
    from noma_prorl_bench.io.machine import kernel_differences  # noqa: PLC0415
    from noma_prorl_bench.io.safe_files import write_json, write_text  # noqa: PLC0415

    p_old, p_new = old.get("provenance") or {}, new.get("provenance") or {}
    diffs = kernel_differences(p_old.get("machine_info"), p_new.get("machine_info"))
    same = sum(r["replicates"] for r in rows)
    write_json(
        str(out / "replication.json"),
        {
            "source": src,
            "command": portable("prorl-bench replicate " + " ".join(argv), out.resolve()),  # no machine path
            "rows": rows,
            "replicated": same,
            "compared": len(rows),
            "machines": {"committed": p_old.get("machine"), "new": p_new.get("machine"), "kernel_differences": diffs},
            "commits": {"committed": p_old.get("commit"), "new": _trained_at(p_new)},
        },
    )
    lines = (
        [
            "# Replication",
            "",
            f"**{same} of {len(rows)} verdicts replicated** on this machine "
            f"({md_text(str(p_new.get('machine')), 240)}); the committed ones were made on "
            f"{md_text(str(p_old.get('machine')), 240)}.",
            "",
            "A verdict *replicates* when the new run gives the same one (better / worse / no detectable "
            "difference); *intervals overlap* when the two 95% intervals share a value. Fewer seeds than the "
            "committed suite mean less power: a committed verdict that comes back `no detectable difference` "
            "on fewer seeds did not replicate here, whatever the reason.",
            "",
            *(
                [
                    "Only some arms were re-run: Holm's families here hold only the re-run questions, "
                    + ", ".join(
                        f"{md_text(str(r['name']), 120)} {r['new']['family_size']} of {r['committed']['family_size']}"
                        for r in rows
                        if r["new"].get("family_size") != r["committed"].get("family_size")
                    )
                    + " (a smaller family is a lower bar: compare the raw p-values too).",
                    "",
                ]
                if any(r["new"].get("family_size") != r["committed"].get("family_size") for r in rows)
                else []
            ),
            _machines_line(diffs) + f". Commits: committed {md_text(str(p_old.get('commit')), 80)}, "
            f"new runs trained at {md_text(str(_trained_at(p_new)), 240)}.",
            "",
        ]
        + _table(rows)
        + [""]
    )
    write_text(str(out / "replication.md"), "\n".join(lines))
