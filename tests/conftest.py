"""Shared fixtures; GPU-marked tests are skipped without CUDA; the chapters that nbval ran
go to the book's execution cache."""

import os
from pathlib import Path

import pytest
import torch


ROOT = Path(__file__).resolve().parent.parent


def pytest_configure(config):
    config.pluginmanager.register(ChapterOutputs(ROOT), "chapter-outputs")


class ChapterOutputs:
    """Hands each chapter that nbval ran whole and without error to the book's execution
    cache, so that `make book` after `make test` executes no chapter a second time.

    `jupyter-book build` (execute_notebooks: cache) looks a chapter up in jupyter-cache by
    a hash of its code cells and kernel before it executes it. nbval runs the same cells in
    the same order in one kernel, and keeps each cell's outputs: this writes them into the
    chapter as myst-nb reads it, and caches that notebook where the book looks. A chapter that failed, or ran in part, is left out,
    and a chapter edited since is a new hash, which the book executes as before."""

    def __init__(self, root: Path):
        self.root = root
        self.cells: dict[Path, list] = {}  # notebook -> [(cell number, outputs, seconds)]
        self.failed: set[Path] = set()

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        report = (yield).get_result()
        if not hasattr(item, "test_outputs"):  # not a notebook cell of nbval's
            return
        notebook = Path(str(item.parent.fspath))
        if report.failed or report.skipped:
            self.failed.add(notebook)
        elif report.when == "call":
            cells = self.cells.setdefault(notebook, [])
            cells.append((item.cell_num, item.test_outputs, report.duration, item.parent.nb))

    def pytest_sessionfinish(self, session):
        for notebook, cells in self.cells.items():
            chapter = self.root / "book" / f"{notebook.stem}.md"
            ran = cells[-1][3]
            if notebook in self.failed or not chapter.is_file():
                continue
            self._cache(chapter, ran, cells)

    def _cache(self, chapter: Path, ran, cells) -> None:
        import nbformat
        from jupyter_cache import get_cache
        from jupyter_cache.base import CacheBundleIn
        from myst_nb.core.read import read_myst_markdown_notebook

        book = read_myst_markdown_notebook(chapter.read_text(), add_source_map=True, path=str(chapter))
        code = [cell for cell in book.cells if cell.cell_type == "code"]
        executed = [cell for cell in ran.cells if cell.cell_type == "code"
                    and "colab" not in cell.metadata.get("tags", [])]
        offset = len([cell for cell in ran.cells if cell.cell_type == "code"]) - len(executed)
        outputs = {n - offset: outs for n, outs, _, _ in cells if n >= offset}
        if [c.source for c in code] != [c.source for c in executed] or sorted(outputs) != list(range(len(code))):
            return  # not this chapter's cells, or not all of them ran
        for number, cell in enumerate(code):
            cell.outputs = [nbformat.from_dict(dict(out)) for out in outputs[number]]
            cell.execution_count = number + 1
        cache = get_cache(self.root / "_build" / ".jupyter_cache")  # jupyter-book's default
        cache.cache_notebook_bundle(
            CacheBundleIn(book, str(chapter), data={"execution_seconds": sum(c[2] for c in cells)}),
            check_validity=False, overwrite=True)


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True, scope="session")
def data_cache(tmp_path_factory):
    """Prepared corpora go to a folder of the test session, not the user's cache."""
    os.environ["TRANSFORMER_CACHE"] = str(tmp_path_factory.mktemp("transformer-cache"))


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
