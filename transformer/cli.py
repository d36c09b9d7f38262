# Generated from book/cli.md by tools/export.py: edit the chapter, not this file.
"""The command line: python -m transformer train ... (see --help)."""

from __future__ import annotations

import argparse
import sys
from dataclasses import fields

from transformer.model import TransformerConfig
from transformer.training import Trainer, TrainingConfig


PRESETS: dict[str, tuple[dict, dict]] = {
    "small": (
        {"d_model": 256, "n_heads": 4, "d_ff": 1024, "n_layers": 3, "dropout": 0.1},
        {
            "vocab_size": 200,
            "max_tokens": 2000,
            "warmup_steps": 400,
            "lr_scale": 0.5,
            "eval_every": 200,
        },
    ),
    "base": ({}, {"vocab_size": 37000, "max_tokens": 25000, "warmup_steps": 4000}),
    "big": (
        {"d_model": 1024, "d_ff": 4096, "n_heads": 16, "dropout": 0.3},
        {"vocab_size": 37000, "max_tokens": 25000, "warmup_steps": 4000},
    ),
}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m transformer",
        description="Train and use the Transformer of 'Attention Is All You Need'.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    train = commands.add_parser(
        "train",
        help="train a model",
        description="Train an encoder-decoder Transformer. Example (the embedded corpus, on a CPU):\n"
        "  python -m transformer train --preset small --max-minutes 10 --out runs/numbers\n"
        "Multi30k files, English to German:\n"
        "  python -m transformer train --data ../shared/data/multi30k --src en --tgt de "
        "--vocab-size 8000 --max-minutes 30 --out runs/multi30k\n"
        "Several GPUs: torchrun --standalone --nproc_per_node 8 -m transformer train --preset base ...",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    train.add_argument(
        "--preset",
        choices=sorted(PRESETS),
        default="small",
        help="model and training preset (default: small)",
    )
    train.add_argument(
        "--out", required=True, help="folder for checkpoints and metrics.jsonl"
    )
    train.add_argument(
        "--resume",
        metavar="PATH",
        help="continue from a checkpoint, or the newest one in a folder",
    )
    data = train.add_argument_group("data")
    data.add_argument(
        "--data",
        help="'numbers' (the embedded corpus, default), a folder of parallel files, or hub:NAME[:CONFIG]",
    )
    data.add_argument(
        "--src",
        dest="src_lang",
        help="source language suffix of the files (default: en)",
    )
    data.add_argument(
        "--tgt", dest="tgt_lang", help="target language suffix (default: de)"
    )
    data.add_argument(
        "--vocab-size", type=int, help="size of the shared BPE vocabulary"
    )
    run = train.add_argument_group("run")
    run.add_argument("--max-steps", type=int, help="stop after this many updates")
    run.add_argument(
        "--max-minutes", type=float, help="stop after this much training time"
    )
    run.add_argument(
        "--max-tokens",
        type=int,
        help="tokens per batch and side, per process (paper: 25000)",
    )
    run.add_argument(
        "--accumulate", type=int, help="batches per update (gradient accumulation)"
    )
    run.add_argument(
        "--warmup-steps", type=int, help="warm-up steps of the schedule (paper: 4000)"
    )
    run.add_argument(
        "--lr-scale", type=float, help="multiplier of the paper's learning-rate curve"
    )
    run.add_argument("--label-smoothing", type=float, help="epsilon_ls (paper: 0.1)")
    run.add_argument(
        "--precision",
        choices=["auto", "fp32", "bf16", "fp16"],
        help="autocast precision (default: auto)",
    )
    run.add_argument(
        "--compile", action="store_true", default=None, help="use torch.compile"
    )
    run.add_argument("--device", help="auto (default), cpu, cuda, cuda:1, mps")
    run.add_argument("--seed", type=int)
    run.add_argument("--eval-every", type=int, help="validate every N steps")
    run.add_argument(
        "--checkpoint-minutes",
        type=float,
        help="write a checkpoint every N minutes (paper: 10)",
    )
    run.add_argument(
        "--keep-checkpoints", type=int, help="keep the newest N checkpoints"
    )
    return parser


def _train(args: argparse.Namespace) -> int:
    given = {
        f.name: getattr(args, f.name)
        for f in fields(TrainingConfig)
        if getattr(args, f.name, None) is not None
    }
    if args.resume:
        trainer = Trainer.resume(args.resume, out=args.out, **given)
    else:
        model_overrides, training_defaults = PRESETS[args.preset]
        if "max_steps" not in given and "max_minutes" not in given:
            raise SystemExit(
                "error: say when to stop: --max-steps N and/or --max-minutes M"
            )
        config = TrainingConfig(**{**training_defaults, **given})
        trainer = Trainer(TransformerConfig(**model_overrides), config, args.out)
    if trainer.rank == 0:
        n_parameters = sum(p.numel() for p in trainer.model.parameters())
        print(
            f"training {n_parameters / 1e6:.1f}M parameters on {trainer.device} ({trainer.world_size} process(es), "
            f"{str(trainer.dtype or 'fp32').removeprefix('torch.')}), {len(trainer.train_pairs):,} pairs, "
            f"vocabulary {trainer.tokenizer.get_vocab_size():,}",
            flush=True,
        )
    try:
        result = trainer.fit()
    except KeyboardInterrupt:
        return 130
    if trainer.rank == 0:
        summary = f"done: {result['step']} steps in {result['minutes']:.1f} min"
        if "val_loss" in result:
            summary += f"; validation loss {result['val_loss']:.3f}, perplexity {result['val_ppl']:.2f}"
        if trainer.config.data == "numbers":
            summary += (
                f"; exact match on the test split {trainer.exact_match('test'):.1%}"
            )
        print(f"{summary}; checkpoints in {trainer.out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of `python -m transformer`."""
    args = _parser().parse_args(argv)
    if args.command == "train":
        return _train(args)
    raise AssertionError(f"unhandled command {args.command}")


__all__ = ['main']
