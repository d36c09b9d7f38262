"""Rewrite the README's figures from the records in benchmarks/results/.

A figure in README.md sits between two markers, `<!-- record: NAME -->` and
`<!-- /record -->`; this script replaces what is between them by what BLOCKS[NAME] renders from
the records, so that no figure of the README is typed by hand. Each figure links to its record.

    python tools/readme.py            # rewrite README.md
    python tools/readme.py --check    # exit 1 if README.md differs from what the records give
    python tools/readme.py --figure   # also redraw the README's picture, _static/architecture.svg

tests/test_readme.py runs the check, and checks against the records what the README's
sentences say of them (a stand-in, a schedule, a commit). The ledger of every CPU's ten
minutes is the experiments appendix's (tools/ledger.py).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
MARKER = re.compile(r"(<!-- record: ([\w-]+) -->\n)(.*?)(<!-- /record -->)", re.S)

# The runs of the results table, a row each: a CPU with native bf16 (ten minutes), a stand-in
# for the slowest CPU without it (ten minutes), one GPU (its step budget), and an hour on a CPU
# (three seeds, a record each)
NATIVE = "multi30k_en_de_10min_cli_issue110_after.json"
EMULATED = "multi30k_en_de_standin23_n2_plain.json"
GPU = "multi30k_en_de_lc_gpu.json"
HOUR = ["multi30k_en_de_lc_cli.json", "multi30k_en_de_lc_cli_alpha.json", "multi30k_en_de_lc_cli_seed2.json"]
# `make install`, `make train`, `make test` and `make book` on a fresh clone: on a CPU with
# native bf16, on one without, and `make train` on a stand-in for one without
FRESH = "fresh_clone.json"
FRESH_EMULATED = "fresh_clone_avx2.json"
FRESH_HELD = "fresh_clone_xeon_held_avx2.json"
METRICS = {"bleu": "sacreBLEU", "tokenized_bleu": "tokenized BLEU"}


def _record(name: str) -> dict:
    return json.loads((RESULTS / name).read_text())


def _link(text: str, name: str) -> str:
    """A figure as a Markdown link to its record."""
    return f"[{text}](benchmarks/results/{name})"


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 90 else f"{seconds:.0f} s"


def seeds(names: str | list[str], metric: str) -> list[tuple[float, str, dict]]:
    """(test2016 score, record, run) of each seed of the records named, lowest first."""
    names = [names] if isinstance(names, str) else names
    return sorted((run["test"][metric], name, run) for name in names
                  for run in _record(name)["seeds"].values())


def _timed(name: str) -> dict[str, dict]:
    """A fresh-clone record's runs by command."""
    return {run["command"]: run for run in _record(name)["runs"]}


def commands() -> str:
    """How long the four commands take on a fresh clone, each time linked to its record."""
    native, emulated, held = _timed(FRESH), _timed(FRESH_EMULATED), _timed(FRESH_HELD)

    def took(runs: dict, command: str, name: str, verb: str = "") -> str:
        return f"`{command}`{verb} {_link(_minutes(runs[command]['seconds']), name)}"

    cores = _record(FRESH)["cpu_count"]
    exact = native["make train"]["exact_match"]
    return (
        f"From a fresh clone on a {cores}-core CPU with native bf16, {took(native, 'make install', FRESH, ' takes')}, "
        f"then {took(native, 'make train', FRESH)}, {took(native, 'make test', FRESH)} and "
        f"{took(native, 'make book', FRESH)}. "
        f"The model of `make train` translates {_link(f'{exact:.1%}', FRESH)} of the test numbers exactly. "
        f"On a CPU without native bf16, {took(emulated, 'make test', FRESH_EMULATED, ' took')} and "
        f"{took(emulated, 'make book', FRESH_EMULATED)}. "
        f"There {took(held, 'make train', FRESH_HELD, ' took')}, measured on a newer CPU with its bf16 turned off.\n"
    )


def _row(machine: str, command: str, names: str | list[str], metric: str) -> str:
    """A row of the results table: the median seed's score and the spread, each figure linked
    to the record of its seed."""
    runs = seeds(names, metric)
    middle = runs[len(runs) // 2]
    spread = (f"{_link(f'{runs[0][0]:.2f}', runs[0][1])} – {_link(f'{runs[-1][0]:.2f}', runs[-1][1])}"
              if len(runs) > 2 else "one seed")
    return (f"| {machine} | `{command}` | {_link(f'{middle[0]:.2f}', middle[1])} {METRICS[metric]} "
            f"| {spread} | {len(runs)} |")


def results() -> str:
    """What the plain commands give on a reader's kind of machine: one table, four rows."""
    cores = _record(NATIVE)["hardware"]["threads"]
    gpu = _record(GPU)
    run = gpu["seeds"]["0"]
    minutes = _link(f"{run['trainer_minutes']:.0f} minutes", GPU)
    return "\n".join([
        "| machine | command | test2016 score, median | lowest – highest | seeds |",
        "|---|---|---|---|---|",
        _row(f"a {cores}-core CPU with native bf16", "train --max-minutes 10", NATIVE, "bleu"),
        _row(f"a {cores}-core CPU without native bf16", "train --max-minutes 10", EMULATED, "bleu"),
        _row(f"one GPU ({gpu['hardware']['gpu']}), {minutes}", "train --lowercase", GPU, "tokenized_bleu"),
        _row(f"a {cores}-core CPU, an hour", "train --lowercase --max-minutes 60", HOUR, "tokenized_bleu"),
    ]) + (
        "\n\nThe second row ran on a faster CPU without native bf16, one thread a run and in fewer "
        "minutes. That way it made about as many updates as the slowest such CPU we met. "
        "The GPU's record was rebuilt by hand from the run's log, and its tokenized BLEU re-scored "
        "on a CPU. "
        "The hour's runs predate the run plan: they used the paper's schedule. "
        "sacreBLEU scores the text as written. "
        "Tokenized BLEU scores it lowercased and tokenized, as the Multi30k papers do. "
        "The two do not compare.\n"
    )


BLOCKS: dict[str, Callable[[], str]] = {"commands": commands, "results": results}



def architecture(path: Path) -> None:
    """The paper's Figure 1 for the base model, drawn by the package (the README's picture)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from transformer import TransformerConfig
    from transformer.figures import draw_architecture

    fig, ax = plt.subplots(figsize=(6, 7.5))
    draw_architecture(TransformerConfig.base(), ax)
    fig.savefig(path, bbox_inches="tight", metadata={"Date": None})


def render(text: str) -> str:
    """text with every marked block rewritten from the records."""

    def block(match: re.Match) -> str:
        name = match[2]
        if name not in BLOCKS:
            raise KeyError(f"README.md marks a block {name!r}; known blocks: {sorted(BLOCKS)}")
        return match[1] + BLOCKS[name]() + match[4]

    return MARKER.sub(block, text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="only check that README.md is up to date")
    parser.add_argument("--figure", action="store_true", help="also redraw _static/architecture.svg")
    args = parser.parse_args()
    if args.figure:
        architecture(ROOT / "_static" / "architecture.svg")
    readme = ROOT / "README.md"
    text = readme.read_text()
    rendered = render(text)
    if args.check:
        if rendered != text:
            sys.exit("README.md differs from its records: run python tools/readme.py")
        return
    readme.write_text(rendered)


if __name__ == "__main__":
    main()
