"""The machine a run or suite ran on, as far as it can change a run's numbers.

Runs are bit-deterministic on one machine, not across machines: torch picks its CPU kernels by
the CPU's instruction set (`torch.backends.cpu.get_cpu_capability()`: DEFAULT, AVX2, AVX512, ...),
and the BLAS (MKL, OpenBLAS) and oneDNN builds pick theirs by the same flags, so an AVX2-only CPU
and an AVX-512 one give different floating-point sums from the first matmul on. A run's
config.json (`machine`) and a suite's settings.json (`machine`, one line; `machine_info`, the
record) carry:

    cpu                   the CPU model (/proc/cpuinfo `model name`, else platform.processor())
    cores, arch, os       os.cpu_count(), platform.machine(), system and kernel release
    virtualised           the CPU reports a hypervisor (`hypervisor` flag)
    cpu_flags             which of KERNEL_FLAGS the CPU has (the ones kernels are chosen by)
    torch                 torch's version; torch_cpu_capability the kernels it dispatches to
    blas, mkl, onednn     torch.__config__.show()'s BLAS_INFO and its MKL / oneDNN version lines
    env                   the variables that force kernels or threads (KERNEL_ENV), where set

`kernel_differences(a, b)` names the fields in which two records differ in a way that changes
kernels (`prorl-bench replicate` prints them beside a replication).
"""

from __future__ import annotations

import os
import platform
import re
from typing import Any

#: CPU flags that decide which kernels torch, MKL and oneDNN run (x86 and Arm)
KERNEL_FLAGS = (
    "sse4_2",
    "avx",
    "fma",
    "avx2",
    "avx512f",
    "avx512bw",
    "avx512_vnni",
    "avx512_bf16",
    "avx512_fp16",
    "amx_tile",
    "amx_bf16",
    "amx_int8",
    "asimd",
    "sve",
    "sve2",
)
#: environment variables that force kernels, reproducibility modes or threads
KERNEL_ENV = (
    "ATEN_CPU_CAPABILITY",
    "MKL_CBWR",
    "MKL_ENABLE_INSTRUCTIONS",
    "DNNL_MAX_CPU_ISA",
    "ONEDNN_MAX_CPU_ISA",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
)
#: fields of the record whose difference changes kernels (hence a run's numbers)
KERNEL_FIELDS = ("cpu", "arch", "cpu_flags", "torch", "torch_cpu_capability", "blas", "mkl", "onednn", "env")


def _cpuinfo() -> dict[str, str]:
    """The first processor's `key: value` lines of /proc/cpuinfo ({} where there is none)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            text = f.read(1 << 20)
    except OSError:
        return {}
    out: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if out:
                break
            continue
        key, _, value = line.partition(":")
        out.setdefault(key.strip().lower(), value.strip())
    return out


def _torch_build() -> dict[str, Any]:
    """torch's version, CPU capability, and its BLAS / MKL / oneDNN builds (None where unknown)."""
    try:
        import torch  # noqa: PLC0415  (the record loads torch only when asked for it)
    except ImportError:
        return {"torch": None, "torch_cpu_capability": None, "blas": None, "mkl": None, "onednn": None}
    try:
        capability = str(torch.backends.cpu.get_cpu_capability())
    except (AttributeError, RuntimeError):
        capability = None
    show = torch.__config__.show()
    blas = re.search(r"BLAS_INFO=([^,\s]+)", show)
    mkl = re.search(r"Math Kernel Library Version ([^\s]+)", show)
    onednn = re.search(r"(?:MKL-DNN|oneDNN) (v[^\s]+)", show)
    return {
        "torch": torch.__version__,
        "torch_cpu_capability": capability,
        "blas": blas.group(1) if blas else None,
        "mkl": mkl.group(1) if mkl else None,
        "onednn": onednn.group(1) if onednn else None,
    }


def machine_info() -> dict[str, Any]:
    """The record of this machine (module docstring)."""
    info = _cpuinfo()
    flags = set((info.get("flags") or info.get("features") or "").split())
    cpu = info.get("model name") or info.get("cpu model") or platform.processor() or "unknown"
    return {
        "cpu": re.sub(r"\s+", " ", cpu),
        "cores": os.cpu_count(),
        "arch": platform.machine(),
        "os": f"{platform.system()} {platform.release()}",
        "virtualised": "hypervisor" in flags,
        "cpu_flags": [f for f in KERNEL_FLAGS if f in flags],
        **_torch_build(),
        "env": {k: os.environ[k] for k in KERNEL_ENV if k in os.environ},
    }


def describe(info: dict[str, Any]) -> str:
    """One line for a report: 'Intel(R) Xeon(R) Processor (VM), 2 cores, x86_64; avx2 avx512f
    amx_bf16; torch 2.13.0 (AVX512 kernels, BLAS mkl, oneDNN v3.12.0)'."""
    top = [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "asimd", "sve") if f in info.get("cpu_flags", [])]
    env = ", ".join(f"{k}={v}" for k, v in (info.get("env") or {}).items() if k in KERNEL_ENV[:4])
    return (
        f"{info.get('cpu', 'unknown')}{' (VM)' if info.get('virtualised') else ''}, {info.get('cores')} cores, "
        f"{info.get('arch')}; {' '.join(top) or 'no AVX2'}; torch {info.get('torch')} "
        f"({info.get('torch_cpu_capability')} kernels, BLAS {info.get('blas')}, oneDNN {info.get('onednn')})"
        + (f"; {env}" if env else "")
    )


def kernel_differences(a: dict[str, Any] | None, b: dict[str, Any] | None) -> list[str]:
    """The KERNEL_FIELDS in which records a and b differ (['unrecorded'] when either is missing)."""
    if not isinstance(a, dict) or not isinstance(b, dict):
        return ["unrecorded"]
    return [k for k in KERNEL_FIELDS if a.get(k) != b.get(k)]
