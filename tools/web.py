"""The deploy chapter's in-page translator, written into the built book (`make book` runs this
after jupyter-book): _build/html/_static/translate/ gets

- page.js and translate.js, from web/, and the package's views: the attention explorer,
  transformer/explorer.js, and the beam search's, transformer/beamsearch.js;
- vendor/: onnxruntime-web's WebAssembly runtime and tokenizers.js, from web/node_modules
  (`npm ci --prefix web`, pinned by web/package-lock.json);
- models/NAME/: exported models (encoder.onnx, step.onnx, maps.onnx, tokenizer.json,
  model.json), and
  models/index.json listing them: the committed models of web/models
  (benchmarks/page_model.py writes them; the page opens with the first), then the number
  model of the book (train_once's run, trained when the chapters ran, so here it is read
  back, or trained again if that run is gone).

Without web/node_modules (no npm on the machine) the page says so instead of loading a
runtime that is not there; the rest of the book is unaffected.

    python tools/web.py [--html _build/html]
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WEB = ROOT / "web"
# the runtime's ES module, its Emscripten glue and WebAssembly (SIMD, the threaded build
# run with one thread), and the tokenizer's ES module
VENDOR = {
    "onnxruntime-web/dist": ["ort.wasm.min.mjs", "ort-wasm-simd-threaded.mjs",
                             "ort-wasm-simd-threaded.wasm"],
    "@huggingface/tokenizers/dist": ["tokenizers.min.mjs"],
}
NO_NPM = """// written by tools/web.py on a machine without npm: the runtime was not installed
const root = document.getElementById("translator");
if (root) root.querySelector(".translator-status").textContent = "This build of the book " +
  "has no in-page translator: it needs Node.js and npm when the book is built (make book " +
  "installs the runtime with npm ci; on Debian or Ubuntu: apt-get install nodejs npm).";
"""


def number_model(folder: Path) -> dict:
    """Export the book's number model into `folder`; its entry in index.json."""
    from transformer import export_onnx
    from transformer._book import small_number_run, train_once

    trainer, _ = train_once(*small_number_run())
    examples = [src for src, _ in trainer.data.test[:4]] + ["two thousand and twenty-six"]
    about = {"corpus": "numbers", "examples": examples,
             "trained": "transformer._book.small_number_run, by the book's chapters"}
    export_onnx(trainer.model.eval(), trainer.data.tokenizer, folder, about=about)
    return _entry(folder.name, "numbers: English number words to German (the book's model)")


def _entry(folder: str, label: str) -> dict:
    """A model's entry in index.json: the menu shows its name (the label before its
    parentheses, whole in the column), the status line the whole label once loaded."""
    return {"folder": folder, "label": label.split(" (")[0], "about": label}


def build(html: Path) -> Path:
    """Write html/_static/translate; returns it."""
    out = html / "_static" / "translate"
    holding = Path(tempfile.mkdtemp(prefix=".translate.", dir=out.parent))
    try:
        modules = WEB / "node_modules"
        if modules.is_dir():
            (holding / "vendor").mkdir()
            for package, names in VENDOR.items():
                for name in names:
                    shutil.copy2(modules / package / name, holding / "vendor" / name)
            for name in ("page.js", "translate.js"):
                shutil.copy2(WEB / name, holding / name)
            for name in ("explorer.js", "beamsearch.js"):  # the package's views
                shutil.copy2(ROOT / "transformer" / name, holding / name)
            models = []  # the committed models first: the page loads the first at once
            for folder in sorted(p for p in (WEB / "models").glob("*") if p.is_dir()):
                shutil.copytree(folder, holding / "models" / folder.name)
                about = json.loads((folder / "model.json").read_text())["about"]
                models.append(_entry(folder.name, about["label"]))
            models.append(number_model(holding / "models" / "numbers"))
        else:
            print("tools/web.py: no web/node_modules (npm ci --prefix web), so the page "
                  "says the translator is missing")
            (holding / "page.js").write_text(NO_NPM)
            models = []
        (holding / "models").mkdir(exist_ok=True)
        index = {"models": models}
        (holding / "models" / "index.json").write_text(json.dumps(index, indent=1) + "\n")
        for path in [holding, *holding.rglob("*")]:  # mkdtemp's folder is private
            path.chmod(0o755 if path.is_dir() else 0o644)
        shutil.rmtree(out, ignore_errors=True)
        holding.rename(out)
    finally:
        shutil.rmtree(holding, ignore_errors=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--html", type=Path, default=ROOT / "_build" / "html",
                        help="the built book (default: _build/html)")
    args = parser.parse_args()
    if not (args.html / "index.html").is_file():
        raise SystemExit(f"{args.html} holds no built book (make book builds it)")
    out = build(args.html)
    sizes = {p.relative_to(out): p.stat().st_size for p in out.rglob("*") if p.is_file()}
    print(f"{out}: {len(sizes)} files, {sum(sizes.values()) / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
