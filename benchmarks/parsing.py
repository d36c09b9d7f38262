"""§6.3 at small scale: a Transformer trained to parse the treebank of book/parsing.md.

For each way of writing the trees (--leaves: "words", the book's form, and "tags", Vinyals et
al.'s Figure 2), samples the treebank (40,000 training sentences, 500 development, 1,000 test),
trains the same model for --steps updates on the CPU with a checkpoint every --every steps,
parses the development sentences greedily with each checkpoint (the learning curve), and parses
the test sentences with the last one, greedily and with the paper's settings (beam 21,
alpha 0.3, output up to the input's length + 300 tokens). Scores are labelled bracketing
precision, recall and F1 (transformer.bracket_scores).

    python benchmarks/parsing.py --out benchmarks/results/parsing.json

book/parsing.md reads the committed results file and repeats the first steps of the "words" run.
How far such a repetition can land from the committed figure is measured by training the same
first steps with other seeds (a different seed changes the initial weights, the dropout masks
and nothing else, as another CPU's rounding does after a few hundred steps), the development
set parsed greedily at each checkpoint, and no test scores:

    python benchmarks/parsing.py --leaves words --steps 200 --seeds 0 1 2 3 4 \
        --out benchmarks/results/parsing_spread.json
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

from report import write_report
from transformer import (
    Trainer,
    TrainingConfig,
    TransformerConfig,
    load_model,
    translate,
)
from transformer.parsing import bracket_scores, treebank, write_corpus

TREEBANK = {"n_train": 40_000, "n_val": 500, "n_test": 1000, "seed": 0}
MODEL = {"d_model": 128, "n_heads": 4, "d_ff": 512, "n_layers": 4, "dropout": 0.1, "norm_first": True}
TRAINING = {"vocab_size": 400, "max_tokens": 2000, "warmup_steps": 200, "lr_scale": 0.7, "precision": "fp32",
            "device": "cpu", "checkpoint_minutes": 1e9, "eval_every": 100, "log_every": 50}
DECODING = {"greedy": {"beam_size": 1}, "beam 21, alpha 0.3": {"beam_size": 21, "alpha": 0.3}}


def parse(model, tokenizer, sentences: list[str], trees: list[str], **decoding) -> dict:
    started = time.perf_counter()
    outputs = translate(model, tokenizer, sentences, extra_len=300, **decoding)
    return {**asdict(bracket_scores(outputs, trees)), "seconds": time.perf_counter() - started}


def run(leaves: str, steps: int, every: int, out: Path, seed: int | None = None) -> dict:
    """Train and parse the development set with every checkpoint; with no seed, the default
    seed and the test set scored with the last checkpoint too."""
    corpus = treebank(**TREEBANK, leaves=leaves)
    folder = write_corpus(corpus, out / "treebank")
    config = TrainingConfig(data=str(folder), src_lang="words", tgt_lang="tree", max_steps=steps,
                            checkpoint_every=every, keep_checkpoints=steps // every + 1,
                            **({} if seed is None else {"seed": seed}), **TRAINING)
    started = time.perf_counter()
    trainer = Trainer.from_config(TransformerConfig(**MODEL), config, out / "run")
    result = trainer.fit(progress=False)
    minutes = (time.perf_counter() - started) / 60
    val, test = ([list(side) for side in zip(*corpus.splits[split])] for split in ("val", "test"))
    curve = []
    for path in sorted(trainer.out.glob("checkpoint-*.pt")):
        model, tokenizer = load_model(path, device="cpu")
        curve.append({"step": int(path.stem.split("-")[1]), **parse(model, tokenizer, *val, beam_size=1)})
        print(f"{leaves}: step {curve[-1]['step']:5}  F1 {curve[-1]['f1']:5.1f}  "
              f"well-formed {curve[-1]['well_formed']:5.1f}%", flush=True)
    record = {"train_minutes": minutes, "val_ppl": result["val_ppl"], "curve": curve}
    if seed is not None:
        return record
    scores = {name: parse(model, tokenizer, *test, **decoding) for name, decoding in DECODING.items()}
    for name, s in scores.items():
        print(f"{leaves}: test, {name}: F1 {s['f1']:.1f} ({s['seconds']:.0f} s)", flush=True)
    return {**record, "test": scores}


def spread(runs: dict[int, dict]) -> dict[int, dict[str, float]]:
    """Min, median and max over the seeds of the development F1 at each checkpoint."""
    steps = [c["step"] for c in next(iter(runs.values()))["curve"]]
    table = {}
    for i, step in enumerate(steps):
        f1 = sorted(run["curve"][i]["f1"] for run in runs.values())
        table[step] = {"min": f1[0], "median": statistics.median(f1), "max": f1[-1]}
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--leaves", nargs="+", default=["words", "tags"], choices=["words", "tags"])
    parser.add_argument("--steps", type=int, default=1500, help="training steps per run (default 1500)")
    parser.add_argument("--every", type=int, default=100, help="steps between checkpoints (default 100)")
    parser.add_argument("--seeds", type=int, nargs="+",
                        help="train the first --leaves once per seed, development set only")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/parsing.json"))
    args = parser.parse_args()
    if args.seeds:
        with tempfile.TemporaryDirectory() as out:
            runs = {seed: run(args.leaves[0], args.steps, args.every, Path(out) / str(seed), seed)
                    for seed in args.seeds}
        write_report(args.out, {"steps": args.steps, "leaves": args.leaves[0], "treebank": TREEBANK,
                                "model": MODEL, "training": TRAINING, "seeds": runs,
                                "spread": spread(runs)})
        return
    runs = {}
    for leaves in args.leaves:
        with tempfile.TemporaryDirectory() as out:
            runs[leaves] = run(leaves, args.steps, args.every, Path(out))
    write_report(args.out, {"steps": args.steps, "treebank": TREEBANK, "model": MODEL, "training": TRAINING,
                            "decoding": DECODING, "runs": runs})


if __name__ == "__main__":
    main()
