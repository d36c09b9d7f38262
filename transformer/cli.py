# Generated from book/cli.md by tools/export.py: edit the chapter.
"""The command line: python -m transformer train ... (see --help)."""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable
from dataclasses import asdict, fields
from pathlib import Path

from tqdm import tqdm

from transformer.checkpoints import (
    average_checkpoints,
    check_output_folder,
    final_model,
    last_checkpoints,
    load_checkpoint,
    load_model,
    newest_checkpoints,
    save_checkpoint,
    write_atomically,
    write_final_model,
)
from transformer.corpora import fetch_multi30k, load_corpus
from transformer.decoding import DECODING, translate
from transformer.deploy import export_onnx
from transformer.devices import pick_device
from transformer.evaluation import evaluate
from transformer.model import TransformerConfig
from transformer.plan import (
    BUDGET_FITS,
    GPU_TEXT_STEPS,
    SCHEDULES,
    Timing,
    TrainingConfig,
    final_average,
    make_plan,
)
from transformer.presets import PAPER, PRESETS
from transformer.runs import FALL_SHARE, FEW_UPDATES, PEAK_SHARE
from transformer.tokenizer import lowercases
from transformer.trainer import Trainer, time_first_update
from transformer.utils import __version__


MODEL_OPTIONS = ("n_layers", "dropout", "attention_dropout", "activation_dropout",
                 "norm_first")


def _probability(text: str) -> float:
    """An argparse type: a number in [0, 1)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a number in [0, 1), got {text!r}"
        ) from None
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1), got {text}")
    return value


def _number(kind: type, zero: bool = False) -> Callable[[str], int | float]:
    """An argparse type: a finite value of `kind` (int or float), > 0 (>= 0 with
    zero)."""
    number = "an integer" if kind is int else "a finite number"
    what = f"{number} {'>= 0' if zero else '> 0'}"

    def parse(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if not (math.isfinite(value) and (value >= 0 if zero else value > 0)):
            raise argparse.ArgumentTypeError(f"expected {what}, got {text}")
        return value

    return parse


def _add_train(commands: argparse._SubParsersAction) -> None:
    train = commands.add_parser(
        "train",
        help="train a model",
        description="Train an encoder-decoder Transformer. Example (the embedded "
        "corpus, on a CPU):\n"
        "  python -m transformer train --max-minutes 10 --out runs/numbers\n"
        "Multi30k files, English to German:\n"
        "  python -m transformer train --data data/multi30k --src en "
        "--tgt de --max-minutes 60 --out runs/multi30k\n"
        "The same, lowercased as Multi30k papers train and score:\n"
        "  python -m transformer train --data data/multi30k --src en "
        "--tgt de --lowercase --max-minutes 60 --out runs/multi30k-lc\n"
        "Several GPUs: torchrun --standalone --nproc_per_node 8 -m transformer "
        "train --preset base ...",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    train.add_argument(
        "--preset",
        choices=list(PRESETS),
        help="model and training preset (default: small on the embedded corpus, "
        "tiny on real text)",
    )
    _add_folder_options(train)
    data = train.add_argument_group("data")
    _add_data_options(data)
    data.add_argument(
        "--vocab-size", type=_number(int), help="size of the shared BPE vocabulary"
    )
    data.add_argument(
        "--cache-dir",
        help="where tokenized corpora are kept (default: $TRANSFORMER_CACHE, else "
        "~/.cache/transformer)",
    )
    data.add_argument(
        "--lowercase",
        action="store_true",
        default=None,
        help="lowercase all text, as Multi30k papers train and score: the tokenizer "
        "lowercases, and the checkpoints carry it, so translate lowercases the input "
        "and evaluate scores against lowercased references",
    )
    _add_model_options(
        train.add_argument_group("model (a new run; a resumed one keeps its own)")
    )
    _add_schedule_options(train.add_argument_group("schedule"))
    _add_run_options(train.add_argument_group("run"))


def _add_folder_options(train: argparse.ArgumentParser) -> None:
    train.add_argument(
        "--out", required=True, help="folder for checkpoints and metrics.jsonl"
    )
    train.add_argument(
        "--resume",
        metavar="PATH",
        help="continue from a checkpoint, or the newest one in a folder",
    )
    train.add_argument(
        "--data-changed-ok",
        action="store_true",
        help="with --resume: go on when the data changed since the checkpoint "
        "(otherwise refused; the plan and metrics.jsonl say from which step)",
    )
    train.add_argument(
        "--overwrite",
        action="store_true",
        help="delete another run's checkpoints and metrics in --out first "
        "(otherwise refused)",
    )


def _add_data_options(group: argparse._ArgumentGroup, trained: bool = False) -> None:
    """--data, --src, --tgt; trained: each defaults to the checkpoint's training run's
    (evaluate), else to numbers, en and de."""
    run = "the training run's, else " if trained else ""
    group.add_argument(
        "--data",
        help="'numbers' (the embedded corpus), a folder of parallel files, or "
        f"hub:NAME[:CONFIG] (default: {run}numbers)",
    )
    group.add_argument(
        "--src",
        dest="src_lang",
        help=f"source language suffix of the files (default: {run}en)",
    )
    group.add_argument(
        "--tgt", dest="tgt_lang", help=f"target language suffix (default: {run}de)"
    )


def _add_model_options(group: argparse._ArgumentGroup) -> None:
    lines = BUDGET_FITS["tiny"].dropout_by_passes
    (first, low), *more = lines
    fitted = " and ".join([f"{low:g} under {first:g} passes over the data"]
                          + [f"{p:g} under {passes:g}" for passes, p in more])
    depth = " and ".join(f"{n} under {updates:,} updates"
                         for updates, n in BUDGET_FITS["tiny"].layers_by_updates)
    paper, tiny = TransformerConfig.base(), TransformerConfig.tiny()
    group.add_argument(
        "--layers",
        dest="n_layers",
        type=_number(int),
        help=f"N, the layers of the encoder and of the decoder (paper: "
        f"{paper.n_layers}; tiny: {tiny.n_layers}, but {depth} in a run of minutes)",
    )
    group.add_argument(
        "--dropout",
        type=_probability,
        help=f"P_drop of the sub-layers (paper: {paper.dropout:g}; tiny: "
        f"{tiny.dropout:g}, but {fitted} in a run of minutes)",
    )
    group.add_argument(
        "--attention-dropout",
        type=_probability,
        help=f"dropout on the attention weights (paper: {paper.attention_dropout:g})",
    )
    group.add_argument(
        "--activation-dropout",
        type=_probability,
        help="dropout on the FFN's hidden activations (paper: "
        f"{paper.activation_dropout:g})",
    )
    group.add_argument(
        "--pre-ln",
        dest="norm_first",
        action="store_const",
        const=True,
        help="LayerNorm before each sub-layer (the tiny preset's)",
    )
    group.add_argument(
        "--post-ln",
        dest="norm_first",
        action="store_const",
        const=False,
        help="LayerNorm after each sub-layer (the paper's; the other presets')",
    )


def _add_schedule_options(group: argparse._ArgumentGroup) -> None:
    group.add_argument(
        "--max-steps",
        type=_number(int),
        help="stop after this many updates (default: none, but "
        f"{GPU_TEXT_STEPS} for the tiny preset on real text on a CUDA GPU)",
    )
    group.add_argument(
        "--max-minutes", type=_number(float), help="stop after this much training time"
    )
    group.add_argument(
        "--max-tokens",
        type=_number(int),
        help="tokens per update and side, over all processes and accumulated batches "
        f"(paper: {PAPER.max_tokens}; the preset's by default, which tiny halves for "
        "a run of "
        f"minutes whose budget holds fewer than {FEW_UPDATES:,} updates of it)",
    )
    group.add_argument(
        "--accumulate",
        type=_number(int),
        help="batches per update (gradient accumulation)",
    )
    group.add_argument(
        "--pack-length",
        type=_number(int),
        help="pack whole sentence pairs into rows of N tokens a side (no padding, "
        "fixed shapes); default: batches by length, padded",
    )
    group.add_argument(
        "--warmup-steps",
        type=_number(int),
        help=f"warm-up steps of the schedule (paper: {PAPER.warmup_steps})",
    )
    group.add_argument(
        "--lr-scale",
        type=_number(float),
        help="multiplier of the paper's learning-rate curve",
    )
    group.add_argument(
        "--cooldown",
        type=_probability,
        help="over this last fraction of the run, the rate's multiplier falls "
        "linearly from 1 to 0 (default 0: none); it keeps the paper's curve",
    )
    group.add_argument(
        "--schedule",
        choices=SCHEDULES,
        help="the rate's schedule: the paper's, or planned for the budget (warm-up "
        f"to {PEAK_SHARE:g} of the paper's peak, held, a fall to 0 over the last "
        f"{FALL_SHARE:g} of the budget); "
        "default: planned for --max-minutes alone without --cooldown, else the paper's",
    )
    group.add_argument("--label-smoothing", type=float,
                       help=f"epsilon_ls (paper: {TrainingConfig.label_smoothing:g})")


def _add_run_options(group: argparse._ArgumentGroup) -> None:
    group.add_argument(
        "--precision",
        choices=["auto", "fp32", "bf16", "fp16"],
        help="autocast precision (default: auto)",
    )
    group.add_argument(
        "--compile",
        action=argparse.BooleanOptionalAction,
        help="torch.compile the step (default: on CUDA only)",
    )
    group.add_argument("--device", help="auto (default), cpu, cuda, cuda:1, mps")
    group.add_argument("--seed", type=int)
    group.add_argument(
        "--log-every", type=_number(int), help="log the loss every N steps"
    )
    group.add_argument("--eval-every", type=_number(int), help="validate every N steps")
    group.add_argument(
        "--checkpoint-minutes",
        type=_number(float),
        help="write a checkpoint every N minutes (paper: "
        f"{PAPER.checkpoint_minutes:g})",
    )
    group.add_argument(
        "--checkpoint-every",
        type=_number(int),
        help="also write a checkpoint every N steps",
    )
    group.add_argument(
        "--keep-checkpoints", type=_number(int), help="keep the newest N checkpoints"
    )
    group.add_argument(
        "--average-last",
        type=_number(int),
        help="the final model averages the newest N checkpoints of the run's last "
        f"third (default {PAPER.average_last}, the paper's; after a --cooldown or a "
        "planned schedule, 1: "
        "the newest checkpoint)",
    )


def _new_trainer(args: argparse.Namespace, given: dict) -> Trainer:
    """A Trainer for a new run: its plan (make_plan) of the options given, timed by
    time_first_update where it needs an update timed, once the folder is checked."""
    def timer(model_config: TransformerConfig, config: TrainingConfig) -> Timing:
        check_output_folder(Path(args.out), False, args.overwrite)  # refused first
        return time_first_update(model_config, config)

    model_given = {k: v for k in MODEL_OPTIONS if (v := getattr(args, k)) is not None}
    plan = make_plan(args.preset, model_given, timer, **given)
    return Trainer.from_plan(plan, args.out, args.overwrite)


def _train(args: argparse.Namespace) -> int:
    given = {
        f.name: getattr(args, f.name)
        for f in fields(TrainingConfig)
        if getattr(args, f.name, None) is not None
    }
    if args.resume:
        if args.lowercase or any(getattr(args, k) is not None for k in MODEL_OPTIONS):
            raise SystemExit(
                "error: --layers, --dropout, --attention-dropout, "
                "--activation-dropout, --pre-ln, --post-ln and --lowercase shape a new "
                "model; a resumed run "
                "keeps its checkpoint's"
            )
        trainer = Trainer.resume(args.resume, args.out, args.overwrite,
                                 args.data_changed_ok, **given)
    elif args.data_changed_ok:
        raise SystemExit("error: --data-changed-ok goes with --resume: a new run has "
                         "no earlier data to differ from")
    else:
        trainer = _new_trainer(args, given)
    if trainer.rank == 0:
        n_parameters = sum(p.numel() for p in trainer.model.parameters())
        dtype = str(trainer.dtype or "fp32").removeprefix("torch.")
        tokenizer = trainer.data.tokenizer
        print(
            f"training {n_parameters / 1e6:.1f}M parameters on {trainer.device} "
            f"({trainer.world_size} process(es), {dtype}), "
            f"{len(trainer.data.train):,} pairs, vocabulary "
            f"{tokenizer.get_vocab_size():,}"
            f"{' (lowercased text)' if lowercases(tokenizer) else ''}",
            flush=True,
        )
    try:
        result = trainer.fit()
    except KeyboardInterrupt:  # a second Ctrl-C: the last checkpoint written stands
        return 130
    if "interrupted" in result:
        return 128 + result["interrupted"]  # the shell's status for a signal
    if trainer.rank == 0:
        n = final_average(trainer.config, args.average_last)
        final, note = write_final_model(trainer.out, n)
        print(note)
        summary = f"done: {result['step']} steps in {result['minutes']:.1f} min"
        if "val_loss" in result:
            summary += (
                f"; validation loss {result['val_loss']:.3f}, "
                f"perplexity {result['val_ppl']:.2f}"
            )
        if trainer.config.data == "numbers":  # the final model's
            trainer.model.load_state_dict(load_checkpoint(final)["model"])
            # the 500 numbers in one batch: a model of a few steps decodes each to the
            # length limit, which a CPU does a third faster in one batch than in 64s
            scores, _ = evaluate(trainer.model, trainer.data.tokenizer,
                                 trainer.data.test, beam_size=1, batch_size=512)
            summary += f"; exact match on the test split {scores.exact_match:.1%}"
        print(f"{summary}; final model {final}")
    return 0


def _add_decoding_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--checkpoint",
        required=True,
        help="a checkpoint file, or a training folder (its final model)",
    )
    parser.add_argument(
        "--beam",
        type=_number(int),
        default=DECODING.beam_size,
        help=f"beam size; 1 decodes greedily (default: {DECODING.beam_size})",
    )
    parser.add_argument(
        "--alpha",
        type=_number(float, zero=True),
        default=DECODING.alpha,
        help=f"length penalty (default: {DECODING.alpha:g})",
    )
    parser.add_argument(
        "--batch-size",
        type=_number(int),
        default=DECODING.batch_size,
        help=f"sentences per batch (default: {DECODING.batch_size})",
    )
    parser.add_argument(
        "--device", default="auto", help="auto (default), cpu, cuda, mps"
    )


def _add_use(commands: argparse._SubParsersAction) -> None:
    translate = commands.add_parser(
        "translate",
        help="translate text with a checkpoint",
        description="Translate sentences, one a line. Examples:\n"
        "  echo 'two hundred and one' | python -m transformer translate "
        "--checkpoint runs/numbers\n"
        "  python -m transformer translate --checkpoint C.pt --input test.en "
        "--output test.hyp.de\n"
        "A model trained with --lowercase lowercases its input.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_decoding_options(translate)
    translate.add_argument(
        "--input", help="file to translate (default: standard input)"
    )
    translate.add_argument("--output", help="file to write (default: standard output)")
    evaluate = commands.add_parser(
        "evaluate",
        help="score a checkpoint on a test set (BLEU, exact match)",
        description="Translate a split of a corpus and score it with sacreBLEU. "
        "Example:\n"
        "  python -m transformer evaluate --checkpoint runs/multi30k "
        "--data data/multi30k\n"
        "A model trained with --lowercase is scored against lowercased references "
        "(sacreBLEU's case:lc).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_decoding_options(evaluate)
    _add_data_options(evaluate, trained=True)
    evaluate.add_argument(
        "--split", default="test", help="test (default), val or train"
    )
    evaluate.add_argument(
        "--limit",
        type=_number(int),
        help="score only the first N sentences of the split",
    )
    evaluate.add_argument("--output", help="also write the translations to this file")
    evaluate.add_argument("--json", help="append the scores to this JSON-lines file")
    average = commands.add_parser(
        "average",
        help="average the weights of checkpoints of one run",
        description=f"Average checkpoints (the paper: the last {PAPER.average_last} "
        f"for base, {PRESETS['big'].training['keep_checkpoints']} for big). "
        "Examples:\n"
        "  python -m transformer average runs/base/checkpoint-*.pt "
        "--out runs/base/average.pt\n"
        "  python -m transformer average runs/base --last 5 --out runs/base/average.pt",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    average.add_argument(
        "checkpoints", nargs="+", help="checkpoint files, or one training folder"
    )
    average.add_argument(
        "--last",
        type=_number(int),
        help="with a folder: average its newest N checkpoints",
    )
    average.add_argument("--out", required=True, help="file to write the average to")


def _checkpoint(path: str) -> Path:
    """A checkpoint file as given, or the final model of a run folder."""
    return final_model(path) if Path(path).is_dir() else Path(path)


def _write_lines(path: str, lines: list[str]) -> None:
    text = "".join(line + "\n" for line in lines).encode("utf-8")
    write_atomically(path, lambda file: file.write(text))


def _lines(data: bytes, source: str) -> list[str]:
    """UTF-8 lines split on "\\n" only, one trailing "\\r" stripped: str.splitlines
    would also split on form feeds, U+2028 and others, and misalign input and output
    lines."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        raise ValueError(
            f"{source} is not UTF-8 text: byte {data[error.start]:#04x} on line {line}"
        ) from error
    lines = text.split("\n")
    if lines[-1] == "":  # the newline that ends the last line
        lines.pop()
    return [line.removesuffix("\r") for line in lines]


def _translate(args: argparse.Namespace) -> int:
    path = _checkpoint(args.checkpoint)
    model, tokenizer = load_model(path, pick_device(args.device))
    if args.input:
        with open(args.input, "rb") as file:
            sentences = _lines(file.read(), args.input)
    else:
        sentences = _lines(sys.stdin.buffer.read(), "standard input")
    # notes on stderr (standard output holds the translations), once the input is read
    if Path(args.checkpoint).is_dir():  # which of the folder's models
        print(f"translating with {path}", file=sys.stderr)
    if lowercases(tokenizer):
        print(f"{path} was trained on lowercased text: the input is lowercased, and "
              "so is the output", file=sys.stderr)
    # a bar only for a file, on a terminal (disable=None: off when stderr is not a TTY)
    with tqdm(
        total=len(sentences), unit="sentence", disable=None if args.input else True
    ) as bar:
        outputs = translate(model, tokenizer, sentences, args.beam, args.alpha,
                            args.batch_size, bar.update)
    outputs = [" ".join(line.splitlines()) for line in outputs]  # one line each
    if args.output:
        _write_lines(args.output, outputs)
    else:
        sys.stdout.writelines(line + "\n" for line in outputs)
    return 0


def _trained_corpus(args: argparse.Namespace, path: Path) -> tuple[str, str, str]:
    """--data, --src and --tgt, each by default that of the run that trained the
    checkpoint (an average keeps its run's): a model is scored on its own language
    pair unless told otherwise."""
    trained = load_checkpoint(path, mmap=True).get("training_config") or {}
    data = args.data or trained.get("data", "numbers")
    local = data != "numbers" and not data.startswith("hub:")
    if not args.data and local and not Path(data).exists():
        raise SystemExit(
            f"error: {path} was trained on {data}, which is not found from here; "
            "give --data"
        )
    src_lang = args.src_lang or trained.get("src_lang", "en")
    return data, src_lang, args.tgt_lang or trained.get("tgt_lang", "de")


def _evaluate(args: argparse.Namespace) -> int:
    path = _checkpoint(args.checkpoint)
    data, src_lang, tgt_lang = _trained_corpus(args, path)
    model, tokenizer = load_model(path, pick_device(args.device))
    corpus = load_corpus(data, src_lang, tgt_lang)
    if args.split not in corpus.splits:
        raise SystemExit(
            f"error: the corpus has no split {args.split!r}; "
            f"it has {sorted(corpus.splits)}"
        )
    pairs = corpus.splits[args.split][: args.limit]
    with tqdm(total=len(pairs), unit="sentence", disable=None) as bar:
        scores, hypotheses = evaluate(
            model,
            tokenizer,
            pairs,
            args.beam,
            args.alpha,
            args.batch_size,
            bar.update,
            tgt_lang=tgt_lang,
        )
    if args.output:
        _write_lines(args.output, hypotheses)
    if args.json:
        record = {
            "checkpoint": str(path),
            "data": data,
            "pair": f"{src_lang}-{tgt_lang}",
            "split": args.split,
            "beam": args.beam,
            "alpha": args.alpha,
            "lowercase": lowercases(tokenizer),
            **asdict(scores),
        }
        with open(args.json, "a", encoding="utf-8") as file:
            file.write(json.dumps(record) + "\n")
    decoding = "greedy" if args.beam == 1 else f"beam {args.beam}"
    print(f"{path}, {args.split}, {decoding}: {scores}")
    return 0


def _average(args: argparse.Namespace) -> int:
    if Path(args.out).is_dir():
        raise SystemExit(f"error: --out {args.out} is a folder; give the file to write")
    if len(args.checkpoints) == 1 and Path(args.checkpoints[0]).is_dir():
        paths = last_checkpoints(args.checkpoints[0], args.last or 5)
    elif args.last is not None:
        raise SystemExit("error: --last goes with one training folder, not with files")
    else:
        paths = [Path(p) for p in args.checkpoints]
    save_checkpoint(average_checkpoints(paths), args.out)
    print(
        f"averaged {len(paths)} checkpoints ({paths[0].name} .. {paths[-1].name}) "
        f"into {args.out}"
    )
    return 0


def _add_export(commands: argparse._SubParsersAction) -> None:
    export = commands.add_parser(
        "export",
        help="write a checkpoint as ONNX graphs for onnxruntime",
        description="Write the encoder and one cached decoding step as ONNX graphs, "
        "the tokenizer and model.json into a folder. Example:\n"
        "  python -m transformer export --checkpoint runs/numbers "
        "--out runs/numbers-onnx",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    export.add_argument("--checkpoint", required=True,
                        help="a checkpoint file, or a run folder (its final model)")
    export.add_argument("--out", required=True, help="the folder to write")
    export.add_argument("--overwrite", action="store_true",
                        help="replace --out if it exists (otherwise refused)")
    export.add_argument("--int8", action="store_true",
                        help="store the weight matrices as int8, computed in float32: "
                        "files a quarter the size, slightly different outputs")


def _export(args: argparse.Namespace) -> int:
    path = _checkpoint(args.checkpoint)
    state = load_checkpoint(path)
    model, tokenizer = load_model(path)
    run = newest_checkpoints(path.parent, 1)  # an average has no training settings
    training = state.get("training_config") or (
        load_checkpoint(run[0]).get("training_config", {}) if run else {})
    about = {"checkpoint": path.name, "step": state.get("step"),
             "averaged_from": [Path(p).name for p in state.get("averaged_from", [])],
             "src_lang": training.get("src_lang"), "tgt_lang": training.get("tgt_lang"),
             "data": training.get("data")}
    export_onnx(model, tokenizer, args.out, about, args.overwrite, args.int8)
    sizes = ", ".join(f"{file.name} {file.stat().st_size / 1e6:.1f} MB"
                      for file in sorted(Path(args.out).iterdir()))
    print(f"wrote {args.out}: {sizes}")
    return 0


def _add_data(commands: argparse._SubParsersAction) -> None:
    data = commands.add_parser(
        "data",
        help="fetch a public corpus into a folder",
        description="Download a corpus's files, check each against its recorded "
        "SHA-256 and write it atomically. Example:\n"
        "  python -m transformer data multi30k --out data/multi30k",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    data.add_argument("corpus", choices=["multi30k"],
                      help="multi30k: Multi30k's task 1 (train, val, test_2016_flickr)")
    data.add_argument("--out", default="data/multi30k",
                      help="the folder to write (default: data/multi30k)")
    data.add_argument("--languages", nargs="+", default=["en", "de", "fr"],
                      metavar="LANG", help="the languages to fetch (default: en de fr)")


def _data(args: argparse.Namespace) -> int:
    paths = fetch_multi30k(args.out, args.languages)
    print(f"{args.out}: {', '.join(path.name for path in paths)} (checked)")
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m transformer",
        description="Train and use the Transformer of 'Attention Is All You Need'.",
    )
    parser.add_argument(
        "--version", action="version", version=f"transformer {__version__}"
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_train(commands)
    _add_use(commands)
    _add_export(commands)
    _add_data(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of `python -m transformer`."""
    args = _parser().parse_args(argv)
    run = {
        "train": _train,
        "translate": _translate,
        "evaluate": _evaluate,
        "average": _average,
        "export": _export,
        "data": _data,
    }
    try:
        return run[args.command](args)
    except (OSError, ValueError) as error:  # bad input, a refused folder, a full disk
        raise SystemExit(f"error: {error}") from error


__all__ = [
    'main',
]
