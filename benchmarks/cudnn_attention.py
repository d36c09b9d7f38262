"""Is a masked bf16 training step finite with each fused attention kernel? (PyTorch issue 196678:
cuDNN's attention backward gave NaN with an attention mask at sequence lengths 64 mod 128.)

For each kernel scaled_dot_product_attention may use (and its own choice, "default") and each
length, one step of a one-layer model (d_model 256, 4 heads, padding masks in the encoder and
cross-attention, the causal decoder): finite loss and gradients or not. A kernel that refuses
the inputs is recorded as such. (tests/test_model.py checks the kernel SDPA picks.)

    python benchmarks/cudnn_attention.py --out benchmarks/results/cudnn_attention_gpu.json
"""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from report import machine, write_report
from transformer import Transformer, TransformerConfig, label_smoothed_loss

KERNELS = {"default": None, "cudnn": SDPBackend.CUDNN_ATTENTION,
           "efficient": SDPBackend.EFFICIENT_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION,
           "math": SDPBackend.MATH}


def finite_step(length: int, kernel: SDPBackend | None) -> bool:
    torch.manual_seed(0)
    config = TransformerConfig(src_vocab_size=50, tgt_vocab_size=50, d_model=256, n_heads=4,
                               d_ff=512, n_layers=1, max_len=512)
    model = Transformer(config).cuda().train()
    tokens = torch.randint(4, 50, (4, length + 1), device="cuda")
    real = torch.tensor([length, length - 3, length // 2, 5], device="cuda")
    tokens[torch.arange(length + 1, device="cuda") >= real[:, None]] = config.pad_id
    chosen = contextlib.nullcontext() if kernel is None else sdpa_kernel(kernel)
    with chosen, torch.autocast("cuda", dtype=torch.bfloat16):
        loss = label_smoothed_loss(model(tokens[:, :-1], tokens[:, :-1], check_ids=False),
                                   tokens[:, 1:], 0.1)
    loss.backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    return bool(torch.isfinite(loss)) and all(bool(torch.isfinite(g).all()) for g in grads)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", type=int, nargs="+", default=[64, 128, 192, 256, 320])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    results = {}
    for name, kernel in KERNELS.items():
        for length in args.lengths:
            try:
                outcome = "finite" if finite_step(length, kernel) else "NaN or inf"
            except RuntimeError as error:  # the kernel refuses these inputs
                outcome = "refused: " + str(error).splitlines()[0][:120]
            results[f"{name}, {length}"] = outcome
            print(f"{name:9} {length:4} {outcome}", flush=True)
    write_report(args.out, {"device": machine(torch.device("cuda")), "results": results},
                 torch.device("cuda"))


if __name__ == "__main__":
    main()
