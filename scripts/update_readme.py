"""Regenerate the generated parts of the docs: README.md's file tree and its results (the atlas
table from docs/atlas/summary.json and docs/suite_quick/summary.json; the cross-task map's answer
from docs/grid/map.json; the variants, growth, cost, bf16 and real-model numbers from
docs/suite_full, docs/growth/suite, docs/cost, docs/real_model: numbers are read, never typed),
docs/files.md (every file), docs/flags.md (every flag, by --help section) and docs/presets.md
(what each preset sets).

Run from the repo root:  .venv/bin/python scripts/update_readme.py      (--check: exit 1 if stale)
The flag tables come from the specs' field docstrings (config/specs/, the same text as `--help`); the trees
list tracked files with the first line of each file's docstring or heading. Each block lives
between `<!-- NAME:start -->` and `<!-- NAME:end -->` markers; tests/smoke/test_docs.py checks
that they are current.
"""

from __future__ import annotations

import ast
import glob
import os
import re
import statistics
import subprocess
import sys
import typing
from dataclasses import MISSING, fields

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "src"))

from noma_prorl_bench.config import RunConfig, field_docs  # noqa: E402
from noma_prorl_bench.config.fields import field_sections  # noqa: E402  (each flag's section, from its spec)
from noma_prorl_bench.config.parser import HELP_GROUPS, _choices  # noqa: E402
from noma_prorl_bench.config.presets import describe_all  # noqa: E402

KNOWN = {
    "pyproject.toml": "Package metadata, console script, optional extras (ray, hf, tensorboard, test), pytest markers."
}
SKIP_TREE = ("docs/figures/", "docs/suite_quick/figures/")


def flags_table() -> str:
    """One table per --help section, in --help's order."""
    docs, hints, sections = field_docs(), typing.get_type_hints(RunConfig), field_sections()
    out = []
    for sec, title in HELP_GROUPS:
        rows = [f"### {title}", "", "| flag | default | values | meaning |", "|---|---|---|---|"]
        for f in fields(RunConfig):
            if sections.get(f.name) != sec:
                continue
            choices = _choices(hints[f.name])
            values = ", ".join(map(str, choices)) if choices else hints[f.name].__name__
            default = "" if f.default is MISSING else repr(f.default)
            rows.append(f"| `--{f.name}` | `{default}` | {values} | {docs.get(f.name, '').replace('|', '/')} |")
        out.append("\n".join(rows))
    return "\n\n".join(out)


def presets_block() -> str:
    """Every field each preset sets (describe_all without the sources, which --help adds)."""
    lines = [re.sub(r"\. Source: .*$", ".", line) for line in describe_all().splitlines()]
    return "```text\n" + "\n".join(lines) + "\n```"


def describe(path: str) -> str:
    """First line of a Python docstring, a Markdown heading, or a shell comment."""
    full = os.path.join(ROOT, path)
    try:
        text = open(full, encoding="utf-8").read()
    except (OSError, UnicodeDecodeError):
        return ""
    if path.endswith(".py"):
        try:
            doc = ast.get_docstring(ast.parse(text)) or ""
        except SyntaxError:
            doc = ""
        return doc.strip().splitlines()[0] if doc.strip() else ""
    if path.endswith(".md"):
        m = re.search(r"^#+\s*(.+)$", text, re.M)
        return m.group(1).strip() if m else ""
    for line in text.splitlines()[:6]:
        if line.startswith("#") and not line.startswith("#!"):
            return line.lstrip("# ").strip()
    return KNOWN.get(path, "")


def tracked_files() -> list[str]:
    files = subprocess.run(["git", "-C", ROOT, "ls-files"], capture_output=True, text=True).stdout.split()
    return sorted(f for f in files if not f.startswith(SKIP_TREE) and not f.endswith((".png", ".jsonl")))


def file_tree() -> str:
    """Every tracked file with its one-line description (docs/files.md)."""
    files = tracked_files()
    width = max(len(f) for f in files) + 2
    return "```\n" + "\n".join(f"{f:<{width}}{describe(f)}".rstrip() for f in files) + "\n```"


def _cut(text: str, n: int = 100) -> str:
    return text if len(text) <= n else text[: n - 3].rstrip() + "..."


def short_tree() -> str:
    """The README's tree: top-level files, each package module or folder on one line, and one
    line per folder of scripts, benchmarks (their subfolders counted), docs and tests (docs/files.md lists every file)."""
    files = tracked_files()
    pkg = "src/noma_prorl_bench/"
    lines, folders = [], {}
    for f in files:
        if f.startswith(pkg) and f.count("/") >= 3:  # a subpackage (and its own subpackages) on one line
            folders.setdefault("/".join(f.split("/")[:3]) + "/", []).append(f)
        elif f.startswith(pkg) or f.count("/") == 0 or f.startswith(".ci/"):
            lines.append((f, describe(f)))
        else:
            top = (
                f.split("/")[0] + "/"
                if f.startswith(("benchmarks/", "docs/", "scripts/"))
                else f.rsplit("/", 1)[0] + "/"
            )
            folders.setdefault(top, []).append(f)
    for folder, members in folders.items():
        init = folder + "__init__.py"
        desc = describe(init) if init in members else ""
        names = [os.path.basename(m) for m in members if not m.endswith("__init__.py")]
        if folder.startswith(pkg):
            names = [
                m[len(folder) : -3]
                for m in members
                if m.endswith(".py") and "/" not in m[len(folder) :] and not m.endswith("__init__.py")
            ]
            names += sorted({m[len(folder) :].split("/")[0] + "/" for m in members if m[len(folder) :].count("/")})
            lines.append((folder, "[" + " ".join(names) + "] " + desc))
        elif folder in ("benchmarks/", "scripts/"):  # its own files, then each subfolder with its count
            subs: dict[str, int] = {}
            for m in members:
                if m.count("/") > 1:
                    sub = m.split("/")[1] + "/"
                    subs[sub] = subs.get(sub, 0) + 1
            own = [os.path.basename(m) for m in members if m.count("/") == 1]
            listed = own + [f"{sub} ({n})" for sub, n in subs.items()]
            lines.append((folder, f"{len(members)} files: " + " ".join(listed)))
        else:
            lines.append((folder, f"{len(members)} files: " + " ".join(names)))
    lines.sort(key=lambda x: (x[0].startswith(("tests/", "docs/", "benchmarks/")), x[0]))
    width = max(len(p) for p, _ in lines) + 2
    return "```\n" + "\n".join(f"{p:<{width}}{_cut(d, 160 - width)}".rstrip() for p, d in lines) + "\n```"


def _num(v: float) -> str:
    """A reward difference at three decimals, rounded once from the stored value."""
    return f"{v:+.3f}"


def _effect(c: dict, mde: bool = True) -> str:
    """'+0.024 [+0.012, +0.036] better' ('..., no detectable difference (mde80 0.020)')."""
    lo, hi = c["ci95"]
    out = f"{_num(c['diff'])} [{_num(lo)}, {_num(hi)}] {c['verdict']}"
    if mde and c["verdict"] == "no detectable difference":
        out += f" (mde80 {c['mde80']:.3f})" if c.get("mde80") is not None else " (mde80 ∞)"
    return out


def atlas_table() -> str:
    """README's beta x treatment table: per beta of docs/atlas, reset + keep vs no reset, soft vs
    keep, and hard / asym / step vs keep; a last row with docs/suite_quick's keep vs no reset."""
    import json  # noqa: PLC0415

    def load(folder: str) -> dict:
        with open(os.path.join(ROOT, folder, "summary.json"), encoding="utf-8") as f:
            return {c["name"]: c for c in json.load(f)["comparisons"] if c["metric"] == "score"}

    atlas, quick = load("docs/atlas"), load("docs/suite_quick")
    betas = list(dict.fromkeys(n.split(":")[0][len("beta ") :] for n in atlas))
    rows = ["| beta | reset + keep vs no reset | soft vs keep | hard / asym / step vs keep |", "|---|---|---|---|"]
    for b in betas:
        keep, soft = atlas[f"beta {b}: reset-keep vs no reset"], atlas[f"beta {b}: reset-soft vs reset-keep"]
        rest = [atlas[f"beta {b}: reset-{t} vs reset-keep"] for t in ("hard", "asym", "step")]
        if all(c["verdict"] == "no detectable difference" for c in rest):
            mdes = " / ".join("∞" if c.get("mde80") is None else f"{c['mde80']:.3f}" for c in rest)
            tail = f"no detectable difference (mde80 {mdes})"
        else:
            tail = " / ".join(_effect(c) for c in rest)
        rows.append(f"| {b} | {_effect(keep)} | {_effect(soft)} | {tail} |")
    qb = [n.split(":")[0] for n in quick if n.endswith("reset-keep vs no reset")]
    n_q = quick[f"{qb[0]}: reset-keep vs no reset"]["n_pairs"] if qb else 0
    cells = "; ".join(f"{b}: {_effect(quick[f'{b}: reset-keep vs no reset'], mde=False)}" for b in qb)
    rows.append(f"| quick preset, {n_q} seeds ([report](docs/suite_quick/report.md)) | {cells} | | |")
    return "\n".join(rows)


def _load(path: str) -> dict:
    import json  # noqa: PLC0415

    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        return json.load(f)


def _scores(folder: str) -> dict:
    """A committed report's score comparisons by name (its summary.json)."""
    return {c["name"]: c for c in _load(f"{folder}/summary.json")["comparisons"] if c["metric"] == "score"}


def _ci(c: dict) -> str:
    lo, hi = c["ci95"]
    return f"{_num(c['diff'])} [{_num(lo)}, {_num(hi)}]"


def _verdict(c: dict) -> str:
    """'worse'; 'no detectable difference (mde80 0.025)', with p_holm when its own CI excludes 0."""
    if c["verdict"] != "no detectable difference":
        return c["verdict"]
    mde = f"mde80 {c['mde80']:.3f}" if c.get("mde80") is not None else "mde80 ∞"
    if c.get("ci_excludes_0_uncorrected"):
        mde += f"; p_holm {c['p_holm']:.3f}, its CI excludes 0 before Holm"
    return f"{c['verdict']} ({mde})"


#: docs/suite_full's comparisons in the README's order: name -> (question, comparison as read)
FULL_ROWS = {
    "A/A: A1-aa vs A1": ("does the method see differences that are not there?", "A/A: A1 vs A1 on other seeds"),
    "B vs A1": ("what does dropping the reference model cost?", "B vs A1"),
    "A1-beta0 vs A1": ("... and dropping only the KL term?", "A1 beta = 0 vs A1"),
    "B vs A1-beta0": ('B against "no KL"', "B vs A1 beta = 0"),
}
GROWTH_ARMS = {
    "full-rank": "full fine-tune",
    "grow-preserve": "preserve",
    "grow-reset": "reset",
    "grow-noma_flat": "noma_flat",
    "fixed-r2": "fixed rank 2",
}


def full_section() -> str:
    """The variants table from docs/suite_full/summary.json."""
    full, prov = _scores("docs/suite_full"), _load("docs/suite_full/summary.json")
    p, fams = prov["provenance"], prov["families"]
    head = (
        f"**Variants and the KL term** ([report](docs/suite_full/report.md): GRU, default shapes, beta 0.05, k3, "
        f"{p['steps']} RL steps, {p['seeds']} paired seeds, K = {p['score_evals']}, a family of {fams['outcome']}):"
    )
    rows = ["| question | comparison | difference [95% CI] | verdict |", "|---|---|---|---|"]
    rows += [
        f"| {q} | {label} | {_ci(full[name])} | {_verdict(full[name])} |" for name, (q, label) in FULL_ROWS.items()
    ]
    return "\n".join([head, "", *rows])


def growth_section() -> str:
    """The growth paragraph from docs/growth/suite/summary.json (gain: mean score - mean warm-start score)."""
    summary = _load("docs/growth/suite/summary.json")
    comps, arms, p = _scores("docs/growth/suite"), summary["arms"], summary["provenance"]
    warms = sorted({f"{a['warm']:.3f}" for a in arms.values()})
    gains = {a: arms[a]["score"] - arms[a]["warm"] for a in GROWTH_ARMS}
    twins = any(c["identical"] and {c["arm"], c["baseline"]} == {"grow-naive", "grow-reset"} for c in summary["checks"])
    said = ", ".join(
        f"{label}{' = naive' if a == 'grow-reset' and twins else ''} {_num(gains[a])}"
        for a, label in GROWTH_ARMS.items()
    )
    tested = [
        ("noma_flat vs preserve", comps["grow-noma_flat vs grow-preserve"]),
        ("preserve vs reset", comps["grow-preserve vs grow-reset"]),
        ("growth vs fixed rank 2", comps["grow-preserve vs fixed-r2"]),
    ]
    found = "; ".join(f"{n} {_ci(c)} {_verdict(c)}" for n, c in tested)
    return (
        "**Optimizer state at a LoRA rank growth** ([report](docs/growth/suite/report.md): transformer, adapters on "
        f"every projection, base frozen, rank 2 -> 8 every 25 steps, {p['steps']} RL steps, {p['seeds']} paired seeds, "
        f"K = {p['score_evals']}). {'Every arm learns' if min(gains.values()) > 0 else 'Not every arm learns'} "
        f"(gain over the warm start, mean score - mean warm-start score {' to '.join(warms)}): {said}. {found}."
    )


def cost_real_section() -> str:
    """Cost (docs/cost), bf16 (docs/real_model/bf16), the real-model demo (docs/real_model/demo.json)
    and its resets (docs/real_model/resets) from their result files."""
    model = _load("docs/cost/report.json")["cost_model"][0]
    cost = _load("docs/cost/summary.json")["provenance"]
    bf16_all = _load("docs/real_model/bf16/bf16.json")
    bf16, bf16_seeds = bf16_all["lift_diff"], bf16_all["seeds"]
    demo = _load("docs/real_model/demo.json")
    lift, flags = demo["over_seeds"]["correct"], demo["rows"][0]["flags"]
    resets, rp = _scores("docs/real_model/resets"), _load("docs/real_model/resets/summary.json")["provenance"]
    keep, hard = resets["real: reset-keep vs no reset"], resets["real: reset-hard vs reset-keep"]
    toy = _scores("docs/atlas")["beta 1: reset-keep vs no reset"]["diff"]
    lo, hi = bf16["ci95"]
    both = keep["verdict"] == hard["verdict"] == "no detectable difference"
    reset_text = (
        f"keep vs none {_ci(keep)}, hard vs keep {_ci(hard)}, both no detectable difference "
        f"(mde80 {keep['mde80']:.3f}, {hard['mde80']:.3f}): the toy's {_num(toy)} is "
        + ("below" if abs(toy) < keep["mde80"] else "within")
        + " what it could detect"
        if both
        else f"keep vs none {_ci(keep)} {_verdict(keep)}, hard vs keep {_ci(hard)} {_verdict(hard)}"
    )
    return "\n".join(
        [
            f"**Cost, interleaved runs only** ([report](docs/cost/report.md), A0/A1/A2/B alternating, GRU, "
            f"{cost['seeds']} seeds): A0 took {model['measured_ratio']:.2f}x A1's step (cost model: "
            f"{model['predicted_ratio']:.2f}x); `--dtype bf16_mixed` against float32 on the real-model demo: lift "
            f"difference {_num(bf16['mean'])} [{_num(lo)}, {_num(hi)}], sign-flip p {bf16['sign_flip_p']:.3f}"
            f"{', no detectable difference' if bf16['sign_flip_p'] >= 0.05 else ''} (mde80 {bf16['mde80']:.3f}, "
            f"{len(bf16_seeds)} paired seeds; "
            "[docs/real_model/bf16](docs/real_model/bf16/bf16.md)).",
            "",
            f"**Real LM** ([docs/real_model.md](docs/real_model.md), SmolLM2-135M, LoRA r8): "
            f"{flags[flags.index('--steps') + 1]} RL steps at beta 0.01, {_num(lift['mean_lift'])} "
            f"[{_num(lift['ci95'][0])}, {_num(lift['ci95'][1])}] greedy correctness on {lift['n_prompts']} held-out "
            f"prompts ({lift['n_seeds']} seeds, {'all' if lift['seeds_up'] == lift['n_seeds'] else lift['seeds_up']} up). "
            f"Resets on it ([docs/real_model/resets](docs/real_model/resets/README.md); k3 beta 1, lr 1e-3, "
            f"{rp['steps']} steps, reset every 4, 200 held-out prompts, {rp['seeds']} paired seeds): {reset_text}.",
        ]
    )


def grid_section() -> str:
    """The cross-task map's answer and machines from docs/grid/map.json, or that it is not yet committed."""
    path = "docs/grid/map.json"
    if not os.path.exists(os.path.join(ROOT, path)):
        return (
            "**Across tasks:** the cross-task map (`prorl-bench map`: the grid preset's betas 0.1-2 x none / keep / "
            "hard / soft / asym / step on reverse_digits and sort_digits) is not yet committed (docs/grid/map.json)."
        )
    data = _load(path)
    suites = data["suites"]
    lines = {m["machine"] for s in suites for m in s["machines"]}
    machines = (
        f"Machine: {lines.pop()} (every run)"
        if len(lines) == 1
        else "Machines: "
        + "; ".join(
            f"{s['task']}: " + ", ".join(f"{m['machine']} ({m['runs']} runs)" for m in s["machines"]) for s in suites
        )
    )
    k = sorted({s["k"] for s in suites})
    return (
        f"**Across tasks** ([map](docs/grid/map.md): the grid preset, GRU, k3, B 8 x G 8, lr 2e-3, 300 RL steps, "
        f"10 paired seeds per cell, reset every 50, K = "
        f"{'/'.join(map(str, k))}, one suite per task): {data['answer']}{_wider_families(suites)} {machines}."
    )


def _wider_families(suites: list[dict]) -> str:
    """What survives Holm over each task's every beta x treatment, and over the whole map, from the raw
    sign-flip p of the committed docs/grid/TASK/summary.json (empty when they are not committed)."""
    from noma_prorl_bench.analysis import power  # noqa: PLC0415

    rows = {}
    for s in suites:
        path = os.path.join(ROOT, "docs", "grid", s["task"], "summary.json")
        if not os.path.exists(path):
            return ""
        rows[s["task"]] = [c for c in _load(os.path.relpath(path, ROOT))["comparisons"] if c["metric"] == "score"]

    wide = power.holm_families({**rows, "": [c for cs in rows.values() for c in cs]})
    per_task = [f"{len(wide[task]['survivors'])} of {wide[task]['m']} on {task}" for task in rows]
    every, n_all, n = wide[""]["m"], len(wide[""]["survivors"]), wide[""]["min_pairs"]
    return (
        f" Those verdicts are Holm within each task and beta; over one family per task (every beta x treatment) "
        f"{' and '.join(per_task)} survive, over the whole map ({every}) {n_all} "
        f"({n} pairs: the smallest sign-flip p, 2/2^{n}, times {every} is {every * 2 / 2**n:.3f})."
    )


def speed_section() -> str:
    """The step-time ratios vs TRL and bf16 vs float32 from benchmarks/results (per-pair CPU-time ratios)."""
    f32, b16, rs = (
        _load(f"benchmarks/results/{n}.json") for n in ("vs_trl_smollm2_float32", "vs_trl_smollm2_bf16", "real_speed")
    )
    loads = [v for d in (f32, b16, rs) for key in ("loadavg_start", "loadavg_end") for v in d[key][:1]]

    def pairs(d: dict) -> str:
        return ", ".join(f"{r:.2f}" for r in d["pair_ratios"])

    def tokens(d: dict) -> str:
        return (
            f"{statistics.median(d['tokens_per_step_trl']):.0f} vs {statistics.median(d['tokens_per_step_ours']):.0f}"
        )

    def draw_of(d: dict) -> str:  # real_speed: the name; vs_trl: "ours --sample_draw NAME; TRL: ..."
        said = str(d["settings"].get("sample_draw", "exponential"))
        m = re.search(r"--sample_draw (\w+)", said)
        return m.group(1) if m else said

    draws = {draw_of(d) for d in (f32, b16, rs)}
    if len(draws) != 1:  # one sentence quotes all three: they must share the draw
        raise ValueError(f"the speed result files were made with different --sample_draw: {sorted(draws)}")
    (draw,) = draws

    def shared_of(d: dict) -> bool:  # real_speed: a bool; vs_trl: "ours --shared_prompt: ..." or "off: ..."
        said = d["settings"].get("shared_prompt", False)
        return said.startswith("ours --shared_prompt") if isinstance(said, str) else bool(said)

    shared = {shared_of(d) for d in (f32, b16, rs)}
    if len(shared) != 1:
        raise ValueError("the speed result files differ in --shared_prompt")
    is_shared = shared.pop()
    flags = ([f"`--sample_draw {draw}`"] if draw != "exponential" else []) + (
        ["`--shared_prompt`"] if is_shared else []
    )
    with_draw = f" with {' and '.join(flags)}" if flags else ""
    b16x = _load_optional("benchmarks/results/vs_trl_smollm2_bf16_exponential.json")
    notes = []
    if draw != "exponential":
        notes.append(
            "the distribution TRL samples, drawn with one uniform per row instead of an exponential per vocabulary entry"
            + (
                f"; with the default draw TRL/ours is {b16x['ratio_trl_over_ours']:.2f}x in bf16"
                if b16x and shared_of(b16x) == is_shared and b16x.get("commit") == b16.get("commit")
                else ""  # quoted only beside runs of the same code
            )
        )
    if is_shared:
        notes.append("the learner's and reference passes encode each distinct prompt once, TRL's every row's")
    same = f" ({'; '.join(notes)})" if notes else ""
    unshared = _load_optional("benchmarks/results/real_speed_noshared.json")  # the same commit, without the flag
    before = (
        f"; {unshared['ratio_bf16_over_float32']:.2f}x without `--shared_prompt`, which speeds float32 up more"
        if is_shared and unshared and not shared_of(unshared)
        else ""
    )
    return (
        f"**Step time** ([docs/performance.md](docs/performance.md); SmolLM2-135M + LoRA r8, B 4 x G 4, <= 32 new "
        f"tokens, medians of per-pair process-CPU ratios over {len(f32['pair_ratios'])} alternating pairs, "
        f"{_short_machine(f32['machine'])} at load {min(loads):.1f}-{max(loads):.1f}), ours{with_draw}{same}: TRL/ours "
        f"{f32['ratio_trl_over_ours']:.2f}x in float32 (pairs {pairs(f32)}; per token "
        f"{f32['ratio_trl_over_ours_per_token']:.2f}x: TRL generates {tokens(f32)} tokens per step), "
        f"{b16['ratio_trl_over_ours']:.2f}x in bf16 ({pairs(b16)}; per token {b16['ratio_trl_over_ours_per_token']:.2f}x); "
        f"our `--dtype bf16_mixed` step {rs['ratio_bf16_over_float32']:.2f}x faster than our float32 ({pairs(rs)}{before}). "
        "B 0.97x A1 and TRL/ours 1.02-1.10x at 4M-32M parameters come from older float32 runs on the AMD guest."
    )


def _load_optional(rel: str) -> dict | None:
    return _load(rel) if os.path.exists(os.path.join(ROOT, rel)) else None


def _short_machine(record: str | dict) -> str:
    """'Intel(R) Xeon(R) Processor (VM), 2 cores, x86_64; avx2 ... amx_bf16; torch ...' (or the machine record
    io/machine.py writes) -> 'a 2-core Intel Xeon with AMX (avx512_bf16, amx_bf16)'."""
    if isinstance(record, dict):
        parts, cores, flags = [str(record.get("cpu", "?"))], str(record.get("cores", "?")), record.get("cpu_flags", [])
    else:
        head, _, rest = record.partition(";")
        parts = [p.strip() for p in head.split(",")]
        cores = next((p.split()[0] for p in parts if p.endswith("cores")), "?")
        flags = rest.split(";")[0].split()
    name = re.sub(r"\(R\)|\(TM\)|\bProcessor\b|\(VM\)", "", parts[0])
    name = " ".join(name.split())
    kind = (
        " with AMX (avx512_bf16, amx_bf16)"
        if "amx_bf16" in flags
        else " with AVX-512"
        if "avx512f" in flags
        else " (AVX2 only)"
        if "avx2" in flags
        else ""
    )
    return f"a {cores}-core {name}{kind}"


def machines_section() -> str:
    """Which machine types the results were made and replicated on, from the committed replication.json files."""
    out = [
        "**Machines:** runs are bit-deterministic on one machine only; per-seed numbers differ across CPU types. The "
        'atlas and the suites made with it predate machine records (provenance "2 cores, x86_64, ... vm"): an '
        "AVX2-only AMD EPYC made them, for its six quick-preset arms re-run there at 8c2e742 came out bit-identical "
        "(every arm's mean final and warm-start validation reward, seeds 0-9); docs/suite_quick is now that "
        "machine's 20-seed run (seeds 0-7 are the earlier 8-seed suite's runs, unchanged). "
        "`prorl-bench replicate DIR` re-runs a committed suite here and says which verdicts replicate; the "
        "quick suite's replications below were compared with its 8-seed version."
    ]
    for path in sorted(glob.glob(os.path.join(ROOT, "docs", "*", "replication_*", "replication.json"))):
        rel = os.path.relpath(path, ROOT)
        data = _load(rel)
        moved = [
            f"{r['name']}: {r['committed']['verdict']} -> {r['new']['verdict']} "
            f"({_num(r['new']['diff'])} [{_num(r['new']['ci95'][0])}, {_num(r['new']['ci95'][1])}])"
            for r in data["rows"]
            if not r["replicates"]
        ]
        total = len(_load(os.path.join(data["source"], "summary.json"))["comparisons"])
        subset = (
            f", {data['compared']} of its {total} questions: " + ", ".join(r["name"] for r in data["rows"])
            if data["compared"] < total
            else ""
        )
        out.append(
            f"Replicated on {_short_machine(data['machines']['new'])} at {data['commits']['new'][:7]} "
            f"([{data['source']}]({os.path.dirname(rel)}/replication.md){subset}): **{data['replicated']} of "
            f"{data['compared']} verdicts replicate**" + (f"; not: {'; '.join(moved)}." if moved else ".")
        )
    return " ".join(out)


def replace_block(text: str, name: str, body: str) -> str:
    pat = re.compile(rf"(<!-- {name}:start -->\n)(.*?)(\n<!-- {name}:end -->)", re.S)
    if not pat.search(text):
        raise SystemExit(f"no <!-- {name}:start/end --> markers")
    return pat.sub(lambda m: m.group(1) + body + m.group(3), text)


# page -> its generated blocks
PAGES = {
    "README.md": {
        "tree": short_tree,
        "atlas_table": atlas_table,
        "results_more": lambda: "\n\n".join([full_section(), growth_section(), cost_real_section(), speed_section()]),
        "grid_map": grid_section,
        "machines": machines_section,
    },
    "docs/files.md": {"files": file_tree},
    "docs/flags.md": {"flags": flags_table},
    "docs/presets.md": {"presets": presets_block},
}


def render(text: str, blocks: dict) -> str:
    for name, make in blocks.items():
        text = replace_block(text, name, make())
    return text


def main() -> int:
    stale = []
    for page, blocks in PAGES.items():
        path = os.path.join(ROOT, page)
        text = open(path, encoding="utf-8").read()
        new = render(text, blocks)
        if new == text:
            continue
        stale.append(page)
        if "--check" not in sys.argv:
            open(path, "w", encoding="utf-8").write(new)
    if stale and "--check" in sys.argv:
        print(f"out of date: {', '.join(stale)}; run .venv/bin/python scripts/update_readme.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
