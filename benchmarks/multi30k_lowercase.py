"""Multi30k as Multi30k papers train on it: every split lowercased, punctuation normalised and
Moses-tokenized (the dataset's task1-tokenize.sh, with sacremoses, the steps tokenized_bleu
applies before scoring; no escaping, so scoring re-tokenizes the output unchanged). Writes
SPLIT.LANG files that `python -m transformer train --data FOLDER` reads.

    python benchmarks/multi30k_lowercase.py ../shared/data/multi30k runs/m30k-lc-data
    python -m transformer train --data runs/m30k-lc-data --src en --tgt de --max-minutes 60 --schedule paper \\
        --checkpoint-minutes 2 --keep-checkpoints 30 --out runs/m30k-en-de-lc

Only the lowercased tokenized BLEU of such a model compares with the literature; its sacreBLEU
column is computed against lowercased, tokenized references and means nothing.
"""

from __future__ import annotations

import argparse
import gzip
from pathlib import Path

from sacremoses import MosesPunctNormalizer, MosesTokenizer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("source", type=Path, help="a folder of SPLIT.LANG[.gz] files")
    parser.add_argument("out", type=Path, help="a new folder for the lowercased, tokenized files")
    args = parser.parse_args()
    files = sorted(p for p in args.source.iterdir() if p.name.count(".") in (1, 2) and p.suffix != ".md")
    if not files:
        raise SystemExit(f"no SPLIT.LANG files in {args.source}")
    args.out.mkdir(parents=True, exist_ok=False)
    for path in files:
        name = path.name.removesuffix(".gz")
        lang = name.rsplit(".", 1)[1]
        normalizer, tokenizer = MosesPunctNormalizer(lang), MosesTokenizer(lang)
        with (gzip.open if path.suffix == ".gz" else open)(path, "rt", encoding="utf-8") as f:
            lines = [tokenizer.tokenize(normalizer.normalize(line.rstrip("\n").lower()), escape=False,
                                       return_str=True) for line in f]
        (args.out / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
        print(f"{name}: {len(lines)} lines")


if __name__ == "__main__":
    main()
