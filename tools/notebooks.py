"""Write the chapters as .ipynb notebooks: for nbval (`make notebooks`) and for the launch
buttons (the deploy workflow publishes them on the `notebooks` branch, where Binder and Colab
open them).

Each notebook starts with a cell that, on Google Colab (the one place where neither is there
already), clones this repository and installs its package, then runs the chapter in the clone's
book/ folder, so that the committed results files are found as they are locally. The address
comes from `repository.url` in _config.yml. Everywhere else the cell does nothing.

    python tools/notebooks.py build/notebooks     # one .ipynb per chapter with code
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import jupytext
import nbformat
import yaml

ROOT = Path(__file__).resolve().parent.parent

COLAB_CELL = '''# On Google Colab, clone the book's repository and install its package first (elsewhere
# both are there already); the chapters then run in its book/ folder, as they do locally.
# Every chapter runs on Colab's default runtime, a CPU: none needs a GPU. To train on one
# (the package finds it by itself), choose Runtime > Change runtime type > T4 GPU before
# running this cell; a T4 trains in fp16 (the devices chapter says why).
import os
import subprocess
import sys

if "google.colab" in sys.modules and not os.path.isdir("/content/book-repository"):
    subprocess.check_call(
        ["git", "clone", "--quiet", "--depth", "1", "--branch", "{branch}", "{url}", "/content/book-repository"]
    )
    subprocess.check_call([sys.executable, "-m", "pip", "install", "--quiet", "/content/book-repository"])
if "google.colab" in sys.modules:
    os.chdir("/content/book-repository/book")'''


def repository_url() -> str:
    """The repository's address, from _config.yml."""
    url = yaml.safe_load((ROOT / "_config.yml").read_text()).get("repository", {}).get("url")
    if not url:
        raise ValueError("_config.yml has no repository.url: the Colab cell needs it")
    return url


def write_notebooks(book: Path, out: Path, branch: str = "main") -> list[Path]:
    """Convert every chapter of `book` that has code cells (a kernelspec) into out/NAME.ipynb,
    whose Colab cell installs the package from `branch`."""
    url = repository_url()
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for chapter in sorted(book.glob("*.md")):
        notebook = jupytext.read(chapter)
        if "kernelspec" not in notebook.metadata:
            continue
        cell = nbformat.v4.new_code_cell(COLAB_CELL.format(url=url, branch=branch))
        cell.metadata["tags"] = ["colab"]
        notebook.cells.insert(0, cell)
        path = out / f"{chapter.stem}.ipynb"
        jupytext.write(notebook, path, fmt="ipynb")
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path, help="folder for the notebooks")
    parser.add_argument("--book", type=Path, default=ROOT / "book", help="folder of the chapters (default: book/)")
    args = parser.parse_args(argv)
    written = write_notebooks(args.book, args.out)
    print(f"wrote {len(written)} notebooks into {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
