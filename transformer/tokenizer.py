# Generated from book/data.md by tools/export.py: edit the chapter.
"""The shared byte-pair vocabulary of source and target (§5.1) and its special
tokens."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from tokenizers import (
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    trainers,
)


PAD, UNK, BOS, EOS = 0, 1, 2, 3
SPECIAL_TOKENS = ["<pad>", "<unk>", "<bos>", "<eos>"]


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


__all__ = [
    'train_tokenizer',
    'lowercases',
    'encode_pairs',
]
