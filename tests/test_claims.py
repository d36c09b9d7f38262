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

import ast
import functools
import json
import re
import sys
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
    before: str = ""  # the prose just before and after the figure, whitespace as one space
    after: str = ""

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
        before, after = text[start : match.start()], text[match.end() : end]
        before = " ".join(before.split()) + (" " if before[-1:].isspace() else "")
        after = (" " if after[:1].isspace() else "") + " ".join(after.split())
        found.append(Figure(name, line, " ".join(match[0].split()), context, before, after))
    return found


def documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "book").glob("*.md"))]


def showing() -> list[Path]:
    """The documents that show figures as findings: all but the Records page, which lists
    every record with what it lacks (book/records.md)."""
    return [path for path in documents() if path.name != "records.md"]


def allowed(table: str = "allowed") -> list[dict]:
    """claims_allowed.toml's table `allowed`, or `pending` (typed, still to fix)."""
    entries = tomllib.loads(ALLOWED.read_text()).get(table, [])
    needs = {"file", "figure", "reason"} if table == "allowed" else {"file", "figure"}
    for entry in entries:
        if needs - entry.keys() or not all(str(entry[k]).strip() for k in needs):
            raise ValueError(f"{ALLOWED.name}: a [[{table}]] entry needs "
                             f"{sorted(needs)}, none empty; got {entry}")
        if entry["figure"] not in entry.get("phrase", entry["figure"]):
            raise ValueError(f"{ALLOWED.name}: a phrase holds its figure; got {entry}")
    return entries


def covers(entry: dict, figure: Figure) -> bool:
    """An entry names one figure: its file and text, and where the text occurs more than
    once in the file, a `phrase` of the prose around it (whitespace as one space)."""
    if entry["file"] != figure.path or entry["figure"] != figure.text:
        return False
    head, _, tail = entry.get("phrase", figure.text).partition(figure.text)
    return figure.before.endswith(head) and figure.after.startswith(tail)


def unbacked(entries: list[dict]) -> tuple[list[Figure], list[dict]]:
    """The figures no entry covers, and the entries that do not cover exactly one figure
    (none: stale; several: a phrase must tell them apart, so that a figure added later
    with the same text is not allowed unseen)."""
    used = [0] * len(entries)
    left = []
    for path in documents():
        for figure in figures(path):
            hits = [i for i, e in enumerate(entries) if covers(e, figure)]
            for i in hits:
                used[i] += 1
            if not hits:
                left.append(figure)
    return left, [dict(e, covers=n) for e, n in zip(entries, used) if n != 1]


def test_every_figure_in_prose_is_rendered_from_a_record_or_allowed():
    left, _ = unbacked(allowed() + allowed("pending"))
    assert not left, (
        f"{len(left)} figures typed in prose: render them from a record (glue, a "
        f"printed table, a README record block) or, for the paper's values and "
        f"definitions, list them in {ALLOWED.name} with a reason:\n"
        + "\n".join(map(str, left)))


def test_every_listed_figure_is_one_figure_still_in_its_file():
    _, loose = unbacked(allowed() + allowed("pending"))
    assert not loose, f"entries of {ALLOWED.name} not matching exactly one figure: {loose}"


def test_an_entry_covers_one_occurrence_and_a_new_one_is_caught(tmp_path, monkeypatch):
    """Two occurrences of "10 minutes": one entry with a phrase covers the first only."""
    chapter = tmp_path / "book" / "x.md"
    chapter.parent.mkdir()
    chapter.write_text("Scored at 10 minutes of training.\nLater, 10 minutes measured.\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    monkeypatch.setattr(sys.modules[__name__], "documents", lambda: [chapter])
    entry = {"file": "book/x.md", "figure": "10 minutes", "reason": "a budget"}
    left, loose = unbacked([entry])
    assert not left and loose == [dict(entry, covers=2)], "without a phrase: refused"
    left, loose = unbacked([dict(entry, phrase="at 10 minutes of")])
    assert [f.line for f in left] == [2] and not loose


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


GLUES = ("glue", "glue_text")


def literal_glues(source: str) -> list[str]:
    """The glue calls of a code cell whose value names no variable: a number typed into
    the cell, which the prose would then show as if it came from a record."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if (isinstance(node, ast.Call) and getattr(node.func, "id", None) in GLUES
                and len(node.args) >= 2
                and not any(isinstance(n, ast.Name) for n in ast.walk(node.args[1]))):
            found.append(ast.unparse(node))
    return found


@pytest.mark.parametrize("source, literal", [
    ('glue_text("wu", "41.02")', True),
    ('glue_text("wu", f"{41.02:.1f}")', True),
    ('glue("wu", 41.02, display=False)', True),
    ('glue_text("wu", f"{record[\'bleu\']:.1f}")', False),
    ('glue(key, value, display=False)', False),
])
def test_a_glued_literal_is_found(source, literal):
    assert bool(literal_glues(source)) == literal


def test_no_chapter_glues_a_literal():
    import jupytext

    typed = [f"{chapter.name}: {call}" for chapter in sorted((ROOT / "book").glob("*.md"))
             for cell in jupytext.read(chapter).cells if cell.cell_type == "code"
             for call in literal_glues(cell.source)]
    assert not typed, f"glued values typed by hand: {typed}"


RESULTS = ROOT / "benchmarks" / "results"
RECORD = re.compile(r"[\w*-]+\.json")


@functools.cache
def made_at_a_commit(name: str) -> bool:
    """Whether a record names the commit that made it (report.py's `git`, or the commit
    a fresh-clone record cloned)."""
    record = json.loads((RESULTS / name).read_text())
    return bool((record.get("git") or {}).get("commit") or record.get("cloned_commit"))


def unmarked_history(text: str, fine=made_at_a_commit) -> list[tuple[int, str]]:
    """(line, record) for each record without a commit (not `fine`) that the document
    reads or names (a glob: each record it matches) outside a passage marked history: a
    section whose headings say "history" or that opens a line with "*History", or a
    paragraph that says "history" itself."""
    lines, fence, heading_at = text.splitlines(), None, {}
    for i, line in enumerate(lines):  # the headings, not a comment in a code cell
        if fence is None and (opening := re.match(r"(`{3,}|~{3,})", line)):
            fence = opening[1]
        elif fence is not None and line.strip() == fence:
            fence = None
        elif fence is None and (heading := re.match(r"(#{1,6}) (.*)", line)):
            heading_at[i] = len(heading[1]), heading[2], i
    starts, headings, found = sorted(heading_at), [], []
    for i, line in enumerate(lines):
        if i in heading_at:
            level = heading_at[i][0]
            headings = [h for h in headings if h[0] < level] + [heading_at[i]]
        start = headings[-1][2] if headings else 0
        end = next((s for s in starts if s > start), len(lines))
        first = next((j for j in range(i, start, -1) if not lines[j - 1].strip()), start)
        last = next((j for j in range(i, end) if not lines[j].strip()), end)
        marked = (any("history" in h[1].lower() for h in headings)
                  or any(x.startswith("*History") for x in lines[start:end])
                  or "history" in " ".join(lines[first:last]).lower())
        names = {r.name for n in RECORD.findall(line) for r in RESULTS.glob(n)}
        found += [(i + 1, n) for n in sorted(names)
                  if not marked and not fine(n)]
    return found


def test_a_record_without_a_commit_is_marked_history():
    text = "# Results\n\n```python\nload('decoding_cpu.json')\n```\n"
    assert unmarked_history(text) == [(4, "decoding_cpu.json")]
    assert not unmarked_history("# Results (history)\n\n`decoding_cpu.json`\n")
    assert not unmarked_history("# Results\n\n*History: the records below.*\n\n"
                                "`decoding_cpu.json`\n")
    assert not unmarked_history("# Results\n\nA run of old (history):\n`decoding_cpu.json`\n")
    # the mark holds in its own section, or paragraph, only
    assert unmarked_history("*History: `decoding_cpu.json`.*\n\n## Later\n\n"
                            "`decoding_cpu.json`\n") == [(5, "decoding_cpu.json")]
    globbed = unmarked_history("# Speed\n\n`multi30k_gpu_*.json`\n")
    assert (3, "multi30k_gpu_tiny.json") in globbed
    assert not unmarked_history("# Results\n\n`trainer_step_cpu_tiny.json`\n")


def test_every_record_shown_without_a_commit_is_marked_history():
    """Issue 51: a figure shown as current comes from a record made at a commit; the
    older ones stay in passages marked history."""
    unmarked = [f"{path.name}:{line}: {name}" for path in showing()
                for line, name in unmarked_history(path.read_text())]
    assert not unmarked, f"records without a commit, not marked history: {unmarked}"


@functools.cache
def holds_its_decisions(name: str) -> bool:
    """Whether a record of training runs holds what each run decided: its plan (the run's
    plan.json, copied by cli_runs.py from issue 95 on), or, for a run from before plans,
    a `lacks` entry that says the record holds no plan. A record of no training run holds
    none to hold."""
    record = json.loads((RESULTS / name).read_text())
    runs = [run for run in (record.get("seeds") or {}).values()
            if isinstance(run, dict) and "train" in run]
    said = any("holds no plan" in str(entry) for entry in record.get("lacks") or [])
    return all("plan" in run for run in runs) or said


def test_a_record_shown_as_current_without_the_runs_decisions_is_caught(monkeypatch):
    shown = "# Results\n\nThe ten minutes (`multi30k_en_de_10min_cli_zen4_plain.json`).\n"
    monkeypatch.setattr(sys.modules[__name__], "RESULTS", ROOT / "benchmarks" / "results")
    holds_its_decisions.cache_clear()
    record = json.loads((RESULTS / "multi30k_en_de_10min_cli_zen4_plain.json").read_text())
    without = {**record, "lacks": [e for e in record.get("lacks") or []
                                   if "holds no plan" not in str(e)]}
    monkeypatch.setattr(json, "loads", lambda text, **kw: without)
    try:
        assert unmarked_history(shown, holds_its_decisions) == [
            (3, "multi30k_en_de_10min_cli_zen4_plain.json")]
    finally:
        holds_its_decisions.cache_clear()


def test_every_training_record_shown_as_current_holds_the_runs_decisions():
    """Issue 99: a record of training runs shown as current holds what each run decided
    (precision, batch, P_drop, schedule, projected updates: the run's plan), or says in its
    `lacks` that it predates plans; older ones stay in passages marked history."""
    unmarked = [f"{path.name}:{line}: {name}" for path in showing()
                for line, name in unmarked_history(path.read_text(), holds_its_decisions)]
    assert not unmarked, f"training records without the runs' decisions: {unmarked}"


HOW_MADE = re.compile(r"\b(rebuilt|transcribed|re-scored)\b", re.I)


@functools.cache
def not_as_written(name: str) -> frozenset[str]:
    """How a record was made where it was not written by its own command as measured: the
    words of HOW_MADE that its `lacks` says (rebuilt by hand, transcribed from printed
    lines), and re-scored where it holds `scored_again` (scores of another machine)."""
    record = json.loads((RESULTS / name).read_text())
    lacks = record.get("lacks") or []
    said = {word.lower() for word in HOW_MADE.findall(" ".join(map(str, lacks)))}
    return frozenset(said | ({"re-scored"} if "scored_again" in record else set()))


def unsaid_how_made(text: str) -> list[tuple[int, str, str]]:
    """(line, record, word) for each record the document reads or names (a glob: each
    record it matches) that was rebuilt, transcribed or re-scored, where the section around
    it (from its innermost heading to the next heading) does not say so in what a reader
    sees: prose, a prose directive, a README record block; not code or HTML comments."""
    seen = text
    for pattern in (HIDDEN[0], HIDDEN[2], HIDDEN[3], HIDDEN[4]):  # front matter, comments, code
        seen = pattern.sub(lambda m: re.sub(r"[^\n]", " ", m[0]), seen)
    lines, shown = text.splitlines(), seen.splitlines()
    starts = [i for i, line in enumerate(shown) if re.match(r"#{1,6} ", line)]
    found = []
    for i, line in enumerate(lines):
        names = {r.name for n in RECORD.findall(line) for r in RESULTS.glob(n)}
        if not names:
            continue
        start = max((s for s in starts if s <= i), default=0)
        end = next((s for s in starts if s > i), len(lines))
        said = {w.lower() for w in HOW_MADE.findall(" ".join(shown[start:end]))}
        found += [(i + 1, n, word) for n in sorted(names)
                  for word in sorted(not_as_written(n) - said)]
    return found


def test_a_rebuilt_or_transcribed_record_is_said_so_where_shown():
    assert not_as_written("multi30k_en_de_lc_gpu.json") == {"rebuilt", "re-scored"}
    assert not_as_written("decoding_gpu_static_cache.json") == {"transcribed"}
    load = "```python\nload('decoding_gpu_static_cache.json')  # transcribed\n```\n"
    assert unsaid_how_made("# Speed\n\n" + load) == [
        (4, "decoding_gpu_static_cache.json", "transcribed")]
    assert not unsaid_how_made("# Speed\n\nFigures transcribed from printed lines.\n\n" + load)
    # said in another section, or in a comment, does not count; a glob is each record
    assert unsaid_how_made("# A\n\nTranscribed.\n\n## B\n\n<!-- transcribed -->\n"
                           "`decoding_gpu_*.json`\n") == [
        (8, "decoding_gpu_static_cache.json", "transcribed")]
    said = "# R\n\nRebuilt by hand, then re-scored: `multi30k_en_de_lc_gpu.json`\n"
    assert not unsaid_how_made(said)
    assert unsaid_how_made(said.replace("re-scored", "scored")) == [
        (3, "multi30k_en_de_lc_gpu.json", "re-scored")]


def test_every_record_shown_rebuilt_or_transcribed_is_said_so_where_shown():
    """Issue 70: a figure from a record rebuilt by hand, transcribed from printed lines or
    re-scored on another machine says so in words in the section that shows it, as
    history is marked where a record without a commit is shown."""
    unsaid = [f"{path.name}:{line}: {name} ({word})" for path in showing()
              for line, name, word in unsaid_how_made(path.read_text())]
    assert not unsaid, f"records shown without saying how they were made: {unsaid}"


def test_every_record_a_page_cites_exists():
    """A chapter's {record}`NAME` and the README's links into benchmarks/results/ name a
    record that is there (the book's build fails on a missing one too; this says which)."""
    cited = {(path.name, name) for path in documents()
             for name in re.findall(r"\{record\}`([\w.-]+)`", path.read_text())}
    cited |= {(path.name, Path(link).stem) for path in documents()
              for link in re.findall(r"\]\((?:\.\./)?benchmarks/results/([\w.-]+\.json)", path.read_text())}
    missing = sorted(f"{page}: {name}" for page, name in cited
                     if not (ROOT / "benchmarks" / "results" / f"{name}.json").is_file())
    assert not missing, f"records cited but not in benchmarks/results/: {missing}"
