"""The deploy chapter's in-page translator, timed where readers run it: the built book served
over HTTP, opened in headless Chromium (Playwright), the page's own code (web/translate.js,
onnxruntime-web in WebAssembly) translating. Beside it, onnxruntime in Python on the same
files (OnnxTranslator), in the same run.

Recorded: what the first visit downloads for the translator (the runtime, the tokenizer, the
page's code and the model, each file's bytes and gzip -6 bytes, as a static host serves
them), the time until the model is loaded, and each sentence's translation time, greedy and
beam 4, over repeats (min / median / max, after one warm-up translation); then, through the
page's controls as a reader uses them, the time from a click on Translate until the
translation and the explorer of every head are drawn, and from a click on "Show the beam
search" until the search is traced and drawn.

    make book
    python benchmarks/page_translate.py --model numbers \\
        --out benchmarks/results/page_translate_numbers.json
"""

from __future__ import annotations

import argparse
import functools
import gzip
import http.server
import shutil
import sys
import threading
import time
from pathlib import Path
from urllib.parse import urlparse

from report import REPO, spread, write_report

sys.path.insert(0, str(REPO))
from transformer import OnnxTranslator  # noqa: E402

BROWSERS = ("chromium", "chromium-browser", "google-chrome")


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def in_page(html: Path, model: str, sentences: list[str], repeats: int) -> dict:
    """Load the page and the model in Chromium; the files it fetched and the timings."""
    from playwright.sync_api import sync_playwright

    executable = next(filter(None, map(shutil.which, BROWSERS)), None)
    if executable is None:
        raise SystemExit("needs a Chromium (Debian: apt-get install chromium)")
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(_Quiet, directory=str(html)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}/"
    fetched = []
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=executable,
                                                 args=["--no-sandbox"])
            page = browser.new_page()
            page.on("response", lambda r: fetched.append(urlparse(r.url).path))
            page.goto(base + "book/deploy.html", wait_until="load")
            page.wait_for_selector("#translator[data-ready=true]", timeout=120_000)
            timings = page.evaluate("""async ([base, model, sentences, repeats]) => {
                const { Translator } = await import(base + "_static/translate/translate.js");
                const started = performance.now();
                const t = await Translator.fromUrl(
                    new URL(`_static/translate/models/${model}/`, base));
                const load_ms = performance.now() - started;
                const runs = {};
                for (const k of [1, 4]) {
                    await t.translate(sentences[0], k);  // warm-up
                    runs[k] = sentences.map(() => []);
                    for (let r = 0; r < repeats; r++) {
                        for (const [i, s] of sentences.entries()) {
                            runs[k][i].push((await t.translate(s, k)).ms);
                        }
                    }
                }
                const out = await Promise.all(sentences.map((s) => t.translate(s, 1)));
                return { load_ms, runs, translations: out.map((r) => r.text),
                         source_tokens: out.map((r) => r.source.length) };
            }""", [base, model, sentences, repeats])
            visit = len(fetched)  # what the explorer fetches comes after the first visit
            timings["clicks"] = through_controls(page, model, sentences, repeats)
            browser.close()
    finally:
        server.shutdown()
    return {**timings, "files": sizes(html, model, fetched[:visit]),
            "explorer_files": sizes(html, model, fetched[visit:])}


def sizes(html: Path, model: str, fetched: list[str]) -> dict:
    """Bytes and gzip -6 bytes of the translator's files among the paths fetched."""
    ours = sorted({p for p in fetched if "/_static/translate/" in p
                   and "/models/" not in p or f"/models/{model}/" in p})
    files = {}
    for path in ours:
        data = (html / path.lstrip("/")).read_bytes()
        files[path.split("/_static/translate/")[1]] = {
            "bytes": len(data), "gzip_bytes": len(gzip.compress(data, 6))}
    return files


def through_controls(page, model: str, sentences: list[str], repeats: int) -> dict:
    """As a reader sees it: from a click on Translate to the translation, its map and the
    explorer of every head drawn, through the page's own controls; ms per sentence, greedy
    and beam 4 (after one warm-up round)."""
    choose = "#translator select[aria-label=model]"
    if page.input_value(choose) != model:
        page.select_option(choose, model)
        page.wait_for_function("() => !document.querySelector('.translator-status')"
                               ".textContent.startsWith('loading')")
    return page.evaluate("""async ([sentences, repeats]) => {
        const root = document.getElementById("translator");
        const input = root.querySelector("input[type=text]");
        const decoding = root.querySelector("select[aria-label=decoding]");
        const go = [...root.querySelectorAll("button")].find((b) => b.textContent === "Translate");
        const output = root.querySelector(".translator-output");
        const drawn = (selector) => new Promise((resolve) => {
            const watch = new MutationObserver(() => {
                if (!output.querySelector(selector)) return;
                watch.disconnect();
                resolve(performance.now());
            });
            watch.observe(output, { childList: true, subtree: true });
        });
        // the first translation offers the explorer; a click opens it (fetching maps.onnx)
        input.value = sentences[0];
        let done = drawn(".translator-explore");
        go.click();
        await done;
        done = drawn(".attention-explorer");
        const started = performance.now();
        output.querySelector(".translator-explore").click();
        const open_ms = (await done) - started;
        const runs = {}, search = sentences.map(() => []);
        for (const k of ["1", "4"]) {
            decoding.value = k;
            runs[k] = sentences.map(() => []);
            for (let r = -1; r < repeats; r++) {  // -1: the warm-up round
                for (const [i, s] of sentences.entries()) {
                    input.value = s;
                    const done = drawn(".attention-explorer"), started = performance.now();
                    go.click();
                    const ended = await done;
                    if (r >= 0) runs[k][i].push(ended - started);
                    if (k !== "4") continue;
                    // then the beam search of the sentence, traced and drawn
                    const shown = drawn(".beam-tree"), clicked = performance.now();
                    output.querySelector(".translator-search").click();
                    const drawnAt = await shown;
                    if (r >= 0) search[i].push(drawnAt - clicked);
                }
            }
        }
        return { open_ms, runs, search };
    }""", [sentences, repeats])


def in_python(folder: Path, sentences: list[str], repeats: int) -> dict:
    """onnxruntime in Python on the same files: seconds per sentence, greedy and beam 4."""
    translator = OnnxTranslator(folder)
    runs = {}
    for k in (1, 4):
        translator.translate(sentences[:1], beam_size=k)  # warm-up
        runs[k] = [[] for _ in sentences]
        for _ in range(repeats):
            for i, sentence in enumerate(sentences):
                started = time.perf_counter()
                translator.translate([sentence], beam_size=k)
                runs[k][i].append((time.perf_counter() - started) * 1000)
    return {"runs": runs, "translations": translator.translate(sentences)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--html", type=Path, default=REPO / "_build" / "html")
    parser.add_argument("--model", default="numbers", help="a folder of the page's models")
    parser.add_argument("--sentences", nargs="+", help="default: the model's examples")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    folder = args.html / "_static" / "translate" / "models" / args.model
    if not (folder / "model.json").is_file():
        raise SystemExit(f"{folder} holds no exported model: make book (with npm) writes it")
    sentences = args.sentences or OnnxTranslator(folder).meta["about"]["examples"]
    page = in_page(args.html, args.model, sentences, args.repeats)
    python = in_python(folder, sentences, args.repeats)
    if page["translations"] != python["translations"]:
        raise SystemExit("the page and onnxruntime in Python translate differently: "
                         f"{page['translations']} against {python['translations']}")
    rows = []
    for i, sentence in enumerate(sentences):
        rows.append({"sentence": sentence, "source_tokens": page["source_tokens"][i],
                     "translation": page["translations"][i],
                     **{f"{where} {'greedy' if k == 1 else 'beam 4'} ms":
                        spread(runs["runs"][str(k) if where == "page" else k][i])
                        for where, runs in [("page", page), ("python", python)]
                        for k in (1, 4)},
                     **{f"page click to explorer {'greedy' if k == 1 else 'beam 4'} ms":
                        spread(page["clicks"]["runs"][str(k)][i]) for k in (1, 4)},
                     "page click to beam search drawn ms": spread(page["clicks"]["search"][i])})
    visit, explorer = page["files"], page["explorer_files"]
    write_report(args.out, {
        "model": args.model, "repeats": args.repeats,
        "first_load": {"files": visit, "bytes": sum(f["bytes"] for f in visit.values()),
                       "gzip_bytes": sum(f["gzip_bytes"] for f in visit.values()),
                       "model_load_ms": page["load_ms"]},
        "explorer_open": {"files": explorer,
                          "gzip_bytes": sum(f["gzip_bytes"] for f in explorer.values()),
                          "ms": page["clicks"]["open_ms"]},
        "sentences": rows,
    })
    for row in rows:
        print(row["sentence"], {k: round(v["median"], 1) for k, v in row.items()
                                if k.endswith(" ms")})


if __name__ == "__main__":
    main()
