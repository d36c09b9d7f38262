"""Tests of transformer/data.py (book/data.md)."""

import functools
import gzip
import hashlib
import http.server
import json
import threading
from pathlib import Path

import numpy as np
import pytest
import torch
from tokenizers import Tokenizer

from transformer import (
    load_corpus,
    number_corpus,
    prepare_data,
    read_parallel_files,
    train_tokenizer,
)
from transformer.batches import TokenizedSplit, collate, pair_lengths
from transformer.corpora import (
    MULTI30K_SHA256,
    MULTI30K_URL,
    english_forms,
    fetch_multi30k,
    load_hub_dataset,
    number_split,
)
from transformer.samplers import (
    BatchStream,
    PackedBatchSampler,
    TokenBatchSampler,
    pack_rows,
    row_lengths,
)
from transformer.tokenizer import encode_pairs, lowercases
from transformer.tokenizer import BOS, EOS, PAD


def test_number_corpus_is_deterministic_disjoint_and_german():
    corpus = number_corpus(max_number=2000, n_val=100, n_test=100, seed=3)
    assert corpus.splits == number_corpus(max_number=2000, n_val=100, n_test=100, seed=3).splits
    assert corpus.splits != number_corpus(max_number=2000, n_val=100, n_test=100, seed=4).splits
    sizes = {split: len(pairs) for split, pairs in corpus.splits.items()}
    assert sizes == {"train": 1800, "val": 100, "test": 100}
    sources = [{s for s, _ in pairs} for pairs in corpus.splits.values()]
    assert not (sources[0] & sources[1]) and not (sources[0] & sources[2]) and not (sources[1] & sources[2])
    everything = dict(pair for pairs in corpus.splits.values() for pair in pairs)
    assert everything["twenty-one"] == "einundzwanzig"
    assert "dreihunderteinundzwanzig" in {everything.get(form) for form in (
        "three hundred and twenty-one", "three hundred twenty-one")}
    with pytest.raises(ValueError, match=r"split must be one of \['test', 'train', 'val'\]; got 'dev'"):
        number_split("dev")


def test_the_train_split_writes_numbers_as_readers_do_and_the_others_as_num2words():
    """Each training source is one of the forms of its number (num2words' own, written out
    here: the comma before the last part kept or not, "and" kept or not), each form is
    trained on; validation and test keep num2words' form, as they always had."""
    from num2words import num2words

    corpus = number_corpus(max_number=3000, n_val=100, n_test=100, seed=1)
    german_to_number = {num2words(n, lang="de"): n for n in range(3000)}
    kinds = set()
    for split, pairs in corpus.splits.items():
        for en, de in pairs:
            words = num2words(german_to_number[de], lang="en")
            if split != "train":
                assert en == words
                continue
            written = {words, words.replace(",", ""), words.replace(" and ", " "),
                       words.replace(",", "").replace(" and ", " ")}
            assert en in written, (en, words)
            kinds.add(("," in en, " and " in en))
    assert kinds == {(True, True), (False, True), (True, False), (False, False)}
    assert english_forms("nine thousand, four hundred and seventy-two")[1:] == [
        "nine thousand four hundred and seventy-two", "nine thousand, four hundred seventy-two",
        "nine thousand four hundred seventy-two"]


def test_parallel_files_plain_and_gzipped(tmp_path):
    (tmp_path / "train.en").write_text("a cat\na dog\n")
    (tmp_path / "train.de").write_text("eine Katze\nein Hund\n")
    with gzip.open(tmp_path / "val.en.gz", "wt") as f:
        f.write("a bird\n")
    with gzip.open(tmp_path / "val.de.gz", "wt") as f:
        f.write("ein Vogel\n")
    (tmp_path / "test_2016_flickr.en").write_text("a fish\n")
    (tmp_path / "test_2016_flickr.de").write_text("ein Fisch\n")
    corpus = read_parallel_files(tmp_path, "en", "de")
    assert corpus.splits == {
        "train": [("a cat", "eine Katze"), ("a dog", "ein Hund")],
        "val": [("a bird", "ein Vogel")],
        "test": [("a fish", "ein Fisch")],
    }
    assert load_corpus(str(tmp_path), "de", "en").splits["train"][0] == ("eine Katze", "a cat")


def test_parallel_files_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="is not a folder"):
        read_parallel_files(tmp_path / "missing", "en", "de")
    (tmp_path / "train.en").write_text("one\ntwo\n")
    with pytest.raises(FileNotFoundError, match=r"needs train.en and train.de"):
        read_parallel_files(tmp_path, "en", "de")
    (tmp_path / "train.de").write_text("eins\n")
    with pytest.raises(ValueError, match=r"must be parallel \(as many lines\); .*train.de ends after 1 lines"):
        read_parallel_files(tmp_path, "en", "de")


def test_a_file_that_is_not_utf8_is_named_with_its_line_and_byte(tmp_path):
    (tmp_path / "train.en").write_bytes(b"one\r\ntwelve \xc2\xbd\r\n")  # Windows line ends, UTF-8
    (tmp_path / "train.de").write_bytes("eins\nzwölf ½\n".encode("utf-8"))
    assert read_parallel_files(tmp_path, "en", "de").splits["train"] == [("one", "eins"), ("twelve ½", "zwölf ½")]
    with gzip.open(tmp_path / "train.de.gz", "wb") as f:
        f.write("eins\nzwölf ½\n".encode("latin-1"))  # ö is the byte 0xf6 in Latin-1
    (tmp_path / "train.de").unlink()
    with pytest.raises(ValueError) as error:
        read_parallel_files(tmp_path, "en", "de")
    assert str(error.value) == f"{tmp_path / 'train.de.gz'} is not UTF-8 text: line 2 has the byte 0xf6 at position 3"


def _damaged(folder: Path, kind: str) -> Path:
    """A Multi30k-like folder whose train.de is damaged in one way; returns that file."""
    folder.mkdir()
    (folder / "train.en").write_text("one\ntwo\nthree\n")
    whole = gzip.compress("eins\nzwei\ndrei\n".encode() * 2000)
    damaged = folder / "train.de.gz"
    if kind == "cut short":
        damaged.write_bytes(whole[: len(whole) // 2])
    elif kind == "not gzip":
        damaged.write_bytes(b"eins\nzwei\ndrei\n")
    elif kind == "binary":
        damaged = folder / "train.de"
        damaged.write_bytes(b"eins\n\x00\x00\x00\rIHDR\x00\x01\n")  # UTF-8, not text
    elif kind == "empty":
        (folder / "train.en").write_text("")
        damaged = folder / "train.de"
        damaged.write_text("")
    return damaged


@pytest.mark.parametrize(("kind", "says"), [
    ("cut short", r"is not a whole gzip file \(Compressed file ended before the end-of-stream marker"),
    ("not gzip", r"is not a whole gzip file \(Not a gzipped file"),
    ("binary", r"is not text: line 2 holds a NUL byte"),
    ("empty", r"hold no sentence pair; a split needs one"),
])
def test_a_damaged_file_is_refused_with_its_name_and_what_is_wrong(tmp_path, kind, says):
    damaged = _damaged(tmp_path / "corpus", kind)
    with pytest.raises(ValueError, match=says) as error:
        read_parallel_files(tmp_path / "corpus", "en", "de")
    assert str(damaged) in str(error.value)


def test_hub_loader_reads_the_translation_format_from_a_local_folder(tmp_path, monkeypatch):
    pytest.importorskip("datasets")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    folder = tmp_path / "wmt_tiny"
    folder.mkdir()
    for split, rows in {"train": [("a cat", "eine Katze"), ("a dog", "ein Hund")], "validation": [("a bird", "ein Vogel")]}.items():
        lines = [json.dumps({"translation": {"en": en, "de": de}}) for en, de in rows]
        (folder / f"{split}.jsonl").write_text("\n".join(lines) + "\n")
    corpus = load_corpus(f"hub:{folder}", "en", "de")
    assert corpus.splits["train"] == [("a cat", "eine Katze"), ("a dog", "ein Hund")]
    assert corpus.splits["val"] == [("a bird", "ein Vogel")]
    with pytest.raises(ValueError, match=r"has languages \['de', 'en'\]; asked for en-fr"):
        load_hub_dataset(str(folder), "en", "fr")
    with pytest.raises(RuntimeError, match="could not load dataset"):
        load_hub_dataset(str(tmp_path / "no-such-dataset"), "en", "de")


def test_tokenizer_round_trips_and_fixes_special_ids():
    tokenizer = train_tokenizer(number_corpus(max_number=1000, n_val=10, n_test=10).texts(), vocab_size=120)
    assert [tokenizer.token_to_id(t) for t in ("<pad>", "<unk>", "<bos>", "<eos>")] == [PAD, 1, BOS, EOS]
    for text in ("four hundred and twenty-one", "vierhunderteinundzwanzig"):
        assert tokenizer.decode(tokenizer.encode(text).ids) == text
    assert tokenizer.get_vocab_size() <= 120


def test_collate_shifts_the_target_and_pads():
    batch = collate([([5, 6, 7], [8, 9]), ([5], [8, 9, 10])])
    assert batch.src.tolist() == [[5, 6, 7, EOS], [5, EOS, PAD, PAD]]
    assert batch.tgt_in.tolist() == [[BOS, 8, 9, PAD], [BOS, 8, 9, 10]]
    assert batch.tgt_out.tolist() == [[8, 9, EOS, PAD], [8, 9, 10, EOS]]
    assert batch.n_tokens == 7


def _lengths(n=500, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [(int(a), int(b)) for a, b in torch.randint(2, 40, (n, 2), generator=g)]


def _greedy_sizes(widths, max_tokens):
    """Batch sizes of the written-out greedy cut of sorted widths (the oracle)."""
    sizes, count, longest = [], 0, 0
    for width in sorted(widths):
        if count and (count + 1) * max(longest, width) > max_tokens:
            sizes.append(count)
            count, longest = 0, 0
        count, longest = count + 1, max(longest, width)
    return sizes + [count]


@pytest.mark.parametrize("max_tokens, pad_multiple", [(40, 1), (150, 1), (1000, 1), (150, 8)])
def test_batches_respect_the_budget_and_cover_every_pair_once(max_tokens, pad_multiple):
    lengths = _lengths()
    sampler = TokenBatchSampler(lengths, max_tokens, seed=1, pad_multiple=pad_multiple)
    rounded = [-(-max(pair) // pad_multiple) * pad_multiple for pair in lengths]
    for epoch in (0, 1):
        batches = sampler.epoch(epoch)
        assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
        for batch in batches:
            assert len(batch) * max(rounded[i] for i in batch) <= max_tokens
        assert sorted(map(len, batches)) == sorted(_greedy_sizes(rounded, max_tokens))
    as_lists = lambda batches: [b.tolist() for b in batches]
    assert as_lists(sampler.epoch(0)) != as_lists(sampler.epoch(1)), "every epoch is shuffled differently"
    again = TokenBatchSampler(lengths, max_tokens, seed=1, pad_multiple=pad_multiple)
    assert as_lists(sampler.epoch(1)) == as_lists(again.epoch(1)), "and reproducibly"


def test_ranks_share_the_batches_without_overlap():
    lengths = _lengths()
    whole = TokenBatchSampler(lengths, 200, seed=0).epoch(0)
    shards = [TokenBatchSampler(lengths, 200, seed=0, rank=r, world_size=3).epoch(0) for r in range(3)]
    assert len({len(s) for s in shards}) == 1, "the same number of batches on every rank"
    interleaved = [b.tolist() for s in zip(*shards) for b in s]
    assert interleaved == [b.tolist() for b in whole[: len(shards[0]) * 3]]


def _random_pairs(n=50, seed=0):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(0, 12, (n, 2), generator=g).tolist()
    return [(torch.randint(4, 300, (a,), generator=g).tolist(), torch.randint(4, 300, (b,), generator=g).tolist())
            for a, b in lengths]


def test_array_batches_equal_the_sentence_by_sentence_collate():
    pairs = _random_pairs()
    split = TokenizedSplit.from_pairs(pairs)
    assert split.lengths().tolist() == [list(x) for x in pair_lengths(pairs)]
    for indices in ([0], [3, 1, 4, 1, 5], list(range(len(pairs)))):
        fast, slow = split.batch(np.array(indices)), collate([pairs[i] for i in indices])
        for name in ("src", "tgt_in", "tgt_out"):
            assert torch.equal(getattr(fast, name), getattr(slow, name)), name
        assert fast.n_tokens == slow.n_tokens
        padded = split.batch(np.array(indices), pad_multiple=8)
        for name in ("src", "tgt_in", "tgt_out"):
            tensor, width = getattr(padded, name), getattr(slow, name).size(1)
            assert tensor.size(1) % 8 == 0 and torch.equal(tensor[:, :width], getattr(slow, name))
            assert (tensor[:, width:] == PAD).all()


@pytest.mark.parametrize("row_length", [12, 16, 40])
def test_packed_rows_hold_every_pair_once_within_the_row_length(row_length):
    lengths = np.array(pair_lengths(_random_pairs(300, seed=3)))
    sampler = PackedBatchSampler(lengths, 4 * row_length, row_length, seed=1)
    for epoch in (0, 1):
        batches = sampler.epoch(epoch)
        indices = np.concatenate([i for i, _ in batches])
        assert np.array_equal(np.sort(indices), np.arange(len(lengths))), "every pair once"
        for pairs, rows in batches:
            assert rows.min() >= 0 and rows.max() < sampler.rows == 4
            for side in (0, 1):
                assert np.bincount(rows, lengths[pairs, side]).max() <= sampler.row_lengths[side]
    assert [i.tolist() for i, _ in sampler.epoch(0)] != [i.tolist() for i, _ in sampler.epoch(1)]
    again = PackedBatchSampler(lengths, 4 * row_length, row_length, seed=1)
    assert [i.tolist() for i, _ in sampler.epoch(1)] == [i.tolist() for i, _ in again.epoch(1)]


@pytest.mark.parametrize("ratio", [1.0, 0.6, 1.5])
def test_rows_of_sentences_whose_sides_correlate_are_nearly_full(ratio):
    rng = np.random.default_rng(0)
    src = rng.integers(5, 40, 3000)
    tgt = np.maximum(1, np.rint(src * ratio * rng.uniform(0.8, 1.25, 3000)))
    lengths = np.stack([src, tgt], 1).astype(int)
    sides = row_lengths(lengths, 128)
    rows = pack_rows(lengths, sides)
    for side in (0, 1):
        assert np.bincount(rows, lengths[:, side]).max() <= sides[side]
        padding = 1 - lengths[:, side].sum() / (sides[side] * (rows.max() + 1))
        # the shorter side's row is rounded up to a multiple of 8: up to 7 positions more
        assert padding < 0.1, f"side {side}: {padding:.1%} of the positions are padding"


def test_row_lengths_follow_the_sides_totals():
    # sources 30 tokens in all, targets 20: the source row 40, the target 40 * 20/30 -> 32
    assert row_lengths(np.array([[10, 5], [20, 15]]), 40) == (40, 32)
    assert row_lengths(np.array([[5, 10], [15, 20]]), 40) == (32, 40)
    # at least the longest sentence of the shorter side, rounded up to 8
    assert row_lengths(np.array([[30, 2], [30, 2], [1, 29]]), 40) == (40, 32)


def test_ranks_share_the_packed_batches_without_overlap():
    lengths = np.array(pair_lengths(_random_pairs(300, seed=5)))
    whole = PackedBatchSampler(lengths, 64, 16, seed=0).epoch(0)
    shards = [PackedBatchSampler(lengths, 64, 16, seed=0, rank=r, world_size=3).epoch(0) for r in range(3)]
    assert len({len(s) for s in shards}) == 1, "the same number of batches on every rank"
    interleaved = [(i.tolist(), r.tolist()) for s in zip(*shards) for i, r in s]
    assert interleaved == [(i.tolist(), r.tolist()) for i, r in whole[: len(shards[0]) * 3]]
    with pytest.raises(ValueError, match="no pairs to pack"):
        PackedBatchSampler(np.zeros((0, 2), int), 64, 16)


def test_best_fit_decreasing_on_a_hand_worked_example():
    # longest first: 7 opens row 0 (room 3), 6 opens row 1 (room 4), 4 fits row 1 exactly
    # (least room that fits), 3 fits row 0, 2 opens row 2
    lengths = np.array([[3, 3], [7, 7], [2, 2], [6, 6], [4, 4]])
    assert pack_rows(lengths, (10, 10)).tolist() == [0, 0, 2, 1, 1]
    # a row's room is the smaller of its two sides', and a pair needs room for its longer
    # side: (1, 6) leaves (9, 4), room 4, so (5, 1) opens a row though its sides would fit
    assert pack_rows(np.array([[5, 1], [1, 6]]), (10, 10)).tolist() == [1, 0]
    # rows of 4 source and 2 target tokens: (1, 2) fills a row's target side alone (row 0),
    # and the two (2, 1) share the next
    assert pack_rows(np.array([[2, 1], [1, 2], [2, 1]]), (4, 2)).tolist() == [1, 0, 1]


def test_packed_batches_hold_the_tokens_of_the_padded_batches():
    pairs = _random_pairs(120, seed=4)
    split = TokenizedSplit.from_pairs(pairs)
    sampler = PackedBatchSampler(split.lengths(), 64, 16, seed=0)
    for item in sampler.epoch(0):
        batch, (indices, rows) = sampler.batch(split, item), item
        assert batch.src.shape == (4, sampler.row_lengths[0])
        assert batch.tgt_in.shape == batch.tgt_out.shape == (4, sampler.row_lengths[1])
        assert batch.n_tokens == (batch.tgt_out != PAD).sum() == (batch.tgt_segments > 0).sum()
        for k, (i, row) in enumerate(zip(indices, rows)):
            source, target = pairs[i]
            src_at = (batch.src_segments[row] == k + 1).nonzero()[:, 0]
            tgt_at = (batch.tgt_segments[row] == k + 1).nonzero()[:, 0]
            assert src_at.tolist() == list(range(src_at[0], src_at[0] + len(source) + 1)), "contiguous"
            assert batch.src[row, src_at].tolist() == source + [EOS]
            assert batch.tgt_in[row, tgt_at].tolist() == [BOS] + target
            assert batch.tgt_out[row, tgt_at].tolist() == target + [EOS]
        assert ((batch.src == PAD) == (batch.src_segments == 0)).all()


def test_packing_refuses_pairs_longer_than_a_row_and_budgets_without_a_row():
    with pytest.raises(ValueError, match=r"row_length=8 is shorter than 1 pair\(s\).*longest has 9"):
        PackedBatchSampler([(3, 4), (9, 2)], 100, 8)
    with pytest.raises(ValueError, match="max_tokens=10 holds no row of row_length=16"):
        PackedBatchSampler([(3, 4)], 10, 16)


def _take(stream, n):
    iterator = iter(stream)
    try:
        return [next(iterator) for _ in range(n)]
    finally:
        iterator.close()


def test_prefetching_gives_the_same_batches_in_the_same_order_across_epochs():
    split = TokenizedSplit.from_pairs(_random_pairs(200))
    sampler = TokenBatchSampler(split.lengths(), 60, seed=2)
    per_epoch = len(sampler)
    plain = _take(BatchStream(split, sampler, prefetch=0), 2 * per_epoch + 3)
    ahead = _take(BatchStream(split, sampler, prefetch=3), 2 * per_epoch + 3)
    assert [(e, i) for _, e, i in plain][per_epoch - 1 : per_epoch + 1] == [(0, per_epoch), (1, 1)]
    for (a, *pa), (b, *pb) in zip(plain, ahead):
        assert pa == pb and torch.equal(a.src, b.src) and torch.equal(a.tgt_out, b.tgt_out)
    middle = _take(BatchStream(split, sampler, epoch=1, index=2, prefetch=2), 3)
    assert [torch.equal(a.src, b.src) for (a, *_), (b, *_) in zip(middle, plain[per_epoch + 2 :])] == [True] * 3


def test_an_error_in_the_prefetch_thread_reaches_the_consumer():
    split = TokenizedSplit.from_pairs(_random_pairs(20))
    sampler = TokenBatchSampler(split.lengths(), 60)
    split.src_ids = split.src_ids[:3]  # the offsets now point past the ids
    with pytest.raises(IndexError):
        _take(BatchStream(split, sampler, prefetch=2), 20)


def _write_corpus(folder, pairs, name="train"):
    folder.mkdir(exist_ok=True)
    (folder / f"{name}.en").write_text("".join(en + "\n" for en, _ in pairs))
    (folder / f"{name}.de").write_text("".join(de + "\n" for _, de in pairs))


PAIRS = [(f"the {w} cat number {n}", f"die {w} Katze Nummer {n}") for n in range(30) for w in ("big", "small")]


def test_prepared_arrays_hold_the_tokenizers_ids(tmp_path):
    _write_corpus(tmp_path / "corpus", PAIRS)
    _write_corpus(tmp_path / "corpus", PAIRS[:5], "val")
    _write_corpus(tmp_path / "corpus", PAIRS[5:9], "test_2016")
    data = prepare_data(str(tmp_path / "corpus"), vocab_size=80, cache_dir=tmp_path / "cache")
    assert len(data.train) == len(PAIRS) and len(data.valid) == 5 and data.test == PAIRS[5:9]
    assert data.train.src_ids.dtype == np.uint16 and isinstance(data.train.src_ids, np.memmap)
    expected = TokenizedSplit.from_pairs(encode_pairs(data.tokenizer, PAIRS))
    for name in ("src_ids", "src_offsets", "tgt_ids", "tgt_offsets"):
        assert np.array_equal(getattr(data.train, name), getattr(expected, name)), name


def test_the_cache_is_reused_and_rebuilt_when_corpus_tokenizer_or_files_change(tmp_path, monkeypatch):
    import transformer.prepared as data_module

    builds = []
    original = data_module._write_split
    monkeypatch.setattr(data_module, "_write_split", lambda *a: builds.append(a[1]) or original(*a))
    corpus, cache = tmp_path / "corpus", tmp_path / "cache"
    _write_corpus(corpus, PAIRS)
    first = prepare_data(str(corpus), vocab_size=80, cache_dir=cache)
    again = prepare_data(str(corpus), vocab_size=80, cache_dir=cache)
    assert builds == ["train"] and again.folder == first.folder, "the second run reuses the arrays"
    assert again.tokenizer.to_str() == first.tokenizer.to_str()
    other_tokenizer = prepare_data(str(corpus), vocab_size=70, cache_dir=cache)
    assert builds == ["train"] * 2 and other_tokenizer.folder != first.folder
    _write_corpus(corpus, PAIRS[:-1] + [("a new line", "eine neue Zeile")])
    changed = prepare_data(str(corpus), vocab_size=80, cache_dir=cache)
    assert builds == ["train"] * 3 and changed.folder != first.folder
    ids = changed.folder / "train.tgt.ids"
    ids.write_bytes(ids.read_bytes()[:-2])  # a truncated file
    with pytest.warns(UserWarning, match="rebuilding the data cache .*train.tgt.ids"):
        repaired = prepare_data(str(corpus), vocab_size=80, cache_dir=cache)
    expected = TokenizedSplit.from_pairs(encode_pairs(repaired.tokenizer, PAIRS[:-1] + [("a new line", "eine neue Zeile")]))
    assert builds == ["train"] * 4 and np.array_equal(repaired.train.tgt_ids, expected.tgt_ids)
    assert not [p for p in (cache / "data").iterdir() if "." in p.name], "no half-written folder is left"


def test_sampler_errors():
    with pytest.raises(ValueError, match="max_tokens=10 is smaller than 1 pair"):
        TokenBatchSampler([(3, 4), (12, 2)], max_tokens=10)
    with pytest.raises(ValueError, match=r"rank must be in \[0, world_size=2\); got 2"):
        TokenBatchSampler([(3, 4)], 10, rank=2, world_size=2)


def test_encode_pairs_and_lengths():
    tokenizer = train_tokenizer(iter(["a b c", "x y z"] * 10), vocab_size=30)
    pairs = encode_pairs(tokenizer, [("a b", "x y z")])
    assert pair_lengths(pairs) == [(len(pairs[0][0]) + 1, len(pairs[0][1]) + 1)]


def test_punctuation_is_split_from_words_and_the_text_restored_exactly():
    texts = ["a man sits on a bench.", "two dogs, playing", "the bench is red!"] * 20
    odd = ["He said: \"t-shirt's fine\" , ok ...", "two  spaces ,", "¿qué? (sí)"]
    tokenizer = train_tokenizer(iter(texts + odd), vocab_size=80, split_punctuation=True)
    spaces_only = train_tokenizer(iter(texts + odd), vocab_size=80)
    assert spaces_only.encode("the bench.").tokens[-1] != "."  # the default: glued
    # the word's tokens do not depend on the mark that follows it (hand-written oracle)
    for word, mark in [("bench", "."), ("dogs", ","), ("red", "!")]:
        alone = tokenizer.encode(f"the {word}").tokens
        assert tokenizer.encode(f"the {word}{mark}").tokens == alone + [mark]
    assert not [t for t in tokenizer.get_vocab() if len(t) > 1 and set(t) & set(".,!?:")]
    for text in odd:  # characters it has seen, spaced and punctuated oddly
        assert tokenizer.decode(tokenizer.encode(text).ids) == text


def test_a_lowercase_tokenizer_encodes_cased_text_as_its_lowercase(tmp_path):
    cased = [(src.title(), tgt.capitalize()) for src, tgt in PAIRS]
    texts = [text for pair in cased for text in pair]
    lower = train_tokenizer(iter(texts), vocab_size=80, lowercase=True)
    kept = train_tokenizer(iter(texts), vocab_size=80)
    assert lowercases(lower) and not lowercases(kept)
    assert not any(char.isupper() for token in lower.get_vocab() for char in token)
    assert any(char.isupper() for token in kept.get_vocab() for char in token)
    for text in ("Two Men Stand", "ÄRGER über Öl", "a DOG"):
        assert lower.encode(text).ids == lower.encode(text.lower()).ids
    assert lowercases(Tokenizer.from_str(lower.to_str())), "the normalizer is serialized"
    # prepare_data: a lowercased run has its own tokenizer and arrays, of lowercased ids
    _write_corpus(tmp_path / "corpus", cased)
    cache = tmp_path / "cache"
    plain = prepare_data(str(tmp_path / "corpus"), vocab_size=80, cache_dir=cache)
    data = prepare_data(str(tmp_path / "corpus"), vocab_size=80, cache_dir=cache, lowercase=True)
    assert lowercases(data.tokenizer) and not lowercases(plain.tokenizer)
    assert data.folder != plain.folder
    lowered = [(src.lower(), tgt.lower()) for src, tgt in cased]
    expected = TokenizedSplit.from_pairs(encode_pairs(data.tokenizer, lowered))
    assert np.array_equal(data.train.src_ids, expected.src_ids)
    assert np.array_equal(data.train.tgt_ids, expected.tgt_ids)
    with pytest.raises(ValueError, match="asks for a tokenizer that lowercases"):
        prepare_data(str(tmp_path / "corpus"), tokenizer=plain.tokenizer, cache_dir=cache, lowercase=True)


@pytest.fixture
def served(tmp_path):
    """A folder served over HTTP on 127.0.0.1, laid out as Multi30k's data/task1/raw (a few
    lines of number words); yields (its URL, the files' SHA-256, the requested paths)."""
    from num2words import num2words

    folder = tmp_path / "served"
    folder.mkdir()
    for split, numbers in {"train": range(1, 40), "val": range(40, 45), "test_2016_flickr": range(45, 50)}.items():
        for lang in ("en", "de", "fr"):
            text = "\n".join(num2words(n, lang=lang) for n in numbers) + "\n"
            (folder / f"{split}.{lang}.gz").write_bytes(gzip.compress(text.encode()))
    sums = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.iterdir()}
    requested = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            requested.append(self.path)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=folder))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/", sums, requested, folder
    server.shutdown()
    server.server_close()


def test_multi30k_is_fetched_checked_and_read_as_a_corpus(served, tmp_path):
    url, sums, requested, folder = served
    paths = fetch_multi30k(tmp_path / "m30k", ("en", "de"), url=url, checksums=sums)
    assert sorted(p.name for p in paths) == sorted(n for n in sums if not n.endswith(".fr.gz"))
    assert all(p.read_bytes() == (folder / p.name).read_bytes() for p in paths)
    corpus = read_parallel_files(tmp_path / "m30k", "en", "de")
    assert corpus.splits["train"][0] == ("one", "eins") and len(corpus.splits["test"]) == 5
    count = len(requested)
    fetch_multi30k(tmp_path / "m30k", ("en", "de"), url=url, checksums=sums)
    assert len(requested) == count, "files already there with their checksum are not fetched again"


def test_a_file_that_is_not_the_recorded_one_is_not_written(served, tmp_path):
    url, sums, _, folder = served
    (folder / "val.de.gz").write_bytes(b"<html>a proxy's error page</html>")
    with pytest.raises(ValueError, match=rf"{url}val.de.gz has SHA-256 [0-9a-f]{{64}}, not the recorded "
                                         rf"{sums['val.de.gz']}; nothing written"):
        fetch_multi30k(tmp_path / "m30k", ("en", "de"), url=url, checksums=sums)
    assert sorted(p.name for p in (tmp_path / "m30k").iterdir()) == ["train.de.gz", "train.en.gz", "val.en.gz"]
    with pytest.raises(OSError, match=rf"could not fetch {url}train.cs.gz: File not found"):
        no_such = {f"{split}.cs.gz": "0" * 64 for split in ("train", "val", "test_2016_flickr")}
        fetch_multi30k(tmp_path / "m30k", ("cs",), url=url, checksums=no_such)
    with pytest.raises(ValueError, match="no recorded checksum for train.xx.gz"):
        fetch_multi30k(tmp_path / "m30k", ("xx",))


def test_the_recorded_multi30k_files_are_pinned_to_a_commit():
    """The address names one commit of github.com/multi30k/dataset, so the recorded checksums
    stay those of the files it serves; nine files: three splits in three languages."""
    commit = MULTI30K_URL.split("/multi30k/dataset/")[1].split("/")[0]
    assert len(commit) == 40 and int(commit, 16) >= 0 and MULTI30K_URL.endswith("/data/task1/raw/")
    assert sorted(MULTI30K_SHA256) == sorted(f"{s}.{l}.gz" for s in ("train", "val", "test_2016_flickr")
                                              for l in ("en", "de", "fr"))
