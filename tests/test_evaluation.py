"""Tests of transformer/evaluation.py (book/results.md)."""

import pytest
import sacrebleu

from transformer import (
    Trainer,
    TrainingConfig,
    TransformerConfig,
    corpus_bleu,
    corpus_chrf,
    evaluate,
    exact_match,
    load_corpus,
    tokenized_bleu,
    train_tokenizer,
)

TINY = TransformerConfig(d_model=32, n_heads=4, d_ff=64, n_layers=1, dropout=0.0)


def _run(corpus, out, steps=4, **overrides):
    settings = dict(data=str(corpus), vocab_size=60, max_tokens=200, max_steps=steps, warmup_steps=10,
                    precision="fp32", device="cpu", eval_every=1000, checkpoint_every=1,
                    checkpoint_minutes=1e9, keep_checkpoints=10)
    config = TrainingConfig(**{**settings, **overrides})
    trainer = Trainer.from_config(TINY, config, out)
    trainer.fit(progress=False)
    return trainer


def test_bleu_matches_sacrebleu_on_the_same_strings():
    hypotheses = ["the cat sat on the mat", "a dog barks .", "Zwei Männer stehen am Herd", ""]
    references = ["the cat sat on a mat", "the dog barks loudly .", "Zwei Männer stehen an einem Herd", "nothing"]
    score, signature = corpus_bleu(hypotheses, references)
    assert score == sacrebleu.corpus_bleu(hypotheses, [references]).score
    assert 0 < score < 100
    assert signature.startswith("nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:")
    assert corpus_bleu(references, references)[0] == pytest.approx(100.0)
    assert corpus_chrf(hypotheses, references) == pytest.approx(sacrebleu.corpus_chrf(hypotheses, [references]).score)


def test_tokenized_bleu_follows_the_multi30k_script_on_hand_worked_sentences():
    # task1-tokenize.sh: lowercase, normalise punctuation, Moses-tokenize (escaping); then
    # multi-bleu.perl on the tokens. Worked by hand: French Moses splits "l'" off "homme", so
    # both sides have 7 tokens, and p_n = 6/7, 4/6, 3/5, 2/4 with no brevity penalty.
    score, signature = tokenized_bleu(["L'homme lit un livre rouge."], ["L'homme lit un livre bleu."], "fr")
    assert score == pytest.approx(100 * (6 / 7 * 4 / 6 * 3 / 5 * 2 / 4) ** 0.25)
    assert signature.startswith("lc|moses-norm+tok:fr|sacremoses:") and "tok:none" in signature
    # case and spacing around punctuation do not count; under sacreBLEU (cased, 13a) they do
    hypotheses, references = ['ein mann, der "läuft".', "zwei Hunde ."], ['Ein Mann , der "läuft".', "Zwei Hunde."]
    assert tokenized_bleu(hypotheses, references, "de")[0] == pytest.approx(100.0)
    assert corpus_bleu(hypotheses, references)[0] < 80
    with pytest.raises(ValueError, match="one reference per hypothesis"):
        tokenized_bleu(["a"], [], "de")


def test_one_word_outputs_have_no_bleu_but_have_chrf():
    hypotheses, references = ["vierhunderteinundzwanzig", "zwei"], ["vierhunderteinundzwanzig", "drei"]
    assert corpus_bleu(hypotheses, references)[0] == 0.0
    assert 50 < corpus_chrf(hypotheses, references) < 100


def test_bleu_and_exact_match_reject_unpaired_lists():
    with pytest.raises(ValueError, match="one reference per hypothesis"):
        corpus_bleu(["a"], ["a", "b"])
    with pytest.raises(ValueError, match="one reference per hypothesis"):
        exact_match([], [])
    assert exact_match(["a", "b", "c"], ["a", "x", "c"]) == pytest.approx(2 / 3)


def test_evaluate_scores_the_translations_it_returns(tiny_corpus, tmp_path):
    trainer = _run(tiny_corpus, tmp_path / "run", steps=2)
    pairs = load_corpus(str(tiny_corpus)).splits["val"]
    scores, hypotheses = evaluate(trainer.model, trainer.data.tokenizer, pairs, beam_size=2)
    references = [r for _, r in pairs]
    assert len(hypotheses) == scores.sentences == len(pairs)
    assert scores.bleu == corpus_bleu(hypotheses, references)[0]
    assert scores.exact_match == exact_match(hypotheses, references)
    assert scores.chrf == corpus_chrf(hypotheses, references)
    assert scores.tokenized_bleu is None and "tokenized" not in str(scores)
    assert "BLEU" in str(scores) and scores.signature in str(scores)
    scores, again = evaluate(trainer.model, trainer.data.tokenizer, pairs, beam_size=2, tgt_lang="de")
    assert again == hypotheses
    assert (scores.tokenized_bleu, scores.tokenized_signature) == tokenized_bleu(hypotheses, references, "de")
    assert "lowercased tokenized BLEU" in str(scores)
    with pytest.raises(ValueError, match="at least one"):
        evaluate(trainer.model, trainer.data.tokenizer, [])


def test_lowercased_scores_equal_sacrebleus_lowercase_and_a_hand_lowercased_call():
    hypotheses = ["zwei männer stehen am herd .", "ein hund bellt", "eine frau"]
    references = ["Zwei Männer stehen am Herd .", "Ein Hund bellt laut", "Eine Frau"]
    score, signature = corpus_bleu(hypotheses, references, lowercase=True)
    assert score == sacrebleu.corpus_bleu(hypotheses, [references], lowercase=True).score
    by_hand = sacrebleu.corpus_bleu(hypotheses, [[r.lower() for r in references]]).score
    assert score == pytest.approx(by_hand) and score > corpus_bleu(hypotheses, references)[0]
    assert "|case:lc|" in signature
    chrf = sacrebleu.corpus_chrf(hypotheses, [[r.lower() for r in references]]).score
    assert corpus_chrf(hypotheses, references, lowercase=True) == pytest.approx(chrf)
    assert exact_match(hypotheses, references, lowercase=True) == pytest.approx(2 / 3)
    assert exact_match(hypotheses, references) == 0


def test_evaluate_scores_a_lowercasing_tokenizers_model_against_lowercased_references(tiny_corpus, monkeypatch):
    import transformer.evaluation as evaluation

    pairs = [("Two Dogs", "Zwei Hunde"), ("One Man Runs", "Ein Mann läuft schnell")]
    perfect = [reference.lower() for _, reference in pairs]  # what a lowercased model can do at best
    monkeypatch.setattr(evaluation, "translate", lambda model, tokenizer, sources, *a: perfect)
    texts = [text for pair in pairs for text in pair]
    for lowercase in (True, False):
        tokenizer = train_tokenizer(iter(texts), vocab_size=60, lowercase=lowercase)
        scores, hypotheses = evaluate(None, tokenizer, pairs, tgt_lang="de")
        assert hypotheses == perfect
        if lowercase:
            assert scores.bleu == pytest.approx(100) and scores.exact_match == 1
            assert scores.chrf == pytest.approx(100) and "case:lc" in scores.signature
        else:
            cased = sacrebleu.corpus_bleu(perfect, [[r for _, r in pairs]]).score
            assert scores.bleu == cased < 100 and scores.exact_match == 0
            assert "case:mixed" in scores.signature
        assert scores.tokenized_bleu == pytest.approx(100), "lowercased either way"
