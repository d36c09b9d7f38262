"""Training throughput: the real Trainer end to end, its bare step, and torch.nn.Transformer.

Three measurements in one run (the third on a CPU only).

1. The bare step, ours against the peer. Both models get the same size, the same batch of token
   ids, the same dropout placement and the same optimizer (Adam); the peer is
   torch.nn.Transformer with the same embeddings, positional encoding and tied output projection
   around it, and with its final LayerNorms removed (nn.Transformer adds one after each stack;
   the paper's post-LN model, and ours, has none), so both compute the same function. Reported:
   target tokens per second of full training steps (forward, backward, Adam), the peak memory on a
   GPU, and on a GPU the model FLOPs utilization (FLOPs of a step counted by PyTorch's
   FlopCounterMode, divided by the step time and the GPU's peak).
2. The Trainer end to end: Trainer.train_step, which takes its batches from the prepared,
   memory-mapped corpus through the prefetching BatchStream, against the same steps on the same
   batches already in memory (the step without its data pipeline). Their ratio is the share of
   the bare step's speed the Trainer keeps; the rest is time spent waiting for data.
3. On a CPU, what the Trainer's two CPU settings are worth: Trainer.train_step of the `tiny`
   preset (4096 tokens per update, vocabulary 8000, precision auto) as shipped, with torch's
   nn.Dropout in place of the model's Dropout, with glibc's default malloc (keep_freed_memory
   not called), and with neither; each in a fresh process, since the allocator setting holds
   for a whole process, the four in turn, --cpu-repeats times: tokens/s min / median / max, and
   each median over neither's. Also the largest peak resident memory of a variant's processes
   (the whole process's: the corpus's preparation in it can set the peak).

    python benchmarks/train_throughput.py                       # CPU: fp32 and bf16
    python benchmarks/train_throughput.py --device cuda --preset base --batch 800 --length 32 \
        --min-length 28 --precisions bf16 --compile --trainer-tokens 25000 --json benchmarks/results/train_gpu.json

On a GPU the FLOPs are counted on the eager model (the compiled one runs the same arithmetic in
kernels FlopCounterMode cannot see), and the Trainer's rate gives the projected time of the
paper's 100,000 steps at --trainer-tokens tokens per update.
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from report import machine, spread, write_report
from train_scale import write_corpus
import transformer.model
import transformer.trainer
from transformer import Trainer, TrainingConfig, Transformer, TransformerConfig
from transformer.positional import sinusoidal_positional_encoding

# Dense (no sparsity) bf16 tensor-core peaks in TFLOP/s, keyed by the exact name that
# torch.cuda.get_device_name reports. Source: NVIDIA's datasheets (H100: SXM 989, PCIe 756,
# NVL 835; H200: SXM 989, NVL 835; A100: 312 for SXM4 and PCIe, 40 and 80 GB). The datasheets
# print the peaks with sparsity; the dense ones are half of those. A model is matched by its
# whole name, never a part of it: "NVIDIA H200" is not "NVIDIA H200 NVL".
PEAK_TFLOPS = {
    "NVIDIA H100 80GB HBM3": 989.0,  # H100 SXM5
    "NVIDIA H100 PCIe": 756.0,
    "NVIDIA H100 NVL": 835.0,
    "NVIDIA H200 NVL": 835.0,
    "NVIDIA H200": 989.0,  # H200 SXM
    "NVIDIA A100-SXM4-80GB": 312.0,
    "NVIDIA A100-SXM4-40GB": 312.0,
    "NVIDIA A100 80GB PCIe": 312.0,
    "NVIDIA A100-PCIE-40GB": 312.0,
}


def peak_tflops(name: str) -> float:
    """The dense bf16 peak of the GPU torch.cuda.get_device_name calls `name`, from PEAK_TFLOPS;
    a GPU not in it is refused rather than given another model's peak (and a wrong MFU)."""
    try:
        return PEAK_TFLOPS[name]
    except KeyError:
        raise ValueError(f"no dense bf16 peak known for the GPU {name!r}, so no MFU; "
                         f"known: {', '.join(sorted(PEAK_TFLOPS))}. Add its datasheet's "
                         f"figure to PEAK_TFLOPS in benchmarks/train_throughput.py") from None


# fp32 FLOPs a cycle of one core (2 per fused multiply-add) by the AMD core's FMA units: Zen 1
# (family 23 model 1) has two 128-bit FMA pipes, Zen 3 (family 25 model 1) and Zen 4 (family 25
# model 17, AVX-512 in two halves) two 256-bit ones (AMD's Software Optimization Guides for
# the families 17h and 19h).
CPU_FP32_FLOPS_A_CYCLE = {(23, 1): 16, (25, 1): 32, (25, 17): 32}


def cpu_peak_gflops(threads: int, info: str | None = None, size: int = 2048) -> dict:
    """The fp32 peak of this CPU's `threads` cores, two ways: nominal (the core's FMA width
    from CPU_FP32_FLOPS_A_CYCLE, times the clock /proc/cpuinfo states, times the threads;
    None for a core not in the table or no stated clock), and measured (the best of 10 fp32
    products of two `size` x `size` matrices by torch on those threads: what a large matrix
    product reaches here, the ceiling the step's small ones work under). info: the text of
    /proc/cpuinfo (read when None)."""
    if info is None:
        info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    field = lambda key: next((line.split(":")[1].strip() for line in info.splitlines()
                              if line.startswith(key)), None)
    family, model, mhz = field("cpu family"), field("model\t"), field("cpu MHz")
    width = CPU_FP32_FLOPS_A_CYCLE.get((int(family), int(model))) if family and model else None
    nominal = width * float(mhz) / 1e3 * threads if width and mhz else None
    a, b = torch.randn(size, size), torch.randn(size, size)
    best = float("inf")
    for _ in range(10):
        start = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - start)
    return {"nominal_gflops": nominal, "clock_mhz": float(mhz) if mhz else None,
            "flops_a_cycle_a_core": width, "measured_gflops": 2 * size**3 / best / 1e9}


class TorchPeer(nn.Module):
    """torch.nn.Transformer (batch-first) with our embeddings and output: post-LN without the
    final LayerNorms (as the paper and our post-LN model), or pre-LN with them (as ours)."""

    def __init__(self, config: TransformerConfig):
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(config.src_vocab_size, config.d_model)
        self.register_buffer("pe", sinusoidal_positional_encoding(config.max_len, config.d_model), persistent=False)
        self.transformer = nn.Transformer(
            config.d_model, config.n_heads, config.n_layers, config.n_layers, config.d_ff, config.dropout,
            batch_first=True, layer_norm_eps=config.layer_norm_eps, norm_first=config.norm_first,
        )
        if not config.norm_first:
            self.transformer.encoder.norm = self.transformer.decoder.norm = None  # as in the paper
        self.output = nn.Linear(config.d_model, config.tgt_vocab_size, bias=False)
        self.output.weight = self.embed.weight
        self.dropout = nn.Dropout(config.dropout)

    def _embed(self, tokens):
        return self.dropout(self.embed(tokens) * math.sqrt(self.config.d_model) + self.pe[: tokens.size(1)])

    def forward(self, src, tgt):
        causal = nn.Transformer.generate_square_subsequent_mask(tgt.size(1), device=tgt.device)
        src_pad = src == self.config.pad_id
        out = self.transformer(
            self._embed(src), self._embed(tgt), tgt_mask=causal, src_key_padding_mask=src_pad,
            memory_key_padding_mask=src_pad, tgt_is_causal=True,
        )
        return self.output(out)


def make_batch(config, batch, length, device, min_length=None, seed=0):
    """Random ids, sentence lengths uniform in [min_length, length] (default length // 2)."""
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(4, config.src_vocab_size, (batch, length), generator=g)
    tgt = torch.randint(4, config.tgt_vocab_size, (batch, length + 1), generator=g)
    lengths = torch.randint(min_length or length // 2, length + 1, (batch,), generator=g)
    src[torch.arange(length)[None, :] >= lengths[:, None]] = config.pad_id
    tgt[torch.arange(length + 1)[None, :] > lengths[:, None] + 1] = config.pad_id
    return src.to(device), tgt.to(device)


def step_fn(model, optimizer, src, tgt, dtype, pad_id, **model_kwargs):
    def step():
        with torch.autocast(src.device.type, dtype=dtype, enabled=dtype is not None):
            logits = model(src, tgt[:, :-1], **model_kwargs)
        loss = nn.functional.cross_entropy(logits.flatten(0, 1).float(), tgt[:, 1:].flatten(), ignore_index=pad_id, label_smoothing=0.1)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return step


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def measure(name, model, config, src, tgt, dtype, compile_model, warmup, steps, peak_tflops):
    device = src.device
    model = model.to(device).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
    ours = {"check_ids": False} if isinstance(model, Transformer) else {}  # as the Trainer runs it
    with FlopCounterMode(display=False) as counter:  # eager: the same arithmetic as compiled
        step_fn(model, optimizer, src, tgt, dtype, config.pad_id, **ours)()
    flops = counter.get_total_flops()
    run = torch.compile(model) if compile_model else model
    step = step_fn(run, optimizer, src, tgt, dtype, config.pad_id, **ours)
    for _ in range(warmup):
        step()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    sync(device)
    start = time.perf_counter()
    for _ in range(steps):
        step()
    sync(device)
    seconds = (time.perf_counter() - start) / steps
    tokens = int((tgt[:, 1:] != config.pad_id).sum())
    result = {
        "model": name, "precision": str(dtype or "fp32").removeprefix("torch."), "compile": compile_model,
        "tokens_per_step": tokens, "step_ms": seconds * 1e3, "tokens_per_s": tokens / seconds,
        "tflops_per_s": flops / seconds / 1e12,
    }
    if device.type == "cuda":
        result["peak_memory_gib"] = torch.cuda.max_memory_allocated() / 2**30
        if peak_tflops:
            result["mfu"] = flops / seconds / 1e12 / peak_tflops
    return result


def bare_step(trainer: Trainer, batch) -> torch.Tensor:
    """What Trainer.train_step does with one batch already on the device; returns its loss."""
    loss = trainer.forward_loss(batch.src, batch.tgt_in, batch.tgt_out, batch.segments)
    (loss / batch.n_tokens).backward()
    trainer.optimizer.step()
    trainer.optimizer.zero_grad(set_to_none=True)
    return loss


def trainer_end_to_end(model_config, device, precision, max_tokens, warmup, steps, work: Path,
                       pairs: int = 20_000) -> dict:
    """Tokens/s of Trainer.train_step (data pipeline included) and of the same steps on the same
    batches held in memory, on a generated corpus of `pairs` pairs."""
    write_corpus(work / "corpus", pairs)
    config = TrainingConfig(data=str(work / "corpus"), vocab_size=model_config.src_vocab_size,
                            max_tokens=max_tokens, max_steps=steps, precision=precision, device=str(device),
                            cache_dir=str(work / "cache"), warmup_steps=4000)
    trainer = Trainer.from_config(model_config, config, work / "run")
    for _ in range(warmup):
        trainer.train_step()  # warm-up (and compilation)
    plan = trainer.batches.sampler.epoch(trainer.batches.epoch)[trainer.batches.index : trainer.batches.index + steps]
    batches = [trainer.batches.sampler.batch(trainer.data.train, indices).to(device) for indices in plan]

    def bare_steps() -> float:  # the same computation, the batches already there
        sync(device)
        start = time.perf_counter()
        for batch in batches:
            loss = bare_step(trainer, batch)
        loss.item()
        return time.perf_counter() - start

    bare_steps()  # every shape the timed steps meet, seen once: neither side pays for a first time
    sync(device)
    start = time.perf_counter()
    tokens = 0
    for _ in range(steps):
        loss_sum, n_tokens = trainer.train_step()
        tokens += n_tokens
    loss_sum.item()  # wait for the last step
    end_to_end = time.perf_counter() - start
    bare = bare_steps()
    assert sum(b.n_tokens for b in batches) == tokens, "both timed the same batches"
    return {"precision": precision, "steps": steps, "tokens": tokens, "trainer_tokens_per_s": tokens / end_to_end,
            "bare_tokens_per_s": tokens / bare, "trainer_share_of_bare": bare / end_to_end}


TINY = {"src_vocab_size": 8000, "tgt_vocab_size": 8000, "d_model": 128, "n_heads": 4, "d_ff": 256,
        "n_layers": 4, "dropout": 0.3, "norm_first": True}  # the tiny preset of the CLI
CPU_VARIANTS = ["as shipped", "torch's nn.Dropout", "glibc's default malloc", "neither"]


def cpu_variant(name: str, steps: int, warmup: int = 3, pairs: int = 20_000) -> dict:
    """Trainer.train_step of the tiny preset, in this process, without the CPU settings `name` names
    (`warmup` steps first; the tests make the run smaller with `warmup` and `pairs`)."""
    if name in ("torch's nn.Dropout", "neither"):
        transformer.model.Dropout.forward = nn.Dropout.forward
    if name in ("glibc's default malloc", "neither"):
        assert hasattr(transformer.trainer, "keep_freed_memory"), "the setting has moved"
        transformer.trainer.keep_freed_memory = lambda: False
    with tempfile.TemporaryDirectory() as work:
        result = trainer_end_to_end(TransformerConfig(**TINY), torch.device("cpu"), "auto", 4096, warmup, steps,
                                    Path(work), pairs)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux
    from transformer.devices import autocast_dtype  # here: measurement 1 runs on older commits

    precision = autocast_dtype("auto", torch.device("cpu"))  # as the CLI trains
    return {"variant": name, "precision": str(precision or "fp32"), "trainer_tokens_per_s": result["trainer_tokens_per_s"], "tokens": result["tokens"],
            "peak_rss_gib": peak}


def cpu_settings(steps: int, repeats: int) -> list[dict]:
    """cpu_variant for every variant, each in a fresh process, the variants in turn, `repeats`
    times: each variant's tokens/s (min / median / max) and its median over neither's."""
    runs: dict[str, list[dict]] = {name: [] for name in CPU_VARIANTS}
    for _ in range(repeats):
        for name in CPU_VARIANTS:
            out = subprocess.run([sys.executable, __file__, "--cpu-variant", name, "--cpu-steps", str(steps)],
                                 capture_output=True, text=True, check=True).stdout
            runs[name].append(json.loads(out.splitlines()[-1]))
            print(f"Trainer, tiny preset, {name}: {runs[name][-1]['trainer_tokens_per_s']:,.0f} tokens/s, "
                  f"peak memory {runs[name][-1]['peak_rss_gib']:.2f} GiB", flush=True)
    rates = {name: spread([r["trainer_tokens_per_s"] for r in rs]) for name, rs in runs.items()}
    return [{"variant": name, "precision": rs[0]["precision"], "tokens": rs[0]["tokens"],
             "trainer_tokens_per_s": rates[name], "peak_rss_gib": max(r["peak_rss_gib"] for r in rs),
             "speed_of_neither": rates[name]["median"] / rates["neither"]["median"]}
            for name, rs in runs.items()]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--preset", choices=["base", "big", "cpu"], default="cpu",
                        help="cpu: d_model=512, h=8, d_ff=2048, N=3, vocabulary 8000 (default); base/big: the paper's")
    parser.add_argument("--batch", type=int, default=32, help="sentences per batch")
    parser.add_argument("--length", type=int, default=32, help="longest source sentence (target: +1)")
    parser.add_argument("--min-length", type=int, help="shortest sentence (default: length // 2)")
    parser.add_argument("--precisions", nargs="+", choices=["fp32", "bf16"], default=["fp32", "bf16"])
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=2, help="alternate the models this many times; the best is kept")
    parser.add_argument("--compile", action="store_true", help="also measure with torch.compile")
    parser.add_argument("--threads", type=int, help="torch.set_num_threads on a CPU")
    parser.add_argument("--trainer-tokens", type=int, default=1500,
                        help="max_tokens of the end-to-end Trainer measurement (default 1500)")
    parser.add_argument("--cpu-steps", type=int, default=20, help="steps of each CPU-settings measurement")
    parser.add_argument("--cpu-repeats", type=int, default=3, help="runs of each CPU setting, in turn (0: skip measurement 3)")
    parser.add_argument("--cpu-variant", choices=CPU_VARIANTS, help=argparse.SUPPRESS)  # one of measurement 3
    parser.add_argument("--cpu-warmup", type=int, default=3, help=argparse.SUPPRESS)  # its size, for the tests
    parser.add_argument("--cpu-pairs", type=int, default=20_000, help=argparse.SUPPRESS)
    parser.add_argument("--json", help="write the results to this file")
    args = parser.parse_args()
    if args.cpu_variant:
        print(json.dumps(cpu_variant(args.cpu_variant, args.cpu_steps, args.cpu_warmup, args.cpu_pairs)))
        return

    device = torch.device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    if device.type == "cpu":  # the allocator the Trainer sets, for both models of measurement 1
        transformer.trainer.keep_freed_memory()
    if args.preset == "cpu":
        config = TransformerConfig(src_vocab_size=8000, tgt_vocab_size=8000, n_layers=3)
    else:
        config = getattr(TransformerConfig, args.preset)()
    # Same math: torch.nn.Transformer applies its dropout inside attention and the FFN as well, so
    # ours does too here (the paper, and our default, drop out only the sub-layer outputs).
    config = TransformerConfig(**{**config.to_dict(), "dropout": 0.1, "attention_dropout": 0.1, "activation_dropout": 0.1})
    src, tgt = make_batch(config, args.batch, args.length, device, args.min_length)
    dtypes = [{"fp32": None, "bf16": torch.bfloat16}[p] for p in args.precisions]
    peak = peak_tflops(torch.cuda.get_device_name(device)) if device.type == "cuda" else None
    cases = [(name, dtype, compiled) for compiled in [False] + [True] * args.compile for dtype in dtypes
             for name in ("ours", "torch.nn.Transformer")]
    best: dict[tuple, dict] = {}
    rates: dict[tuple, list[float]] = {}
    for _ in range(args.repeats):
        for name, dtype, compile_model in cases:
            torch.manual_seed(0)
            model = Transformer(config) if name == "ours" else TorchPeer(config)
            result = measure(name, model, config, src, tgt, dtype, compile_model, args.warmup, args.steps, peak)
            key = (name, dtype, compile_model)
            rates.setdefault(key, []).append(result["tokens_per_s"])
            result["tokens_per_s_repeats"] = spread(rates[key])
            if key not in best or result["tokens_per_s"] > best[key]["tokens_per_s"]:
                best[key] = result
            del model
    results = list(best.values())
    device_name = machine(device)
    print(f"device: {device_name}; torch {torch.__version__}; d_model={config.d_model}, N={config.n_layers}, "
          f"vocab={config.src_vocab_size}; batch {args.batch} x {args.length} tokens")
    header = f"{'model':<22} {'precision':<9} {'compile':<7} {'tokens/s':>10} {'step ms':>8} {'TFLOP/s':>8}"
    print(header + ("  peak GiB   MFU" if device.type == "cuda" else ""))
    for r in results:
        line = f"{r['model']:<22} {r['precision']:<9} {str(r['compile']):<7} {r['tokens_per_s']:>10,.0f} {r['step_ms']:>8.1f} {r['tflops_per_s']:>8.2f}"
        if device.type == "cuda":
            line += f"  {r['peak_memory_gib']:>8.2f} {r.get('mfu', float('nan')):>5.1%}"
        print(line)
    by_key = {(r["model"], r["precision"], r["compile"]): r["tokens_per_s"] for r in results}
    precisions = [str(d or "fp32").removeprefix("torch.") for d in dtypes]
    for precision in precisions:
        ratio = by_key[("ours", precision, False)] / by_key[("torch.nn.Transformer", precision, False)]
        ours, peer = (best[name, dict(zip(precisions, dtypes))[precision], False]["tokens_per_s_repeats"]
                      for name in ("ours", "torch.nn.Transformer"))
        print(f"ours {precision} / peer {precision}: {ratio:.2f}x (tokens/s min/median/max over "
              f"{args.repeats} repeats: ours {ours['min']:,.0f}/{ours['median']:,.0f}/{ours['max']:,.0f}, "
              f"peer {peer['min']:,.0f}/{peer['median']:,.0f}/{peer['max']:,.0f})")
    if len(precisions) == 2:
        print(f"ours bf16 / peer fp32: {by_key[('ours', 'bfloat16', False)] / by_key[('torch.nn.Transformer', 'fp32', False)]:.2f}x")
    if args.compile:
        for precision in precisions:
            ours_compiled = by_key[("ours", precision, True)]
            print(f"ours compiled {precision} / peer {precision}: "
                  f"{ours_compiled / by_key[('torch.nn.Transformer', precision, False)]:.2f}x eager, "
                  f"{ours_compiled / by_key[('torch.nn.Transformer', precision, True)]:.2f}x compiled")
    end_to_end = []
    with tempfile.TemporaryDirectory() as work:
        for precision in args.precisions:
            end_to_end.append(trainer_end_to_end(config, device, precision, args.trainer_tokens, max(3, args.warmup),
                                                 args.steps, Path(work) / precision))
    for r in end_to_end:
        print(f"Trainer end to end, {r['precision']}: {r['trainer_tokens_per_s']:,.0f} tokens/s; the same steps on "
              f"batches in memory {r['bare_tokens_per_s']:,.0f} tokens/s; the Trainer keeps {r['trainer_share_of_bare']:.1%}")
        r["hours_for_100k_steps"] = 100_000 * r["tokens"] / r["steps"] / r["trainer_tokens_per_s"] / 3600
        print(f"  100,000 steps of {r['tokens'] / r['steps']:,.0f} target tokens at this rate: {r['hours_for_100k_steps']:.1f} h")
    settings = cpu_settings(args.cpu_steps, args.cpu_repeats) if device.type == "cpu" and args.cpu_repeats else []
    for r in settings:
        print(f"  {r['variant']}: {r['speed_of_neither']:.2f}x the speed without either setting")
    if args.json:
        write_report(Path(args.json), {"device": device_name, "args": vars(args), "results": results,
                                       "trainer_end_to_end": end_to_end, "cpu_settings": settings}, device)


if __name__ == "__main__":
    main()
