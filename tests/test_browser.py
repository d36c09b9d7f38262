"""The built book in a real browser: every page of the table of contents opened in headless
Chromium (Debian's `chromium`, driven by Playwright) from a local HTTP server.

Each page must load without console errors or failed requests, have its equations rendered by
MathJax (no MathJax error, no raw TeX left), load every image, link only to pages and anchors
that exist, fit its outputs, equations, figures and tables in the column, show one search box,
and keep the exercise solutions hidden until clicked. A chapter is also opened as a notebook
in JupyterLab, run and saved. Skipped when Playwright, a Chromium, JupyterLab or the built book
(`make book`) is missing; `make test-browser` provides them all.
"""

import functools
import json
import http.server
import re
import shutil
import threading
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urljoin, urlparse

import numpy as np
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
def chromium():
    """One Playwright and one Chromium for the module's tests: a second sync_playwright
    started inside the first one's asyncio loop is refused."""
    pytest.importorskip("playwright.sync_api", reason="needs Playwright: make test-browser")
    executable = next(filter(None, map(shutil.which, BROWSERS)), None)
    if executable is None:
        pytest.skip("needs a Chromium (Debian: apt-get install chromium): make test-browser")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=[
            "--no-sandbox",  # as root, in CI
            # no connections of its own: a machine without a network refuses them
            "--disable-background-networking", "--disable-component-update",
            "--disable-sync", "--no-first-run"])
        yield browser
        browser.close()


@pytest.fixture(scope="module")
def site(request):
    """The built book served here, and the module's Chromium: launched only once the book
    is found (under make test, before make book, starting it would cost seconds of both
    cores for tests that skip)."""
    if not (HTML / "index.html").is_file():
        pytest.skip("needs the built book in _build/html: make book")
    chromium = request.getfixturevalue("chromium")
    handler = functools.partial(_QuietHandler, directory=str(HTML))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield chromium, f"http://127.0.0.1:{server.server_address[1]}/"
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


@pytest.mark.parametrize("page_path", toc_pages())
def test_page_layout(site, page_path):
    """What the reader sees at 1280x720: everything fits the column, tables are readable,
    and one search box."""
    browser, base = site
    page = browser.new_page(viewport={"width": 1280, "height": 720})
    page.goto(base + page_path, wait_until="load")
    if page.evaluate("() => Boolean(window.MathJax && MathJax.startup)"):
        page.evaluate("() => MathJax.startup.promise")
    # nothing wider than the column: code, outputs, display equations, figures and tables fit
    too_wide = page.evaluate("""() => {
        const column = document.querySelector('main article') || document.querySelector('main');
        const right = column.getBoundingClientRect().right + 1;
        const parts = column.querySelectorAll(
            'pre, mjx-container[display="true"], img, table');
        return [...parts].filter(e => e.offsetParent !== null
                && (e.scrollWidth > e.clientWidth + 1 || e.getBoundingClientRect().right > right))
            .map(e => e.tagName.toLowerCase() + ': ' + (e.innerText || e.src || '').slice(0, 70));
    }""")
    assert not too_wide, f"wider than the column: {too_wide}"

    # tables a reader can read: cells padded (figures side by side do not run together),
    # columns named in words, not a record's keys (val_bleu)
    cramped, keys = page.evaluate("""() => {
        const cells = [...document.querySelectorAll('main article table')]
            .filter(t => t.offsetParent !== null).flatMap(t => [...t.querySelectorAll('td, th')])
            .filter(c => c.innerText.trim());
        const pad = (c) => Math.min(...['padding-left', 'padding-right'].map(
            (side) => parseFloat(getComputedStyle(c).getPropertyValue(side))));
        return [cells.filter(c => pad(c) < 4).map(c => c.innerText.slice(0, 30) + ` (${pad(c)} px)`),
                cells.filter(c => c.tagName === 'TH' && /^[a-z]+(_[a-z]+)+$/.test(c.innerText.trim()))
                    .map(c => c.innerText.trim())];
    }""")
    assert not cramped, f"table cells padded under 4 px: {cramped[:5]}"
    assert not keys, f"columns named by a record's keys: {keys}"

    # every image says what it shows: no missing alt text, and no file name in its place
    unsaid = page.evaluate("""() => [...document.querySelectorAll('main img')]
        .filter(i => !i.closest('a.navbar-brand, .bd-sidebar')).map(i => i.getAttribute('alt') || '')
        .filter(alt => alt.trim().length < 8 || /\\.(png|svg|jpe?g|gif)$|^[\\w.-]*\\//i.test(alt.trim()))""")
    assert not unsaid, f"images whose alt text does not say what they show: {unsaid}"

    # one search box, not a second one in a bar of its own
    searches = page.evaluate("""() => [...document.querySelectorAll(
            'input[type="search"], .search-button-field, .search-button')]
        .filter(e => e.offsetParent !== null && e.getBoundingClientRect().height > 0).length""")
    assert searches <= 1, f"{searches} search boxes are visible"

    page.close()


def test_the_landing_page_shows_the_path_in_its_first_screen(site):
    """At 1280x900 the "Read, run, try" box ends above the fold, with no folded code bar
    before it."""
    browser, base = site
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(base + "book/intro.html", wait_until="load")
    box = page.locator("div.admonition.tip", has_text="Read, run, try").first.bounding_box()
    assert box is not None and box["y"] + box["height"] <= 900, box
    bars = page.evaluate("""() => [...document.querySelectorAll('main details')]
        .filter(d => d.offsetParent !== null).map(d => d.getBoundingClientRect().top)""")
    assert not [y for y in bars if y < box["y"]], f"folded code bars above the box: {bars}"
    assert len([y for y in bars if y < 900]) <= 1, f"folded code bars in the first screen: {bars}"
    assert "make train" in page.locator("div.admonition.tip").first.inner_text()
    page.close()


@pytest.mark.parametrize("page_path", toc_pages())
def test_a_first_screen_holds_at_most_one_folded_code_bar(site, page_path):
    """At 1280x900 a page's first screen shows what it is and its first idea: headers and
    imports cost it one folded code bar at most."""
    browser, base = site
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(base + page_path, wait_until="load")
    if page.evaluate("() => Boolean(window.MathJax && MathJax.startup)"):
        page.evaluate("() => MathJax.startup.promise")
    bars = page.evaluate("""() => [...document.querySelectorAll('main details')]
        .filter(d => d.offsetParent !== null).map(d => Math.round(d.getBoundingClientRect().top))""")
    assert len([y for y in bars if y < 900]) <= 1, f"folded bars at y={bars[:4]}"
    page.close()


@pytest.mark.parametrize("page_path, what, fraction", [
    ("book/model.html", "class EncoderLayer", 0.25),
    ("book/trainer.html", "def fit", 0.50),
    ("book/results.html", "img", 0.10),  # its findings' chart
])
def test_what_a_page_is_for_comes_early(site, page_path, what, fraction):
    """At 1280x900, the code a page is about (or its first chart) starts within the first
    `fraction` of the page's height."""
    browser, base = site
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(base + page_path, wait_until="load")
    if page.evaluate("() => Boolean(window.MathJax && MathJax.startup)"):
        page.evaluate("() => MathJax.startup.promise")
    top, height = page.evaluate("""(what) => {
        const found = what === 'img' ? document.querySelector('main article img')
            : [...document.querySelectorAll('main article pre')].find(
                p => p.offsetParent !== null && p.textContent.includes(what));
        return [found ? found.getBoundingClientRect().top + window.scrollY : null,
                document.documentElement.scrollHeight];
    }""", what)
    assert top is not None, f"{what} not found on {page_path}"
    assert top / height < fraction, f"{what} at y={top:.0f} of {height} ({top / height:.1%})"
    page.close()


MODELS = HTML / "_static" / "translate" / "models"


def _watched(browser):
    """A new page, with the console errors, page errors and requests it will make."""
    page = browser.new_page()
    problems, requests = [], []
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(str(e)))
    page.on("request", lambda r: requests.append(r.url))
    return page, problems, requests


def _each_in_page(page, base: str, sentences: dict[str, list[str]], call: str) -> dict:
    """For each model folder of `sentences`, a list of what the JavaScript expression `call`
    gives for each of its sentences, evaluated in the page: `t` is the page's Translator of
    that model (translate.js), `s` the sentence, one sentence after another."""
    return page.evaluate(f"""async ([sentences, base]) => {{
        const {{ Translator }} = await import(base + "_static/translate/translate.js");
        const out = {{}};
        for (const [model, texts] of Object.entries(sentences)) {{
            const t = await Translator.fromUrl(new URL(`_static/translate/models/${{model}}/`, base));
            out[model] = [];
            for (const s of texts) out[model].push(await {call});
        }}
        return out;
    }}""", [sentences, base])


def _drawn(explorer) -> list[tuple[int, int, float]]:
    """(query, key, weight) of each cell of an explorer's main view, from its SVG."""
    return explorer.locator(".explorer-main [data-weight]").evaluate_all(
        "cells => cells.map(c => [+c.dataset.query, +c.dataset.key, +c.dataset.weight])")


def _choose(explorer, **controls) -> None:
    for control, value in controls.items():
        explorer.locator(f'select[data-control="{control}"]').select_option(value=str(value))


def test_the_attention_explorer_draws_pythons_weights_and_follows_its_controls(site):
    """The two explorers of the attention-maps chapter: for a kind, layer and head chosen
    with the controls (and the mean of the heads), the weights drawn (the SVG's
    data-weight) are Python's: the number model's as `explore` computes them again here,
    the Multi30k model's as its record holds them; the lines view draws a line per pair;
    hovering a query dims the other rows; the small multiples show h heads and a click
    on one chooses it; no request leaves the book; no console error."""
    import torch

    from transformer._book import small_number_run, train_once
    from transformer.attention_maps import explore

    trainer, _ = train_once(*small_number_run())  # the model the chapter explores
    numbers = explore(trainer.model.eval(), trainer.data.tokenizer,
                      "nine hundred and eighty-six").data
    record = json.loads((ROOT / "benchmarks" / "results" / "attention_multi30k.json").read_text())
    real = record["sentences"][0]["weights"]
    names = ["encoder.{}.self", "decoder.{}.self", "decoder.{}.cross"]  # the menu's order
    browser, base = site
    page, problems, requests = _watched(browser)
    page.goto(base + "book/attention_maps.html", wait_until="load")
    explorers = page.locator(".attention-explorer")
    assert explorers.count() == 2
    for index, heads, weights in [
        (0, numbers["heads"], lambda kind, layer: numbers["kinds"][kind]["layers"][layer]),
        (1, record["model_config"]["n_heads"], lambda kind, layer: real[names[kind].format(layer)]),
    ]:
        explorer = explorers.nth(index)
        for kind in range(3):
            for layer, head in [(0, heads - 1), (1, 0)]:
                _choose(explorer, attention=kind, layer=layer + 1, head=head + 1)  # from 1
                expected = torch.tensor(weights(kind, layer))  # (h, queries, keys)
                drawn = _drawn(explorer)
                assert len(drawn) == expected[head].numel()
                for q, k, w in drawn:
                    assert abs(w - expected[head, q, k].item()) < 1e-4, (index, kind, layer, q, k)
        _choose(explorer, head="mean")
        mean = expected.mean(0)
        assert all(abs(w - mean[q, k].item()) < 1e-4 for q, k, w in _drawn(explorer))
        _choose(explorer, view="lines")
        assert explorer.locator(".explorer-main line").count() == mean.numel()
        explorer.locator('.explorer-main text[data-query="1"]').dispatch_event("mouseenter")
        dimmed = explorer.locator(".explorer-main line").evaluate_all(
            "ls => ls.map(l => [+l.dataset.query, +l.getAttribute('stroke-opacity'), +l.dataset.weight])")
        assert all(o == (w if q == 1 else w * 0.1) or abs(o - (w if q == 1 else w * 0.1)) < 1e-9
                   for q, o, w in dimmed), "the hovered query's lines stay, the others dim"
        small = explorer.locator(".explorer-heads [data-head]")
        assert small.count() == heads
        small.nth(heads - 1).click()
        assert explorer.locator('select[data-control="head"]').input_value() == str(heads)
    assert all(url.startswith(base) for url in requests), [u for u in requests if not u.startswith(base)]
    assert not problems, problems
    page.close()


def test_the_translator_in_the_page_translates_as_python_does(site):
    """The deploy chapter's translator (tools/web.py's files), with each model of its menu:
    greedy and beam translations equal onnxruntime's in Python (OnnxTranslator), and for
    the book's number model PyTorch's greedy ones too; the map drawn with a row per output
    step and a column per source token; no request leaves the book; no console error."""
    if not (MODELS / "numbers" / "model.json").is_file():
        pytest.skip("the book was built without npm: no in-page translator (make book)")
    from transformer import OnnxTranslator, translate
    from transformer._book import small_number_run, train_once

    index = json.loads((MODELS / "index.json").read_text())
    assert [m["folder"] for m in index["models"]] == ["multi30k-en-de", "numbers"]
    sentences, expected = {}, {}
    for entry in index["models"]:
        onnx = OnnxTranslator(MODELS / entry["folder"])
        sentences[entry["folder"]] = onnx.meta["about"]["examples"] + ["", "one, two."]
        expected[entry["folder"]] = {
            str(k): onnx.translate(sentences[entry["folder"]], beam_size=k) for k in (1, 4)}
    trainer, _ = train_once(*small_number_run())  # the model the build exported
    model, tokenizer = trainer.model.eval(), trainer.data.tokenizer
    assert expected["numbers"]["1"] == translate(
        model, tokenizer, sentences["numbers"], beam_size=1, batch_size=1)

    browser, base = site
    page, problems, requests = _watched(browser)
    page.goto(base + "book/deploy.html", wait_until="load")
    page.wait_for_selector("#translator[data-ready=true]", timeout=60_000)
    got = _each_in_page(page, base, sentences, "(async () => [(await t.translate(s, 1)).text, "
                        "(await t.translate(s, 4)).text])()")
    assert {model: {k: [pair[i] for pair in pairs] for i, k in enumerate(("1", "4"))}
            for model, pairs in got.items()} == expected

    # through the controls: the number model chosen, a sentence typed, beam search, the map
    page.select_option("#translator select[aria-label=model]", "numbers")
    page.wait_for_function("() => document.querySelector('.translator-status')"
                           ".textContent.startsWith('numbers')")
    onnx = OnnxTranslator(MODELS / "numbers")
    sentence = sentences["numbers"][0]
    page.fill("#translator input[type=text]", sentence)
    page.select_option("#translator select[aria-label=decoding]", "4")
    page.click("#translator button:text('Translate')")
    page.wait_for_function("() => document.querySelector('.translator-output').dataset"
                           ".translation !== undefined")
    assert page.inner_text(".translator-translation") == expected["numbers"]["4"][0]
    src = tokenizer.encode(sentence, add_special_tokens=False).ids + [onnx.meta["eos_id"]]
    steps, _, n = onnx.beam(src, 4)[1].shape  # a row per output step, a column per token
    assert page.locator(".attention-map rect").count() == steps * n
    assert page.locator(".attention-map > text").count() == steps + n, "every label"
    hypotheses = page.locator(".translator-beam li").all_inner_texts()
    assert 1 <= len(hypotheses) <= 4
    assert hypotheses[0].startswith(expected["numbers"]["4"][0] + " (")
    # a model of the reader's own, chosen from disk: the number model's four files
    page.select_option("#translator select[aria-label=model]", "")
    page.set_input_files("#translator input[type=file]",
                         [str(p) for p in sorted((MODELS / "numbers").iterdir())])
    page.wait_for_function("() => document.querySelector('.translator-status')"
                           ".textContent.startsWith('your model')")
    page.select_option("#translator select[aria-label=decoding]", "1")
    page.fill("#translator input[type=text]", sentences["numbers"][1])
    page.click("#translator button:text('Translate')")
    page.wait_for_function(f"() => document.querySelector('.translator-translation')"
                           f".textContent === {json.dumps(expected['numbers']['1'][1])}")
    assert all(url.startswith(base) for url in requests), "a request left the book"
    assert not problems, problems
    page.close()


def test_the_translator_sits_in_the_column_and_labels_words_without_the_marker(site):
    """At 1280x900, the landing's "Try" link (deploy.html#in-this-page) shows the sentence box
    and the Translate button; after a translation, nothing of the translator reaches past
    the column; the map and the explorer's are at least 400 px wide, the explorer's labels
    12 px or more; the model menu's names are whole; no label shows the tokenizer's
    "\u2581"."""
    if not (MODELS / "numbers" / "model.json").is_file():
        pytest.skip("the book was built without npm: no in-page translator (make book)")
    browser, base = site
    page, problems, _ = _watched(browser)
    page.set_viewport_size({"width": 1280, "height": 900})
    page.goto(base + "book/deploy.html#in-this-page", wait_until="load")
    page.wait_for_selector("#translator[data-ready=true]", timeout=60_000)
    for control in ("#translator input[type=text]", "#translator button:text('Translate')"):
        box = page.locator(control).bounding_box()
        assert box and 0 <= box["y"] and box["y"] + box["height"] <= 900, (control, box)
    page.click("#translator button:text('Translate')")
    page.wait_for_function("() => document.querySelector('.translator-output').dataset.translation")
    page.click(".translator-explore")
    page.wait_for_selector("#translator .attention-explorer")
    outside = page.evaluate("""() => {
        const right = document.querySelector('main article').getBoundingClientRect().right + 1;
        return [...document.querySelectorAll('#translator select, #translator input, '
                + '#translator button, #translator svg, #translator p')]
            .filter(e => e.offsetParent !== null && e.getBoundingClientRect().right > right)
            .map(e => e.tagName.toLowerCase() + ': ' + (e.getAttribute('aria-label') || e.textContent).slice(0, 40));
    }""")
    assert not outside, f"past the column's edge: {outside}"
    assert page.locator(".attention-map").bounding_box()["width"] >= 400
    assert page.locator("#translator .explorer-main svg").bounding_box()["width"] >= 400
    small = page.evaluate("""() => [...document.querySelectorAll('#translator .explorer-main text')]
        .map(t => parseFloat(getComputedStyle(t).fontSize) * Math.hypot(t.getScreenCTM().a, t.getScreenCTM().b))
        .filter(px => px < 12).length""")  # its font size, as the map is scaled
    assert not small, f"{small} labels of the explorer's map drawn under 12 px"
    cut = page.evaluate("""() => {  // the model menu shows each name whole
        const menu = document.querySelector('#translator select[aria-label=model]');
        const context = document.createElement('canvas').getContext('2d');
        context.font = getComputedStyle(menu).font;
        const room = menu.clientWidth - 24;  // its padding (0.6em a side) and arrow
        return [...menu.options].map(o => o.text).filter(t => context.measureText(t).width > room);
    }""")
    assert not cut, f"model names cut in the menu: {cut}"
    labels = page.locator("#translator svg text").all_text_contents()
    assert labels and not [text for text in labels if "\u2581" in text]
    assert not problems, problems
    page.close()


def _same_trace(page_trace: dict, python_trace: dict) -> None:
    """The page's trace of a sentence against Python's (OnnxTranslator.trace's to_dict).
    Tokens, prefixes, candidates, fates, the finished ids and greedy's exactly. log P to
    a tolerance from the arithmetic: both run the same int8 graphs in float32, but
    onnxruntime-web's WebAssembly kernels sum the matrix products and the softmax in
    another order than the native ones. A token's log-probability is a logit less the
    log-sum-exp of the logits, each of magnitude up to about 30 here, where a float32 ulp is
    2 ** -19 (1.9e-6); a different order of the sums moves each by a few ulps, so the two
    may differ by DELTA = 16 ulps (3e-5; 1e-5 seen at most). A log P at step t sums t of
    them: t * DELTA. The attention weights are rounded to 4 decimals on both sides, so they
    may differ by one in the last decimal, and a little more."""
    delta = 16 * 2.0 ** -19
    for key in ("source", "beam_size", "alpha", "greedy", "tokens"):
        assert page_trace[key] == python_trace[key], key
    assert [f["ids"] for f in page_trace["finished"]] == [f["ids"] for f in python_trace["finished"]]
    assert page_trace["greedy_score"] == pytest.approx(
        python_trace["greedy_score"], abs=len(page_trace["greedy"]) * delta)
    assert len(page_trace["steps"]) == len(python_trace["steps"])
    for ours, theirs in zip(page_trace["steps"], python_trace["steps"]):
        t = ours["t"]
        assert (t, ours["prefixes"]) == (theirs["t"], theirs["prefixes"])
        fields = ("row", "token", "fate", "slot")
        assert [[c[f] for f in fields] for c in ours["candidates"]] == [
            [c[f] for f in fields] for c in theirs["candidates"]], f"step {t}"
        for a, b in zip(ours["candidates"], theirs["candidates"]):
            assert a["token_log_prob"] == pytest.approx(b["token_log_prob"], abs=delta)
            assert a["log_prob"] == pytest.approx(b["log_prob"], abs=t * delta)
            assert (a["score"] is None) == (b["score"] is None)
            if a["score"] is not None:
                assert a["score"] == pytest.approx(b["score"], abs=t * delta)
        assert ours["log_probs"] == pytest.approx(theirs["log_probs"], abs=t * delta)
        assert (ours["bound"] is None) == (theirs["bound"] is None)
        assert abs(np.array(ours["attention"]) - np.array(theirs["attention"])).max() <= 1.5e-4


def test_the_pages_beam_search_traces_as_pythons_and_is_drawn_in_the_column(site):
    """The page's traced search (translate.js's Translator.trace) equals Python's
    (OnnxTranslator.trace) on 21 sentences of both models of the menu; and through the
    controls, a 20-word sentence's search is drawn within the column, with the winner's
    path filled step by step, and a step's candidates listed when it is clicked."""
    if not (MODELS / "numbers" / "model.json").is_file():
        pytest.skip("the book was built without npm: no in-page translator (make book)")
    from transformer import OnnxTranslator
    from transformer._book import small_number_run, train_once

    trainer, _ = train_once(*small_number_run())
    sentences = {"multi30k-en-de": OnnxTranslator(MODELS / "multi30k-en-de").meta["about"]["examples"],
                 "numbers": [src for src, _ in trainer.data.test[:16]] + [""]}
    browser, base = site
    page, problems, _ = _watched(browser)
    page.set_viewport_size({"width": 1280, "height": 900})
    page.goto(base + "book/deploy.html", wait_until="load")
    page.wait_for_selector("#translator[data-ready=true]", timeout=60_000)
    got = _each_in_page(page, base, sentences, "t.trace(s, 4).then((r) => r.trace)")
    compared = 0
    for model, texts in sentences.items():
        translator = OnnxTranslator(MODELS / model)
        for sentence, trace in zip(texts, got[model], strict=True):
            _same_trace(trace, json.loads(json.dumps(translator.trace(sentence).to_dict())))
            compared += 1
    assert compared >= 20

    sentence = ("A man in a blue shirt and a woman in a red dress are walking their "
                "dogs along the beach.")
    assert len(sentence.split()) == 20
    page.fill("#translator input[type=text]", sentence)
    page.click("#translator button:text('Translate')")
    page.wait_for_function("() => document.querySelector('.translator-output').dataset.translation")
    page.click(".translator-search")  # its time: benchmarks/page_translate.py
    page.wait_for_selector(".beam-search svg.beam-tree")
    python = OnnxTranslator(MODELS / "multi30k-en-de").trace(sentence)
    winner = python.finished[0][0]
    assert page.locator(".beam-candidate[data-on-path=true]").count() == len(winner)
    steps = len(python.steps)
    assert page.locator(".beam-tree text[data-step]").count() == steps
    page.click(f".beam-tree text[data-step='{steps - 1}']")
    assert page.locator(".beam-candidates tbody tr").count() == len(python.steps[-1].candidates)
    right = page.evaluate("document.querySelector('main article').getBoundingClientRect().right + 1")
    for selector in (".beam-search", ".beam-scroll", ".beam-summary", ".beam-candidates"):
        box = page.locator(selector).bounding_box()
        assert box["x"] + box["width"] <= right, f"{selector} reaches past the column"
    assert not problems, problems
    page.close()


def test_the_translators_explorer_draws_every_weight_as_python_does(site):
    """Under the deploy chapter's translator, the explorer of each model of its menu, on
    two sentences, opened by its button (which fetches maps.onnx, not fetched before):
    for every kind and layer, a head chosen with the controls, the weights drawn are
    onnxruntime's in Python (OnnxTranslator.attention_maps of the same translation),
    within 1e-4 (WebAssembly's float32 arithmetic against the CPU's; the int8 model's
    weights too are computed in float32); the small multiples show h heads; no request
    leaves the book; no console error."""
    if not (MODELS / "numbers" / "model.json").is_file():
        pytest.skip("the book was built without npm: no in-page translator (make book)")
    from transformer import OnnxTranslator
    from transformer.decoding import encode_sources

    names = ["encoder.{}.self", "decoder.{}.self", "decoder.{}.cross"]  # the menu's order
    browser, base = site
    page, problems, requests = _watched(browser)
    labels = {m["folder"]: m["label"]
              for m in json.loads((MODELS / "index.json").read_text())["models"]}
    page.goto(base + "book/deploy.html", wait_until="load")
    page.wait_for_selector("#translator[data-ready=true]", timeout=60_000)
    assert not any(url.endswith("maps.onnx") for url in requests), "a first visit fetched maps.onnx"
    for folder in ["multi30k-en-de", "numbers"]:
        onnx = OnnxTranslator(MODELS / folder)
        page.select_option("#translator select[aria-label=model]", folder)
        page.wait_for_function(f"() => document.querySelector('.translator-status')"
                               f".textContent.startsWith({json.dumps(labels[folder])})")
        for sentence in onnx.meta["about"]["examples"][:2]:
            page.fill("#translator input[type=text]", sentence)
            page.click("#translator button:text('Translate')")
            page.wait_for_function(f"() => document.querySelector('.translator-output')"
                                   f".dataset.translation === {json.dumps(onnx.translate([sentence])[0])}")
            if page.locator(".translator-explore").count():  # the first time: the button
                page.click(".translator-explore")
            page.wait_for_selector("#translator .attention-explorer")
            src = encode_sources(onnx.tokenizer, [sentence], onnx.meta["max_len"])[0]
            ids, steps = onnx.greedy(src)  # the output, and <eos> where it ended in one
            maps = onnx.attention_maps(src, [*ids, onnx.meta["eos_id"]][: len(steps)])
            explorer = page.locator("#translator .attention-explorer")
            h = onnx.meta["n_heads"]
            for kind, name in enumerate(names):
                for layer in range(onnx.meta["n_layers"]):
                    head = (kind + layer) % h
                    _choose(explorer, attention=kind, layer=layer + 1, head=head + 1)
                    expected = maps[name.format(layer)][head]
                    drawn = _drawn(explorer)
                    assert len(drawn) == expected.size, (folder, sentence, name, layer)
                    worst = max(abs(w - expected[q, k]) for q, k, w in drawn)
                    assert worst < 1e-4, (folder, sentence, name.format(layer), worst)
            assert explorer.locator(".explorer-heads [data-head]").count() == h
    assert all(url.startswith(base) for url in requests), "a request left the book"
    assert not problems, problems
    page.close()


@pytest.fixture(scope="module")
def jupyterlab(request, tmp_path_factory):
    """A JupyterLab (the one `make lab` installs) serving a copy of the chapters, and the
    module's Chromium (launched once JupyterLab is found); yields (browser, url of the lab,
    the served folder)."""
    pytest.importorskip("jupyterlab", reason="needs JupyterLab: make test-browser installs it")
    chromium = request.getfixturevalue("chromium")
    import socket
    import subprocess
    import sys
    import time
    import urllib.request

    folder = tmp_path_factory.mktemp("lab")
    shutil.copy(ROOT / "book" / "positional.md", folder)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyter", "lab", "--no-browser", f"--port={port}", "--ip=127.0.0.1",
         "--IdentityProvider.token=test", "--expose-app-in-browser", "--allow-root", f"--ServerApp.root_dir={folder}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/lab?token=test"
    try:
        for _ in range(120):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status?token=test", timeout=2)
                break
            except OSError:
                time.sleep(0.5)
        else:
            pytest.fail("JupyterLab did not start within a minute")
        yield chromium, url, folder
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_a_chapter_opens_runs_and_saves_in_jupyterlab(jupyterlab):
    """The book's second use: a chapter's .md opened as a notebook through jupytext, its first
    cells run with their outputs shown, an edit saved back to the .md, and nothing else changed."""
    browser, url, folder = jupyterlab
    chapter = folder / "positional.md"
    original = chapter.read_text()
    page = browser.new_page()
    page.goto(url, wait_until="load")
    page.wait_for_function("() => window.jupyterapp && window.jupyterapp.started", timeout=60_000)
    page.evaluate("() => window.jupyterapp.started")
    page.evaluate("""() => window.jupyterapp.commands.execute('docmanager:open',
        {path: 'positional.md', factory: 'Jupytext Notebook'})""")
    notebook = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook")
    notebook.locator(".jp-CodeCell").first.wait_for(timeout=60_000)
    page.wait_for_function("""() => { const w = window.jupyterapp.shell.currentWidget;
        return w && w.sessionContext && w.sessionContext.session
            && w.sessionContext.session.kernel && w.sessionContext.session.kernel.status === 'idle'; }""",
                           timeout=120_000)
    # run the cells up to the first figure (the sinusoid table), as a reader does
    ran = page.evaluate("""async () => {
        const panel = window.jupyterapp.shell.currentWidget, cells = panel.content.widgets;
        const figure = cells.findIndex(c => c.model.type === 'code'
            && c.model.sharedModel.getSource().includes('imshow'));
        panel.content.activeCellIndex = 0;
        panel.content.select(cells[0]);
        panel.content.extendContiguousSelectionTo(figure);
        await window.jupyterapp.commands.execute('notebook:run-cell');
        return figure;
    }""")
    figure = notebook.locator(".jp-Cell").nth(ran).locator(".jp-OutputArea-output img")
    figure.wait_for(timeout=120_000)
    errors = notebook.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']")
    assert notebook.locator(".jp-RenderedText[data-mime-type='application/vnd.jupyter.error']").count() == 0
    assert errors.count() == 0, errors.first.inner_text()

    # an edit of one code cell, saved: the .md changes by that line and nothing else
    page.evaluate("""async () => {
        const panel = window.jupyterapp.shell.currentWidget;
        const cell = panel.content.widgets.find(c => c.model.type === 'code'
            && c.model.sharedModel.getSource().startsWith('pe = sinusoidal_positional_encoding(100, 512)'));
        cell.model.sharedModel.setSource(cell.model.sharedModel.getSource().replace('(100, 512)', '(120, 512)'));
        await panel.context.save();
    }""")
    import difflib

    changed = [line for line in difflib.unified_diff(original.splitlines(), chapter.read_text().splitlines(),
                                                     lineterm="", n=0)
               if line[:1] in "+-" and line[:3] not in ("+++", "---")]
    assert changed == ["-pe = sinusoidal_positional_encoding(100, 512)",
                       "+pe = sinusoidal_positional_encoding(120, 512)"], changed
    assert not list(folder.glob("*.ipynb")), "jupytext pairs nothing unless asked"
    page.close()
