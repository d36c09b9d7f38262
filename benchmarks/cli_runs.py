"""A recipe as a user runs it: the plain `train` command, then `evaluate` on its run folder
(the final model: the newest checkpoint after a planned schedule, the average of the last
ones after the paper's), once per seed; the spread over seeds recorded as min / median / max.

    python benchmarks/cli_runs.py --seeds 0 1 2 --data ../shared/data/multi30k --src en \\
        --tgt de --out runs/cli10.json -- --max-minutes 10

Everything after `--` goes to `train` as given. Each seed trains into runs/cli-SEED (or
--runs), then `evaluate` scores the validation split (where recipes are compared) and the
test split (beam 4, alpha 0.6, the defaults). A seed changes the initial weights, the
dropout masks and the order of the batches, as a run on another machine would in effect.

--alphas chooses the length penalty as the paper chose its alpha, on the validation split:
each seed's final model scores the validation split with each alpha named, and the test split
is scored with the one of highest validation BLEU (and with the default, beside it).
--score RECORD skips training: it scores the runs in --runs that RECORD's seeds trained (their
train command, steps and final model copied from RECORD). --newest also scores each run's
newest checkpoint on both splits, beside the final model (the average of the last ones).
--merge RECORDS trains and scores nothing: it writes the seeds of records of one recipe, each
run alone (one seed at a time, say, in turn with another recipe's seeds, so that both see the
same hours of a machine whose speed drifts), as one record of that recipe. The records must
name the same options, commit and machine; the merged record keeps theirs, and each one's
command and date under "parts".

    python benchmarks/cli_runs.py --seeds 1 --data ../shared/data/multi30k --src en --tgt de \
        --runs runs/lc3 --alphas 0.6 0.8 1.0 1.2 1.4 1.6 \
        --out benchmarks/results/multi30k_en_de_lc_cli_alpha.json -- --lowercase --max-minutes 60 \
        --schedule paper
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from report import spread, write_report
from transformer.checkpoints import newest_checkpoints
from transformer.cli import main as cli
from transformer.runs import Schedule

REPO = Path(__file__).resolve().parent.parent


def run(command: list[str]) -> list[str]:
    """Run a command of the package's CLI from the repository; its output lines."""
    print("$", " ".join(command), flush=True)
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"{' '.join(command)} failed ({done.returncode}):\n{done.stderr}")
    return done.stdout.splitlines()


def train(args: argparse.Namespace, seed: int, out: Path, data: list[str]) -> dict:
    command = [sys.executable, "-m", "transformer", "train", *data, *args.train,
               "--seed", str(seed), "--out", str(out), "--overwrite"]
    started = time.perf_counter()
    output = run(command)
    result = {"train": " ".join(["python", *command[1:]]),
              "train_seconds": round(time.perf_counter() - started, 1)}
    done = next(line for line in output if line.startswith("done: "))
    result["steps"] = int(re.match(r"done: (\d+) steps", done)[1])
    result["final_model"] = next(line for line in output if line.startswith("final model"))
    # what train said it trains (device, precision) and, for a planned schedule, its plan
    # (the "batch" line that records before issue 95 hold is no longer printed)
    result["training"] = next(line for line in output if line.startswith("training "))
    # and from issue 95 on, the run's whole plan as it saved it: every setting (precision,
    # batch, P_drop, schedule, budget) and where it came from, written by the run itself
    if (out / "plan.json").is_file():
        result["plan"] = json.loads((out / "plan.json").read_text())
    result["schedule"] = schedule_said(output, result.get("plan"))
    return result


def schedule_said(output: list[str], plan: dict | None) -> str:
    """A run's schedule in words: from issue 110 on, its plan's last one (its shape, then
    why); before, the line train printed for a planned schedule, else "the paper's"."""
    if plan and plan.get("schedule"):
        schedule = Schedule(**plan["schedule"])
        return f"{schedule.describe()} ({schedule.why})"
    plans = [line for line in output if line.startswith("schedule planned for")]
    return plans[0] if plans else "the paper's"


def evaluate(out: Path, data: list[str], split: str, scores: Path, alpha: float | None = None) -> dict:
    """evaluate's scores of the run folder (or checkpoint) `out` on `split`, and its command.
    The command runs in this process (cli.main, what `python -m transformer` calls), which
    scores as a new process would and saves starting one for each split and alpha."""
    options = [] if alpha is None else ["--alpha", str(alpha)]
    command = ["evaluate", "--checkpoint", str(out), *data, "--split", split, *options]
    print("$ python -m transformer", " ".join(command), flush=True)
    if cli([*command, "--json", str(scores)]) != 0:
        raise SystemExit(f"evaluate {' '.join(command[1:])} failed")
    record = json.loads(scores.read_text().splitlines()[-1])
    keys = ("bleu", "tokenized_bleu", "chrf", "signature", "tokenized_signature")
    return {**{key: record[key] for key in keys}, "evaluate": " ".join(["python -m transformer", *command])}


def one_seed(args: argparse.Namespace, seed: int, scores: Path) -> dict:
    out = args.runs / f"cli-{seed}"
    data = ["--data", str(args.data), "--src", args.src, "--tgt", args.tgt]
    if args.score:
        trained = json.loads(args.score.read_text())["seeds"][str(seed)]
        result = {key: trained[key] for key in ("train", "train_seconds", "steps", "final_model")}
        found = newest_checkpoints(out, 1)
        newest = int(found[0].stem.removeprefix("checkpoint-")) if found else None
        if newest != trained["steps"]:
            raise SystemExit(f"{out} is not the run of {args.score}'s seed {seed}: its newest "
                             f"checkpoint is of step {newest}, the record's run ended at {trained['steps']}")
    else:
        result = train(args, seed, out, data)
    for split in ("val", "test"):
        result[split] = evaluate(out, data, split, scores)
    result["evaluate"] = result["test"].pop("evaluate")
    if args.newest:
        newest = newest_checkpoints(out, 1)[0]
        for split in ("val", "test"):
            result[f"{split}_newest"] = evaluate(newest, data, split, scores)
    if args.alphas:
        result["val_by_alpha"] = {str(a): evaluate(out, data, "val", scores, a) for a in args.alphas}
        best = max(args.alphas, key=lambda a: result["val_by_alpha"][str(a)]["bleu"])
        result["alpha"] = best
        result["test_best_alpha"] = evaluate(out, data, "test", scores, best)
    print({split: result[split]["bleu"] for split in ("val", "test")}, result["steps"],
          result.get("alpha"), flush=True)
    return result


def summarise(seeds: dict) -> dict:
    """The spread over seeds of each score the runs have (and of their updates)."""
    summary = {f"{split}_{score}": spread([s[split][score] for s in seeds.values()])
               for split in ("val", "test") for score in ("bleu", "tokenized_bleu")}
    summary["steps"] = spread([s["steps"] for s in seeds.values()])
    if all("val_newest" in s for s in seeds.values()):
        summary |= {f"{split}_newest_{score}": spread([s[f"{split}_newest"][score] for s in seeds.values()])
                    for split in ("val", "test") for score in ("bleu", "tokenized_bleu")}
    if all("test_best_alpha" in s for s in seeds.values()):
        summary["test_best_alpha_tokenized_bleu"] = spread(
            [s["test_best_alpha"]["tokenized_bleu"] for s in seeds.values()])
    return summary


def recipe(command: str) -> list[str]:
    """A record's command without its --seeds, --out and --runs (also as --option=VALUE):
    what runs of one recipe have in common."""
    words, kept = shlex.split(command), []
    while words:
        word = words.pop(0)
        if word in ("--out", "--runs"):
            words.pop(0)
        elif word == "--seeds":
            while words and words[0].isdigit():
                words.pop(0)
        elif word.partition("=")[0] not in ("--out", "--runs", "--seeds"):
            kept.append(word)
    return kept


MERGED = ("command", "date", "wall_s", "seeds", "machine", "git", "versions", "hardware")


def merge(paths: list[Path]) -> dict:
    """One record of the seeds of the records at `paths` (see --merge): their seeds, spread,
    commit, machine and software, and each one's command, date and wall time."""
    parts = [json.loads(path.read_text()) for path in paths]
    for path, part in zip(paths, parts):
        if missing := [key for key in MERGED if key not in part]:
            raise SystemExit(f"{path} is not a record of cli_runs.py: it lacks {missing}")
    same = {"options": lambda p: recipe(p["command"]), "trained commit": lambda p: p.get("trained"),
            **{key: lambda p, key=key: p.get(key) for key in ("git", "hardware", "versions", "torch")}}
    for key, value in same.items():
        values = [value(p) for p in parts]
        if any(v != values[0] for v in values):
            raise SystemExit(f"records of different {key} cannot be merged: "
                             + "; ".join(f"{path}: {v}" for path, v in zip(paths, values)))
    seeds = {}
    for path, part in zip(paths, parts):
        if twice := set(seeds) & set(part["seeds"]):
            raise SystemExit(f"seed {', '.join(sorted(twice))} of {path} is in another record too")
        seeds |= part["seeds"]
    seeds = dict(sorted(seeds.items(), key=lambda item: int(item[0])))
    first = parts[0]
    kept = ("machine", "torch", "git", "versions", "hardware", "trained")
    return {key: first[key] for key in kept if key in first} | {
        "date": max(p["date"] for p in parts),
        "wall_s": round(sum(p["wall_s"] for p in parts), 1),
        "parts": [{key: p[key] for key in ("command", "date", "wall_s")} for p in parts],
        "seeds": seeds, "spread": summarise(seeds)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--data", type=Path, help="a folder of parallel files")
    parser.add_argument("--src", default="en")
    parser.add_argument("--tgt", default="de")
    parser.add_argument("--runs", type=Path, default=Path("runs"), help="where the run folders go")
    parser.add_argument("--alphas", type=float, nargs="+",
                        help="length penalties tried on the validation split; the best scores test")
    parser.add_argument("--score", type=Path, metavar="RECORD",
                        help="do not train: score the runs in --runs that RECORD's seeds trained")
    parser.add_argument("--newest", action="store_true",
                        help="also score each run's newest checkpoint, beside its final model")
    parser.add_argument("--merge", type=Path, nargs="+", metavar="RECORD",
                        help="do not train: one record of these records' seeds (one recipe's)")
    parser.add_argument("--out", type=Path, required=True, help="the JSON record to write")
    parser.add_argument("train", nargs=argparse.REMAINDER, help="-- then the options of train")
    args = parser.parse_args()
    args.train = args.train[1:] if args.train[:1] == ["--"] else args.train
    if args.merge:
        if args.data or args.score or args.newest or args.alphas or args.train:
            parser.error("--merge trains and scores nothing: give it records and --out alone")
        write_report(args.out, merge(args.merge))
        return
    if args.data is None:
        parser.error("--data is required (unless --merge)")
    seeds = {}
    with tempfile.TemporaryDirectory() as work:
        for seed in args.seeds:
            seeds[str(seed)] = one_seed(args, seed, Path(work) / "scores.jsonl")
    report = {"seeds": seeds, "spread": summarise(seeds)}
    if args.score:  # the runs were trained at the commit of that record
        trained = json.loads(args.score.read_text())
        report["trained"] = {"record": str(args.score), "git": trained.get("git")}
    write_report(args.out, report)


if __name__ == "__main__":
    main()
