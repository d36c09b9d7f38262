"""The traced beam search against the untraced one: the same output, and no cost to the search
that is not traced.

1. Outputs: each sentence decoded by the untraced search and by the traced one (beam 4, alpha
   0.6), tokens and score compared: with PyTorch (`beam_search(trace=...)` against
   `beam_search`) on the test sentences of a checkpoint's corpus, and with the exported model
   of the page (`OnnxTranslator.trace` against `OnnxTranslator.beam`) on the sentences of
   --sentences-from (a file of one sentence a line, .gz or not).
2. Speed: `translate` (beam 4, the function `evaluate` and the CLI call) over the checkpoint's
   test sentences (the fastest of 5 passes), in a fresh process from this checkout and from --baseline (a commit before
   the trace, from a `git worktree`, its own `transformer` imported: checked), the two in
   turn, --repeats times; the record gives each side's seconds (min / median / max) and the
   ratio of the medians.

    python benchmarks/beam_trace.py --baseline 23e902e \\
        --sentences-from ../shared/data/multi30k/test_2016_flickr.en.gz \\
        --out benchmarks/results/beam_trace.json
"""

from __future__ import annotations

import argparse
import gzip
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

from report import spread, write_report
from transformer import OnnxTranslator, beam_search, final_model, load_model, number_corpus
from transformer.decoding import BeamTrace, encode_sources

ROOT = Path(__file__).resolve().parent.parent
PASSES = 5  # translate's passes over the sentences in each process: the fastest is its time
TIMED = """
import json, sys, time
import torch
from transformer import load_model, translate
torch.set_num_threads({threads})
model, tokenizer = load_model({checkpoint!r})
sources = json.loads({sources!r})
translate(model, tokenizer, sources[:64], beam_size=4)  # warm-up
passes = []
for _ in range({passes}):
    start = time.perf_counter()
    translate(model, tokenizer, sources, beam_size=4)
    passes.append(time.perf_counter() - start)
import transformer
print(json.dumps({{"seconds": min(passes), "package": transformer.__file__}}))
"""


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, check=True, capture_output=True,
                          text=True).stdout.strip()


def torch_outputs(checkpoint: Path, sources: list[str]) -> dict:
    """Traced against untraced beam_search, one sentence at a time."""
    model, tokenizer = load_model(checkpoint)
    model.eval()
    same = 0
    for ids in encode_sources(tokenizer, sources, model.config.max_len):
        src = torch.tensor([ids])
        trace = BeamTrace(ids, 4, 0.6)
        traced, plain = beam_search(model, src, 4, 0.6, trace=trace), beam_search(model, src, 4, 0.6)
        same += bool(torch.equal(traced.tokens, plain.tokens) and torch.equal(traced.scores, plain.scores)
                     and trace.finished[0][0] == [i for i in plain.tokens[0, 0].tolist() if i])
    return {"sentences": len(sources), "same_tokens_and_scores": same}


def onnx_outputs(folder: Path, sources: list[str]) -> dict:
    """OnnxTranslator.trace's winner against OnnxTranslator.beam's output."""
    translator = OnnxTranslator(folder)
    eos, same = translator.meta["eos_id"], 0
    for sentence, ids in zip(sources, encode_sources(translator.tokenizer, sources, translator.meta["max_len"])):
        best = translator.trace(sentence).finished[0][0]
        same += translator.beam(ids)[0] == (best[:-1] if best[-1] == eos else best)
    model = folder.resolve()
    return {"model": str(model.relative_to(ROOT) if model.is_relative_to(ROOT) else model),
            "sentences": len(sources), "same_tokens": same}


def timed(checkout: Path, checkpoint: Path, sources: list[str], threads: int) -> dict:
    code = TIMED.format(threads=threads, checkpoint=str(checkpoint), sources=json.dumps(sources),
                        passes=PASSES)
    done = subprocess.run([sys.executable, "-c", code], cwd=checkout, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"translate failed in {checkout}:\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout.splitlines()[-1])
    if not Path(result["package"]).resolve().is_relative_to(checkout.resolve()):
        raise RuntimeError(f"{checkout} imported transformer from {result['package']}")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", type=Path, help="a number-corpus model: a checkpoint or a "
                        "run folder (its final model); default: the book's number model")
    parser.add_argument("--baseline", required=True, help="a commit before the trace")
    parser.add_argument("--onnx", type=Path, default=ROOT / "web" / "models" / "multi30k-en-de")
    parser.add_argument("--sentences-from", type=Path, help="sentences for the exported model")
    parser.add_argument("--sentences", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.checkpoint is None:  # the chapters' run, trained once and cached
        from transformer._book import small_number_run, train_once

        args.checkpoint = train_once(*small_number_run())[0].out
    checkpoint = final_model(args.checkpoint) if args.checkpoint.is_dir() else args.checkpoint
    numbers = [src for src, _ in number_corpus().splits["test"][: args.sentences]]
    results = {"torch": torch_outputs(checkpoint, numbers)}
    print(results, flush=True)
    if args.sentences_from:
        opener = gzip.open if args.sentences_from.suffix == ".gz" else open
        with opener(args.sentences_from, "rt", encoding="utf-8") as file:
            lines = [line.rstrip("\n") for line, _ in zip(file, range(args.sentences))]
        results["onnx"] = onnx_outputs(args.onnx, lines)
        print(results["onnx"], flush=True)
    baseline = git("rev-parse", "--verify", f"{args.baseline}^{{commit}}")
    with tempfile.TemporaryDirectory() as work:
        sides = {"this checkout": ROOT, "baseline": Path(work) / "baseline"}
        git("worktree", "add", "--detach", str(sides["baseline"]), baseline)
        try:
            seconds = {name: [] for name in sides}
            for repeat in range(args.repeats):  # in turn, the first of each pair alternating
                for name, checkout in list(sides.items())[:: 1 if repeat % 2 == 0 else -1]:
                    seconds[name].append(timed(checkout, checkpoint, numbers, args.threads)["seconds"])
                    print(f"repeat {repeat + 1}, {name}: {seconds[name][-1]:.2f} s", flush=True)
        finally:
            git("worktree", "remove", "--force", str(sides["baseline"]))
    results["translate_seconds"] = {name: spread(s) for name, s in seconds.items()}
    results["ratio_of_medians"] = (results["translate_seconds"]["this checkout"]["median"]
                                   / results["translate_seconds"]["baseline"]["median"])
    results["baseline"] = baseline
    write_report(args.out, results)


if __name__ == "__main__":
    main()
