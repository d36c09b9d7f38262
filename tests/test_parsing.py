"""Tests of transformer/parsing.py (book/parsing.md): linearised trees, the sampled treebank
and its files, and labelled bracketing scores against hand-worked examples."""

import random
from collections import Counter

import pytest

from transformer import read_parallel_files
from transformer.corpora import ParallelCorpus
from transformer.parsing import (
    Tree,
    bracket_scores,
    linearize,
    read_linearized,
    sample_tree,
    treebank,
    write_corpus,
)
from transformer.parsing import GRAMMAR, LEXICON


def tag(label, word):
    return Tree(label, (word,))


# Vinyals et al. (2015), Figure 2: "John has a dog ."
JOHN = Tree(
    "S",
    (
        Tree("NP", (tag("NNP", "John"),)),
        Tree("VP", (tag("VBZ", "has"), Tree("NP", (tag("DT", "a"), tag("NN", "dog"))))),
        tag(".", "."),
    ),
)
GOLD = "(S (NP NNP )NP (VP VBZ (NP DT NN )NP )VP . )S"


def test_linearize_writes_vinyals_et_al_figure_2():
    assert linearize(JOHN) == GOLD
    assert JOHN.words() == ["John", "has", "a", "dog", "."]
    assert str(JOHN) == "(S (NP (NNP John)) (VP (VBZ has) (NP (DT a) (NN dog))) (. .))"


def test_linearize_with_words_keeps_the_brackets_and_puts_words_for_tags():
    assert linearize(JOHN, "words") == "(S (NP John )NP (VP has (NP a dog )NP )VP . )S"
    # the same brackets over the same spans, whichever the leaves
    assert read_linearized(linearize(JOHN, "words")) == read_linearized(GOLD)
    with pytest.raises(ValueError, match='"tags" or "words"; got .XX.'):
        linearize(JOHN, "XX")


def test_read_linearized_gives_the_spans_worked_by_hand():
    spans = Counter({("S", 0, 5): 1, ("NP", 0, 1): 1, ("VP", 1, 4): 1, ("NP", 2, 4): 1})
    assert read_linearized(GOLD) == (spans, 5, True)
    # a unary chain gives two brackets over the same span; a repeated one is counted twice
    assert read_linearized("(S (VP (VP VBD )VP )VP )S")[0] == Counter(
        {("S", 0, 1): 1, ("VP", 0, 1): 2}
    )


@pytest.mark.parametrize(
    "text, spans",
    [  # brackets left open close after the last word
        ("(S (NP DT NN", {("S", 0, 2), ("NP", 0, 2)}),
        # a stray closing bracket is skipped
        (")NP (S DT )S", {("S", 0, 1)}),
        # a mismatched label closes the innermost open bracket
        ("(S (NP DT )VP NN )S", {("NP", 0, 1), ("S", 0, 2)}),
    ],
)
def test_malformed_outputs_are_read_leniently_and_flagged(text, spans):
    found, _, well_formed = read_linearized(text)
    assert set(found) == spans and not well_formed


def test_bracket_scores_on_hand_worked_parses():
    flat = "(S (NP NNP )NP (VP VBZ )VP (NP DT NN )NP . )S"  # 3 of 4 brackets right
    assert bracket_scores([GOLD, flat], [GOLD, GOLD]).f1 == pytest.approx(100 * 7 / 8)
    scores = bracket_scores([flat, "(S NNP VBZ DT NN . )S"], [GOLD, GOLD])
    # outputs: 4 + 1 brackets, 3 + 1 of them right; gold: 8 brackets
    assert scores.precision == pytest.approx(100 * 4 / 5)
    assert scores.recall == pytest.approx(100 * 4 / 8)
    assert scores.f1 == pytest.approx(2 * 80 * 50 / 130)
    assert (scores.exact, scores.well_formed) == (0.0, 100.0)
    missing_word = bracket_scores(
        ["(S (NP NNP )NP (VP VBZ )VP )S"], ["(S (NP NNP )NP (VP VBZ )VP . )S"]
    )
    assert missing_word.well_formed == 0.0 and missing_word.recall == pytest.approx(
        200 / 3
    )
    assert bracket_scores(["NNP VBZ ."], [GOLD]).f1 == 0.0  # no brackets at all


def test_bracket_scores_rejects_unpaired_outputs():
    with pytest.raises(ValueError, match="one output per reference"):
        bracket_scores([GOLD], [GOLD, GOLD])
    with pytest.raises(ValueError, match="at least one"):
        bracket_scores([], [])


def derivable(tree: Tree) -> bool:
    """Whether every node of `tree` rewrites by a rule of GRAMMAR or a word of LEXICON."""
    if isinstance(tree.children[0], str):
        return any(
            name.split(":")[0] == tree.label and tree.children[0] in words
            for name, words in LEXICON.items()
        )
    labels = tuple(child.label for child in tree.children)
    bodies = {
        tuple(s.split("/")[0].split(":")[0] for s in body)
        for name, rules in GRAMMAR.items()
        if name.split("/")[0] == tree.label
        for _, body in rules
    }
    return labels in bodies and all(derivable(child) for child in tree.children)


def test_sampled_trees_follow_the_grammar_and_stop():
    rng = random.Random(0)
    trees = [sample_tree(rng) for _ in range(500)]
    assert all(derivable(tree) for tree in trees)
    assert all(tree.label == "S" and tree.words()[-1] == "." for tree in trees)
    # the tags of the linearised tree are one per word
    assert all(read_linearized(linearize(t))[1] == len(t.words()) for t in trees)
    assert max(len(t.words()) for t in trees) < 100


def test_treebank_holds_out_distinct_sentences_never_seen_in_training():
    corpus = treebank(n_train=2000, n_val=50, n_test=100, seed=3)
    sizes = {split: len(pairs) for split, pairs in corpus.splits.items()}
    assert sizes == {"train": 2000, "val": 50, "test": 100}
    held_out = [src for split in ("val", "test") for src, _ in corpus.splits[split]]
    assert len(set(held_out)) == 150
    assert not set(held_out) & {src for src, _ in corpus.splits["train"]}
    for src, tree in corpus.splits["test"]:
        assert read_linearized(tree)[1:] == (len(src.split()), True)
    assert treebank(n_train=2000, n_val=50, n_test=100, seed=3) == corpus
    words = treebank(n_train=2000, n_val=50, n_test=100, seed=3, leaves="words")
    for (src, tree), (_, tags) in zip(words.splits["test"], corpus.splits["test"]):
        found, n_words, well_formed = read_linearized(tree)
        leaves = [t for t in tree.split() if t[0] not in "()" or len(t) == 1]
        assert leaves == src.split() and (found, n_words, well_formed) == read_linearized(tags)
    with pytest.raises(ValueError, match="leaves must be"):
        treebank(n_train=10, n_val=1, n_test=1, leaves="XX")
    with pytest.raises(ValueError, match="at least one sentence; got n_train=10, n_val=0"):
        treebank(n_train=10, n_val=0, n_test=1)
    assert treebank(n_train=2000, n_val=50, n_test=100, seed=4) != corpus


def test_write_corpus_round_trips_through_the_file_reader(tmp_path):
    corpus = treebank(n_train=300, n_val=20, n_test=30)
    folder = write_corpus(corpus, tmp_path / "trees")
    assert read_parallel_files(folder, "words", "tree") == corpus
    smaller = treebank(n_train=100, n_val=20, n_test=30)
    assert (
        read_parallel_files(write_corpus(smaller, folder), "words", "tree") == smaller
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["trees"]  # no temporary left


def test_write_corpus_refuses_a_folder_with_other_files_and_leaves_it_alone(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    corpus = treebank(n_train=100, n_val=10, n_test=10)
    with pytest.raises(FileExistsError, match="holds files other than"):
        write_corpus(corpus, tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]


def test_write_corpus_writes_nothing_when_a_sentence_would_break_the_lines(tmp_path):
    first = write_corpus(treebank(n_train=100, n_val=10, n_test=10), tmp_path / "trees")
    before = {p.name: p.read_text() for p in first.iterdir()}
    pairs = [("a\nb", "(S NN )S")]
    broken = ParallelCorpus(
        "words", "tree", {"train": pairs, "val": pairs, "test": pairs}
    )
    with pytest.raises(ValueError, match="line break"):
        write_corpus(broken, first)
    assert {p.name: p.read_text() for p in first.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["trees"]
