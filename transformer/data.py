# Generated from book/data.md by tools/export.py: edit the chapter, not this file.
"""Parallel corpora, the shared BPE tokenizer and batches by token count (§5.1 of the paper)."""

from __future__ import annotations

import gzip
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from num2words import num2words
from tokenizers import (
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    trainers,
)
from torch import Tensor


PAD, UNK, BOS, EOS = 0, 1, 2, 3
SPECIAL_TOKENS = ["<pad>", "<unk>", "<bos>", "<eos>"]


@dataclass
class ParallelCorpus:
    """Sentence pairs by split ("train", "val", "test"), each a list of (source, target) strings."""

    src_lang: str
    tgt_lang: str
    splits: dict[str, list[tuple[str, str]]]

    def __post_init__(self) -> None:
        if not self.splits.get("train"):
            raise ValueError(
                f"a corpus needs a non-empty 'train' split; got splits {sorted(self.splits)}"
            )

    def texts(self, split: str = "train") -> Iterator[str]:
        """Every source and target sentence of a split (what the tokenizer is trained on)."""
        for src, tgt in self.splits[split]:
            yield src
            yield tgt


def number_corpus(
    max_number: int = 10_000, n_val: int = 500, n_test: int = 500, seed: int = 0
) -> ParallelCorpus:
    """English -> German number words for 0 <= n < max_number, split at random (by seed)."""
    if max_number < n_val + n_test + 1:
        raise ValueError(
            f"max_number={max_number} leaves no numbers for training after {n_val}+{n_test}"
        )
    numbers = list(range(max_number))
    random.Random(seed).shuffle(numbers)
    pairs = [(num2words(n, lang="en"), num2words(n, lang="de")) for n in numbers]
    splits = {
        "test": pairs[:n_test],
        "val": pairs[n_test : n_test + n_val],
        "train": pairs[n_test + n_val :],
    }
    return ParallelCorpus("en", "de", splits)


def _read_lines(path: Path) -> list[str]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as file:
        return [line.rstrip("\n") for line in file]


def _split_file(folder: Path, names: Sequence[str], lang: str) -> Path | None:
    for name in names:
        for path in (folder / f"{name}.{lang}", folder / f"{name}.{lang}.gz"):
            if path.is_file():
                return path
    return None


def read_parallel_files(
    folder: str | Path, src_lang: str, tgt_lang: str
) -> ParallelCorpus:
    """Read train/val/test from `folder`: files SPLIT.LANG or SPLIT.LANG.gz, one sentence a line."""
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
    splits = {}
    for split, candidates in names.items():
        src_path, tgt_path = _split_file(folder, candidates, src_lang), _split_file(
            folder, candidates, tgt_lang
        )
        if src_path is None or tgt_path is None:
            if split == "train":
                raise FileNotFoundError(
                    f"{folder} needs train.{src_lang} and train.{tgt_lang} (optionally .gz); "
                    f"found {sorted(p.name for p in folder.iterdir())}"
                )
            continue
        src, tgt = _read_lines(src_path), _read_lines(tgt_path)
        if len(src) != len(tgt):
            raise ValueError(
                f"{src_path} has {len(src)} lines but {tgt_path} has {len(tgt)}; they must be parallel"
            )
        splits[split] = list(zip(src, tgt))
    return ParallelCorpus(src_lang, tgt_lang, splits)


def load_hub_dataset(
    name: str, src_lang: str, tgt_lang: str, config: str | None = None
) -> ParallelCorpus:
    """A translation dataset of the Hugging Face hub (e.g. "wmt14", config "de-en"), or a local folder of them."""
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
            "Named datasets download from the Hugging Face hub; offline, use a folder of parallel files."
        ) from error
    aliases = {
        "train": "train",
        "validation": "val",
        "val": "val",
        "valid": "val",
        "test": "test",
    }
    splits = {}
    for hub_split, rows in loaded.items():
        if hub_split in aliases:
            pairs = rows["translation"]
            if pairs and (src_lang not in pairs[0] or tgt_lang not in pairs[0]):
                raise ValueError(
                    f"dataset {name!r} has languages {sorted(pairs[0])}; asked for {src_lang}-{tgt_lang}"
                )
            splits[aliases[hub_split]] = [(p[src_lang], p[tgt_lang]) for p in pairs]
    return ParallelCorpus(src_lang, tgt_lang, splits)


def load_corpus(
    data: str, src_lang: str = "en", tgt_lang: str = "de"
) -> ParallelCorpus:
    """ "numbers" (the embedded corpus), a folder of parallel files, or "hub:NAME[:CONFIG]"."""
    if data == "numbers":
        return number_corpus()
    if data.startswith("hub:"):
        name, _, config = data[len("hub:") :].partition(":")
        return load_hub_dataset(name, src_lang, tgt_lang, config or None)
    return read_parallel_files(data, src_lang, tgt_lang)


def train_tokenizer(texts: Iterator[str], vocab_size: int) -> Tokenizer:
    """A BPE tokenizer trained on `texts`, with <pad>=0, <unk>=1, <bos>=2, <eos>=3."""
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.normalizer = normalizers.NFKC()
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    tokenizer.decoder = decoders.Metaspace()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, show_progress=False
    )
    tokenizer.train_from_iterator(texts, trainer)
    return tokenizer


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


class TokenBatchSampler:
    """Batches of pair indices whose padded size stays within max_tokens per side.

    lengths: (source length, target length) per pair, special tokens included.
    Each rank of world_size gets every world_size-th batch (the same number on every rank).
    """

    def __init__(
        self,
        lengths: Sequence[tuple[int, int]],
        max_tokens: int,
        shuffle: bool = True,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
    ):
        too_long = [i for i, (s, t) in enumerate(lengths) if max(s, t) > max_tokens]
        if too_long:
            raise ValueError(
                f"max_tokens={max_tokens} is smaller than {len(too_long)} pair(s) alone "
                f"(the longest has {max(max(lengths[i]) for i in too_long)} tokens); raise max_tokens or filter them"
            )
        if not 0 <= rank < world_size:
            raise ValueError(
                f"rank must be in [0, world_size={world_size}); got {rank}"
            )
        self.lengths, self.max_tokens, self.shuffle, self.seed = (
            list(lengths),
            max_tokens,
            shuffle,
            seed,
        )
        self.rank, self.world_size = rank, world_size

    def epoch(self, epoch: int) -> list[list[int]]:
        """This rank's batches for one epoch."""
        rng = random.Random(self.seed * 1_000_003 + epoch)
        order = list(range(len(self.lengths)))
        if self.shuffle:
            rng.shuffle(order)
        order.sort(
            key=lambda i: self.lengths[i]
        )  # stable: equal lengths keep the shuffled order
        batches, batch, longest_src, longest_tgt = [], [], 0, 0
        for i in order:
            s, t = self.lengths[i]
            grown = len(batch) + 1  # padded size if pair i joins the batch:
            if batch and grown * max(longest_src, s, longest_tgt, t) > self.max_tokens:
                batches.append(batch)
                batch, longest_src, longest_tgt = [], 0, 0
            batch.append(i)
            longest_src, longest_tgt = max(longest_src, s), max(longest_tgt, t)
        batches.append(batch)
        if self.shuffle:
            rng.shuffle(batches)
        if self.world_size > 1:
            if len(batches) < self.world_size:
                raise ValueError(
                    f"{len(batches)} batches cannot be shared by {self.world_size} processes"
                )
            batches = batches[: len(batches) - len(batches) % self.world_size][
                self.rank :: self.world_size
            ]
        return batches

    def __len__(self) -> int:
        return len(self.epoch(0))


@dataclass
class Batch:
    """src (batch, n), tgt_in (batch, m) = <bos> y, tgt_out (batch, m) = y <eos>; right-padded."""

    src: Tensor
    tgt_in: Tensor
    tgt_out: Tensor

    @property
    def n_tokens(self) -> int:
        """Target tokens the loss is computed on (padding excluded)."""
        return int((self.tgt_out != PAD).sum())

    def to(self, device: torch.device | str) -> Batch:
        return Batch(
            *(
                t.to(device, non_blocking=True)
                for t in (self.src, self.tgt_in, self.tgt_out)
            )
        )


def _pad(sequences: Sequence[list[int]]) -> Tensor:
    out = torch.full(
        (len(sequences), max(len(s) for s in sequences)), PAD, dtype=torch.long
    )
    for row, sequence in enumerate(sequences):
        out[row, : len(sequence)] = torch.tensor(sequence, dtype=torch.long)
    return out


def collate(pairs: Sequence[tuple[list[int], list[int]]]) -> Batch:
    """Token-id pairs (without special tokens) -> a padded Batch."""
    return Batch(
        src=_pad([s + [EOS] for s, _ in pairs]),
        tgt_in=_pad([[BOS] + t for _, t in pairs]),
        tgt_out=_pad([t + [EOS] for _, t in pairs]),
    )


def pair_lengths(pairs: Sequence[tuple[list[int], list[int]]]) -> list[tuple[int, int]]:
    """Lengths with the special tokens: (len(src) + 1, len(tgt) + 1)."""
    return [(len(s) + 1, len(t) + 1) for s, t in pairs]


__all__ = ['ParallelCorpus', 'number_corpus', 'read_parallel_files', 'load_hub_dataset', 'load_corpus', 'train_tokenizer', 'encode_pairs', 'TokenBatchSampler', 'Batch', 'collate', 'pair_lengths']
