"""Tests of transformer/evaluation.py (book/results.md)."""

import pytest
import sacrebleu
import torch

from transformer import (
    Trainer,
    TrainingConfig,
    TransformerConfig,
    average_checkpoints,
    corpus_bleu,
    corpus_chrf,
    evaluate,
    exact_match,
    final_model,
    last_checkpoints,
    load_checkpoint,
    load_corpus,
    load_model,
    save_checkpoint,
    tokenized_bleu,
    train_tokenizer,
)
from transformer.evaluation import write_final_model

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


def test_averaging_equal_checkpoints_returns_the_same_weights(tiny_corpus, tmp_path):
    trainer = _run(tiny_corpus, tmp_path / "run", steps=1)
    path = last_checkpoints(tmp_path / "run", 1)[0]
    averaged = average_checkpoints([path, path, path])
    for name, weight in trainer.model.state_dict().items():
        assert torch.equal(averaged["model"][name], weight), name


def test_averaging_is_the_mean_and_loads_as_a_model(tiny_corpus, tmp_path):
    _run(tiny_corpus, tmp_path / "run", steps=4)
    paths = last_checkpoints(tmp_path / "run", 3)
    assert [p.name for p in paths] == ["checkpoint-00000002.pt", "checkpoint-00000003.pt", "checkpoint-00000004.pt"]
    weights = [torch.load(p, weights_only=True)["model"] for p in paths]
    averaged = average_checkpoints(paths)
    for name in weights[0]:
        torch.testing.assert_close(averaged["model"][name], sum(w[name] for w in weights) / 3)
    assert not torch.equal(averaged["model"]["encoder.layers.0.feed_forward.w_1.weight"],
                           weights[-1]["encoder.layers.0.feed_forward.w_1.weight"])
    save_checkpoint(averaged, tmp_path / "average.pt")
    model, _ = load_model(tmp_path / "average.pt")
    for name, weight in model.state_dict().items():
        assert torch.equal(weight, averaged["model"][name]), name
    with pytest.raises(ValueError, match="weights only"):
        Trainer.resume(tmp_path / "average.pt")


def test_averaging_refuses_checkpoints_of_different_runs(tiny_corpus, tmp_path):
    _run(tiny_corpus, tmp_path / "a", steps=1)
    _run(tiny_corpus, tmp_path / "b", steps=1, vocab_size=50)
    with pytest.raises(ValueError, match="only checkpoints of one training run"):
        average_checkpoints([last_checkpoints(tmp_path / "a", 1)[0], last_checkpoints(tmp_path / "b", 1)[0]])
    with pytest.raises(ValueError, match="asked for the last 5 checkpoints"):
        last_checkpoints(tmp_path / "a", 5)
    with pytest.raises(ValueError, match="at least one"):
        average_checkpoints([])


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


def _fake_checkpoints(folder, steps):
    """Weights-only checkpoints of one run whose single weight equals the step."""
    for step in steps:
        state = {"model_config": {}, "tokenizer": "t", "model": {"w": torch.tensor([float(step)])}, "step": step}
        save_checkpoint(state, folder / f"checkpoint-{step:08d}.pt")


def test_final_model_averages_the_newest_checkpoints_of_the_last_third(tmp_path):
    _fake_checkpoints(tmp_path, [200, 400, 600, 800, 1000, 1200])
    path, note = write_final_model(tmp_path, n=5)
    # the last third of 1200 steps starts at step 800: mean of 800, 1000, 1200
    assert path.name == "checkpoint_average.pt" and load_checkpoint(path)["model"]["w"].item() == 1000
    assert "800, 1000, 1200" in note
    assert sorted(p.name for p in tmp_path.iterdir())[-1] == path.name, "lists after the checkpoints"
    assert final_model(tmp_path) == path
    assert load_checkpoint(write_final_model(tmp_path, n=2)[0])["model"]["w"].item() == 1100, "newest 2"
    _fake_checkpoints(tmp_path, [1400])  # the run resumed: the average is stale
    assert final_model(tmp_path).name == "checkpoint-00001400.pt"


def test_final_model_is_the_newest_checkpoint_when_nothing_can_be_averaged(tmp_path):
    _fake_checkpoints(tmp_path, [100, 1000])
    path, note = write_final_model(tmp_path)
    assert path.name == "checkpoint-00001000.pt" and "fewer than 2" in note
    assert not (tmp_path / "checkpoint_average.pt").exists() and final_model(tmp_path) == path
    _fake_checkpoints(tmp_path, [800, 900])
    write_final_model(tmp_path)
    path, note = write_final_model(tmp_path, n=1)
    assert path.name == "checkpoint-00001000.pt" and "off" in note
    assert not (tmp_path / "checkpoint_average.pt").exists(), "a stale average is removed"
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        write_final_model(tmp_path / "empty")


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
