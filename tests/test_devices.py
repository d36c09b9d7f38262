"""Tests of transformer/devices.py (book/devices.md)."""

from types import SimpleNamespace

import pytest
import torch

from transformer import devices
from transformer.devices import (
    all_gather,
    autocast,
    autocast_dtype,
    cpu_bf16_speedup,
    data_parallel,
    pick_device,
    sum_over_ranks,
)


def test_a_device_that_is_not_here_is_refused_with_what_is():
    assert pick_device("cpu") == torch.device("cpu")
    with pytest.raises(ValueError, match="unknown device 'gpu': expected auto, cpu, cuda, cuda:N or mps"):
        pick_device("gpu")
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    with pytest.raises(ValueError, match=rf"device 'cuda:{count}' asked for; this machine has {count} CUDA"):
        pick_device(f"cuda:{count}")


def test_precisions_map_to_autocast_dtypes_and_others_are_refused():
    cpu = torch.device("cpu")
    assert autocast_dtype("fp32", cpu) is None and autocast_dtype("bf16", cpu) is torch.bfloat16
    assert autocast_dtype("auto", cpu) in (None, torch.bfloat16)
    with pytest.raises(ValueError, match="precision must be 'auto', 'fp32', 'bf16' or 'fp16'; got 'fp8'"):
        autocast_dtype("fp8", cpu)
    with autocast(cpu, torch.bfloat16):
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.bfloat16
    with autocast(cpu, None):
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.float32


def test_auto_takes_bf16_on_a_cpu_only_where_its_products_are_faster():
    """The oracle is the processor's own flags (torch.cpu): without AVX-512 BF16 or AMX,
    bf16 is emulated, slower than fp32, and "auto" must train in fp32; with them, the
    ratio is whatever the products measured, and "auto" follows it."""
    speedup = cpu_bf16_speedup()
    native = torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()
    if not native:
        assert speedup < 1, f"bf16 emulated, yet measured {speedup:.2f}x the speed of fp32"
    expected = torch.bfloat16 if speedup >= 1.5 else None
    assert autocast_dtype("auto", torch.device("cpu")) is expected


def test_a_pause_in_one_product_does_not_decide_the_precision(monkeypatch):
    """A hand-worked clock: fp32 products take 3 ms and bf16 ones 1 ms, but the machine
    pauses for 100 ms in one bf16 product. The speedup is 3 (the fastest of each), where
    the sums (15 ms over 104 ms) would say bf16 is seven times slower."""
    durations = iter([3e-3] * 5 + [1e-3, 1e-3, 100e-3, 1e-3, 1e-3])
    now, started = [0.0], [False]

    def clock() -> float:  # each product's start, then its end
        if started[0]:
            now[0] += next(durations)
        started[0] = not started[0]
        return now[0]

    monkeypatch.setattr(devices, "time", SimpleNamespace(perf_counter=clock))
    assert devices._bf16_speedup(8, 5) == pytest.approx(3.0)


def test_one_process_is_the_identity():
    model, value = torch.nn.Linear(2, 2), torch.arange(3.0)
    assert data_parallel(model, torch.device("cpu"), 1) is model
    assert sum_over_ranks(7, 1, torch.device("cpu")) == 7
    (gathered,) = all_gather(value, 1)
    assert gathered is value


