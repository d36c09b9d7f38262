# Generated from book/data.md by tools/export.py: edit the chapter.
"""Corpora prepared once: tokenized into memory-mapped arrays under a cache folder keyed
by the corpus and the settings, built by one process while the others wait."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.metadata
import itertools
import json
import os
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch.distributed as dist
from tokenizers import Tokenizer

from transformer.batches import TokenizedSplit
from transformer.corpora import (
    file_sha256,
    hub_pair_chunks,
    hub_splits,
    number_split,
    parallel_files,
    read_pair_chunks,
)
from transformer.files import building_folder, write_atomically
from transformer.tokenizer import lowercases, train_tokenizer


DATA_FORMAT = "transformer-data-v1"
ChunkReader = Callable[[], Iterator[tuple[list[str], list[str]]]]


def default_cache_dir() -> Path:
    """$TRANSFORMER_CACHE, else $XDG_CACHE_HOME/transformer, else
    ~/.cache/transformer."""
    if "TRANSFORMER_CACHE" in os.environ:
        return Path(os.environ["TRANSFORMER_CACHE"])
    return (
        Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "transformer"
    )


def _sha256(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def _in_chunks(pairs: Sequence[tuple[str, str]], size: int = 10_000) -> ChunkReader:
    def read() -> Iterator[tuple[list[str], list[str]]]:
        for start in range(0, len(pairs), size):
            chunk = pairs[start : start + size]
            yield [src for src, _ in chunk], [tgt for _, tgt in chunk]

    return read


def corpus_splits(
    data: str, src_lang: str = "en", tgt_lang: str = "de"
) -> dict[str, tuple[str, ChunkReader]]:
    """Each split's (fingerprint, reader of its (sources, targets) chunks); see
    load_corpus."""
    if data == "numbers":  # each split written out once, and only when it is read
        generate = functools.cache(number_split)
        version = importlib.metadata.version("num2words")
        return {
            split: (
                _sha256("numbers, in the forms readers write", version, split),
                lambda split=split: _in_chunks(generate(split))(),
            )
            for split in ("train", "val", "test")
        }
    if data.startswith("hub:"):
        name, _, config = data[len("hub:") :].partition(":")
        return {
            split: (
                _sha256("hub", rows._fingerprint, src_lang, tgt_lang),
                lambda rows=rows: hub_pair_chunks(rows, src_lang, tgt_lang),
            )
            for split, rows in hub_splits(name, config or None).items()
        }
    return {
        split: (
            _sha256("files", *map(file_sha256, paths)),
            lambda paths=paths: read_pair_chunks(*paths),
        )
        for split, paths in parallel_files(data, src_lang, tgt_lang).items()
    }


def _id_dtype(vocab_size: int) -> np.dtype:
    return np.dtype(np.uint16 if vocab_size <= 2**16 else np.int32)


def _write_split(
    folder: Path, split: str, read: ChunkReader, tokenizer: Tokenizer
) -> dict:
    dtype, lengths = _id_dtype(tokenizer.get_vocab_size()), {"src": [], "tgt": []}
    with (
        open(folder / f"{split}.src.ids", "wb") as src,
        open(folder / f"{split}.tgt.ids", "wb") as tgt,
    ):
        for chunk in read():
            for side, texts, file in (("src", chunk[0], src), ("tgt", chunk[1], tgt)):
                encoded = [
                    e.ids
                    for e in tokenizer.encode_batch_fast(
                        texts, add_special_tokens=False
                    )
                ]
                lengths[side].append(
                    np.array([len(ids) for ids in encoded], dtype=np.int64)
                )
                flat = itertools.chain.from_iterable(encoded)
                np.fromiter(flat, dtype, count=int(lengths[side][-1].sum())).tofile(
                    file
                )
    for side in ("src", "tgt"):
        offsets = np.concatenate([[0], np.cumsum(np.concatenate(lengths[side]))])
        offsets.astype(np.int64).tofile(folder / f"{split}.{side}.offsets")
    names = [
        f"{split}.{side}.{kind}"
        for side in ("src", "tgt")
        for kind in ("ids", "offsets")
    ]
    return {
        "pairs": len(offsets) - 1,
        "sha256": {n: file_sha256(folder / n) for n in names},
    }


def _largest_id(path: Path, dtype: str) -> int:
    """The largest id in a file, read in chunks (a memory map would count them all as
    the process's own memory once touched)."""
    largest = -1
    with open(path, "rb") as file:
        while len(chunk := np.fromfile(file, dtype=dtype, count=1 << 22)):
            largest = max(largest, int(chunk.max()))
    return largest


def _read_split(folder: Path, split: str, meta: dict) -> TokenizedSplit:
    """The split's arrays (ids memory-mapped), or ValueError saying what is wrong with
    them."""
    for name, digest in meta["sha256"].items():
        if not (folder / name).is_file() or file_sha256(folder / name) != digest:
            raise ValueError(f"{name} is missing or does not match its checksum")
    arrays = []
    for side in ("src", "tgt"):
        offsets = np.fromfile(folder / f"{split}.{side}.offsets", dtype=np.int64)
        path = folder / f"{split}.{side}.ids"
        ids = (
            np.memmap(path, dtype=meta["dtype"], mode="r")
            if path.stat().st_size
            else np.zeros(0, dtype=meta["dtype"])  # an empty file cannot be mapped
        )
        ok = (
            len(offsets) == meta["pairs"] + 1
            and offsets[0] == 0
            and offsets[-1] == len(ids)
        )
        if not ok or (np.diff(offsets) < 0).any():
            raise ValueError(f"the offsets of {split}.{side} do not index its ids")
        if _largest_id(path, meta["dtype"]) >= meta["vocab_size"]:
            raise ValueError(
                f"{split}.{side} holds ids beyond the vocabulary of "
                f"{meta['vocab_size']}"
            )
        arrays += [ids, offsets]
    return TokenizedSplit(*arrays)


@dataclass
class PreparedData:
    """A tokenizer, the training and validation splits as arrays, the test pairs as
    text, and the fingerprint of each split's source (its files' SHA-256, or the
    generator's or the dataset's version) that the cache key holds."""

    tokenizer: Tokenizer
    train: TokenizedSplit
    valid: TokenizedSplit | None
    folder: Path  # the cache folder holding the arrays
    read_test: ChunkReader | None = None
    fingerprints: dict[str, str] = field(default_factory=dict)  # split: fingerprint

    @functools.cached_property
    def test(self) -> list[tuple[str, str]]:
        """The test split's (source, target) pairs, read when first asked for."""
        chunks = self.read_test() if self.read_test is not None else []
        return [pair for src, tgt in chunks for pair in zip(src, tgt)]


def _cached_tokenizer(
    cache: Path, train: tuple[str, ChunkReader], vocab_size: int, lowercase: bool,
    split_punctuation: bool,
) -> Tokenizer:
    salt = ["bpe-v1"] + ["lowercase"] * lowercase + ["punctuation"] * split_punctuation
    key = _sha256(train[0], str(vocab_size), *salt)
    path = cache / "tokenizers" / f"{key}.json"
    if path.is_file():
        with contextlib.suppress(Exception):  # unreadable: train it again
            return Tokenizer.from_file(str(path))
    texts = (text for src, tgt in train[1]() for text in itertools.chain(src, tgt))
    tokenizer = train_tokenizer(texts, vocab_size, lowercase, split_punctuation)
    write_atomically(path, lambda file: file.write(tokenizer.to_str().encode()))
    return tokenizer


def _read_cache(folder: Path) -> dict[str, TokenizedSplit]:
    meta = json.loads((folder / "meta.json").read_text())
    if meta.get("format") != DATA_FORMAT:
        raise ValueError(f"format {meta.get('format')!r}, expected {DATA_FORMAT!r}")
    return {s: _read_split(folder, s, {**meta, **meta[s]}) for s in meta["splits"]}


def _load_or_build(
    folder: Path, splits: dict, tokenizer: Tokenizer
) -> dict[str, TokenizedSplit]:
    if (folder / "meta.json").is_file():
        try:
            return _read_cache(folder)
        except (ValueError, KeyError, TypeError, OSError) as error:
            warnings.warn(f"rebuilding the data cache {folder}: {error}")
    # keep_theirs: another run that finished the same cache first
    with building_folder(folder, keep_theirs=True) as building:
        vocab_size = tokenizer.get_vocab_size()
        meta = {
            "format": DATA_FORMAT,
            "vocab_size": vocab_size,
            "dtype": _id_dtype(vocab_size).name,
            "splits": sorted(splits),
        }
        for split, read in splits.items():
            meta[split] = _write_split(building, split, read, tokenizer)
        (building / "meta.json").write_text(json.dumps(meta, indent=1))
    return _read_cache(folder)


@contextlib.contextmanager
def _rank_zero_first() -> Iterator[None]:
    """Under torch.distributed, rank 0 runs the block first and the other ranks after
    it."""
    distributed = dist.is_available() and dist.is_initialized()
    if distributed and dist.get_rank() != 0:
        dist.barrier()
    yield
    if distributed and dist.get_rank() == 0:
        dist.barrier()


def prepare_data(
    data: str = "numbers",
    src_lang: str = "en",
    tgt_lang: str = "de",
    vocab_size: int = 8000,
    tokenizer: Tokenizer | None = None,
    cache_dir: str | Path | None = None,
    lowercase: bool = False,
    split_punctuation: bool = False,
) -> PreparedData:
    """Tokenize a corpus (see load_corpus) once and cache it; see PreparedData.
    lowercase, split_punctuation: how the tokenizer is trained (see train_tokenizer); a
    given tokenizer brings its own normalizer, and must lowercase if lowercase is
    asked."""
    if tokenizer is not None and lowercase and not lowercases(tokenizer):
        raise ValueError(
            "lowercase=True asks for a tokenizer that lowercases; the one given keeps "
            "the case (its normalizer decides, not this option)"
        )
    splits = corpus_splits(data, src_lang, tgt_lang)
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    with _rank_zero_first():
        if tokenizer is None:
            tokenizer = _cached_tokenizer(
                cache, splits["train"], vocab_size, lowercase, split_punctuation
            )
        kept = {s: splits[s] for s in ("train", "val") if s in splits}
        key = _sha256(
            *(f"{s}:{fingerprint}" for s, (fingerprint, _) in kept.items()),
            tokenizer.to_str(),
        )
        folder = cache / "data" / key[:32]
        arrays = _load_or_build(
            folder, {s: read for s, (_, read) in kept.items()}, tokenizer
        )
    test = splits["test"][1] if "test" in splits else None
    fingerprints = {s: fingerprint for s, (fingerprint, _) in kept.items()}
    return PreparedData(tokenizer, arrays["train"], arrays.get("val"), folder, test,
                        fingerprints)


__all__ = [
    'default_cache_dir',
    'corpus_splits',
    'PreparedData',
    'prepare_data',
]
