"""Sphinx extension: include each script of a page once.

sphinx-thebe 0.3.1 (pulled in by Jupyter Book 1) registers its inline configuration script on
every `env-before-read-docs`, which fires twice in a Jupyter Book build; the page then declares
`const THEBE_JS_URL` twice and the browser reports a SyntaxError (tests/test_browser.py saw it).
"""

from __future__ import annotations


def _single(app, pagename, templatename, context, doctree) -> None:
    seen, scripts = set(), []
    for script in context.get("script_files", []):
        # an inline script is registered once with filename None and once with "": the same script
        filename = getattr(script, "filename", script) or ""
        key = (str(filename), tuple(sorted(getattr(script, "attributes", {}).items())))
        if key not in seen:
            seen.add(key)
            scripts.append(script)
    context["script_files"] = scripts


def setup(app):
    app.connect("html-page-context", _single)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
