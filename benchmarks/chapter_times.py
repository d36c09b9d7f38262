"""Each chapter executed as a reader runs it in Jupyter, timed: the chapter's .md read by
jupytext (as JupyterLab opens it), a new kernel of this environment's Python started by
nbclient, the book/ folder as its working directory, torch's default threads (nothing sets
OMP_NUM_THREADS here, as nothing does on a reader's machine).

Two measurements a chapter, each from starting its kernel to shutting it down after the
last cell:
- first: the chapter alone with an empty cache of prepared corpora and trained runs
  (TRANSFORMER_CACHE, a folder of its own, so no other chapter's runs are there): what a
  reader waits who opens this chapter first, training whatever runs it uses (the book's
  number run, parsing's run). Python's own caches (pip's, the bytecode, the system's
  file cache) are as this machine left them;
- cached: the chapter again, --repeats times, with the cache its first run left: what a
  reader waits once its runs are there (min / median / max).
Each also names its slowest cell and the seconds that cell took (nbclient's timing; for
the cached runs, in the run of median time).

    python benchmarks/chapter_times.py --repeats 3 --out benchmarks/results/chapter_times.json
    python benchmarks/chapter_times.py --chapters parsing trainer --repeats 1 --out OUT.json
"""

from __future__ import annotations

import argparse
import datetime
import os
import shutil
import tempfile
import time
from pathlib import Path

import jupytext
from nbclient import NotebookClient

from report import spread, write_report

BOOK = Path(__file__).resolve().parent.parent / "book"


def chapters(book: Path) -> list[str]:
    """The chapters with code (a kernelspec), by name."""
    return sorted(p.stem for p in book.glob("*.md") if "kernelspec" in jupytext.read(p).metadata)


def _seconds(cell) -> float:
    timing = cell.metadata.get("execution", {})
    start, end = timing.get("iopub.execute_input"), timing.get("shell.execute_reply")
    if not (start and end):
        return 0.0
    parse = datetime.datetime.fromisoformat
    return (parse(end.replace("Z", "+00:00")) - parse(start.replace("Z", "+00:00"))).total_seconds()


def execute(chapter: Path, cache: Path, timeout: int) -> dict:
    """Run the chapter in a new kernel with TRANSFORMER_CACHE=cache; its wall seconds (the
    kernel's start included) and its slowest code cell (number among the code cells)."""
    notebook = jupytext.read(chapter)
    previous = os.environ.get("TRANSFORMER_CACHE")
    os.environ["TRANSFORMER_CACHE"] = str(cache)  # the kernel inherits this process's
    try:
        started = time.perf_counter()
        NotebookClient(notebook, timeout=timeout, kernel_name="python3",
                       resources={"metadata": {"path": str(chapter.parent)}}).execute()
        seconds = time.perf_counter() - started
    finally:
        if previous is None:
            del os.environ["TRANSFORMER_CACHE"]
        else:
            os.environ["TRANSFORMER_CACHE"] = previous
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    slowest = max(range(len(code)), key=lambda i: _seconds(code[i]), default=None)
    return {"seconds": round(seconds, 2),
            "slowest_cell": None if slowest is None else
            {"code_cell": slowest + 1, "seconds": round(_seconds(code[slowest]), 2),
             "starts": (code[slowest].source.splitlines() or [""])[0][:80]}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chapters", nargs="+", help="names of book/*.md (default: every "
                        "chapter with code)")
    parser.add_argument("--repeats", type=int, default=3, help="cached runs of each chapter")
    parser.add_argument("--timeout", type=int, default=900, help="seconds a cell may take")
    parser.add_argument("--book", type=Path, default=BOOK, help=argparse.SUPPRESS)  # tests
    parser.add_argument("--out", type=Path, required=True, help="the JSON record to write")
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error(f"--repeats must be at least 1; got {args.repeats}")
    known = chapters(args.book)
    names = args.chapters or known
    unknown = sorted(set(names) - set(known))
    if unknown:
        parser.error(f"no chapter with code named {', '.join(unknown)}; the chapters: "
                     f"{', '.join(known)}")
    work = Path(tempfile.mkdtemp(prefix="chapter-times-"))
    results = {}
    try:
        for name in names:
            chapter, cache = args.book / f"{name}.md", work / name
            first = execute(chapter, cache, args.timeout)
            cached = sorted((execute(chapter, cache, args.timeout) for _ in range(args.repeats)),
                            key=lambda run: run["seconds"])
            results[name] = {"first": first, "cached": {
                "seconds": spread([run["seconds"] for run in cached]),
                "slowest_cell": cached[len(cached) // 2]["slowest_cell"]}}
            print(f"{name:20} first {first['seconds']:6.1f} s, cached "
                  f"{results[name]['cached']['seconds']['median']:6.1f} s (median of "
                  f"{args.repeats})", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    write_report(args.out, {
        "threads_env": os.environ.get("OMP_NUM_THREADS"),  # None: torch's default
        "repeats": args.repeats, "chapters": results})


if __name__ == "__main__":
    main()
