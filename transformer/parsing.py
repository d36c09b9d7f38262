# Generated from book/parsing.md by tools/export.py: edit the chapter.
"""English constituency parsing as translation (§6.3 of the paper): a treebank sampled
from a small grammar of English, trees linearised as in Vinyals et al. (2015), and
labelled bracketing precision, recall and F1 as EVALB computes them."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from transformer.corpora import ParallelCorpus
from transformer.files import building_folder


@dataclass(frozen=True)
class Tree:
    """A constituent: a label and its children; a part-of-speech tag has one word as
    child."""

    label: str
    children: tuple[Tree | str, ...]

    def words(self) -> list[str]:
        return [
            w for c in self.children for w in ([c] if isinstance(c, str) else c.words())
        ]

    def __str__(self) -> str:  # the Penn Treebank's bracketed form
        return f"({self.label} {' '.join(map(str, self.children))})"


def linearize(tree: Tree, leaves: str = "tags") -> str:
    """Vinyals et al.'s target sequence: labelled brackets on both sides, and for each
    word its tag (leaves="tags", their Figure 2) or the word itself (leaves="words")."""
    if leaves not in ("tags", "words"):
        raise ValueError(f'leaves must be "tags" or "words"; got {leaves!r}')
    if isinstance(tree.children[0], str):
        return tree.label if leaves == "tags" else tree.children[0]
    inside = " ".join(linearize(child, leaves) for child in tree.children)
    return f"({tree.label} {inside} ){tree.label}"


# Rules of the grammar: a nonterminal named LABEL or LABEL/ROLE (one treebank label,
# rules of its own) -> (probability, children). A tag TAG or TAG:CLASS draws its word
# from one class of LEXICON: verbs that take an object, nothing, or a clause are all
# tagged VBD.
GRAMMAR: dict[str, list[tuple[float, tuple[str, ...]]]] = {
    "S": [(1.0, ("NP", "VP", "."))],
    "S/sub": [(1.0, ("NP", "VP"))],
    "S/gap": [(1.0, ("VP",))],
    "NP": [
        (0.32, ("DT", "NN")),
        (0.14, ("DT", "JJ", "NN")),
        (0.08, ("DT", "NNS")),
        (0.08, ("NNP",)),
        (0.06, ("PRP",)),
        (0.16, ("NP", "PP")),
        (0.08, ("NP", "CC", "NP")),
        (0.08, ("NP", "SBAR/rel")),
    ],
    "VP": [
        (0.26, ("VBD:tr", "NP")),
        (0.12, ("VBD:tr", "NP", "PP")),
        (0.12, ("VBD:intr",)),
        (0.10, ("VBD:intr", "PP")),
        (0.08, ("VBD:intr", "ADVP")),
        (0.12, ("VBD:say", "SBAR/comp")),
        (0.12, ("MD", "VB", "NP")),
        (0.08, ("VP", "CC", "VP")),
    ],
    "PP": [(1.0, ("IN", "NP"))],
    "ADVP": [(1.0, ("RB",))],
    "SBAR/comp": [(1.0, ("IN:that", "S/sub"))],
    "SBAR/rel": [(1.0, ("WHNP", "S/gap"))],
    "WHNP": [(1.0, ("WDT",))],
}
LEXICON: dict[str, list[str]] = {
    "DT": "the a every this some".split(),
    "NN": "dog cat man woman child teacher park garden river house ball book telescope "
    "hill boat city friend letter song window".split(),
    "NNS": "dogs cats children teachers birds flowers books boats".split(),
    "JJ": "old young small big red happy tall quiet".split(),
    "NNP": "Anna Ben Clara David Emma Felix".split(),
    "PRP": "she he they we it".split(),
    "VBD:tr": "saw liked found watched carried painted followed heard".split(),
    "VBD:intr": "slept laughed ran waited smiled sang".split(),
    "VBD:say": "said thought knew believed".split(),
    "MD": "will can might should".split(),
    "VB": "see find follow carry paint".split(),
    "IN": "with near in on behind under".split(),
    "IN:that": ["that"],
    "WDT": ["which", "who"],
    "RB": "quickly slowly again yesterday".split(),
    "CC": ["and", "or"],
    ".": ["."],
}


def sample_tree(
    rng: random.Random, symbol: str = "S", depth: int = 0, max_depth: int = 5
) -> Tree:
    """A tree drawn from GRAMMAR; from max_depth on, only rules made of tags are
    drawn."""
    if symbol in LEXICON:
        return Tree(symbol.split(":")[0], (rng.choice(LEXICON[symbol]),))
    rules = GRAMMAR[symbol]
    if depth >= max_depth:
        rules = [rule for rule in rules if all(s in LEXICON for s in rule[1])] or rules
    weights, bodies = zip(*rules)
    body = rng.choices(bodies, weights)[0]
    return Tree(
        symbol.split("/")[0],
        tuple(sample_tree(rng, s, depth + 1, max_depth) for s in body),
    )


def treebank(
    n_train: int = 40_000,
    n_val: int = 500,
    n_test: int = 1000,
    seed: int = 0,
    leaves: str = "tags",
) -> ParallelCorpus:
    """(sentence, linearised tree) pairs sampled from GRAMMAR, the trees written by
    linearize(tree, leaves); no held-out sentence (val, test: distinct sentences) occurs
    in train."""
    if min(n_train, n_val, n_test) < 1:
        raise ValueError(
            "every split needs at least one sentence; got "
            f"n_train={n_train}, n_val={n_val}, n_test={n_test}"
        )
    linearize(Tree("S", ("",)), leaves)  # a wrong `leaves` fails before the sampling
    rng, held_out = random.Random(seed), {}
    while len(held_out) < n_val + n_test:
        tree = sample_tree(rng)
        held_out.setdefault(" ".join(tree.words()), linearize(tree, leaves))
    train = []
    while len(train) < n_train:
        tree = sample_tree(rng)
        if (sentence := " ".join(tree.words())) not in held_out:
            train.append((sentence, linearize(tree, leaves)))
    pairs = list(held_out.items())
    splits = {"train": train, "val": pairs[:n_val], "test": pairs[n_val:]}
    return ParallelCorpus("words", "tree", splits)


def write_corpus(corpus: ParallelCorpus, folder: str | Path) -> Path:
    """Write SPLIT.SRC and SPLIT.TGT files that `--data folder` reads; all or none of
    them.

    An existing folder is replaced only if it holds nothing but such files.
    """
    folder = Path(folder)
    names = {
        f"{split}.{lang}"
        for split in corpus.splits
        for lang in (corpus.src_lang, corpus.tgt_lang)
    }
    if folder.exists() and not {p.name for p in folder.iterdir()} <= names:
        raise FileExistsError(
            f"{folder} holds files other than {sorted(names)}; give a new or "
            "empty folder"
        )
    with building_folder(folder) as building:
        for split, pairs in corpus.splits.items():
            for side, lang in enumerate((corpus.src_lang, corpus.tgt_lang)):
                lines = [pair[side] for pair in pairs]
                if any("\n" in line for line in lines):
                    raise ValueError(f"a {split} sentence of {lang} holds a line break")
                (building / f"{split}.{lang}").write_text("\n".join(lines) + "\n")
    return folder


def read_linearized(text: str) -> tuple[Counter[tuple[str, int, int]], int, bool]:
    """The brackets (label, first word, end) of a linearised tree, its number of words,
    and whether it was well formed. Malformed input is read leniently: a closing bracket
    with no open one is skipped, one whose label differs still closes the innermost open
    bracket, and brackets left open close after the last word.
    """
    found: Counter[tuple[str, int, int]] = Counter()
    stack: list[tuple[str, int]] = []
    n_words, well_formed = 0, True
    for token in text.split():
        if token.startswith("(") and len(token) > 1:
            stack.append((token[1:], n_words))
        elif token.startswith(")") and len(token) > 1:
            if not stack:
                well_formed = False
                continue
            label, start = stack.pop()
            well_formed &= label == token[1:]
            found[(label, start, n_words)] += 1
        else:
            n_words += 1
    well_formed &= not stack
    for label, start in stack:
        found[(label, start, n_words)] += 1
    return found, n_words, well_formed


@dataclass
class BracketScores:
    """Labelled bracketing scores of a test set, in percent, as EVALB reports them."""

    precision: float
    recall: float
    f1: float
    exact: float  # sentences whose brackets all match
    well_formed: float  # outputs that are balanced trees over as many words as the gold


def bracket_scores(outputs: Sequence[str], references: Sequence[str]) -> BracketScores:
    """Score linearised trees (a parser's outputs) against linearised gold trees."""
    if len(outputs) != len(references) or not references:
        raise ValueError(
            "need one output per reference tree, and at least one; got "
            f"{len(outputs)} outputs and {len(references)} references"
        )
    matched = n_gold = n_output = exact = well_formed = 0
    for output, reference in zip(outputs, references):
        gold, n_words, _ = read_linearized(reference)
        found, n_found, ok = read_linearized(output)
        matched += sum((gold & found).values())
        n_gold += sum(gold.values())
        n_output += sum(found.values())
        exact += gold == found
        well_formed += ok and n_found == n_words
    precision, recall = matched / max(n_output, 1), matched / max(n_gold, 1)
    f1 = 2 * precision * recall / (precision + recall) if matched else 0.0
    n = len(references)
    return BracketScores(
        100 * precision, 100 * recall, 100 * f1, 100 * exact / n, 100 * well_formed / n
    )


__all__ = [
    'Tree',
    'linearize',
    'sample_tree',
    'treebank',
    'write_corpus',
    'read_linearized',
    'BracketScores',
    'bracket_scores',
]
