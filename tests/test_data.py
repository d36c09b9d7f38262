"""Tests of transformer/data.py (book/data.md)."""

import gzip
import json

import pytest
import torch

from transformer import (
    TokenBatchSampler,
    collate,
    encode_pairs,
    load_corpus,
    load_hub_dataset,
    number_corpus,
    pair_lengths,
    read_parallel_files,
    train_tokenizer,
)
from transformer.data import BOS, EOS, PAD


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
    assert everything["three hundred and twenty-one"] == "dreihunderteinundzwanzig"


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
    with pytest.raises(ValueError, match="has 2 lines but .* has 1; they must be parallel"):
        read_parallel_files(tmp_path, "en", "de")


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


@pytest.mark.parametrize("max_tokens", [40, 150, 1000])
def test_batches_respect_the_budget_and_cover_every_pair_once(max_tokens):
    lengths = _lengths()
    sampler = TokenBatchSampler(lengths, max_tokens, seed=1)
    for epoch in (0, 1):
        batches = sampler.epoch(epoch)
        assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
        for batch in batches:
            for side in (0, 1):
                assert len(batch) * max(lengths[i][side] for i in batch) <= max_tokens
    assert sampler.epoch(0) != sampler.epoch(1), "every epoch is shuffled differently"
    assert sampler.epoch(1) == TokenBatchSampler(lengths, max_tokens, seed=1).epoch(1), "and reproducibly"


def test_ranks_share_the_batches_without_overlap():
    lengths = _lengths()
    whole = TokenBatchSampler(lengths, 200, seed=0).epoch(0)
    shards = [TokenBatchSampler(lengths, 200, seed=0, rank=r, world_size=3).epoch(0) for r in range(3)]
    assert len({len(s) for s in shards}) == 1, "the same number of batches on every rank"
    assert [b for s in zip(*shards) for b in s] == whole[: len(shards[0]) * 3]


def test_sampler_errors():
    with pytest.raises(ValueError, match="max_tokens=10 is smaller than 1 pair"):
        TokenBatchSampler([(3, 4), (12, 2)], max_tokens=10)
    with pytest.raises(ValueError, match=r"rank must be in \[0, world_size=2\); got 2"):
        TokenBatchSampler([(3, 4)], 10, rank=2, world_size=2)


def test_encode_pairs_and_lengths():
    tokenizer = train_tokenizer(iter(["a b c", "x y z"] * 10), vocab_size=30)
    pairs = encode_pairs(tokenizer, [("a b", "x y z")])
    assert pair_lengths(pairs) == [(len(pairs[0][0]) + 1, len(pairs[0][1]) + 1)]
