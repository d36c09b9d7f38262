"""Sphinx extension: bibliography labels in the form of the in-text citations.

The chapters cite author-year ("Vaswani et al., 2017", `bibtex_reference_style: author_year`),
but pybtex's styles label the bibliography's entries "[VSP+17]". This registers the style
`author_year` (pybtex's `plain`, with labels "Vaswani et al., 2017"), which _config.yml names
as `bibtex_default_style`.
"""

from __future__ import annotations

from pybtex.plugin import register_plugin
from pybtex.style.formatting.plain import Style as PlainStyle
from pybtex.style.labels import BaseLabelStyle


class AuthorYearLabels(BaseLabelStyle):
    def format_labels(self, sorted_entries):
        for entry in sorted_entries:
            names = [" ".join(p.last_names) for p in entry.persons.get("author", [])]
            if len(names) > 2:
                who = f"{names[0]} et al."
            else:
                who = " and ".join(names) or entry.fields.get("title", "")
            yield f"{who.replace('{', '').replace('}', '')}, {entry.fields.get('year', 'n.d.')}"


class AuthorYearStyle(PlainStyle):
    default_label_style = AuthorYearLabels


def setup(app):
    register_plugin("pybtex.style.formatting", "author_year", AuthorYearStyle)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
