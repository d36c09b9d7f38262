"""Sphinx extension: the {record} role, a figure's link to the record it was rendered from.

    Halving the batch scored higher with every seed {record}`multi30k_half_batch`.

renders a small superscript link, "record", to that record's entry on the Records page
(book/records.md), with the record's machine, commit and date as its hover text. The
sentence says what was found; the record says how it was obtained. A name with no
benchmarks/results/NAME.json is an error, so the book (built with warnings as errors)
fails on a link to a record that does not exist.
"""

from __future__ import annotations

import json
from pathlib import Path

from docutils import nodes

RESULTS = Path(__file__).resolve().parent.parent / "benchmarks" / "results"
PAGE = "records"  # book/records.md


def hover(record: dict) -> str:
    """One line on how a record was obtained: machine, commit, date."""
    git = record.get("git") or {}
    commit = (git.get("commit") or "")[:7] or "commit not recorded"
    if git.get("dirty"):
        commit += " (uncommitted changes)"
    date = str(record.get("date", "date not recorded"))[:10]
    return f"{record.get('machine', 'machine not recorded')}; {commit}; {date}"


def record_role(name, rawtext, text, lineno, inliner, options=None, content=None):
    key = text.strip()
    path = RESULTS / f"{key}.json"
    if not path.is_file():
        message = inliner.reporter.error(
            f"{{record}}`{key}`: expected a record benchmarks/results/{key}.json, "
            f"found none", line=lineno)
        return [inliner.problematic(rawtext, rawtext, message)], [message]
    docname = inliner.document.settings.env.docname  # book/speed
    depth = docname.count("/")
    target = "../" * depth + f"book/{PAGE}.html#{key}"
    link = nodes.reference(rawtext, "record", refuri=target, classes=["record-link"],
                           reftitle=f"{key}: {hover(json.loads(path.read_text()))}")
    return [nodes.superscript("", "", link)], []


def setup(app):
    app.add_role("record", record_role)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
