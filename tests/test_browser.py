"""The built book in a real browser: every page of the table of contents opened in headless
Chromium (Debian's `chromium`, driven by Playwright) from a local HTTP server.

Each page must load without console errors or failed requests, have its equations rendered by
MathJax (no MathJax error, no raw TeX left), load every image, link only to pages and anchors
that exist, and keep the exercise solutions hidden until clicked. Skipped when Playwright,
a Chromium or the built book (`make book`) is missing; `make test-browser` provides all three.
"""

import functools
import http.server
import re
import shutil
import threading
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urljoin, urlparse

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
HTML = ROOT / "_build" / "html"
BROWSERS = ("chromium", "chromium-browser", "google-chrome")
pytestmark = pytest.mark.browser  # left out of make test-quick


def toc_pages() -> list[str]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    pages = [toc["root"]] + [c["file"] for part in toc["parts"] for c in part["chapters"]]
    return [page + ".html" for page in pages]


class _Ids(HTMLParser):
    def __init__(self):
        super().__init__()
        self.ids = set()

    def handle_starttag(self, tag, attrs):
        self.ids.update(value for name, value in attrs if name in ("id", "name") and value)


@functools.cache
def anchors(path: Path) -> frozenset[str]:
    parser = _Ids()
    parser.feed(path.read_text(encoding="utf-8"))
    return frozenset(parser.ids)


@pytest.fixture(scope="module")
def site():
    pytest.importorskip("playwright.sync_api", reason="needs Playwright: make test-browser")
    executable = next(filter(None, map(shutil.which, BROWSERS)), None)
    if executable is None:
        pytest.skip("needs a Chromium (Debian: apt-get install chromium): make test-browser")
    if not (HTML / "index.html").is_file():
        pytest.skip("needs the built book in _build/html: make book")
    from playwright.sync_api import sync_playwright

    handler = functools.partial(_QuietHandler, directory=str(HTML))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        yield browser, f"http://127.0.0.1:{server.server_address[1]}/"
        browser.close()
    server.shutdown()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.mark.parametrize("page_path", toc_pages())
def test_page_in_a_browser(site, page_path):
    browser, base = site
    page = browser.new_page()
    problems = []
    page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.on("requestfailed", lambda r: problems.append(f"request failed: {r.url}"))
    page.on("response", lambda r: problems.append(f"HTTP {r.status}: {r.url}") if r.status >= 400 else None)
    page.goto(base + page_path, wait_until="load")

    # MathJax: wait for typesetting, then no error and no raw TeX delimiters in the text
    source = (ROOT / page_path.replace(".html", ".md")).read_text(encoding="utf-8")
    has_math = bool(re.search(r"\$[^$\n]+\$|\$\$", source))
    if has_math:
        page.wait_for_function("() => window.MathJax && MathJax.startup && MathJax.startup.promise")
        page.evaluate("() => MathJax.startup.promise")
        assert page.locator("mjx-container").count() > 0, "MathJax rendered nothing"
        assert page.locator("mjx-merror").count() == 0, "MathJax reported an error"
        prose = page.evaluate("""() => { const main = document.querySelector('main').cloneNode(true);
            main.querySelectorAll('pre, code, mjx-container').forEach(e => e.remove()); return main.innerText; }""")
        assert "\\frac" not in prose and "\\sqrt" not in prose, "raw TeX left in the prose"

    # every image loaded
    broken = page.evaluate("() => [...document.images].filter(i => !i.complete || i.naturalWidth === 0).map(i => i.src)")
    assert not broken, f"images that did not load: {broken}"

    # every link inside the book resolves, anchors included
    here = base + page_path
    for href in page.evaluate("() => [...document.querySelectorAll('a[href]')].map(a => a.getAttribute('href'))"):
        url = urlparse(urljoin(here, href))
        if url.scheme not in ("http", "https") or url.netloc != urlparse(base).netloc:
            continue
        target = HTML / url.path.lstrip("/")
        target = target / "index.html" if target.is_dir() else target
        assert target.is_file(), f"{page_path} links to {href}, which does not exist"
        if url.fragment and target.suffix == ".html":
            assert url.fragment in anchors(target), f"{page_path} links to {href}: no such anchor"

    # exercise solutions stay hidden until clicked
    solutions = page.locator("div.admonition.dropdown")
    if "## Exercises" in source:
        assert solutions.count() >= 3, "a chapter ends with exercises"
        first = solutions.first
        body = first.locator(":scope > :not(.admonition-title)").first
        assert not body.is_visible(), "solutions are hidden at first"
        first.locator(".admonition-title").click()
        body.wait_for(state="visible")

    assert not problems, problems
    page.close()
