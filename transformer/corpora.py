# Generated from book/data.md by tools/export.py: edit the chapter.
"""Parallel corpora (§5.1): the embedded number corpus, text files, Multi30k's download
(its hashes checked) and datasets of the Hugging Face hub, all read as sentence
pairs."""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import itertools
import random
import urllib.error
import urllib.request
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from transformer.files import write_atomically


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
    splits = {
        split: number_split(split, max_number, n_val, n_test, seed)
        for split in ("test", "val", "train")
    }
    return ParallelCorpus("en", "de", splits)


def number_split(
    split: str, max_number: int = 10_000, n_val: int = 500, n_test: int = 500,
    seed: int = 0,
) -> list[tuple[str, str]]:
    """One split of number_corpus, written out alone: num2words takes a fifth of a
    millisecond a number, so the 500 test pairs cost a twentieth of the whole."""
    if max_number < n_val + n_test + 1:
        raise ValueError(
            f"max_number={max_number} leaves no numbers for training after "
            f"{n_val}+{n_test}"
        )
    bounds = {"test": (0, n_test), "val": (n_test, n_test + n_val),
              "train": (n_test + n_val, max_number)}
    if split not in bounds:
        raise ValueError(f"split must be one of {sorted(bounds)}; got {split!r}")
    from num2words import num2words  # here: a fifth of a second, for this corpus only

    numbers = list(range(max_number))
    random.Random(seed).shuffle(numbers)
    start, stop = bounds[split]
    forms = random.Random(f"{seed} forms")  # the train split's forms, by the seed
    return [(forms.choice(english_forms(num2words(n, lang="en"))) if split == "train"
             else num2words(n, lang="en"), num2words(n, lang="de"))
            for n in numbers[start:stop]]


def english_forms(words: str) -> list[str]:
    """The ways readers write the English number `words`, num2words' form first: with
    and without the comma before its last part, with and without "and" after its
    hundreds or thousands."""
    forms = []
    for comma, conjunction in ((1, 1), (0, 1), (1, 0), (0, 0)):
        form = words if comma else words.replace(",", "")
        form = form if conjunction else form.replace(" and ", " ")
        if form not in forms:
            forms.append(form)
    return forms


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
        if not path.is_file() or file_sha256(path) != checksums[name]:
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


def file_sha256(path: Path) -> str:
    """The SHA-256 of a file's bytes, in hex."""
    with open(path, "rb") as file:
        return hashlib.file_digest(file, "sha256").hexdigest()


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


__all__ = [
    'ParallelCorpus',
    'number_corpus',
    'number_split',
    'english_forms',
    'parallel_files',
    'read_pair_chunks',
    'read_parallel_files',
    'fetch_multi30k',
    'file_sha256',
    'hub_splits',
    'hub_pair_chunks',
    'load_hub_dataset',
    'load_corpus',
]
