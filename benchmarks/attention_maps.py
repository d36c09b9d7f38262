"""The attention weights of a model trained on Multi30k, for book/attention_maps.md.

Translates test sentences with a checkpoint (beam 4), runs the model once more on each
sentence and its translation with transformer.attention_weights, and writes the tokens and every
attention layer's weights (rounded to 3 decimals) to a JSON file the chapter plots, so the book
shows a real sentence without the Multi30k files or a checkpoint.

    python -m transformer average runs/m30k-en-de-tinypre --last 5 --out runs/m30k-en-de-tinypre/average.pt
    python benchmarks/attention_maps.py --checkpoint runs/m30k-en-de-tinypre/average.pt \\
        --data ../shared/data/multi30k --src en --tgt de --index 12 \\
        --out benchmarks/results/attention_multi30k.json
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from report import write_report
from transformer import attention_weights, load_corpus, load_model, translate
from transformer.tokenizer import BOS, EOS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", type=Path, required=True)
    parser.add_argument("--data", required=True, help="a folder of parallel files, as for train")
    parser.add_argument("--src", default="en")
    parser.add_argument("--tgt", default="de")
    parser.add_argument("--split", default="test")
    parser.add_argument("--index", type=int, nargs="+", default=[0], help="sentences of the split (default 0)")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/attention_multi30k.json"))
    args = parser.parse_args()
    model, tokenizer = load_model(args.checkpoint)
    pairs = load_corpus(args.data, args.src, args.tgt).splits[args.split]
    sentences = []
    for index in args.index:
        source, reference = pairs[index]
        output = translate(model, tokenizer, [source], beam_size=4)[0]
        src_ids = tokenizer.encode(source, add_special_tokens=False).ids + [EOS]
        out_ids = tokenizer.encode(output, add_special_tokens=False).ids + [EOS]
        with torch.no_grad():
            weights = attention_weights(model, torch.tensor([src_ids]), torch.tensor([[BOS, *out_ids[:-1]]]))
        sentences.append({
            "index": index, "source": source, "reference": reference, "output": output,
            "source_tokens": [tokenizer.id_to_token(i) for i in src_ids],
            "output_tokens": [tokenizer.id_to_token(i) for i in out_ids],
            "weights": {name: w[0].double().round(decimals=3).tolist() for name, w in weights.items()},
        })
        print(f"{index}: {source}\n   -> {output}")
    write_report(args.out, {"checkpoint": str(args.checkpoint), "split": args.split, "model_config":
                            model.config.to_dict(), "sentences": sentences})


if __name__ == "__main__":
    main()
