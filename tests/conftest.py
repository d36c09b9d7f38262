"""Shared fixtures; GPU-marked tests are skipped without CUDA."""

import os

import pytest
import torch


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
