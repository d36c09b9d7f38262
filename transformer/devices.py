# Generated from book/devices.md by tools/export.py: edit the chapter.
"""Devices, precision and processes: where a run trains, in which dtype, over how many
processes."""

from __future__ import annotations

import contextlib
import functools
import os
import time

import torch
import torch.distributed as dist
from torch import Tensor, nn


def pick_device(device: str = "auto") -> torch.device:
    """ "auto": CUDA, then MPS, then CPU; otherwise the named device, if it is here."""
    if device != "auto":
        try:
            chosen = torch.device(device)
        except RuntimeError:
            raise ValueError(
                f"unknown device {device!r}: expected auto, cpu, cuda, cuda:N or mps"
            ) from None
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if chosen.type == "cuda" and (chosen.index or 0) >= count:
            raise ValueError(
                f"device {device!r} asked for; this machine has {count} CUDA GPU(s)"
            )
        if chosen.type == "mps" and not torch.backends.mps.is_available():
            raise ValueError(f"device {device!r} asked for; MPS is not available here")
        return chosen
    if torch.cuda.is_available():
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
    if torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def _bf16_speedup(size: int, repeats: int) -> float:
    """The fastest of `repeats` fp32 size x size matrix products, in seconds, over the
    fastest of `repeats` bf16 ones."""
    fastest = {}
    for dtype in (torch.float32, torch.bfloat16):
        a, b = (torch.randn(size, size, dtype=dtype) for _ in range(2))
        a @ b  # warm-up
        seconds = []
        for _ in range(repeats):
            start = time.perf_counter()
            a @ b
            seconds.append(time.perf_counter() - start)
        fastest[dtype] = min(seconds)
    return fastest[torch.float32] / fastest[torch.bfloat16]


@functools.cache
def cpu_bf16_speedup(size: int = 1024, repeats: int = 5) -> float:
    """Measured speed of a bf16 over an fp32 matrix product on this CPU: first on
    256 x 256 matrices, where a CPU that emulates bf16 is already tens of times
    slower (that ratio is returned: the full products would take it seconds), then,
    where bf16 may pay, on size x size ones."""
    quick = _bf16_speedup(256, repeats)
    return quick if quick < 0.5 else _bf16_speedup(size, repeats)


def check_precision(precision: str) -> None:
    """Raise unless `precision` is "auto", "fp32", "bf16" or "fp16"."""
    if precision not in ("auto", "fp32", "bf16", "fp16"):
        raise ValueError(
            f"precision must be 'auto', 'fp32', 'bf16' or 'fp16'; got {precision!r}"
        )


def default_precision(device: torch.device) -> tuple[str, str]:
    """The precision "auto" means on `device`, and why. A CUDA card: bf16 from compute
    capability 8.0, where it has bf16 tensor cores; fp16 with loss scaling below it,
    where torch would only emulate bf16 (is_bf16_supported() says True there unless
    asked including_emulation=False, and of the current device, not `device`). A
    CPU: bf16 where its products are timed at least 1.5 times as fast as fp32's
    (native bf16), else fp32. MPS: fp32."""
    if device.type == "cuda":  # this card's capability, not the current device's
        major, minor = torch.cuda.get_device_capability(device)
        card = f"CUDA compute capability {major}.{minor}"
        if major >= 8:  # what is_bf16_supported(including_emulation=False) checks
            return "bf16", f"{card}: bf16 in hardware"
        return "fp16", f"{card}: no bf16 in hardware, fp16 with loss scaling"
    if device.type == "cpu":
        speedup = cpu_bf16_speedup()
        if speedup >= 1.5:
            return "bf16", f"CPU bf16 products {speedup:.1f}x fp32's: native bf16"
        return "fp32", f"CPU bf16 products {speedup:.2f}x fp32's: no native bf16"
    return "fp32", f"{device.type}: fp32 unless asked (--precision)"


def autocast_dtype(precision: str, device: torch.device) -> torch.dtype | None:
    """The autocast dtype for "auto" (default_precision's), "fp32", "bf16" or "fp16"
    on `device` (None: fp32)."""
    check_precision(precision)
    if precision == "auto":
        precision = default_precision(device)[0]
    return {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]


def autocast(
    device: torch.device, dtype: torch.dtype | None
) -> contextlib.AbstractContextManager:
    """torch.autocast to `dtype` on `device`; nothing for fp32 (dtype None)."""
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=dtype)


def init_distributed(device: torch.device) -> tuple[int, int]:
    """(rank, world_size) from torchrun's environment; joins the process group once."""
    rank = int(os.environ.get("RANK", 0))
    world_size = int(os.environ.get("WORLD_SIZE", 1))
    if world_size > 1 and not dist.is_initialized():
        if device.type == "cuda":
            torch.cuda.set_device(device)
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return rank, world_size


def data_parallel(model: nn.Module, device: torch.device, world_size: int) -> nn.Module:
    """The model wrapped in DistributedDataParallel under torchrun; itself otherwise."""
    if world_size == 1:
        return model
    ids = [device] if device.type == "cuda" else None
    return nn.parallel.DistributedDataParallel(model, device_ids=ids)


def sum_over_ranks(value: int, world_size: int, device: torch.device) -> Tensor | int:
    """The sum of `value` over every process (the value itself without torchrun)."""
    if world_size == 1:
        return value
    total = torch.tensor(float(value), device=device)
    dist.all_reduce(total)
    return total


def all_gather(value: Tensor, world_size: int) -> list[Tensor]:
    """`value` from every process, in rank order (a list of one without torchrun)."""
    if world_size == 1:
        return [value]
    gathered = [torch.empty_like(value) for _ in range(world_size)]
    dist.all_gather(gathered, value)
    return gathered


def default_compile(device: torch.device, precision: str = "fp32") -> tuple[bool, str]:
    """Whether to torch.compile the training step on `device` in `precision`, and why:
    on CUDA, where fused kernels repay the compile within minutes, if Inductor's Triton
    kernels run on the card (compute capability 7.0 and up) in that dtype (bf16 from
    8.0: below it Inductor leaves bf16 graphs eager); not on a CPU, where a short run
    would not repay it, nor on MPS."""
    if device.type != "cuda":
        return False, f"{device.type}: a short run would not repay the compile"
    major, minor = torch.cuda.get_device_capability(device)
    if (major, minor) < (7, 0):
        return False, f"compute capability {major}.{minor}: Triton needs 7.0"
    if precision == "bf16" and major < 8:
        why = f"compute capability {major}.{minor}: Inductor skips bf16 below 8.0"
        return False, why
    return True, "CUDA: fused kernels repay the compile within minutes"


PAD_MULTIPLE = 8  # tensor cores work in multiples of 8; so do packed rows' tiles


def default_pad_multiple(compiled: bool) -> int:
    """Pad batch lengths to a multiple of PAD_MULTIPLE for a compiled step (fewer
    shapes to compile for, and tensor cores work in multiples of 8); not at all
    otherwise."""
    return PAD_MULTIPLE if compiled else 1


def default_pin_memory(device: torch.device) -> bool:
    """Batches in page-locked memory on CUDA, so that their copies to the GPU run while
    it computes; a CPU has nothing to copy."""
    return device.type == "cuda"


def default_static_cache(device: torch.device) -> bool:
    """Decode with a fixed-size key/value cache on CUDA, so that each step replays as a
    CUDA graph (launching its kernels costs more than running them); not on a CPU."""
    return device.type == "cuda"


def default_fused_adam(device: torch.device) -> bool | None:
    """Adam's one-kernel update of every parameter on the devices torch has it for
    (CUDA, CPU); None elsewhere: torch's own choice."""
    return device.type in ("cuda", "cpu") or None


__all__ = [
    'pick_device',
    'cpu_bf16_speedup',
    'check_precision',
    'default_precision',
    'autocast_dtype',
    'autocast',
    'init_distributed',
    'data_parallel',
    'sum_over_ranks',
    'all_gather',
    'default_compile',
    'default_pad_multiple',
    'default_pin_memory',
    'default_static_cache',
    'default_fused_adam',
]
