"""Where a training step's time goes: torch.profiler over the real Trainer's steps and the bare step.

    python benchmarks/profile_step.py --device cuda --preset base --max-tokens 25000 --trace runs/gpu/trace.json

Two profiles of the same model and batches, after every batch shape has been seen once (compiled
and warm): `Trainer.train_step` (data pipeline included) and the bare step (forward, label-smoothed
loss, backward, Adam on a batch already on the device). For each: wall time per step, the time the
device was busy (the sum of its kernels), the kernels grouped into matrix products, attention,
fused element-wise (Triton) and the rest, and the costliest kernels. Busy time well under the wall
time means the device waits on the host (launches, Python, data); busy time close to it and a
small matrix-product share means memory-bound element-wise work dominates.
"""

from __future__ import annotations

import argparse
import collections
import tempfile
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from report import machine, write_report
from train_scale import write_corpus
from train_throughput import bare_step
from transformer import Trainer, TrainingConfig, TransformerConfig

GROUPS = {  # kernel name fragments -> group, the first that matches; cuDNN's attention kernels
    # on Hopper (..._sdpa_sm90_flash_...) are matrix-product (wgmma) kernels and count as such
    "matrix products": ("gemm", "nvjet", "cutlass", "xmma", "sm90_", "cublas"),
    "attention": ("fmha", "flash", "attention", "efficient"),
    "fused element-wise (Triton)": ("triton",),
    "copies": ("memcpy", "memset", "copy"),
}


def group_of(name: str) -> str:
    lowered = name.lower()
    return next((g for g, parts in GROUPS.items() if any(p in lowered for p in parts)), "other")


def profile_steps(step, steps: int, device: torch.device, trace: Path | None) -> dict:
    """Wall and device time per step of `step()` over `steps` calls, kernels grouped."""
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        torch.cuda.synchronize(device) if device.type == "cuda" else None
        start = time.perf_counter()
        for _ in range(steps):
            step()
        torch.cuda.synchronize(device) if device.type == "cuda" else None
        wall = time.perf_counter() - start
    if trace:
        prof.export_chrome_trace(str(trace))
    kernels = collections.Counter()
    counts = collections.Counter()
    for event in prof.events():
        if event.device_type.name == "CUDA":
            kernels[event.name] += event.device_time_total
            counts[event.name] += 1
    busy_us = sum(kernels.values())
    groups = collections.Counter()
    for name, us in kernels.items():
        groups[group_of(name)] += us
    return {
        "wall_ms": wall / steps * 1e3,
        "device_busy_ms": busy_us / steps / 1e3,
        "kernels_per_step": sum(counts.values()) / steps,
        "groups_ms": {g: us / steps / 1e3 for g, us in groups.most_common()},
        "top_kernels": [
            {"name": name[:90], "ms": us / steps / 1e3, "calls": counts[name] / steps}
            for name, us in kernels.most_common(12)
        ],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--preset", choices=["base", "big"], default="base")
    parser.add_argument("--max-tokens", type=int, default=25000)
    parser.add_argument("--warmup", type=int, default=20, help="Trainer steps before the profiles")
    parser.add_argument("--steps", type=int, default=10, help="steps profiled")
    parser.add_argument("--pairs", type=int, default=20_000, help="sentence pairs of the generated corpus")
    parser.add_argument("--data", help="a corpus folder (Multi30k: train.en.gz, ...) instead of the generated one")
    parser.add_argument("--vocab-size", type=int, help="default: the preset's")
    parser.add_argument("--pack-length", type=int, help="the Trainer's pack_length (default: padded batches); "
                        "packed rows are profiled in the Trainer only")
    parser.add_argument("--trace", help="also write the Trainer's Chrome trace here")
    parser.add_argument("--json", help="write the results to this file")
    args = parser.parse_args()
    device = torch.device(args.device)
    model_config = getattr(TransformerConfig, args.preset)()
    with tempfile.TemporaryDirectory() as work:
        work = Path(work)
        if args.data is None:
            write_corpus(work / "corpus", args.pairs)
        config = TrainingConfig(data=args.data or str(work / "corpus"),
                                vocab_size=args.vocab_size or model_config.src_vocab_size,
                                max_tokens=args.max_tokens, max_steps=10**6, device=str(device),
                                cache_dir=str(work / "cache"), pack_length=args.pack_length,
                                split_punctuation=args.data is not None)
        trainer = Trainer.from_config(model_config, config, work / "run")
        for _ in range(args.warmup):
            trainer.train_step()
        if args.pack_length:
            results = {"trainer": profile_steps(trainer.train_step, args.steps, device,
                                                args.trace and Path(args.trace)),
                       "target_tokens_per_step": None}
            return report(results, device, args)
        plan = trainer.batches.sampler.epoch(trainer.batches.epoch)[trainer.batches.index : trainer.batches.index + args.steps]
        batches = [trainer.batches.sampler.batch(trainer.data.train, indices).to(device) for indices in plan]
        batches = iter(batches * 2)

        def next_bare_step():
            bare_step(trainer, next(batches))

        for _ in range(args.steps):  # every shape of the profiled batches seen once, untimed
            next_bare_step()
        results = {
            "trainer": profile_steps(trainer.train_step, args.steps, device, args.trace and Path(args.trace)),
            "bare": profile_steps(next_bare_step, args.steps, device, None),
        }
        results["target_tokens_per_step"] = sum(b.n_tokens for b in
                                                (trainer.data.train.batch(i, 1) for i in plan)) / args.steps
    report(results, device, args)


def report(results: dict, device: torch.device, args: argparse.Namespace) -> None:
    for name, r in results.items():
        if not isinstance(r, dict):
            continue
        print(f"\n{name}: {r['wall_ms']:.1f} ms per step, device busy {r['device_busy_ms']:.1f} ms "
              f"({r['device_busy_ms'] / r['wall_ms']:.0%}), {r['kernels_per_step']:.0f} kernels per step")
        for group, ms in r["groups_ms"].items():
            print(f"  {group:<30} {ms:8.2f} ms")
        for k in r["top_kernels"]:
            print(f"    {k['ms']:7.2f} ms {k['calls']:5.1f}x  {k['name']}")
    if results["target_tokens_per_step"]:
        print(f"\n{results['target_tokens_per_step']:,.0f} target tokens per step")
    print(f"device: {machine(device)}")
    if args.json:
        write_report(Path(args.json), {"device": machine(device), "args": vars(args), **results}, device)


if __name__ == "__main__":
    main()
