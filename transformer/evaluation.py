# Generated from book/results.md by tools/export.py: edit the chapter.
"""BLEU with sacreBLEU, exact match and the evaluation of a model (§6)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib.metadata import version

from sacrebleu.metrics import BLEU, CHRF
from tokenizers import Tokenizer

from transformer.decoding import DECODING, translate
from transformer.model import Transformer
from transformer.tokenizer import lowercases


def _check_pairs(hypotheses: Sequence[str], references: Sequence[str]) -> None:
    if len(hypotheses) != len(references) or not references:
        raise ValueError(
            "one reference per hypothesis expected, at least one; got "
            f"{len(hypotheses)} hypotheses and {len(references)} references"
        )


def corpus_bleu(
    hypotheses: Sequence[str], references: Sequence[str], lowercase: bool = False
) -> tuple[float, str]:
    """Corpus BLEU (0-100) of detokenized hypotheses against one reference each, and the
    sacreBLEU signature of the settings (13a tokenization, case-sensitive unless
    lowercase: then both sides are lowercased, sacreBLEU's -lc, "case:lc")."""
    _check_pairs(hypotheses, references)
    metric = BLEU(lowercase=lowercase)
    score = metric.corpus_score(list(hypotheses), [list(references)])
    return score.score, str(metric.get_signature())


def corpus_chrf(
    hypotheses: Sequence[str], references: Sequence[str], lowercase: bool = False
) -> float:
    """Corpus chrF (0-100): F-score of character n-grams, n = 1..6, sacreBLEU's
    defaults (lowercase: of the lowercased texts)."""
    _check_pairs(hypotheses, references)
    metric = CHRF(lowercase=lowercase)
    return metric.corpus_score(list(hypotheses), [list(references)]).score


def exact_match(
    hypotheses: Sequence[str], references: Sequence[str], lowercase: bool = False
) -> float:
    """Fraction of hypotheses identical to their reference (lowercase: ignoring
    case)."""
    _check_pairs(hypotheses, references)
    if lowercase:
        hypotheses = [h.lower() for h in hypotheses]
        references = [r.lower() for r in references]
    return sum(h == r for h, r in zip(hypotheses, references)) / len(references)


def tokenized_bleu(
    hypotheses: Sequence[str], references: Sequence[str], lang: str
) -> tuple[float, str]:
    """BLEU as Multi30k papers report it: hypotheses and references lowercased,
    punctuation normalised and Moses-tokenized for language `lang` (the dataset's
    task1-tokenize.sh, with sacremoses), then scored on those tokens as multi-bleu.perl
    does. Returns the score and a signature of the steps."""
    # imported here: sacremoses takes half a second, and most processes never score
    from sacremoses import MosesPunctNormalizer, MosesTokenizer

    _check_pairs(hypotheses, references)
    normalizer, tokenizer = MosesPunctNormalizer(lang), MosesTokenizer(lang)

    def moses(text: str) -> str:
        return tokenizer.tokenize(normalizer.normalize(text.lower()), return_str=True)

    metric = BLEU(tokenize="none", force=True)
    score = metric.corpus_score(
        [moses(h) for h in hypotheses], [[moses(r) for r in references]]
    )
    steps = f"lc|moses-norm+tok:{lang}|sacremoses:{version('sacremoses')}"
    return score.score, f"{steps}|{metric.get_signature()}"


@dataclass
class Scores:
    """Scores of one decoding of a test set: sacreBLEU (with its signature), the
    lowercased tokenized BLEU of Multi30k papers (None when no target language was
    given), chrF and exact match."""

    bleu: float
    signature: str
    tokenized_bleu: float | None
    tokenized_signature: str | None
    chrf: float
    exact_match: float
    sentences: int
    seconds: float

    def __str__(self) -> str:
        tokenized = (
            ""
            if self.tokenized_bleu is None
            else f", lowercased tokenized BLEU {self.tokenized_bleu:.2f}"
        )
        return (
            f"BLEU {self.bleu:.2f}{tokenized}, chrF {self.chrf:.2f}, exact match "
            f"{self.exact_match:.1%} on {self.sentences} sentences, decoded in "
            f"{self.seconds:.1f} s ({self.signature})"
        )


def evaluate(
    model: Transformer,
    tokenizer: Tokenizer,
    pairs: Sequence[tuple[str, str]],
    beam_size: int = DECODING.beam_size,
    alpha: float = DECODING.alpha,
    batch_size: int = DECODING.batch_size,
    progress: Callable[[int], object] | None = None,
    tgt_lang: str | None = None,
) -> tuple[Scores, list[str]]:
    """Translate the sources of (source, reference) pairs and score the translations;
    tgt_lang (a Moses language code such as "de") adds the lowercased tokenized BLEU.
    A tokenizer that lowercases (a model trained on lowercased text) is scored against
    lowercased references: sacreBLEU and chrF with lowercase=True, exact match ignoring
    case."""
    if not pairs:
        raise ValueError("evaluate needs at least one (source, reference) pair")
    started = time.perf_counter()
    hypotheses = translate(
        model, tokenizer, [s for s, _ in pairs], beam_size, alpha, batch_size, progress
    )
    seconds = time.perf_counter() - started
    references, lowercase = [r for _, r in pairs], lowercases(tokenizer)
    bleu, signature = corpus_bleu(hypotheses, references, lowercase)
    tokenized, tokenized_signature = (
        (None, None)
        if tgt_lang is None
        else tokenized_bleu(hypotheses, references, tgt_lang)
    )
    chrf = corpus_chrf(hypotheses, references, lowercase)
    exact = exact_match(hypotheses, references, lowercase)
    scores = Scores(
        bleu,
        signature,
        tokenized,
        tokenized_signature,
        chrf,
        exact,
        len(pairs),
        seconds,
    )
    return scores, hypotheses


__all__ = [
    'corpus_bleu',
    'corpus_chrf',
    'exact_match',
    'tokenized_bleu',
    'Scores',
    'evaluate',
]
