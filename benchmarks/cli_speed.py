"""Training speed of the plain command, this checkout against an earlier commit, side by side.

Each side runs `python -m transformer train --data DATA --src SRC --tgt TGT --max-steps N
--log-every L` (the command's defaults for everything else: its preset, precision and batches
for that corpus) in a fresh process, the two sides in turn (which goes first alternating),
--repeats times. A run's rate is
the median of the target tokens/s it logged (metrics.jsonl), the first interval left out
(tokenizer and caches warm, the allocator's first steps); the record gives each side's rates
(min / median / max over repeats), the ratio of the medians, the precision and preset each
run logged, and the two commits. The earlier commit runs from a `git worktree` in a temporary
folder with this checkout's Python environment (its own `transformer` package imported:
checked). Each side prepares the corpus once, untimed, in its own cache. Flags after `--` go
to both sides' train.

    python benchmarks/cli_speed.py --baseline f9968bd --data ../shared/data/multi30k \\
        --src en --tgt de --steps 300 --log-every 50 --repeats 3 \\
        --out benchmarks/results/cli_speed_multi30k.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

from report import machine, spread, write_report

ROOT = Path(__file__).resolve().parent.parent


def git(*args: str, cwd: Path = ROOT) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def data_option(data: str) -> str:
    """--data as both sides get it: a corpus name (numbers, hub:NAME) as given; a folder as
    an absolute path, since the baseline runs from another folder."""
    if data == "numbers" or data.startswith("hub:"):
        return data
    return str(Path(data).resolve())


def train(checkout: Path, args, out: Path, cache: Path, steps: int) -> dict:
    """One run of the command from `checkout`: its logged rates and what it said it ran."""
    command = [sys.executable, "-m", "transformer", "train", "--data", data_option(args.data),
               "--src", args.src, "--tgt", args.tgt, "--max-steps", str(steps),
               "--log-every", str(args.log_every), "--cache-dir", str(cache), "--out", str(out),
               "--overwrite", *args.flags]
    done = subprocess.run(command, cwd=checkout, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"train failed in {checkout}:\n{done.stderr[-3000:]}")
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    rates = [r["tokens_per_s"] for r in records if "tokens_per_s" in r]
    device_line = next((line for line in done.stdout.splitlines() if "process(es)" in line), "")
    return {"rates": rates, "says": device_line.strip()}


def package_file(checkout: Path) -> Path:
    """The `transformer` that `python -m transformer` finds from `checkout` (found as an import
    finds it, without running it: importing it would import torch, for seconds)."""
    find = "import importlib.util; print(importlib.util.find_spec('transformer').origin)"
    found = subprocess.run([sys.executable, "-c", find], cwd=checkout, check=True, capture_output=True,
                           text=True).stdout.strip()
    return Path(found).resolve()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", required=True, help="the earlier commit")
    parser.add_argument("--data", required=True,
                        help="a folder of parallel files, or a corpus name (numbers, hub:NAME)")
    parser.add_argument("--src", default="en")
    parser.add_argument("--tgt", default="de")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--log-every", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("flags", nargs="*", help="more flags of train, for both sides (after --)")
    args = parser.parse_args()
    if args.steps < 3 * args.log_every:
        parser.error(f"--steps must give at least 3 logged intervals; got {args.steps} steps "
                     f"at --log-every {args.log_every}")
    baseline = git("rev-parse", "--verify", f"{args.baseline}^{{commit}}")
    with tempfile.TemporaryDirectory() as work:
        work = Path(work)
        sides = {"this checkout": ROOT, "baseline": work / "baseline"}
        git("worktree", "add", "--detach", str(sides["baseline"]), baseline)
        try:
            for name, checkout in sides.items():
                found = package_file(checkout)
                if not found.is_relative_to(checkout.resolve()):
                    raise RuntimeError(f"{name} imports transformer from {found}, not from {checkout}")
                train(checkout, args, work / f"prepare-{name[:4]}", work / f"cache-{name[:4]}", 1)
            runs = {name: [] for name in sides}
            for repeat in range(args.repeats):  # the two in turn, the first of each pair alternating
                order = list(sides.items())[:: 1 if repeat % 2 == 0 else -1]
                for name, checkout in order:
                    run = train(checkout, args, work / f"run-{name[:4]}", work / f"cache-{name[:4]}", args.steps)
                    runs[name].append(run)
                    print(f"repeat {repeat + 1}, {name}: {statistics.median(run['rates'][1:]):,.0f} tokens/s "
                          f"({run['says']})", flush=True)
        finally:
            git("worktree", "remove", "--force", str(sides["baseline"]))
    results = {}
    for name, side in runs.items():
        medians = [statistics.median(run["rates"][1:]) for run in side]
        results[name] = {"tokens_per_s": spread(medians), "runs": side}
    ratio = results["this checkout"]["tokens_per_s"]["median"] / results["baseline"]["tokens_per_s"]["median"]
    print(f"this checkout / baseline {baseline[:7]}: {ratio:.2f}x")
    write_report(args.out, {"device": machine(torch.device("cpu")), "args": {k: str(v) for k, v in vars(args).items()},
                            "baseline_commit": baseline, "results": results, "ratio": ratio},
                 torch.device("cpu"))


if __name__ == "__main__":
    main()
