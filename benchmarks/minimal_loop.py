"""The training chapter's minimal loop, run as the chapter runs it, with several seeds.

The loop lives in book/training.md, not in the package: this script reads the chapter with
jupytext, executes its code cells up to the one that measures exact match (figures left out;
the seed of the imports cell and of the batch sampler replaced by each seed in turn) and records each seed's
exact match on the test numbers, with their min / median / max. The chapter prints the record
beside its own run, and its assert stays below the spread.

    python benchmarks/minimal_loop.py --seeds 0 1 2 3 4 --out benchmarks/results/minimal_loop.json
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import jupytext

from report import REPO, write_report

LAST = "assert exact > "


def loop_cells() -> list[str]:
    """The chapter's code cells, from its first to the one that measures exact match,
    leaving out figures."""
    notebook = jupytext.read(REPO / "book" / "training.md")
    cells = []
    for cell in notebook.cells:
        if cell.cell_type != "code" or "plt.subplots" in cell.source:
            continue
        cells.append(cell.source)
        if LAST in cell.source:
            return cells
    raise ValueError(f"book/training.md has no cell with {LAST!r}")


def run(seed: int, cells: list[str]) -> dict:
    namespace: dict = {}
    start = time.perf_counter()
    for source in cells:
        source = source.replace("manual_seed(0)", f"manual_seed({seed})")
        source = source.replace("seed=0)", f"seed={seed})")
        exec(compile(source, "book/training.md", "exec"), namespace)
    return {"seed": seed, "exact_match": namespace["exact"],
            "minutes": (time.perf_counter() - start) / 60}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    cells = loop_cells()
    runs = [run(seed, cells) for seed in args.seeds]
    exact = [r["exact_match"] for r in runs]
    spread = {"min": min(exact), "median": statistics.median(exact), "max": max(exact)}
    write_report(args.out, {"runs": runs, "exact_match": spread})
    print(spread)


if __name__ == "__main__":
    main()
