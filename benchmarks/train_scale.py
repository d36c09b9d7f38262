"""Training cost against corpus size, through the command line users run.

For each size, a parallel corpus of that many generated sentence pairs (random words of a fixed
lexicon, lengths like WMT's: 5 to 60 words) is written to disk, then `python -m transformer
train` runs twice on it in a fresh cache: the first run tokenizes the corpus and caches the
arrays, the second finds them. Reported per run: the time spent outside the training loop
(start-up and data preparation, and the final validation and checkpoint), the time per training step after the first logging window (median over
the logged windows), and the peak resident memory of the process. The same model and batch are
used for every size, so the step time should not depend on the size of the corpus.

    python benchmarks/train_scale.py --pairs 100000 2000000 --out benchmarks/results/train_scale_cpu.json
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from report import write_report

# The run of `python -m transformer train` in a child whose peak memory the wrapper reads.
WRAPPER = """
import resource, subprocess, sys
code = subprocess.run(sys.argv[1:]).returncode
print("peak_rss_kib", resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, flush=True)
sys.exit(code)
"""


def write_corpus(folder: Path, pairs: int, seed: int = 0) -> None:
    """train/val files of `pairs` (and 50) generated pairs; words from a 20000-word lexicon."""
    rng = np.random.default_rng(seed)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    lexicon = ["".join(rng.choice(letters, rng.integers(2, 10))) for _ in range(20000)]
    folder.mkdir(parents=True, exist_ok=True)
    for split, n in (("train", pairs), ("val", 50)):
        for lang in ("en", "de"):
            with open(folder / f"{split}.{lang}", "w") as file:
                for start in range(0, n, 100_000):
                    count = min(100_000, n - start)
                    lengths = rng.integers(5, 61, count)
                    words = rng.zipf(1.2, lengths.sum()) % len(lexicon)
                    cuts = np.cumsum(lengths)[:-1]
                    file.writelines(" ".join(lexicon[w] for w in s) + "\n" for s in np.split(words, cuts))


def run(corpus: Path, cache: Path, out: Path, args: argparse.Namespace) -> dict:
    command = [sys.executable, "-m", "transformer", "train", "--data", str(corpus), "--out", str(out),
               "--preset", "small", "--vocab-size", str(args.vocab_size), "--max-tokens", str(args.max_tokens),
               "--max-steps", str(args.steps), "--log-every", str(args.log_every), "--eval-every", "1000000",
               "--precision", "fp32", "--device", "cpu", "--cache-dir", str(cache), "--overwrite"]
    started = time.perf_counter()
    result = subprocess.run([sys.executable, "-c", WRAPPER, *command], capture_output=True, text=True)
    wall = time.perf_counter() - started
    if result.returncode != 0:
        raise SystemExit(f"training failed:\n{result.stdout}\n{result.stderr}")
    peak = int(result.stdout.rsplit("peak_rss_kib", 1)[1].split()[0]) * 1024
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    logged = [r for r in records if "loss" in r]
    windows = [(b["minutes"] - a["minutes"]) * 60 / (b["step"] - a["step"]) for a, b in zip(logged, logged[1:])]
    outside = wall - records[-1]["minutes"] * 60  # start-up, data preparation, final validation
    return {"outside_loop_s": outside, "step_s": statistics.median(windows), "peak_rss_gib": peak / 2**30,
            "wall_s": wall, "steps": logged[-1]["step"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, nargs="+", default=[100_000, 2_000_000])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--log-every", type=int, default=10)
    parser.add_argument("--max-tokens", type=int, default=1500)
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--work", type=Path, help="folder for the corpora and runs (default: a temporary one)")
    parser.add_argument("--out", type=Path, help="write the results to this JSON file")
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="train-scale-"))
    results = {}
    for pairs in args.pairs:
        corpus, cache = work / f"corpus-{pairs}", work / f"cache-{pairs}"
        started = time.perf_counter()
        if not (corpus / "train.en").is_file():  # kept by --work between runs of the script
            write_corpus(corpus, pairs)
        generated = time.perf_counter() - started  # 0 when --work held the corpus already
        shutil.rmtree(cache, ignore_errors=True)  # the first run tokenizes
        first = run(corpus, cache, work / f"run-{pairs}-first", args)
        second = run(corpus, cache, work / f"run-{pairs}-second", args)
        results[str(pairs)] = {"generate_s": generated, "first_run": first, "cached_run": second}
        print(f"{pairs:>9,} pairs: outside the loop {first['outside_loop_s']:.1f} s (tokenizing) / "
              f"{second['outside_loop_s']:.1f} s (cached); {first['step_s'] * 1e3:.0f} / {second['step_s'] * 1e3:.0f} ms a step; peak RSS "
              f"{first['peak_rss_gib']:.2f} / {second['peak_rss_gib']:.2f} GiB", flush=True)
    if len(args.pairs) > 1:
        small, large = (results[str(p)]["cached_run"]["step_s"] for p in (min(args.pairs), max(args.pairs)))
        print(f"step time, {max(args.pairs):,} pairs / {min(args.pairs):,} pairs: {large / small:.3f}")
    if args.out:
        settings = {k: v for k, v in vars(args).items() if k not in ("work", "out")}
        write_report(args.out, {"settings": settings, "results": results})


if __name__ == "__main__":
    main()
