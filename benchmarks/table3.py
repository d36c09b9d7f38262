"""Table 3 of the paper at small scale: variations of a small Transformer on the embedded corpus.

Each row changes one thing of the base setting below (d_model=128, h=4, N=2, d_ff=512,
P_drop=0.1, eps_ls=0.1, sinusoidal positions), trains it for the same number of steps on the
English->German number corpus, and records its parameters, validation perplexity (per BPE
token, no label smoothing) and exact match of greedy translations on the 500 test numbers.
The base setting is trained with three seeds to show how much of a difference is noise.

    python benchmarks/table3.py --steps 300 --out benchmarks/results/table3.json

book/results.md plots the committed results file.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch

from report import write_report
from transformer import Trainer, TrainingConfig, TransformerConfig, evaluate

BASE = {"d_model": 128, "n_heads": 4, "d_ff": 512, "n_layers": 2, "dropout": 0.1}
TRAINING = {"data": "numbers", "vocab_size": 200, "max_tokens": 2000, "warmup_steps": 200,
            "lr_scale": 0.5, "precision": "fp32", "device": "cpu", "checkpoint_minutes": 1e9,
            "keep_checkpoints": 1}
# (Table 3 row, label, model overrides, training overrides)
VARIANTS = [
    ("base", "base", {}, {}),
    ("base", "base, seed 1", {}, {"seed": 1}),
    ("base", "base, seed 2", {}, {"seed": 2}),
    ("A", "h=1, d_k=128", {"n_heads": 1}, {}),
    ("A", "h=16, d_k=8", {"n_heads": 16}, {}),
    ("B", "d_k=8", {"d_k": 8}, {}),
    ("C", "N=1", {"n_layers": 1}, {}),
    ("C", "N=4", {"n_layers": 4}, {}),
    ("C", "d_model=64", {"d_model": 64, "d_ff": 256}, {}),
    ("C", "d_model=256", {"d_model": 256, "d_ff": 1024}, {}),
    ("C", "d_ff=128", {"d_ff": 128}, {}),
    ("C", "d_ff=2048", {"d_ff": 2048}, {}),
    ("D", "P_drop=0.0", {"dropout": 0.0}, {}),
    ("D", "P_drop=0.3", {"dropout": 0.3}, {}),
    ("D", "eps_ls=0.0", {}, {"label_smoothing": 0.0}),
    ("D", "eps_ls=0.3", {}, {"label_smoothing": 0.3}),
    ("E", "learned positions", {"positional": "learned"}, {}),
]


def run(model_overrides: dict, training_overrides: dict, steps: int) -> dict:
    seed = training_overrides.get("seed", 0)
    torch.manual_seed(seed)
    config = TrainingConfig(**{**TRAINING, "max_steps": steps, "eval_every": steps, **training_overrides})
    with tempfile.TemporaryDirectory() as out:
        trainer = Trainer.from_config(TransformerConfig(**{**BASE, **model_overrides}), config, out)
        result = trainer.fit(progress=False)
        return {
            "parameters": sum(p.numel() for p in trainer.model.parameters()),
            "val_ppl": result["val_ppl"],
            "exact_match": evaluate(trainer.model, trainer.data.tokenizer, trainer.data.test,
                                    beam_size=1)[0].exact_match,
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=300, help="training steps per row (default 300)")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/table3.json"))
    args = parser.parse_args()
    rows = []
    for row, label, model_overrides, training_overrides in VARIANTS:
        started = time.perf_counter()
        measured = run(model_overrides, training_overrides, args.steps)
        rows.append({"row": row, "label": label, "model": model_overrides, "training": training_overrides,
                     **measured})
        print(f"{row:4} {label:18} {measured['parameters'] / 1e6:5.2f}M  ppl {measured['val_ppl']:6.3f}  "
              f"exact {measured['exact_match']:6.1%}  ({(time.perf_counter() - started) / 60:.1f} min)", flush=True)
    write_report(args.out, {"steps": args.steps, "base": {"model": BASE, "training": TRAINING}, "rows": rows})

if __name__ == "__main__":
    main()
