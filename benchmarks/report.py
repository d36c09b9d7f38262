"""What every script in benchmarks/ records with its numbers: the command (repo-relative paths),
the code (git commit and dirty flag), the software (Python, torch, tokenizers, sacreBLEU), the
machine (the CPU's name, family and model, its bf16 flags, PyTorch's capability, the threads and
the memory; for a GPU run the GPUs' name, count and memory, CUDA and the driver), the date and
the wall time, in an atomically written JSON file.

The environment variables BENCHMARK_COMMIT and BENCHMARK_DIRTY (1 or 0), when set, give the
commit and dirty flag instead of git: a copy of the checkout sent to a GPU machine may carry no
.git, or a stale one (one did: it named a commit weeks older than the code it ran)."""

from __future__ import annotations

import datetime
import importlib.metadata
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
STARTED = time.time()  # when the benchmark's process imported this module


NATIVE_BF16 = ("avx512_bf16", "amx_bf16")  # the CPU multiplies bf16 in hardware
CPU_FLAGS = ("avx2", "avx512f", *NATIVE_BF16, "amx_tile")  # the flags that decide a step's speed
# the variables that keep PyTorch, oneDNN and MKL below the CPU's instructions (a CPU of one
# kind made to run as another: a Zen 4 limited to AVX2 multiplies bf16 the way a Zen 3 does)
ISA_LIMITS = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS")


def cpu(cpuinfo: Path = Path("/proc/cpuinfo"), meminfo: Path = Path("/proc/meminfo")) -> dict:
    """The CPU exactly: its model name, family and model (two processors sold under one name
    differ there), the flags that matter for training (bf16 emulated or native), PyTorch's
    kernel capability, the threads and the memory. Linux's /proc files; elsewhere the name
    alone."""
    fields: dict[str, str] = {}
    if cpuinfo.is_file():
        for line in cpuinfo.read_text().splitlines():
            if not line.strip():
                break  # the first processor's block is enough
            key, _, value = line.partition(":")
            fields[key.strip()] = value.strip()
    flags = set(fields.get("flags", "").split())
    memory = None
    if meminfo.is_file():
        total = [line.split()[1] for line in meminfo.read_text().splitlines() if line.startswith("MemTotal:")]
        memory = round(int(total[0]) / 2**20, 1) if total else None  # kB -> GiB
    number = lambda key: int(fields[key]) if fields.get(key, "").isdigit() else None  # noqa: E731
    return {"model_name": fields.get("model name") or platform.processor() or platform.machine(),
            "family": number("cpu family"), "model": number("model"),
            "flags": [flag for flag in CPU_FLAGS if flag in flags] if fields else None,
            "capability": torch.backends.cpu.get_cpu_capability(),
            "threads": torch.get_num_threads(), "memory_gib": memory, **_isa_limits()}


def _isa_limits() -> dict:
    """{"isa_limits": {variable: value}} for each of ISA_LIMITS set here; {} when none is."""
    limits = {name: os.environ[name] for name in ISA_LIMITS if os.environ.get(name)}
    return {"isa_limits": limits} if limits else {}


def _bf16_limited(limits: dict) -> bool:
    """Whether oneDNN, which multiplies bf16 on a CPU, is held below the bf16 instructions."""
    isa = limits.get("ONEDNN_MAX_CPU_ISA", "ALL").lower()
    return isa != "all" and "bf16" not in isa and "amx" not in isa


def machine(device: torch.device | None = None) -> str:
    """The device the numbers were measured on, in words: a GPU's name, or the CPU's name,
    family and model, whether it multiplies bf16 natively, and the threads."""
    if device is not None and device.type == "cuda":
        return torch.cuda.get_device_name(device)
    found = cpu()
    exact = []
    if found["family"] is not None:
        exact.append(f"family {found['family']} model {found['model']}")
    if found["flags"] is not None:
        native = any(flag in found["flags"] for flag in NATIVE_BF16)
        limits = found.get("isa_limits", {})
        if native and _bf16_limited(limits):
            held = " and ".join(f"{name}={value}" for name, value in limits.items())
            exact.append(f"native bf16 held back by {held}, so bf16 emulated")
        else:
            exact.append("native bf16" if native else "bf16 emulated")
    detail = f" ({', '.join(exact)})" if exact else ""
    threads = found['threads']
    return f"{found['model_name']} CPU{detail}, {threads} thread{'' if threads == 1 else 's'}"


def _output(command: list[str]) -> str | None:
    try:
        return subprocess.run(command, capture_output=True, text=True, check=True, cwd=REPO).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def git_state() -> dict:
    """The commit of the checkout and whether its files differ from it (untracked files
    included, records in benchmarks/results/ excepted: a benchmark writes those)."""
    if "BENCHMARK_COMMIT" in os.environ:
        dirty = os.environ.get("BENCHMARK_DIRTY")
        return {"commit": os.environ["BENCHMARK_COMMIT"], "dirty": None if dirty is None else dirty == "1"}
    commit = _output(["git", "rev-parse", "HEAD"])
    status = _output(["git", "status", "--porcelain", "--", ".", ":(exclude)benchmarks/results"])
    return {"commit": commit, "dirty": None if status is None else bool(status)}


GIT = git_state()  # read when the benchmark starts: the code that ran, not what was edited later


def versions() -> dict:
    found = {"python": platform.python_version(), "torch": torch.__version__}
    for package in ("tokenizers", "sacrebleu"):
        try:
            found[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            found[package] = None
    return found


def hardware(device: torch.device | None = None) -> dict:
    """The CPU, or for a GPU run the GPUs (name, count, CUDA, driver) and not the host's CPU."""
    if device is None or device.type != "cuda":
        return {"cpu": machine(), **cpu()}
    driver = _output(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
    memory = torch.cuda.get_device_properties(device).total_memory
    return {"gpu": torch.cuda.get_device_name(device), "gpu_count": torch.cuda.device_count(),
            "gpu_memory_gib": round(memory / 2**30, 1), "cuda": torch.version.cuda,
            "driver": driver.splitlines()[0] if driver else None}


def _from_repo(word: str) -> str:
    """A path argument as seen from the repository's root (where the record's command is
    run): inside the repository relative to it, beside it (../shared) relative to it too,
    elsewhere as given (a test's temporary folder; tests/test_benchmarks.py keeps such
    paths out of the committed records)."""
    path = Path(word)
    if not path.is_absolute() and Path.cwd() == REPO:
        return word
    if not path.is_absolute() and "/" not in word and not path.exists():
        return word  # not a path: a preset's name, a number
    # abspath, not resolve: ../shared is often a link (CI links it beside the clone), and
    # following it would name the folder it points to
    absolute = Path(os.path.abspath(path))
    if absolute.is_relative_to(REPO.parent):
        return os.path.relpath(absolute, REPO)
    return word


def command_line() -> str:
    """python and the arguments, paths relative to the repository (see _from_repo), also in
    --option=PATH."""
    words = [_from_repo(sys.argv[0])]
    for word in sys.argv[1:]:
        option, equals, value = word.partition("=")
        if equals and option.startswith("--"):
            words.append(f"{option}={_from_repo(value)}")
        elif word.startswith("-") or not word:
            words.append(word)
        else:
            words.append(_from_repo(word))
    return "python " + shlex.join(words)


def spread(values: list[float]) -> dict[str, float]:
    """Repeated measurements as every record gives them: min, median and max."""
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def write_report(path: Path, results: dict, device: torch.device | None = None) -> None:
    """Write results with the command, code, software, machine, date and wall time to path,
    whole or not at all."""
    report = {
        "command": command_line(),
        "machine": machine(device),
        "torch": torch.__version__,
        "git": GIT,
        "versions": versions(),
        "hardware": hardware(device),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "wall_s": round(time.time() - STARTED, 1),
        **results,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(json.dumps(report, indent=1) + "\n")
    temporary.replace(path)
    print(f"wrote {path}")
