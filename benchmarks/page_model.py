"""A trained run as a model of the in-page translator: its final model exported as ONNX with
float32 and with int8 weights, each scored on the test split as the page runs it
(onnxruntime, OnnxTranslator's greedy decoding and beam search), beside PyTorch's translate
of the same checkpoint, and its maps.onnx (the explorer's weights) compared with PyTorch's
attention_weights on the first test sentences; the int8 folder then goes to
web/models/NAME, which tools/web.py puts into the built book. Those files are committed (a
few MB): the book's build cannot make them, as it has neither the corpus nor the training.

    python benchmarks/page_model.py --run runs/gpu/lc/cli-0 --data ../shared/data/multi30k \\
        --src en --tgt de --name multi30k-en-de \\
        --label "Multi30k, English to German (tiny preset, lowercased, the GPU recipe; int8)" \\
        --out benchmarks/results/page_model_multi30k_en_de.json
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
from report import REPO, write_report

sys.path.insert(0, str(REPO))
from transformer import (  # noqa: E402
    OnnxTranslator,
    export_onnx,
    final_model,
    load_corpus,
    load_model,
    translate,
)
from transformer.attention_maps import attention_weights  # noqa: E402
from transformer.decoding import encode_sources  # noqa: E402
from transformer.evaluation import corpus_bleu, tokenized_bleu  # noqa: E402
from transformer.tokenizer import lowercases  # noqa: E402


def scores(hypotheses: list[str], references: list[str], lowercase: bool, lang: str) -> dict:
    return {"bleu": corpus_bleu(hypotheses, references, lowercase)[0],
            "tokenized_bleu": tokenized_bleu(hypotheses, references, lang)[0]}


def maps_difference(model, translator: OnnxTranslator, sources: list[str]) -> dict:
    """The largest difference, over every weight of every layer, head and kind, between
    the exported maps.onnx and PyTorch's attention_weights, each reading a sentence and its
    greedy translation (the translator's)."""
    worst = {}
    for src in encode_sources(translator.tokenizer, sources, translator.meta["max_len"]):
        ids, steps = translator.greedy(src)
        output = [*ids, translator.meta["eos_id"]][: len(steps)]
        maps = translator.attention_maps(src, output)
        tgt = torch.tensor([[translator.meta["bos_id"], *output[:-1]]])
        for key, w in attention_weights(model, torch.tensor([src]), tgt).items():
            difference = float(np.abs(maps[key] - w[0].numpy()).max())
            worst[key] = max(worst.get(key, 0.0), difference)
    return {"sentences": len(sources), "max_abs": max(worst.values()), "by_layer": worst}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", type=Path, required=True, help="a training run's folder")
    parser.add_argument("--data", required=True)
    parser.add_argument("--src", required=True)
    parser.add_argument("--tgt", required=True)
    parser.add_argument("--split", default="test")
    parser.add_argument("--name", required=True, help="the folder under web/models")
    parser.add_argument("--label", required=True, help="the model's name in the page")
    parser.add_argument("--examples", type=int, default=4, help="test sentences shown")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    checkpoint = final_model(args.run)
    model, tokenizer = load_model(checkpoint)
    pairs = load_corpus(args.data, args.src, args.tgt).splits[args.split]
    sources, references = [s for s, _ in pairs], [t for _, t in pairs]
    lowercase = lowercases(tokenizer)
    about = {"label": args.label, "corpus": f"{Path(args.data).name} {args.src}-{args.tgt}",
             "checkpoint": checkpoint.name, "record": f"benchmarks/results/{args.out.name}",
             "examples": sources[: args.examples]}
    results = {"checkpoint": str(checkpoint), "split": args.split, "sentences": len(pairs),
               "lowercase": lowercase, "variants": {}}
    outputs = {}
    for k in (1, 4):
        outputs[("torch", k)] = translate(model, tokenizer, sources, beam_size=k)
        results["variants"].setdefault("torch", {})[f"beam {k}"] = scores(
            outputs[("torch", k)], references, lowercase, args.tgt)
    with tempfile.TemporaryDirectory() as temporary:
        for weights in ("float32", "int8"):
            folder = Path(temporary) / weights
            export_onnx(model, tokenizer, folder, about, int8=weights == "int8")
            translator = OnnxTranslator(folder)
            variant = {"megabytes": {f.name: f.stat().st_size / 1e6
                                     for f in sorted(folder.iterdir())}}
            for k in (1, 4):
                outputs[(weights, k)] = translator.translate(sources, beam_size=k)
                variant[f"beam {k}"] = scores(outputs[(weights, k)], references,
                                              lowercase, args.tgt)
                variant[f"beam {k}"]["same_as_torch"] = sum(
                    a == b for a, b in zip(outputs[(weights, k)], outputs[("torch", k)]))
            variant["maps_vs_torch"] = maps_difference(model, translator, sources[:20])
            results["variants"][weights] = variant
            print(weights, {k: v for k, v in variant.items() if k != "megabytes"},
                  flush=True)
        target = REPO / "web" / "models" / args.name
        if target.exists():
            shutil.rmtree(target)
        shutil.copytree(Path(temporary) / "int8", target)
    results["page_model"] = f"web/models/{args.name}"
    write_report(args.out, results)


if __name__ == "__main__":
    main()
