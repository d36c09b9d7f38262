"""A recipe as a user runs it: the plain `train` command, then `evaluate` on its run folder
(the final model, the average of the run's last checkpoints), once per seed; the spread over
seeds recorded as min / median / max.

    python benchmarks/cli_runs.py --seeds 0 1 2 --data ../shared/data/multi30k --src en \\
        --tgt de --out benchmarks/results/multi30k_en_de_10min_cli.json -- --max-minutes 10

Everything after `--` goes to `train` as given. Each seed trains into runs/cli-SEED (or
--runs), then `evaluate` scores the validation split (where recipes are compared) and the
test split (beam 4, alpha 0.6, the defaults). A seed changes the initial weights, the
dropout masks and the order of the batches, as a run on another machine would in effect.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from report import write_report

REPO = Path(__file__).resolve().parent.parent


def run(command: list[str]) -> list[str]:
    """Run a command of the package's CLI from the repository; its output lines."""
    print("$", " ".join(command), flush=True)
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"{' '.join(command)} failed ({done.returncode}):\n{done.stderr}")
    return done.stdout.splitlines()


def one_seed(args: argparse.Namespace, seed: int, scores: Path) -> dict:
    out = args.runs / f"cli-{seed}"
    data = ["--data", str(args.data), "--src", args.src, "--tgt", args.tgt]
    train = [sys.executable, "-m", "transformer", "train", *data, *args.train,
             "--seed", str(seed), "--out", str(out), "--overwrite"]
    started = time.perf_counter()
    output = run(train)
    result = {"train": " ".join(["python", *train[1:]]), "train_seconds": round(time.perf_counter() - started, 1)}
    done = next(line for line in output if line.startswith("done: "))
    result["steps"] = int(re.match(r"done: (\d+) steps", done)[1])
    result["final_model"] = next(line for line in output if line.startswith("final model"))
    for split in ("val", "test"):
        evaluate = [sys.executable, "-m", "transformer", "evaluate", "--checkpoint", str(out),
                    *data, "--split", split, "--json", str(scores)]
        run(evaluate)
        record = json.loads(scores.read_text().splitlines()[-1])
        result[split] = {key: record[key] for key in
                         ("bleu", "tokenized_bleu", "chrf", "signature", "tokenized_signature")}
    result["evaluate"] = " ".join(["python", *evaluate[1:-2]])  # without --json
    print({split: result[split]["bleu"] for split in ("val", "test")}, result["steps"], flush=True)
    return result


def spread(values: list[float]) -> dict[str, float]:
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--data", type=Path, required=True, help="a folder of parallel files")
    parser.add_argument("--src", default="en")
    parser.add_argument("--tgt", default="de")
    parser.add_argument("--runs", type=Path, default=Path("runs"), help="where the run folders go")
    parser.add_argument("--out", type=Path, required=True, help="the JSON record to write")
    parser.add_argument("train", nargs=argparse.REMAINDER, help="-- then the options of train")
    args = parser.parse_args()
    args.train = args.train[1:] if args.train[:1] == ["--"] else args.train
    seeds = {}
    with tempfile.TemporaryDirectory() as work:
        for seed in args.seeds:
            seeds[str(seed)] = one_seed(args, seed, Path(work) / "scores.jsonl")
    summary = {f"{split}_{score}": spread([s[split][score] for s in seeds.values()])
               for split in ("val", "test") for score in ("bleu", "tokenized_bleu")}
    summary["steps"] = spread([s["steps"] for s in seeds.values()])
    write_report(args.out, {"seeds": seeds, "spread": summary})


if __name__ == "__main__":
    main()
