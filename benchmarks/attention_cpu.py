"""Attention in a CPU training step: the package's written-out path against PyTorch's kernels.

One attention call, forward and backward, on the heads of a Multi30k-sized batch (the `tiny`
preset: d_model 128, 4 heads of 32; --tokens // length sentences of each of --lengths tokens,
some padded, about the CLI's 4,096 tokens: 204 of 20, 341 of 12), with a padding mask (the
encoder, the cross-attention) and with the padding and causal masks together (the decoder), in
bf16 autocast (the CLI's precision on a CPU) and in fp32. Four ways to compute it on the same
queries, keys and values: `attention_for_cpu_training` (what `MultiHeadAttention` calls when it
trains on a CPU), the same without its padding of short rows of scores to 16 for the softmax
(what the package did before), and `F.scaled_dot_product_attention` restricted to PyTorch's
composite kernel (MATH, what the `Trainer` used before that) or to its fused CPU kernel
(FLASH_ATTENTION, what it picks by itself).
Each is timed over --calls calls, --repeats times in turn; the record gives ms per call
(min / median / max over repeats) and the largest difference from the float64 formula.

    python benchmarks/attention_cpu.py --out benchmarks/results/attention_cpu.json
"""

from __future__ import annotations

import argparse
import itertools
import math
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from report import machine, spread, write_report
from transformer.attention import attention_for_cpu_training, causal_mask
from transformer.fast import keep_freed_memory


def torch_kernel(backend: SDPBackend):
    def attend(q, k, v, mask):
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    return attend


def rows_not_padded(q, k, v, mask):
    """attention_for_cpu_training without the padding of short rows for the softmax."""
    scores = (q @ k.transpose(-2, -1)).float() / math.sqrt(q.size(-1))
    bias = torch.zeros(mask.shape).masked_fill_(~mask, float("-inf"))
    return (scores + bias).softmax(-1).to(v.dtype) @ v


WAYS = {
    "written out for CPU training (the package)":
        lambda q, k, v, mask: attention_for_cpu_training(q, k, v, mask, 0.0),
    "the same, short rows not padded": rows_not_padded,
    "PyTorch's composite kernel (MATH)": torch_kernel(SDPBackend.MATH),
    "PyTorch's fused CPU kernel (FLASH_ATTENTION)": torch_kernel(SDPBackend.FLASH_ATTENTION),
}


def padded_mask(batch: int, n: int, causal: bool) -> torch.Tensor:
    lengths = torch.randint(n // 3, n + 1, (batch,))
    lengths[0] = n
    mask = (torch.arange(n)[None, :] < lengths[:, None])[:, None, None, :]
    return mask & causal_mask(n) if causal else mask


def heads(qkv: torch.Tensor, h: int) -> list[torch.Tensor]:
    """Q, K, V as MultiHeadAttention makes them: views of one projection's output."""
    batch, n, width = qkv.shape
    return [x.view(batch, n, h, width // (3 * h)).transpose(1, 2) for x in qkv.chunk(3, -1)]


def call(way, qkv, mask, grad, dtype):
    with torch.autocast("cpu", dtype=dtype, enabled=dtype is not None):
        out = way(*heads(qkv, 4), mask)
    out.backward(grad)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--lengths", type=int, nargs="+", default=[20, 12])
    parser.add_argument("--calls", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    keep_freed_memory()  # as the Trainer does on a CPU
    torch.manual_seed(0)
    results = {}
    for length, masks in itertools.product(args.lengths, ("padding", "padding and causal")):
        batch = args.tokens // length
        mask = padded_mask(batch, length, masks != "padding")
        projected = torch.randn(batch, length, 3 * 128)
        grad = torch.randn(batch, 4, length, 32)
        with sdpa_kernel(SDPBackend.MATH):
            exact = F.scaled_dot_product_attention(*heads(projected.double(), 4), attn_mask=mask)
        for precision, dtype in (("bf16", torch.bfloat16), ("fp32", None)):
            # the projection's output: bf16 under autocast, as nn.Linear's is
            qkv = projected.to(dtype or torch.float32).requires_grad_()
            times = {name: [] for name in WAYS}
            errors = {name: float((call(way, qkv, mask, grad, dtype).detach().double() - exact).abs().max())
                      for name, way in WAYS.items()}  # also the warm-up
            for _ in range(args.repeats):
                for name, way in WAYS.items():
                    start = time.perf_counter()
                    for _ in range(args.calls):
                        call(way, qkv, mask, grad, dtype)
                    times[name].append((time.perf_counter() - start) / args.calls * 1e3)
            for name in WAYS:
                key = f"{length} tokens, {masks}, {precision}, {name}"
                results[key] = {"ms_per_call": spread(times[name]), "max_error": errors[name]}
                print(f"{key}: {results[key]['ms_per_call']['median']:.2f} ms, "
                      f"error {errors[name]:.2g}", flush=True)
    write_report(args.out, {"device": machine(torch.device("cpu")), "shape": {
        "tokens": args.tokens, "lengths": args.lengths, "heads": 4, "d_k": 32},
        "results": results})


if __name__ == "__main__":
    main()
