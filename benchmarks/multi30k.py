"""Score a Multi30k training run on test_2016_flickr: quality against training time, the
paper's recipe (beam search, checkpoint averaging) at a few time budgets, both BLEU scores
(sacreBLEU, and the lowercased tokenized BLEU of Multi30k papers) and chrF, and an error
analysis of the best system over the whole test set. Writes the file that book/results.md reads.

    python -m transformer train --data ../shared/data/multi30k --src en --tgt de \
        --max-minutes 60 --schedule paper --checkpoint-minutes 3 --keep-checkpoints 30 \
        --out runs/m30k-en-de
    python benchmarks/multi30k.py --run runs/m30k-en-de --data ../shared/data/multi30k \
        --src en --tgt de --out benchmarks/results/multi30k_en_de.json

A budget of t minutes is scored with the checkpoints written by then: the newest one, and the
average of those written in the last third of the budget (at most --average of them; the
paper averages the last 5, written at 10-minute intervals of a 12-hour run). The same numbers
come from `python -m transformer average FILES --out A.pt` and `python -m transformer evaluate
--checkpoint A.pt --data ../shared/data/multi30k --src en --tgt de --beam 4`.
"""

from __future__ import annotations

import argparse
import json
import re
from collections import Counter
from pathlib import Path

import numpy as np
import torch
from report import machine, write_report
from sacremoses import MosesPunctNormalizer, MosesTokenizer

from transformer import (
    average_checkpoints,
    evaluate,
    load_corpus,
    load_model,
    tokenized_bleu,
)
from transformer.checkpoints import load_checkpoint

# colour words of image captions: English name -> pattern of its forms in the target language
COLOURS = {
    "de": {"white": r"weiß(e[mnrs]?)?", "black": r"schwarz(e[mnrs]?)?", "red": r"rot(e[mnrs]?)?",
           "blue": r"blau(e[mnrs]?)?", "green": r"grün(e[mnrs]?)?", "yellow": r"gelb(e[mnrs]?)?",
           "orange": r"orange(n|[mnrs])?|orangefarben(e[mnrs]?)?", "pink": r"rosa|pink(e[mnrs]?)?",
           "purple": r"lila|violett(e[mnrs]?)?", "brown": r"braun(e[mnrs]?)?", "gray": r"grau(e[mnrs]?)?"},
    "fr": {"white": r"blanc(he)?s?", "black": r"noire?s?", "red": r"rouges?", "blue": r"bleue?s?",
           "green": r"verte?s?", "yellow": r"jaunes?", "orange": r"oranges?", "pink": r"roses?",
           "purple": r"violet(te)?s?", "brown": r"marrons?|brune?s?", "gray": r"grise?s?"},
}
ENGLISH_COLOURS = {name: name for name in COLOURS["de"]} | {"gray": r"gr[ae]y"}


def moses(lang: str):
    normalizer, tokenizer = MosesPunctNormalizer(lang), MosesTokenizer(lang)
    return lambda text: tokenizer.tokenize(normalizer.normalize(text.lower()), escape=False)


def colours(tokens: list[str], patterns: dict[str, str]) -> set[str]:
    parts = [part for t in tokens for part in t.split("-")]  # "saftig-grünes"
    return {name for name, p in patterns.items() if any(re.fullmatch(p, part) for part in parts)}


def analyse(pairs, hypotheses, train_targets, src, tgt) -> dict:
    """Where the system fails, counted over the whole test set."""
    src_tok, tgt_tok = moses(src), moses(tgt)
    sources = [src_tok(s) for s, _ in pairs]
    references = [tgt_tok(r) for _, r in pairs]
    outputs = [tgt_tok(h) for h in hypotheses]
    frequency = Counter(t for line in train_targets for t in tgt_tok(line))
    # recall of reference words by how often the training targets contain them
    bins = [(0, 0), (1, 4), (5, 19), (20, 99), (100, None)]
    recall = []
    for low, high in bins:
        found = total = 0
        for ref, out in zip(references, outputs):
            have = Counter(out)
            for word, n in Counter(ref).items():
                if frequency[word] >= low and (high is None or frequency[word] <= high):
                    found, total = found + min(n, have[word]), total + n
        recall.append({"train_count": f"{low}-{high}" if high is not None else f"{low}+",
                       "reference_words": total, "recall": found / max(total, 1)})
    # BLEU by source length
    lengths = np.array([len(s) for s in sources])
    by_length = []
    for low, high in [(1, 10), (11, 15), (16, 20), (21, 1000)]:
        chosen = [i for i, n in enumerate(lengths) if low <= n <= high]
        score = tokenized_bleu([hypotheses[i] for i in chosen], [pairs[i][1] for i in chosen], tgt)[0]
        by_length.append({"source_words": f"{low}-{high}" if high < 1000 else f"{low}+",
                          "sentences": len(chosen), "tokenized_bleu": score})
    # words copied from the source that the reference does not have
    def copied(out, source, ref):
        return [w for w in out if w.isalpha() and len(w) > 2 and w in source and w not in ref]
    copies = [copied(o, set(s), set(r)) for o, s, r in zip(outputs, sources, references)]
    # colours: named in the output but not in the source (invented), in the source but not the output (lost)
    invented, lost, named = [], [], 0
    for i, (s, o) in enumerate(zip(sources, outputs)):
        said, rendered = colours(s, ENGLISH_COLOURS), colours(o, COLOURS[tgt])
        named += len(said)
        invented += [(i, c) for c in rendered - said]
        lost += [(i, c) for c in said - rendered]
    def example(i):
        return {"source": pairs[i][0], "reference": pairs[i][1], "output": hypotheses[i]}
    untranslated = [i for i, c in enumerate(copies) if c]
    return {
        "length_ratio": sum(map(len, outputs)) / sum(map(len, references)),
        "sentences_shorter_by_20pct": float(np.mean([len(o) < 0.8 * len(r) for o, r in zip(outputs, references)])),
        "sentences_longer_by_20pct": float(np.mean([len(o) > 1.2 * len(r) for o, r in zip(outputs, references)])),
        "recall_by_training_frequency": recall,
        "bleu_by_source_length": by_length,
        "sentences_with_copied_words": len(untranslated),
        "copied_words": Counter(w for c in copies for w in c).most_common(10),
        "source_colours": named, "colours_invented": len(invented), "colours_lost": len(lost),
        "examples": {"copied": [example(i) | {"copied": copies[i]} for i in untranslated[:3]],
                     "colour_invented": [example(i) | {"colour": c} for i, c in invented[:3]],
                     "colour_lost": [example(i) | {"colour": c} for i, c in lost[:3]]},
        "exact_matches": sum(h == r for h, (_, r) in zip(hypotheses, pairs)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", type=Path, required=True, help="the training folder")
    parser.add_argument("--data", default="../shared/data/multi30k")
    parser.add_argument("--src", default="en")
    parser.add_argument("--tgt", default="de")
    parser.add_argument("--budgets", type=float, nargs="+", default=[10, 30, 60],
                        help="minutes of training at which to score the recipe (default 10 30 60)")
    parser.add_argument("--average", type=int, default=5, help="at most this many checkpoints averaged")
    parser.add_argument("--limit", type=int, help="score only the first N test sentences (a quick check)")
    parser.add_argument("--device", default="cpu", help="where the test set is decoded (cpu or cuda)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    corpus = load_corpus(args.data, args.src, args.tgt)
    pairs = corpus.splits["test"][: args.limit]
    metrics = [json.loads(line) for line in (args.run / "metrics.jsonl").read_text().splitlines()]
    timed = sorted({m["step"]: m["minutes"] for m in metrics if "minutes" in m}.items())
    checkpoints = sorted(args.run.glob("checkpoint-*.pt"))
    steps = [load_checkpoint(p)["step"] for p in checkpoints]
    minutes = np.interp(steps, [0, *(s for s, _ in timed)], [0, *(m for _, m in timed)]).tolist()
    model, tokenizer = load_model(checkpoints[-1])
    model.to(args.device)
    state = load_checkpoint(checkpoints[-1])

    def score(weights, beam):
        model.load_state_dict(weights)
        scores, hypotheses = evaluate(model, tokenizer, pairs, beam_size=beam, tgt_lang=args.tgt)
        print(f"  beam {beam}: {scores}", flush=True)
        return {"bleu": scores.bleu, "tokenized_bleu": scores.tokenized_bleu, "chrf": scores.chrf,
                "seconds": scores.seconds}, hypotheses, scores

    curve = []
    for path, step, minute in zip(checkpoints, steps, minutes):
        print(f"{path.name} ({minute:.1f} min)", flush=True)
        curve.append({"step": step, "minutes": minute, **score(load_checkpoint(path)["model"], 1)[0]})
    budgets, recipe = [], None
    for budget in [b for b in args.budgets if b <= minutes[-1] + 1] or [minutes[-1]]:
        written = [i for i, m in enumerate(minutes) if m <= budget + 1]
        last_third = [i for i in written if minutes[i] >= minutes[written[-1]] * 2 / 3][-args.average:]
        averaged = average_checkpoints([checkpoints[i] for i in last_third])
        print(f"budget {budget:g} min: {checkpoints[written[-1]].name}, average of {len(last_third)}", flush=True)
        rows = []
        for name, weights in [("final", load_checkpoint(checkpoints[written[-1]])["model"]),
                              (f"average of last {len(last_third)}", averaged["model"])]:
            for beam in (1, 4):
                row, hypotheses, scores = score(weights, beam)
                rows.append({"weights": name, "decoding": "greedy" if beam == 1 else f"beam {beam}", **row})
                if name != "final" and beam == 4:  # the recipe's output: analysed at the largest budget
                    recipe = (budget, scores, hypotheses, rows[-1])
        budgets.append({"minutes": budget, "step": steps[written[-1]], "minutes_trained": minutes[written[-1]],
                        "averaged": [checkpoints[i].name for i in last_third], "rows": rows})
    budget, scores, hypotheses, row = recipe
    print(f"analysing the system at {budget:g} min: {row['weights']}, {row['decoding']}", flush=True)
    train_targets = [t for _, t in corpus.splits["train"]]
    write_report(args.out, {
        "pair": f"{args.src}-{args.tgt}",
        "test_set": f"test_2016_flickr, {len(pairs)} sentences",
        "signature": scores.signature,
        "tokenized_signature": scores.tokenized_signature,
        "training": {"model_config": state["model_config"], "training_config": state["training_config"],
                     "steps": steps[-1], "minutes": minutes[-1],
                     "parameters": sum(p.numel() for p in model.parameters()),
                     "val_ppl_by_step": [[m["step"], m["val_ppl"]] for m in metrics if "val_ppl" in m]},
        "curve": curve,
        "budgets": budgets,
        "decoded_on": machine(torch.device(args.device)),
        "analysis": {"system": f"{budget:g} min, {row['weights']}, {row['decoding']}",
                     **analyse(pairs, hypotheses, train_targets, args.src, args.tgt)},
    })


if __name__ == "__main__":
    main()
