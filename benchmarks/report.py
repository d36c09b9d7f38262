"""What every script in benchmarks/ records with its numbers: the command, the machine, and an
atomically written JSON file."""

from __future__ import annotations

import json
import platform
import sys
from pathlib import Path

import torch


def machine(device: torch.device | None = None) -> str:
    """The device the numbers were measured on, in words."""
    if device is not None and device.type == "cuda":
        return torch.cuda.get_device_name(device)
    name = platform.processor() or platform.machine()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        models = [line.split(":", 1)[1].strip() for line in cpuinfo.read_text().splitlines()
                  if line.startswith("model name")]
        name = models[0] if models else name
    return f"{name} CPU, {torch.get_num_threads()} threads"


def write_report(path: Path, results: dict, device: torch.device | None = None) -> None:
    """Write results with the command line, machine and torch version to path, whole or not at all."""
    report = {
        "command": "python " + " ".join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]]),
        "machine": machine(device),
        "torch": torch.__version__,
        **results,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(json.dumps(report, indent=1) + "\n")
    temporary.replace(path)
    print(f"wrote {path}")
