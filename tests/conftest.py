"""Shared fixtures; the run cache of the session; GPU-marked tests are skipped without CUDA;
the chapters that nbval ran go to the book's execution cache."""

import os
import shutil
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def pytest_configure(config):
    """Prepared corpora and trained runs go to $TRANSFORMER_CACHE where it is set (make sets
    build/cache: the test processes, nbval's kernels, the browser tests and the book share
    it), else to a folder of this session that it removes; never to ~/.cache. Set here,
    before xdist starts its workers, so that they inherit it."""
    if "TRANSFORMER_CACHE" not in os.environ:
        config.own_cache = tempfile.mkdtemp(prefix="transformer-cache-")
        os.environ["TRANSFORMER_CACHE"] = config.own_cache
    config.pluginmanager.register(ChapterOutputs(ROOT / "book", ROOT / "_build" / ".jupyter_cache"))


def pytest_unconfigure(config):
    if getattr(config, "own_cache", None):
        shutil.rmtree(config.own_cache, ignore_errors=True)
        del os.environ["TRANSFORMER_CACHE"]


class ChapterOutputs:
    """Hands each chapter that nbval ran whole and without error to the book's execution
    cache, so that `make book` after `make test` executes no chapter a second time.

    `jupyter-book build` (execute_notebooks: cache) looks a chapter up in jupyter-cache by
    a hash of its code cells before it executes it. nbval runs the same cells in order in
    one kernel and keeps each cell's outputs: when a notebook's last cell has passed, this
    puts the outputs into the chapter as myst-nb reads it and caches that notebook. A
    chapter with a failed cell is left out, and a chapter edited since is another hash,
    which the book executes as before."""

    def __init__(self, book: Path, cache: Path):
        self.book, self.cache = book, cache  # cache: jupyter-book's default place
        self.ran: dict[Path, list] = {}  # notebook -> [(cell number, outputs, seconds)]

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        report = (yield).get_result()
        if not hasattr(item, "test_outputs"):  # not a cell of nbval's
            return
        notebook = Path(str(item.parent.fspath))
        if report.failed or report.skipped:
            self.ran[notebook] = None  # nothing of it is cached
        elif report.when == "call" and self.ran.get(notebook, []) is not None:
            cells = self.ran.setdefault(notebook, [])
            cells.append((item.cell_num, item.test_outputs, report.duration))
            code = [c for c in item.parent.nb.cells if c.cell_type == "code"]
            chapter = self.book / f"{notebook.stem}.md"
            if item.cell_num == len(code) - 1 and chapter.is_file():
                self._cache(chapter, code, cells)

    def _cache(self, chapter: Path, ran: list, cells: list) -> None:
        import nbformat
        from jupyter_cache import get_cache
        from jupyter_cache.base import CacheBundleIn
        from myst_nb.core.read import read_myst_markdown_notebook

        book = read_myst_markdown_notebook(chapter.read_text(), add_source_map=True, path=str(chapter))
        code = [cell for cell in book.cells if cell.cell_type == "code"]
        first = len(ran) - len(code)  # tools/notebooks.py's Colab cell comes before
        outputs = {number - first: outs for number, outs, _ in cells if number >= first}
        if [c.source for c in code] != [c.source for c in ran[first:]] or len(outputs) != len(code):
            return  # not this chapter's cells, or not all of them ran
        for number, cell in enumerate(code):
            cell.outputs = [nbformat.from_dict(dict(out)) for out in outputs[number]]
            cell.execution_count = number + 1
        bundle = CacheBundleIn(book, str(chapter), data={"execution_seconds": sum(c[2] for c in cells)})
        get_cache(self.cache).cache_notebook_bundle(bundle, check_validity=False, overwrite=True)


# The units of work of `make test` (a chapter's notebook, or a test file: --dist loadfile)
# that take a minute or more on a 2-core CPU, longest first as make test's --durations
# measured them, but for the first; the Makefile turns off xdist's own order (by count of
# tests). Started first, they leave the short units for the end, where one process would
# otherwise work alone. The first trains the book's number run, which five other chapters
# load (train_once): started after it, they do not wait on its lock.
HEAVIEST_FIRST = [
    "build/notebooks/results.ipynb", "tests/test_benchmarks.py", "tests/test_trainer.py",
    "build/notebooks/parsing.ipynb", "build/notebooks/deploy.ipynb", "build/notebooks/trainer.ipynb",
    "tests/test_deploy.py", "build/notebooks/training.ipynb", "tests/test_readme.py", "tests/test_cli.py",
]


def pytest_collection_modifyitems(config, items):
    """The heaviest units first (the same order in every worker, as xdist asks); tests marked
    gpu skipped without CUDA."""
    import torch  # here, in the workers that collect: xdist's controller, which starts them,
    # would spend seconds importing it first

    rank = {unit: number for number, unit in enumerate(HEAVIEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def tiny_corpus(tmp_path):
    """A folder of 64 English-German number pairs in parallel files."""
    return _write_tiny_corpus(tmp_path / "corpus")


@pytest.fixture(scope="module")
def tiny_corpus_module(tmp_path_factory):
    """The same folder, shared by the tests of a module that only read it."""
    return _write_tiny_corpus(tmp_path_factory.mktemp("module") / "corpus")


def _write_tiny_corpus(folder):
    from num2words import num2words

    folder.mkdir()
    numbers = list(range(1, 65))
    for split, chosen in {"train": numbers, "val": numbers[:8]}.items():
        (folder / f"{split}.en").write_text("\n".join(num2words(n) for n in chosen) + "\n")
        (folder / f"{split}.de").write_text("\n".join(num2words(n, lang="de") for n in chosen) + "\n")
    return folder
