"""Score a Multi30k training run on test_2016_flickr: greedy, beam 4, and both on the average
of the last 5 checkpoints, with sacreBLEU. Writes the results file that book/results.md reads.

    python -m transformer train --data ../shared/data/multi30k --src en --tgt de \
        --vocab-size 8000 --max-tokens 4000 --max-minutes 55 --checkpoint-minutes 4 \
        --keep-checkpoints 12 --eval-every 400 --out runs/m30k
    python benchmarks/multi30k.py --run runs/m30k --data ../shared/data/multi30k \
        --out benchmarks/results/multi30k.json

The same numbers come from the commands `python -m transformer average runs/m30k --last 5
--out runs/m30k/average.pt` and `python -m transformer evaluate --checkpoint C --data
../shared/data/multi30k --beam 1|4` on the newest checkpoint and on the average.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from report import write_report
from transformer import average_checkpoints, evaluate, last_checkpoints, load_corpus, load_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", type=Path, required=True, help="the training folder")
    parser.add_argument("--data", default="../shared/data/multi30k")
    parser.add_argument("--average", type=int, default=5, help="checkpoints to average (default 5)")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/multi30k.json"))
    args = parser.parse_args()
    corpus = load_corpus(args.data, "en", "de")
    pairs = corpus.splits["test"]
    newest = last_checkpoints(args.run, 1)[0]
    model, tokenizer = load_model(newest)
    averaged = average_checkpoints(last_checkpoints(args.run, args.average))
    metrics = [json.loads(line) for line in (args.run / "metrics.jsonl").read_text().splitlines()]
    last = [m for m in metrics if "val_ppl" in m][-1]
    rows, signature = [], None
    for weights_name, weights in [("final", None), (f"average of last {args.average}", averaged["model"])]:
        if weights is not None:
            model.load_state_dict(weights)
        for beam in (1, 4):
            scores, _ = evaluate(model, tokenizer, pairs, beam_size=beam)
            signature = scores.signature
            rows.append({"weights": weights_name, "decoding": "greedy" if beam == 1 else f"beam {beam}",
                         "bleu": scores.bleu, "chrf": scores.chrf, "exact_match": scores.exact_match, "seconds": scores.seconds})
            print(f"{weights_name:18} {rows[-1]['decoding']:7} {scores}", flush=True)
    write_report(args.out, {
        "test_set": f"test_2016_flickr, {len(pairs)} sentences",
        "signature": signature,
        "training": {"steps": last["step"], "minutes": max(m.get("minutes", 0) for m in metrics),
                     "val_ppl": last["val_ppl"], "checkpoint": newest.name,
                     "val_ppl_by_step": [[m["step"], m["val_ppl"]] for m in metrics if "val_ppl" in m],
                     "averaged": [Path(p).name for p in averaged["averaged_from"]],
                     "parameters": sum(p.numel() for p in model.parameters())},
        "rows": rows,
    })

if __name__ == "__main__":
    main()
