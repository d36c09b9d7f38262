# Generated from book/data.md by tools/export.py: edit the chapter.
"""Parallel corpora, the shared BPE tokenizer and batches by token count (§5.1 of the
paper)."""

from __future__ import annotations

import contextlib
import functools
import gzip
import hashlib
import importlib.metadata
import itertools
import json
import math
import os
import queue
import random
import threading
import urllib.error
import urllib.request
import warnings
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import BinaryIO

import numpy as np
import torch
import torch.distributed as dist
from tokenizers import (
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    trainers,
)
from torch import Tensor

from transformer.files import building_folder, write_atomically


PAD, UNK, BOS, EOS = 0, 1, 2, 3
SPECIAL_TOKENS = ["<pad>", "<unk>", "<bos>", "<eos>"]


@dataclass
class ParallelCorpus:
    """Sentence pairs by split ("train", "val", "test"), each a list of (source, target)
    strings."""

    src_lang: str
    tgt_lang: str
    splits: dict[str, list[tuple[str, str]]]

    def __post_init__(self) -> None:
        if not self.splits.get("train"):
            raise ValueError(
                "a corpus needs a non-empty 'train' split; "
                f"got splits {sorted(self.splits)}"
            )

    def texts(self, split: str = "train") -> Iterator[str]:
        """Every source and target sentence of a split (what the tokenizer is trained
        on)."""
        for src, tgt in self.splits[split]:
            yield src
            yield tgt


def number_corpus(
    max_number: int = 10_000, n_val: int = 500, n_test: int = 500, seed: int = 0
) -> ParallelCorpus:
    """English -> German number words for 0 <= n < max_number, split at random (by
    seed)."""
    if max_number < n_val + n_test + 1:
        raise ValueError(
            f"max_number={max_number} leaves no numbers for training after "
            f"{n_val}+{n_test}"
        )
    from num2words import num2words  # here: a fifth of a second, for this corpus only

    numbers = list(range(max_number))
    random.Random(seed).shuffle(numbers)
    pairs = [(num2words(n, lang="en"), num2words(n, lang="de")) for n in numbers]
    splits = {
        "test": pairs[:n_test],
        "val": pairs[n_test : n_test + n_val],
        "train": pairs[n_test + n_val :],
    }
    return ParallelCorpus("en", "de", splits)


@contextlib.contextmanager
def _open_text(path: Path) -> Iterator[Iterator[str]]:
    """The lines of a text file, gzipped or not, without their line ends. A line that is
    not text, or a compressed file that is cut short or damaged, stops the reading with
    the file's name and what is wrong."""
    with (gzip.open if path.suffix == ".gz" else open)(path, "rb") as file:
        yield _lines(file, path)


def _lines(file: BinaryIO, path: Path) -> Iterator[str]:
    try:
        for number, line in enumerate(file, 1):
            yield _decode(line, path, number)
    except (EOFError, gzip.BadGzipFile, zlib.error) as error:
        raise ValueError(
            f"{path} is not a whole gzip file ({error}); fetch it again"
        ) from None


def _decode(line: bytes, path: Path, number: int) -> str:
    if b"\x00" in line:
        raise ValueError(f"{path} is not text: line {number} holds a NUL byte")
    try:
        return line.decode("utf-8").removesuffix("\n").removesuffix("\r")
    except UnicodeDecodeError as error:
        raise ValueError(
            f"{path} is not UTF-8 text: line {number} has the byte "
            f"{line[error.start]:#04x} at position {error.start + 1}"
        ) from None


def _split_file(folder: Path, names: Sequence[str], lang: str) -> Path | None:
    for name in names:
        for path in (folder / f"{name}.{lang}", folder / f"{name}.{lang}.gz"):
            if path.is_file():
                return path
    return None


def parallel_files(
    folder: str | Path, src_lang: str, tgt_lang: str
) -> dict[str, tuple[Path, Path]]:
    """The (source, target) files of each split in `folder`: SPLIT.LANG or
    SPLIT.LANG.gz."""
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(
            f"--data must be a folder of parallel files; {folder} is not a folder"
        )
    tests = sorted({p.name.split(".")[0] for p in folder.glob(f"test*.{src_lang}*")})
    names = {
        "train": ["train"],
        "val": ["val", "valid", "dev", "validation"],
        "test": tests[:1],
    }
    files = {}
    for split, candidates in names.items():
        src_path = _split_file(folder, candidates, src_lang)
        tgt_path = _split_file(folder, candidates, tgt_lang)
        if src_path is not None and tgt_path is not None:
            files[split] = (src_path, tgt_path)
    if "train" not in files:
        raise FileNotFoundError(
            f"{folder} needs train.{src_lang} and train.{tgt_lang} (optionally .gz); "
            f"found {sorted(p.name for p in folder.iterdir())}"
        )
    return files


def read_pair_chunks(
    src_path: Path, tgt_path: Path, chunk_size: int = 10_000
) -> Iterator[tuple[list[str], list[str]]]:
    """The lines of two parallel files, `chunk_size` at a time, as (sources,
    targets)."""
    with _open_text(src_path) as src, _open_text(tgt_path) as tgt:
        lines = itertools.zip_longest(src, tgt)
        for n_read in itertools.count(0, chunk_size):
            chunk = list(itertools.islice(lines, chunk_size))
            if not chunk and n_read == 0:
                raise ValueError(
                    f"{src_path} and {tgt_path} hold no sentence pair; a split needs "
                    "one"
                )
            if not chunk:
                return
            if None in chunk[-1]:
                side = chunk[-1].index(None)  # 0: the source file is shorter
                short = (src_path, tgt_path)[side]
                n_short = n_read + sum(pair[side] is not None for pair in chunk)
                raise ValueError(
                    f"{src_path} and {tgt_path} must be parallel (as many lines); "
                    f"{short} ends after {n_short} lines, the other has more"
                )
            yield [s for s, _ in chunk], [t for _, t in chunk]


def read_parallel_files(
    folder: str | Path, src_lang: str, tgt_lang: str
) -> ParallelCorpus:
    """Read train/val/test from `folder` into memory (see parallel_files for the
    names)."""
    splits = {}
    for split, paths in parallel_files(folder, src_lang, tgt_lang).items():
        splits[split] = [
            pair for src, tgt in read_pair_chunks(*paths) for pair in zip(src, tgt)
        ]
    return ParallelCorpus(src_lang, tgt_lang, splits)


MULTI30K_URL = (
    "https://raw.githubusercontent.com/multi30k/dataset/"
    "a3d2e0d26b56f3846f66a952536ffed4e401d05a/data/task1/raw/"
)
MULTI30K_SHA256 = {
    "train.en.gz": (
        "d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f"
    ),
    "train.de.gz": (
        "726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6"
    ),
    "train.fr.gz": (
        "622e75069e9f4c577425c4f277116ce66e63a2401c0a2312d90073cb12379a3c"
    ),
    "val.en.gz": (
        "14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28"
    ),
    "val.de.gz": (
        "f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a"
    ),
    "val.fr.gz": (
        "ca3106f1a72390591d25f6c45cb4cd39dec4cd3f123e099748a3ce5256c160e9"
    ),
    "test_2016_flickr.en.gz": (
        "611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9"
    ),
    "test_2016_flickr.de.gz": (
        "9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8"
    ),
    "test_2016_flickr.fr.gz": (
        "6d326e188d259fb1d04ac19eae3af956559b3a0b93d7635e56c90987c40c8b90"
    ),
}


def fetch_multi30k(
    out: str | Path, languages: Sequence[str] = ("en", "de", "fr"),
    url: str = MULTI30K_URL, checksums: dict[str, str] = MULTI30K_SHA256,
) -> list[Path]:
    """Download Multi30k's train, val and test_2016_flickr files in `languages` into
    `out`, each checked against its SHA-256 and written atomically; returns the
    paths."""
    names = [f"{split}.{lang}.gz" for split in ("train", "val", "test_2016_flickr")
             for lang in languages]
    unknown = [name for name in names if name not in checksums]
    if unknown:
        raise ValueError(f"no recorded checksum for {', '.join(unknown)}: Multi30k's "
                         "task 1 has English, German and French (en, de, fr)")
    paths = []
    for name in names:
        path = Path(out) / name
        if not path.is_file() or _file_sha256(path) != checksums[name]:
            data = _download(url + name)
            digest = hashlib.sha256(data).hexdigest()
            if digest != checksums[name]:
                raise ValueError(f"{url + name} has SHA-256 {digest}, not the recorded "
                                 f"{checksums[name]}; nothing written")
            write_atomically(path, lambda file: file.write(data))
        paths.append(path)
    return paths


def _download(url: str) -> bytes:
    try:
        with urllib.request.urlopen(url, timeout=60) as response:
            return response.read()
    except urllib.error.URLError as error:  # also an HTTP status such as 404
        reason = getattr(error, "reason", error)
        raise OSError(f"could not fetch {url}: {reason}") from None


HUB_SPLITS = {
    "train": "train",
    "validation": "val",
    "val": "val",
    "valid": "val",
    "dev": "val",
    "test": "test",
}


def hub_splits(name: str, config: str | None = None) -> dict:
    """The splits of a hub dataset (e.g. "wmt14", config "de-en") by our names;
    Arrow-backed."""
    try:
        import datasets
    except ImportError as error:
        raise ImportError(
            "named datasets need the optional package `datasets`: pip install datasets"
        ) from error
    try:
        loaded = datasets.load_dataset(name, config)
    except (ConnectionError, OSError, ValueError) as error:
        raise RuntimeError(
            f"could not load dataset {name!r} (config {config!r}): {error}. "
            "Named datasets download from the Hugging Face hub; offline, use a folder "
            "of parallel files."
        ) from error
    return {HUB_SPLITS[s]: rows for s, rows in loaded.items() if s in HUB_SPLITS}


def hub_pair_chunks(
    rows, src_lang: str, tgt_lang: str, chunk_size: int = 10_000
) -> Iterator[tuple[list[str], list[str]]]:
    """The (sources, targets) of a hub split's {"translation": {...}} rows, a chunk at a
    time."""
    for start in range(0, len(rows), chunk_size):
        pairs = rows[start : start + chunk_size]["translation"]
        if src_lang not in pairs[0] or tgt_lang not in pairs[0]:
            raise ValueError(
                f"the dataset has languages {sorted(pairs[0])}; "
                f"asked for {src_lang}-{tgt_lang}"
            )
        yield [p[src_lang] for p in pairs], [p[tgt_lang] for p in pairs]


def load_hub_dataset(
    name: str, src_lang: str, tgt_lang: str, config: str | None = None
) -> ParallelCorpus:
    """A translation dataset of the Hugging Face hub, or a local folder of them, in
    memory."""
    splits = {}
    for split, rows in hub_splits(name, config).items():
        chunks = hub_pair_chunks(rows, src_lang, tgt_lang)
        splits[split] = [pair for src, tgt in chunks for pair in zip(src, tgt)]
    return ParallelCorpus(src_lang, tgt_lang, splits)


def load_corpus(
    data: str, src_lang: str = "en", tgt_lang: str = "de"
) -> ParallelCorpus:
    """ "numbers" (the embedded corpus), a folder of parallel files, or
    "hub:NAME[:CONFIG]"."""
    if data == "numbers":
        return number_corpus()
    if data.startswith("hub:"):
        name, _, config = data[len("hub:") :].partition(":")
        return load_hub_dataset(name, src_lang, tgt_lang, config or None)
    return read_parallel_files(data, src_lang, tgt_lang)


def train_tokenizer(
    texts: Iterator[str], vocab_size: int, lowercase: bool = False,
    split_punctuation: bool = False,
) -> Tokenizer:
    """A BPE tokenizer trained on `texts`, with <pad>=0, <unk>=1, <bos>=2, <eos>=3;
    lowercase: its normalizer lowercases every text it trains on and encodes;
    split_punctuation: punctuation marks are pre-tokens of their own."""
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    nfkc = normalizers.NFKC()
    tokenizer.normalizer = (
        normalizers.Sequence([nfkc, normalizers.Lowercase()]) if lowercase else nfkc
    )
    spaces = pre_tokenizers.Metaspace()
    tokenizer.pre_tokenizer = (
        pre_tokenizers.Sequence([spaces, pre_tokenizers.Punctuation()])
        if split_punctuation else spaces
    )
    tokenizer.decoder = decoders.Metaspace()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, show_progress=False
    )
    tokenizer.train_from_iterator(texts, trainer)
    if tokenizer.get_vocab_size() > vocab_size:  # BPE cannot drop characters
        raise ValueError(
            f"vocab_size={vocab_size} is too small: this corpus needs "
            f"{tokenizer.get_vocab_size()} tokens before any merge (its characters and "
            f"the {len(SPECIAL_TOKENS)} special tokens)"
        )
    return tokenizer


def lowercases(tokenizer: Tokenizer) -> bool:
    """Whether `tokenizer` lowercases what it encodes (a model trained with it has only
    seen lowercased text)."""
    probe = "AÄ"
    normalizer = tokenizer.normalizer
    return normalizer is not None and normalizer.normalize_str(probe) == probe.lower()


def encode_pairs(
    tokenizer: Tokenizer, pairs: Sequence[tuple[str, str]]
) -> list[tuple[list[int], list[int]]]:
    """Token ids of each (source, target) pair, without special tokens."""
    sources = tokenizer.encode_batch(
        [src for src, _ in pairs], add_special_tokens=False
    )
    targets = tokenizer.encode_batch(
        [tgt for _, tgt in pairs], add_special_tokens=False
    )
    return [(s.ids, t.ids) for s, t in zip(sources, targets)]


def _round_up(n: np.ndarray | int, multiple: int) -> np.ndarray | int:
    return -(-n // multiple) * multiple


def _rank_share(batches: list, rank: int, world_size: int) -> list:
    """Every world_size-th batch from `rank` on, the same number for every rank (the
    last few batches of an epoch dropped)."""
    if world_size == 1:
        return batches
    if len(batches) < world_size:
        raise ValueError(
            f"{len(batches)} batches cannot be shared by {world_size} processes"
        )
    kept = len(batches) - len(batches) % world_size
    return batches[:kept][rank::world_size]


class TokenBatchSampler:
    """Batches of pair indices whose padded size stays within max_tokens per side.

    lengths: (source length, target length) per pair, special tokens included; an (n, 2)
    array or a sequence of pairs. Each rank of world_size gets every world_size-th batch
    (the same number on every rank).
    """

    def __init__(
        self,
        lengths: np.ndarray | Sequence[tuple[int, int]],
        max_tokens: int,
        shuffle: bool = True,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
        pad_multiple: int = 1,
    ):
        lengths = np.asarray(lengths, dtype=np.int64).reshape(-1, 2)
        self.width = _round_up(
            lengths.max(axis=1), pad_multiple
        )  # padded size of a pair
        too_long = np.flatnonzero(self.width > max_tokens)
        if len(too_long):
            raise ValueError(
                f"max_tokens={max_tokens} is smaller than {len(too_long)} pair(s) "
                "alone "
                f"(the longest has {self.width.max()} tokens with padding); "
                "raise max_tokens or filter them"
            )
        if not 0 <= rank < world_size:
            raise ValueError(
                f"rank must be in [0, world_size={world_size}); got {rank}"
            )
        self.max_tokens, self.shuffle, self.seed = max_tokens, shuffle, seed
        self.rank, self.world_size, self.pad_multiple = rank, world_size, pad_multiple

    def __len__(self) -> int:
        return len(self.epoch(0))

    def batch(self, split: TokenizedSplit, indices: np.ndarray) -> Batch:
        """The tensors of one planned batch (see TokenizedSplit below)."""
        return split.batch(indices, self.pad_multiple)

    def epoch(self, epoch: int) -> list[np.ndarray]:
        """This rank's batches for one epoch, each an array of pair indices."""
        rng = np.random.default_rng([self.seed % 2**32, epoch])
        n = len(self.width)
        order = rng.permutation(n) if self.shuffle else np.arange(n)
        # sorted by width; ties stay shuffled
        order = order[np.argsort(self.width[order], kind="stable")]
        width = self.width[order]
        batches, start = [], 0
        # the padded size of the first k pairs from start: k * width[k - 1]
        while start < n:
            window = width[start : start + self.max_tokens // width[start]]
            padded = np.arange(1, len(window) + 1) * window  # increasing
            size = int(np.searchsorted(padded, self.max_tokens, side="right"))
            batches.append(order[start : start + size])
            start += size
        if self.shuffle:
            batches = [batches[i] for i in rng.permutation(len(batches))]
        return _rank_share(batches, self.rank, self.world_size)


@dataclass
class Batch:
    """src (batch, n), tgt_in (batch, m) = <bos> y, tgt_out (batch, m) = y <eos>;
    right-padded.

    n_tokens: the target tokens the loss is computed on (padding excluded).
    src_segments, tgt_segments: for packed rows (see Packing), the sentence number of
    each position, 0 at padding; None for one sentence per row.
    """

    src: Tensor
    tgt_in: Tensor
    tgt_out: Tensor
    n_tokens: int
    src_segments: Tensor | None = None
    tgt_segments: Tensor | None = None

    @property
    def segments(self) -> tuple[Tensor, Tensor] | None:
        """(src_segments, tgt_segments) of packed rows, else None."""
        if self.src_segments is None:
            return None
        return self.src_segments, self.tgt_segments

    def _apply(self, function: Callable[[Tensor], Tensor]) -> Batch:
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        return Batch(**{
            k: function(v) if isinstance(v, Tensor) else v for k, v in values.items()
        })

    def to(self, device: torch.device | str) -> Batch:
        return self._apply(lambda t: t.to(device, non_blocking=True))

    def pin_memory(self) -> Batch:
        """A copy in page-locked memory, from which copies to a GPU run
        asynchronously."""
        return self._apply(Tensor.pin_memory)


def _pad(sequences: Sequence[list[int]]) -> Tensor:
    out = torch.full((len(sequences), max(len(s) for s in sequences)), PAD)
    for row, sequence in enumerate(sequences):
        out[row, : len(sequence)] = torch.tensor(sequence, dtype=torch.long)
    return out


def collate(pairs: Sequence[tuple[list[int], list[int]]]) -> Batch:
    """Token-id pairs (without special tokens) -> a padded Batch, one sentence at a
    time."""
    return Batch(
        src=_pad([s + [EOS] for s, _ in pairs]),
        tgt_in=_pad([[BOS] + t for _, t in pairs]),
        tgt_out=_pad([t + [EOS] for _, t in pairs]),
        n_tokens=sum(len(t) + 1 for _, t in pairs),
    )


def pair_lengths(pairs: Sequence[tuple[list[int], list[int]]]) -> list[tuple[int, int]]:
    """Lengths with the special tokens: (len(src) + 1, len(tgt) + 1)."""
    return [(len(s) + 1, len(t) + 1) for s, t in pairs]


@dataclass
class TokenizedSplit:
    """The token ids of a split's pairs (special tokens not stored), as flat arrays.

    Pair i's source is src_ids[src_offsets[i] : src_offsets[i + 1]], its target
    likewise; the id arrays may be memory-mapped files.
    """

    src_ids: np.ndarray
    src_offsets: np.ndarray  # int64, len(self) + 1 entries
    tgt_ids: np.ndarray
    tgt_offsets: np.ndarray

    @classmethod
    def from_pairs(cls, pairs: Sequence[tuple[list[int], list[int]]]) -> TokenizedSplit:
        sides = []
        for side in (0, 1):
            sentences = [pair[side] for pair in pairs]
            lengths = np.array([len(s) for s in sentences], dtype=np.int64)
            offsets = np.concatenate([[0], np.cumsum(lengths)])
            sides += [
                np.array([i for s in sentences for i in s], dtype=np.int64),
                offsets,
            ]
        return cls(*sides)

    def __len__(self) -> int:
        return len(self.src_offsets) - 1

    def lengths(self) -> np.ndarray:
        """(n, 2): source and target lengths with their special tokens (<eos>,
        <bos>)."""
        return np.stack([np.diff(self.src_offsets), np.diff(self.tgt_offsets)], 1) + 1

    def batch(self, indices: np.ndarray, pad_multiple: int = 1) -> Batch:
        """The pairs `indices` as a Batch, lengths padded up to a multiple of
        pad_multiple."""
        indices = np.asarray(indices, dtype=np.int64)
        src, src_len = _gather(self.src_ids, self.src_offsets, indices, 0, pad_multiple)
        tgt_out, tgt_len = _gather(
            self.tgt_ids, self.tgt_offsets, indices, 0, pad_multiple
        )
        tgt_in, _ = _gather(self.tgt_ids, self.tgt_offsets, indices, 1, pad_multiple)
        rows = np.arange(len(indices))
        src[rows, src_len], tgt_out[rows, tgt_len], tgt_in[:, 0] = EOS, EOS, BOS
        tensors = (torch.from_numpy(a) for a in (src, tgt_in, tgt_out))
        return Batch(*tensors, n_tokens=int(tgt_len.sum()) + len(indices))

    def packed_batch(
        self, indices: np.ndarray, rows: np.ndarray, n_rows: int,
        row_lengths: tuple[int, int],
    ) -> Batch:
        """The pairs `indices` packed into n_rows rows of row_lengths (source, target)
        tokens, pair k in row rows[k], after the pairs before it in that row."""
        indices, rows = np.asarray(indices, np.int64), np.asarray(rows, np.int64)
        lengths = self.lengths()[indices]
        source = (self.src_ids, self.src_offsets, indices, rows,
                  _starts(lengths[:, 0], rows), (n_rows, row_lengths[0]))
        target = (self.tgt_ids, self.tgt_offsets, indices, rows,
                  _starts(lengths[:, 1], rows), (n_rows, row_lengths[1]))
        src, src_segments = _pack(*source, bos=False)
        tgt_in, tgt_segments = _pack(*target, bos=True)
        tgt_out, _ = _pack(*target, bos=False)
        n_tokens = int(lengths[:, 1].sum())
        return Batch(src, tgt_in, tgt_out, n_tokens, src_segments, tgt_segments)


def _gather(
    ids, offsets, indices, shift, pad_multiple
) -> tuple[np.ndarray, np.ndarray]:
    """Rows of `ids` for `indices`, placed from column `shift` in a PAD-filled array
    with one free column for the special token; returns the array and the row
    lengths."""
    starts, lengths = offsets[indices], offsets[indices + 1] - offsets[indices]
    width = _round_up(int(lengths.max(initial=0)) + 1, pad_multiple)
    out = np.full((len(indices), width), PAD, dtype=np.int64)
    row = np.repeat(np.arange(len(indices)), lengths)
    column = np.arange(lengths.sum()) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    out[row, column + shift] = ids[np.repeat(starts, lengths) + column]
    return out, lengths


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


def _file_sha256(path: Path) -> str:
    with open(path, "rb") as file:
        return hashlib.file_digest(file, "sha256").hexdigest()


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
    if data == "numbers":  # generated at most once, and only when a split is read
        generate = functools.cache(number_corpus)
        version = importlib.metadata.version("num2words")
        return {
            split: (
                _sha256("numbers", version, split),
                lambda split=split: _in_chunks(generate().splits[split])(),
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
            _sha256("files", *map(_file_sha256, paths)),
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
        "sha256": {n: _file_sha256(folder / n) for n in names},
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
        if not (folder / name).is_file() or _file_sha256(folder / name) != digest:
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
    """A tokenizer, the training and validation splits as arrays, and the test pairs as
    text."""

    tokenizer: Tokenizer
    train: TokenizedSplit
    valid: TokenizedSplit | None
    folder: Path  # the cache folder holding the arrays
    read_test: ChunkReader | None = None

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
    return PreparedData(tokenizer, arrays["train"], arrays.get("val"), folder, test)


class BatchStream:
    """Endless (batch, epoch, next index) from a sampler's epochs, starting at (epoch,
    index).

    prefetch: batches prepared ahead by a background thread (0: none); pin_memory: pin
    them for asynchronous copies to a GPU.
    """

    def __init__(
        self,
        split: TokenizedSplit,
        sampler: TokenBatchSampler | PackedBatchSampler,
        epoch: int = 0,
        index: int = 0,
        prefetch: int = 4,
        pin_memory: bool = False,
    ):
        self.split, self.sampler, self.epoch, self.index = split, sampler, epoch, index
        self.prefetch, self.pin = prefetch, pin_memory

    def _generate(self) -> Iterator[tuple[Batch, int, int]]:
        epoch, index = self.epoch, self.index
        while True:
            plan = self.sampler.epoch(epoch)  # planned once per epoch
            for i in range(index, len(plan)):
                batch = self.sampler.batch(self.split, plan[i])
                yield (batch.pin_memory() if self.pin else batch), epoch, i + 1
            epoch, index = epoch + 1, 0

    def __iter__(self) -> Iterator[tuple[Batch, int, int]]:
        if self.prefetch == 0:
            yield from self._generate()
            return
        ready, stop = queue.Queue(self.prefetch), threading.Event()

        def hand_over(item: object) -> bool:  # False once the consumer has stopped
            while not stop.is_set():
                with contextlib.suppress(queue.Full):
                    ready.put(item, timeout=0.1)
                    return True
            return False

        def produce() -> None:
            try:
                for item in self._generate():
                    if not hand_over(item):
                        return
            except Exception as error:  # raised in the consumer
                hand_over(error)

        thread = threading.Thread(target=produce, daemon=True, name="batch-prefetch")
        thread.start()
        try:
            while True:
                item = ready.get()
                if isinstance(item, Exception):
                    raise item
                yield item
        finally:
            stop.set()
            thread.join()


def row_lengths(lengths: np.ndarray, row_length: int) -> tuple[int, int]:
    """(source, target) row lengths for pairs of these (n, 2) lengths: row_length for
    the side with more tokens, the other's in proportion to its share and at least its
    longest sentence, rounded up to a multiple of 8 (at most row_length)."""
    totals, longest = lengths.sum(axis=0), lengths.max(axis=0, initial=0)
    long = int(np.argmax(totals))  # the side with more tokens
    share = math.ceil(row_length * int(totals[1 - long]) / max(int(totals[long]), 1))
    other = min(_round_up(max(share, int(longest[1 - long])), 8), row_length)
    return (row_length, other) if long == 0 else (other, row_length)


def pack_rows(lengths: np.ndarray, row_length: tuple[int, int]) -> np.ndarray:
    """Best fit decreasing: the row of each pair (rows numbered from 0), so that no row
    holds more than row_length[0] source or row_length[1] target tokens. lengths:
    (n, 2), in the order in which ties are taken."""
    g = math.gcd(*row_length)
    unit = np.array([row_length[1] // g, row_length[0] // g])  # per token, each side
    need = lengths * unit  # both sides on one scale, a row holding `full` units
    full, width = row_length[0] * int(unit[0]), need.max(axis=1)
    room = [[] for _ in range(full + 1)]  # room[c]: rows with c units of room
    nonempty = 0  # bit c set: room[c] holds a row
    free, rows = [], np.empty(len(lengths), dtype=np.int64)
    for i in np.argsort(-width, kind="stable").tolist():
        (a, b), w = need[i].tolist(), int(width[i])
        fits = nonempty >> w  # buckets of room >= w, from w on
        if fits:
            c = w + (fits & -fits).bit_length() - 1  # the least room that fits
            row = room[c].pop()
            if not room[c]:
                nonempty &= ~(1 << c)
        else:
            row = len(free)
            free.append([full, full])
        free[row][0] -= a
        free[row][1] -= b
        rows[i] = row
        c = min(free[row])
        room[c].append(row)
        nonempty |= 1 << c
    return rows


class PackedBatchSampler:
    """Batches of max_tokens // row_length rows, whole pairs packed into them
    (pack_rows; row lengths per side from row_lengths). lengths, shuffle, seed, rank
    and world_size as for TokenBatchSampler."""

    def __init__(
        self,
        lengths: np.ndarray | Sequence[tuple[int, int]],
        max_tokens: int,
        row_length: int,
        shuffle: bool = True,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
    ):
        self.lengths = np.asarray(lengths, dtype=np.int64).reshape(-1, 2)
        if not len(self.lengths):
            raise ValueError("no pairs to pack")
        too_long = np.flatnonzero(self.lengths.max(axis=1) > row_length)
        if len(too_long):
            raise ValueError(
                f"row_length={row_length} is shorter than {len(too_long)} pair(s) (the "
                f"longest has {self.lengths.max()} tokens on one side); raise it"
            )
        self.rows = max_tokens // row_length
        if self.rows == 0:
            raise ValueError(
                f"max_tokens={max_tokens} holds no row of row_length={row_length}"
            )
        if not 0 <= rank < world_size:
            raise ValueError(
                f"rank must be in [0, world_size={world_size}); got {rank}"
            )
        self.max_tokens, self.row_length = max_tokens, row_length
        self.row_lengths = row_lengths(self.lengths, row_length)
        self.shuffle, self.seed = shuffle, seed
        self.rank, self.world_size = rank, world_size

    def __len__(self) -> int:
        return len(self.epoch(0))

    def epoch(self, epoch: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """This rank's batches for one epoch: (pair indices, row of each pair)."""
        rng = np.random.default_rng([self.seed % 2**32, epoch])
        n = len(self.lengths)
        order = rng.permutation(n) if self.shuffle else np.arange(n)
        row = pack_rows(self.lengths[order], self.row_lengths)
        n_rows = int(row.max(initial=-1)) + 1
        place = rng.permutation(n_rows) if self.shuffle else np.arange(n_rows)
        slot = place[row]  # the rows in their shuffled order
        by_slot = np.argsort(slot, kind="stable")
        order, slot = order[by_slot], slot[by_slot]
        cuts = np.searchsorted(slot, np.arange(self.rows, n_rows, self.rows))
        batches = [
            (indices, rows % self.rows)
            for indices, rows in zip(np.split(order, cuts), np.split(slot, cuts))
        ]
        return _rank_share(batches, self.rank, self.world_size)

    def batch(
        self, split: TokenizedSplit, item: tuple[np.ndarray, np.ndarray]
    ) -> Batch:
        """The tensors of one planned batch: (rows, row length) on each side."""
        return split.packed_batch(*item, self.rows, self.row_lengths)


def _pack(ids, offsets, indices, rows, starts, shape, bos: bool):
    """Each pair's ids with <bos> before (bos) or <eos> after, at its row and start;
    returns the (rows, row_length) ids and segments."""
    first, lengths = offsets[indices], offsets[indices + 1] - offsets[indices] + 1
    pair = np.repeat(np.arange(len(indices)), lengths)
    place = np.arange(lengths.sum()) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    real = place >= 1 if bos else place < lengths[pair] - 1
    values = np.full(len(pair), BOS if bos else EOS, dtype=np.int64)
    values[real] = ids[first[pair[real]] + place[real] - bos]
    out, segments = np.full(shape, PAD, np.int64), np.zeros(shape, np.int64)
    at = rows[pair] * shape[1] + starts[pair] + place
    out.flat[at], segments.flat[at] = values, pair + 1
    return torch.from_numpy(out), torch.from_numpy(segments)


def _starts(lengths: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Where each pair starts in its row: after the pairs before it in that row."""
    by_row = np.argsort(rows, kind="stable")
    size = lengths[by_row]
    before = np.cumsum(size) - size
    new_row = np.r_[True, rows[by_row][1:] != rows[by_row][:-1]]
    starts = np.empty_like(before)
    starts[by_row] = before - np.maximum.accumulate(np.where(new_row, before, 0))
    return starts


__all__ = [
    'ParallelCorpus',
    'number_corpus',
    'parallel_files',
    'read_pair_chunks',
    'read_parallel_files',
    'fetch_multi30k',
    'hub_splits',
    'hub_pair_chunks',
    'load_hub_dataset',
    'load_corpus',
    'train_tokenizer',
    'lowercases',
    'encode_pairs',
    'TokenBatchSampler',
    'Batch',
    'collate',
    'pair_lengths',
    'TokenizedSplit',
    'default_cache_dir',
    'corpus_splits',
    'PreparedData',
    'prepare_data',
    'BatchStream',
    'row_lengths',
    'pack_rows',
    'PackedBatchSampler',
]
