"""The training step users run, timed: Trainer.train_step, warm, on real and generated batches.

The Trainer is built as `python -m transformer train` builds it (the preset's model, the
prepared and cached corpus, the prefetching batch stream, the device's precision, torch.compile
on CUDA). After --warmup steps (compilation included), --steps steps are timed, --repeats times
over; each repeat takes the next batches of the epoch. torch.compile compiles again for each new
batch shape until it has made the lengths dynamic: on one H100, 10 warm-up steps left a repeat of
20 base steps at 2.3 s a step, 40 leave the first repeat about 1.7 times the later ones' time
(the spread shows it). Per repeat:

- target tokens/s counting real target tokens, and positions/s counting every position of the
  padded source and target tensors;
- the padding fraction of those positions;
- MFU on real tokens: the FLOPs the step needs for its real tokens, written out below
  (useful_flops), per second, over the device's dense bf16 peak (named in the record); on a
  CPU, the same FLOPs over its fp32 peak, measured (a large matrix product on the run's
  threads) and nominal (the core's FMA width times its stated clock), both in the record
  (train_throughput.cpu_peak_gflops);
- peak memory on a GPU;
- the bare step beside it: the same computation on the same batches already on the device
  (benchmarks/train_throughput.py's bare_step), the Trainer's data pipeline left out.

Corpora: Multi30k (--data, a folder of train.en.gz ...; skipped when absent) and a generated
corpus whose target lengths follow the source lengths as a real corpus's do (a target of
0.8 to 1.25 times the source's words), with a shared BPE vocabulary of --vocab-size (37,000,
the paper's and `train --preset base`'s).

Each preset and corpus is measured once for each of --batching: "padded" (batches by length,
the default), "packed" (train --pack-length, rows of the longest pair's length rounded up to a
multiple of 64, at least 128; on a GPU the Trainer then searches the block sizes of
Inductor's kernels and replays the compiled step as CUDA graphs), "packed, no CUDA graphs",
"packed, no kernel tuning" (each undoes one of the two), "packed, fp32 residual stream" (the
stream between layers kept in fp32 under autocast, as before the model's LayerNorm returned
its input's dtype, up to the bf16 rounding of the stacks' input) and "packed, max-autotune"
(matrix products benchmarked too; trainer_step_gpu_base_tuning.json measured the tuning at a
commit whose Trainer did not tune, as "packed" and "packed, coordinate descent"). Peak memory is
torch's allocator's: the memory pool of CUDA graphs is not in it. --precisions measures each
setting in each precision named (default: auto, as train picks it). --ablation then measures the
first preset on --ablation-corpus (default: the generated one) once for each change of
VARIANTS: the step with one of the Trainer's speed choices undone, to show what each is worth.
A variant of the loss is also timed against the shipped loss on the same batches in turn, each
repeat (shipped_bare_tokens_per_s beside bare_tokens_per_s): Trainers measured one after the
other in one process differ by several percent for reasons of their own (on the CPU, a first
run had the shipped bf16 step slower than its variant measured after it), which taking the same
batches in turn removes from the comparison.

--peer times, on the very batches of each padded repeat, the step a user writes with
torch.nn.Transformer (train_throughput.TorchPeer: the same function, pre-LN or post-LN as the
preset; torch's Adam, the same label-smoothed loss on its logits, in the Trainer's precision):
the peer's tokens/s beside the Trainer's, same batches, same math.

    python benchmarks/trainer_step.py --device cuda --presets base big --ablation \\
        --data ../shared/data/multi30k --out benchmarks/results/train_gpu.json
    python benchmarks/trainer_step.py --device cpu --presets tiny --vocab-size 8000 \\
        --max-tokens 4096 --warmup 5 --steps 20 --pairs 30000 --batching padded packed \\
        --precisions fp32 bf16 \\
        --peer --ablation "loss on the logits" --ablation-corpus multi30k \\
        --data ../shared/data/multi30k --out benchmarks/results/trainer_step_cpu_tiny.json
"""

from __future__ import annotations

import argparse
import itertools
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from report import machine, spread, write_report
from train_throughput import TorchPeer, bare_step, cpu_peak_gflops, peak_tflops, sync
from transformer import Trainer, TrainingConfig, TransformerConfig, label_smoothed_loss
from transformer.devices import autocast
from transformer.prepared import prepare_data
from transformer.tokenizer import PAD


def write_correlated_corpus(folder: Path, pairs: int, seed: int = 0) -> Path:
    """train/val files of generated pairs: 5 to 60 source words, a target of 0.8 to 1.25 times
    as many, words of a 60,000-word lexicon drawn with Zipf frequencies."""
    rng = np.random.default_rng(seed)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    lexicon = ["".join(rng.choice(letters, rng.integers(2, 11))) for _ in range(60_000)]
    folder.mkdir(parents=True, exist_ok=True)
    for split, n in (("train", pairs), ("val", 200)):
        src_len = rng.integers(5, 61, n)
        tgt_len = np.maximum(1, np.rint(src_len * rng.uniform(0.8, 1.25, n))).astype(int)
        for lang, lengths in (("en", src_len), ("de", tgt_len)):
            words = rng.zipf(1.1, lengths.sum()) % len(lexicon)
            sentences = np.split(words, np.cumsum(lengths)[:-1])
            text = "".join(" ".join(lexicon[w] for w in s) + "\n" for s in sentences)
            (folder / f"{split}.{lang}").write_text(text)
    return folder


def useful_flops(config: TransformerConfig, src_len: torch.Tensor, tgt_len: torch.Tensor) -> float:
    """FLOPs of one training step (forward and backward: 3 x forward) on the real tokens of a
    batch of sentences of these lengths: every matrix product of the model, attention scores
    and their weighted sums included (the decoder's self-attention causal: half the square)."""
    d, d_ff, n, vocab = config.d_model, config.d_ff, config.n_layers, config.tgt_vocab_size
    s, t = src_len.double(), tgt_len.double()
    encoder = n * ((8 * d * d + 4 * d * d_ff) * s.sum() + 4 * d * (s * s).sum())
    decoder = n * (
        (8 * d * d + 4 * d * d + 4 * d * d_ff) * t.sum()  # self q,k,v,o; cross q,o; FFN
        + 4 * d * d * s.sum()  # cross-attention keys and values of the source
        + 2 * d * (t * t).sum()  # causal self-attention
        + 4 * d * (s * t).sum()  # cross-attention
    )
    output = 2 * d * vocab * t.sum()
    return float(3 * (encoder + decoder + output))


def loss_not_compiled(trainer: Trainer) -> None:
    """The model compiled alone; the loss eager, on the logits in fp32."""
    network = torch.compile(trainer.network)

    def forward_loss(src, tgt_in, tgt_out):
        with autocast(trainer.device, trainer.dtype):
            logits = network(src, tgt_in, check_ids=False)
        return label_smoothed_loss(logits, tgt_out, trainer.config.label_smoothing)

    trainer.forward_loss = forward_loss


def loss_on_logits(trainer: Trainer) -> None:
    """Not compiled: the loss computed on the logits (label_smoothed_loss), not output_loss."""
    def forward_loss(src, tgt_in, tgt_out, segments=None):
        with autocast(trainer.device, trainer.dtype):
            logits = trainer.network(src, tgt_in, check_ids=False, segments=segments)
        return label_smoothed_loss(logits, tgt_out, trainer.config.label_smoothing)

    trainer.forward_loss = forward_loss


def adam_not_fused(trainer: Trainer) -> None:
    """torch's default Adam on CUDA (foreach: a few kernels per group of tensors); the Trainer sets its rate
    at each update, as it sets the fused one's."""
    trainer.optimizer = torch.optim.Adam(trainer.model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)


def fp32_stream(trainer: Trainer) -> None:
    """The residual stream in fp32 under autocast: the encoder and decoder entered in fp32
    (the model's bf16 input cast back), so their LayerNorms, which return their input's
    dtype, keep it there."""
    for stack in (trainer.model.encoder, trainer.model.decoder):
        stack.register_forward_pre_hook(lambda module, args: (args[0].float(), *args[1:]))


def compiled(**how):
    """A change that compiles the Trainer's step with torch.compile(**how) instead."""
    def change(trainer: Trainer) -> None:
        trainer.forward_loss = torch.compile(trainer._loss, **how)
    return change


def peer_steps(peer: TorchPeer, optimizer, batches, trainer: Trainer) -> float:
    """Seconds of a training step of torch.nn.Transformer on each batch, as a user writes it:
    the same function, loss and optimizer as the Trainer's, in the Trainer's precision."""
    sync(trainer.device)
    start = time.perf_counter()
    for batch in batches:
        with autocast(trainer.device, trainer.dtype):
            logits = peer(batch.src, batch.tgt_in)
        loss = label_smoothed_loss(logits, batch.tgt_out, trainer.config.label_smoothing)
        (loss / batch.n_tokens).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    loss.item()
    return time.perf_counter() - start


def preset(name: str) -> TransformerConfig:
    """The model of `train --preset NAME`."""
    return TransformerConfig.preset(name)


def sentence_lengths(batch) -> tuple[torch.Tensor, torch.Tensor]:
    """The source and target length of each sentence of a batch, padded or packed."""
    if batch.segments is None:
        return (batch.src != PAD).sum(1), (batch.tgt_out != PAD).sum(1)
    return tuple(torch.bincount(s.flatten())[1:] for s in batch.segments)


def row_length(corpus: Path, vocab_size: int, cache: Path) -> int:
    """The packed rows' length: the longest pair's longer side, rounded up to 64, >= 128."""
    longest = int(prepare_data(str(corpus), "en", "de", vocab_size, cache_dir=str(cache)).train.lengths().max())
    return max(128, -(-longest // 64) * 64)


PACKED = {"pack_length": "auto"}
BATCHING = {  # name: (TrainingConfig changes, change to the built Trainer)
    "padded": ({}, None),
    "packed": (PACKED, None),
    # one of the packed step's choices undone at a time: CUDA graphs; Inductor's search of its
    # Triton kernels' block sizes (one parameter at a time); or matrix-product kernels
    # benchmarked against cuBLAS too
    "packed, no CUDA graphs": (PACKED, compiled(options={"coordinate_descent_tuning": True})),
    "packed, no kernel tuning": (PACKED, compiled(mode="reduce-overhead")),
    "packed, fp32 residual stream": (PACKED, fp32_stream),
    "packed, max-autotune": (PACKED, compiled(mode="max-autotune")),
}
VARIANTS = {  # name: (TrainingConfig changes, change to the built Trainer)
    "not compiled": ({"compile": False, "pad_multiple": 8}, None),
    "loss not compiled": ({}, loss_not_compiled),
    "Adam not fused": ({}, adam_not_fused),
    "loss on the logits": ({}, loss_on_logits),
}
LOSS_VARIANTS = (loss_not_compiled, loss_on_logits)


def measure(model_config, corpus: Path, args, work: Path, changes: dict | None = None, change=None) -> dict:
    changes = {"precision": "auto", **(changes or {})}
    if changes.get("pack_length") == "auto":
        changes["pack_length"] = row_length(corpus, args.vocab_size, work.parent / "cache")
    config = TrainingConfig(data=str(corpus), vocab_size=args.vocab_size, max_tokens=args.max_tokens,
                            device=args.device, cache_dir=str(work.parent / "cache"),
                            warmup_steps=4000, checkpoint_minutes=1e9, max_steps=10**6, **changes)
    trainer = Trainer.from_config(model_config, config, work / "run")
    shipped = trainer.forward_loss
    if change is not None:
        change(trainer)
    paired = change in LOSS_VARIANTS  # a variant of the loss: timed beside the shipped one
    device = trainer.device
    for _ in range(args.warmup):
        trainer.train_step()
    if paired:  # the shipped loss warmed up too (compiled, on a GPU)
        trainer.forward_loss, variant = shipped, trainer.forward_loss
        for _ in range(args.warmup):
            trainer.train_step()
        trainer.forward_loss = variant
    sync(device)
    config = trainer.model.config  # with the vocabulary of the tokenizer
    peak = peak_tflops(torch.cuda.get_device_name(device)) if device.type == "cuda" else None
    cpu_peak = cpu_peak_gflops(torch.get_num_threads()) if device.type == "cpu" else None
    peer = None
    if args.peer and trainer.config.pack_length is None:  # the peer takes padded batches
        peer = TorchPeer(config).to(device).train()
        peer_optimizer = torch.optim.Adam(peer.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
    seen = []  # the batches train_step takes, as it takes them
    next_batch = trainer.batches.next
    trainer.batches.next = lambda: seen.append(next_batch()) or seen[-1]
    repeats = []
    for _ in range(args.repeats):
        seen.clear()
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        sync(device)
        start = time.perf_counter()
        tokens = 0
        for _ in range(args.steps):
            loss_sum, n_tokens = trainer.train_step()
            tokens += n_tokens
        loss_sum.item()
        seconds = time.perf_counter() - start
        src_len, tgt_len = (torch.cat(side).cpu() for side in zip(*map(sentence_lengths, seen)))
        positions = sum(b.src.numel() + b.tgt_out.numel() for b in seen)
        flops = useful_flops(config, src_len, tgt_len)
        assert tokens == int(tgt_len.sum()), "the batches counted are the steps timed"
        sync(device)
        start = time.perf_counter()
        for batch in seen:
            loss = bare_step(trainer, batch)
        loss.item()
        bare = time.perf_counter() - start
        if paired:  # the shipped loss on the same batches, in the same process, in turn
            trainer.forward_loss, variant = shipped, trainer.forward_loss
            sync(device)
            start = time.perf_counter()
            for batch in seen:
                loss = bare_step(trainer, batch)
            loss.item()
            shipped_bare, trainer.forward_loss = time.perf_counter() - start, variant
        if peer is not None:
            if not repeats:  # its first time at these shapes, untimed
                peer_steps(peer, peer_optimizer, seen, trainer)
            peer_seconds = peer_steps(peer, peer_optimizer, seen, trainer)
        repeat = {"tokens_per_s": tokens / seconds, "positions_per_s": positions / seconds,
                  "padding": 1 - (int(src_len.sum()) + tokens) / positions, "step_ms": 1e3 * seconds / args.steps,
                  "bare_tokens_per_s": tokens / bare, "tokens_per_step": tokens / args.steps}
        if peer is not None:
            repeat["peer_tokens_per_s"] = tokens / peer_seconds
        if paired:
            repeat["shipped_bare_tokens_per_s"] = tokens / shipped_bare
        repeat["useful_gflops_a_step"] = flops / args.steps / 1e9
        if cpu_peak:  # the share of the CPU's fp32 peak, measured and nominal
            for kind in ("measured", "nominal"):
                if cpu_peak[f"{kind}_gflops"]:
                    repeat[f"{kind}_peak_share"] = flops / seconds / 1e9 / cpu_peak[f"{kind}_gflops"]
        if peak:
            repeat["mfu"] = flops / seconds / 1e12 / peak
            repeat["bare_mfu"] = flops / bare / 1e12 / peak
        if device.type == "cuda":
            repeat["peak_memory_gib"] = torch.cuda.max_memory_allocated(device) / 2**30
        repeats.append(repeat)
        print({k: round(v, 4) for k, v in repeat.items()}, flush=True)
    result = {key: spread([r[key] for r in repeats]) for key in repeats[0]}
    result["parameters"] = sum(p.numel() for p in trainer.model.parameters())
    result["vocabulary"] = config.tgt_vocab_size
    result["peak_tflops"] = peak
    if cpu_peak:
        result["cpu_peak"] = cpu_peak
    result["precision"] = str(trainer.dtype or "fp32").removeprefix("torch.")
    result["pack_length"] = trainer.config.pack_length
    result["row_lengths"] = getattr(trainer.batches.sampler, "row_lengths", None)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--presets", nargs="+", default=["base"], choices=["tiny", "base", "big"])
    parser.add_argument("--precisions", nargs="+", default=["auto"], choices=["auto", "fp32", "bf16"],
                        help="the Trainer's precision (auto: as train runs it)")
    parser.add_argument("--peer", action="store_true",
                        help="also time torch.nn.Transformer's step on the same padded batches")
    parser.add_argument("--data", type=Path, help="a Multi30k folder (train.en.gz, ...); left out when absent")
    parser.add_argument("--corpora", nargs="+", default=["generated", "multi30k"], choices=["generated", "multi30k"])
    parser.add_argument("--pairs", type=int, default=100_000, help="pairs of the generated corpus")
    parser.add_argument("--vocab-size", type=int, default=37_000)
    parser.add_argument("--max-tokens", type=int, default=25_000, help="tokens per update and side (paper: 25000)")
    parser.add_argument("--warmup", type=int, default=40,
                        help="untimed steps first: each new batch shape is compiled (seconds a step)")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--layers", type=int, nargs="+",
                        help="measure each preset at each of these N (default: the preset's)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batching", nargs="+", default=["padded"], choices=list(BATCHING),
                        help="batches by length (padded), packed rows (CUDA graphs on one GPU), packed rows without CUDA graphs")
    parser.add_argument("--ablation", nargs="*", choices=list(VARIANTS), metavar="VARIANT",
                        help=f"also measure these VARIANTS (all when none is named): {', '.join(VARIANTS)}; "
                        "first preset, generated corpus")
    parser.add_argument("--ablation-corpus", default="generated", choices=["generated", "multi30k"])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    device = torch.device("cuda" if args.device in ("auto", "cuda") and torch.cuda.is_available() else args.device)
    results, ablation = {}, {}

    def write() -> None:  # after every measurement: a run cut short keeps what it measured
        write_report(args.out, {"device": machine(device), "args": {k: str(v) for k, v in vars(args).items()},
                                "results": results, "ablation": ablation}, device)

    with tempfile.TemporaryDirectory() as work:
        corpora = {}
        if "generated" in args.corpora:
            corpora["generated"] = write_correlated_corpus(Path(work) / "generated", args.pairs)
        if "multi30k" in args.corpora and args.data is not None and (args.data / "train.en.gz").is_file():
            corpora["multi30k"] = args.data
        for name, corpus in corpora.items():
            for size in args.presets:
                for batching, precision, layers in itertools.product(
                        args.batching, args.precisions, args.layers or [None]):
                    key = ", ".join([size, name] + [batching] * (batching != "padded")
                                    + [precision] * (args.precisions != ["auto"])
                                    + [f"N={layers}"] * (layers is not None))
                    print(f"{key}:", flush=True)
                    changes, change = BATCHING[batching]
                    folder = Path(work) / key.replace(", ", "-").replace(" ", "_").replace("=", "")
                    model = preset(size) if layers is None else replace(preset(size), n_layers=layers)
                    results[key] = measure(model, corpus, args, folder,
                                           {**changes, "precision": precision}, change)
                    write()
        for variant in (args.ablation or list(VARIANTS)) if args.ablation is not None else ():
            changes, change = VARIANTS[variant]
            print(f"{args.presets[0]}, {args.ablation_corpus}, {variant}:", flush=True)
            model_config = preset(args.presets[0])
            ablation[variant] = measure(model_config, corpora[args.ablation_corpus], args,
                                        Path(work) / variant, changes, change)
            write()


if __name__ == "__main__":
    main()
