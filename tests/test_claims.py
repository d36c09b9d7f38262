"""No figure in the README's or the chapters' prose is typed by hand (issue 26, item 5).

A figure is a number with a unit (BLEU, tokens/s, MFU, %, ms, s, minutes, hours, GB/GiB,
TFLOP/s, x, points). In prose it must be rendered from a record in benchmarks/results/:
in a chapter by a code cell (myst-nb's `glue` and the `{glue:text}` role, or a printed
table), in the README inside a `<!-- record: NAME -->` block that tools/readme.py
rewrites (test_readme.py keeps the blocks and the records in sync). What stays typed
is the paper's own numbers, definitions and constants: each is listed in
claims_allowed.toml, beside this file, with its reason.

Prose is what a reader meets outside code: the scan drops front matter, fenced blocks
(code cells, console and Python examples, math), `$...$` math, inline code, HTML
comments and the README's rendered record blocks.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ALLOWED = Path(__file__).with_name("claims_allowed.toml")

NUMBER = r"(?<![\w.,/-])[~±+]?\d+(?:,\d{3})*(?:\.\d+)?(?:e\d+)?"  # 1,300 2.8 ±10
WORD_NUMBER = (r"\b(?:one|two|three|four|five|six|seven|eight|nine|ten|twelve|twenty"
               r"|thirty)\b")
RANGE = rf"(?:{NUMBER}|{WORD_NUMBER})(?:\s?(?:to|-|–|or|and)\s?{NUMBER})?"
UNIT = (
    r"(?:%|\s?(?:per ?cent|percent)\b"
    r"|\s?[kKM]?\s?(?:(?:target |source |real )?(?:tokens?|tok|sentences)"
    r"(?:/s\b| per second\b| a second\b))"
    r"|\s?(?:tokenized |sacre)?BLEU\b|\s?(?:BLEU )?points?\b|\s?F1\b"
    r"|\s?MFU\b|\s?[TPG]?FLOP(?:s|/s)?\b"
    r"|\s?(?:ms|s|sec|seconds?|min|minutes?|(?:CPU|GPU)-(?:minutes?|hours?)|h|hours?"
    r"|days?)\b"
    r"|\s?(?:GB|GiB|MB|MiB|TB)\b"
    r"|\s?[x×](?![\w×]|\s?\d)|\s?times (?:faster|slower|as (?:fast|slow|much))\b)"
)
UNIT_FIRST = rf"\b(?:F1|(?:sacre)?BLEU|perplexity|MFU)(?: of| is| at)? {NUMBER}"
FIGURE = re.compile(rf"(?:{RANGE}){UNIT}|{UNIT_FIRST}")

HIDDEN = [  # what a reader does not meet as prose, in the order it is removed
    re.compile(r"\A---\n.*?\n---\n", re.S),  # front matter
    re.compile(r"<!-- record: [\w-]+ -->\n.*?<!-- /record -->", re.S),  # README records
    re.compile(r"<!--.*?-->", re.S),  # HTML comments
    re.compile(r"^(`{3,}|~{3,})(?!\{(?:note|tip|important|warning|admonition|seealso|"
               r"dropdown|figure|table|list-table|margin|epigraph)\}).*?^\1[ \t]*$",
               re.S | re.M),  # fenced code, code cells and math, not prose directives
    re.compile(r"^:{3,}\{(?:math|code-cell)\}.*?^:{3,}[ \t]*$", re.S | re.M),
    re.compile(r"\$\$.*?\$\$", re.S),  # display math
    re.compile(r"(?<![\\$])\$(?!\s)[^$\n]+?(?<!\s)\$"),  # inline math
    # inline code, and the targets of roles ({glue:text}`key`)
    re.compile(r"(?<!`)(`{1,2})(?!`)(?:[^`\n]|\n(?!\n))+?\1(?!`)"),
]


@dataclass(frozen=True)
class Figure:
    path: str
    line: int
    text: str
    context: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.text!r} in ...{self.context}..."


def prose(text: str) -> str:
    """text with everything that is not prose blanked, line numbers kept."""
    for pattern in HIDDEN:
        text = pattern.sub(lambda m: re.sub(r"[^\n]", " ", m[0]), text)
    return text


def figures(path: Path) -> list[Figure]:
    """Every number with a unit in the prose of path."""
    text = prose(path.read_text())
    found = []
    for match in FIGURE.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        start, end = max(0, match.start() - 40), min(len(text), match.end() + 40)
        context = " ".join(text[start:end].split())
        name = str(path.relative_to(ROOT))
        found.append(Figure(name, line, " ".join(match[0].split()), context))
    return found


def documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "book").glob("*.md"))]


def allowed(table: str = "allowed") -> list[dict]:
    """claims_allowed.toml's table `allowed`, or `pending` (typed, still to fix)."""
    entries = tomllib.loads(ALLOWED.read_text()).get(table, [])
    needs = {"file", "figure", "reason"} if table == "allowed" else {"file", "figure"}
    for entry in entries:
        if needs - entry.keys() or not all(str(entry[k]).strip() for k in needs):
            raise ValueError(f"{ALLOWED.name}: a [[{table}]] entry needs "
                             f"{sorted(needs)}, none empty; got {entry}")
    return entries


def unbacked(entries: list[dict]) -> tuple[list[Figure], list[dict]]:
    """The figures no entry covers, and the entries that cover no figure."""
    used = [False] * len(entries)
    left = []
    for path in documents():
        for figure in figures(path):
            hits = [i for i, e in enumerate(entries)
                    if e["file"] == figure.path and e["figure"] == figure.text]
            for i in hits:
                used[i] = True
            if not hits:
                left.append(figure)
    return left, [e for e, u in zip(entries, used) if not u]


def test_every_figure_in_prose_is_rendered_from_a_record_or_allowed():
    left, _ = unbacked(allowed() + allowed("pending"))
    assert not left, (
        f"{len(left)} figures typed in prose: render them from a record (glue, a "
        f"printed table, a README record block) or, for the paper's values and "
        f"definitions, list them in {ALLOWED.name} with a reason:\n"
        + "\n".join(map(str, left)))


def test_every_listed_figure_is_still_in_its_file():
    _, stale = unbacked(allowed() + allowed("pending"))
    assert not stale, f"entries of {ALLOWED.name} matching no figure: {stale}"


@pytest.mark.xfail(bool(allowed("pending")), reason="typed figures still to fix",
                   strict=True)
def test_no_typed_figure_is_pending():
    pending = allowed("pending")
    assert not pending, "\n".join(f"{e['file']}: {e['figure']!r}" for e in pending)


@pytest.mark.parametrize("typed", [
    "about 5 minutes of the 2-core CPU", "gains 3 to 10% on the GPU", "a 2.5x speed-up",
    "37.60 BLEU", "570k target tokens/s", "by 2 to 6 points", "10.4 GiB", "38.5 ms",
    "800 TFLOP/s", "about ±10%", "12 hours", "runs 3× faster", "five minutes",
    "costs about three times as much", "F1 41 after 300 steps", "perplexity 5.12",
])
def test_a_typed_figure_is_found(typed):
    assert FIGURE.search(prose(f"Prose: {typed}.\n")), typed


@pytest.mark.parametrize("hidden", [
    "```{code-cell} ipython3\nprint('5 s')\n```\n",
    "```console\nmake test  # 8 min\n```\n",
    "$$\\mathrm{lr} = 4000 s$$\n", "the rate $d^{-0.5}$ for 4000 steps\n",
    "<!-- 5 s -->\n", "`--time 5 s`\n",
    "<!-- record: x -->\n3 s\n<!-- /record -->\n",
    "{glue:text}`cpu_minutes` minutes\n", "layer 6 of 12, matrix 2x3, step 5\n",
])
def test_code_math_comments_and_non_figures_are_not_prose_figures(hidden):
    assert not FIGURE.search(prose(hidden)), hidden


def test_a_prose_directive_is_scanned():
    assert FIGURE.search(prose("```{note}\nThis takes 5 minutes.\n```\n"))
