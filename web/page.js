// The translator's controls in the page: a model (the book's, or one the reader exports and
// chooses from disk), a sentence, greedy or beam search; the translation, its time, the
// beam's finished hypotheses and the encoder-decoder attention map of the output.
import { Translator } from "./translate.js";

// matplotlib's "Blues", which the book's attention maps use (0 white, 1 dark blue)
const BLUES = ["#f7fbff", "#deebf7", "#c6dbef", "#9ecae1", "#6baed6", "#4292c6", "#2171b5",
  "#08519c", "#08306b"].map((c) => [1, 3, 5].map((i) => parseInt(c.slice(i, i + 2), 16)));

function blue(weight) {
  const x = Math.min(Math.max(weight, 0), 1) * (BLUES.length - 1), i = Math.min(Math.floor(x), BLUES.length - 2);
  const [a, b] = [BLUES[i], BLUES[i + 1]];
  return `rgb(${a.map((v, c) => Math.round(v + (b[c] - v) * (x - i))).join(",")})`;
}

function element(tag, attributes = {}, ...children) {
  const svg = ["svg", "rect", "text", "g", "title"].includes(tag);
  const node = svg ? document.createElementNS("http://www.w3.org/2000/svg", tag) : document.createElement(tag);
  for (const [key, value] of Object.entries(attributes)) node.setAttribute(key, value);
  node.append(...children);
  return node;
}

// The map as the book draws it: a row per output token (labelled left), a column per
// source token (labelled below), darker where the output token attended more.
export function attentionMap(result, heads) {
  const cell = 18, font = 11, widest = (labels) => Math.max(...labels.map((l) => l.length)) * 6.5 + 8;
  const left = widest(result.output), bottom = widest(result.source);
  const width = left + cell * result.source.length, height = cell * result.output.length + bottom;
  const svg = element("svg", { width, height, viewBox: `0 0 ${width} ${height}`, class: "attention-map",
    role: "img", "aria-label": `attention map, ${result.output.length} by ${result.source.length}` });
  result.map.forEach((weights, i) => {
    svg.append(element("text", { x: left - 4, y: cell * i + cell * 0.7, "text-anchor": "end", "font-size": font }, result.output[i]));
    weights.forEach((w, j) => svg.append(element("rect", { x: left + cell * j, y: cell * i, width: cell, height: cell,
      fill: blue(w), "data-weight": w.toFixed(4) }, element("title", {}, `${result.output[i]} → ${result.source[j]}: ${w.toFixed(2)}`))));
  });
  result.source.forEach((label, j) => {
    const x = left + cell * j + cell * 0.65, y = cell * result.output.length + 4;
    svg.append(element("text", { x, y, transform: `rotate(-90 ${x} ${y})`, "text-anchor": "end", "font-size": font }, label));
  });
  return element("figure", { style: "overflow-x: auto; max-width: 100%; margin: 0" }, svg, element("figcaption", {},
    `Encoder-decoder attention of the last decoder layer, the mean of its ${heads} heads: a row per output token, a column per source token.`));
}

export async function mount(root) {
  const base = new URL(root.dataset.models, document.baseURI);
  const index = await (await fetch(new URL("index.json", base))).json();
  const choose = element("select", { "aria-label": "model" },
    ...index.models.map((m) => element("option", { value: m.folder }, m.label)),
    element("option", { value: "" }, "your own exported model (choose its four files)…"));
  const files = element("input", { type: "file", multiple: "", accept: ".onnx,.json", hidden: "" });
  const input = element("input", { type: "text", "aria-label": "sentence", style: "width: min(100%, 32em)" });
  const decoding = element("select", { "aria-label": "decoding" },
    element("option", { value: "1" }, "greedy"), element("option", { value: "4" }, "beam search, k = 4"));
  const go = element("button", { type: "button", disabled: "" }, "Translate");
  const status = element("p", { class: "translator-status", "aria-live": "polite" });
  const examples = element("p", { class: "translator-examples" });
  const output = element("div", { class: "translator-output" });
  root.replaceChildren(element("p", {}, choose, " ", files), examples,
    element("p", {}, input, " ", decoding, " ", go), status, output);

  let translator = null;
  async function load(promise, about) {
    go.disabled = true;
    status.textContent = `loading ${about}…`;
    try {
      const started = performance.now();
      translator = await promise;
      const m = translator.meta;
      status.textContent = `${about}: ${m.n_layers} layers, ${m.n_heads} heads, ${m.vocab_size.toLocaleString("en")} tokens, loaded in ${Math.round(performance.now() - started)} ms` +
        (m.lowercase ? "; it was trained on lowercased text, so the input is lowercased" : "");
      examples.replaceChildren(...(m.about.examples ?? []).flatMap((text) => {
        const button = element("button", { type: "button", class: "translator-example" }, text);
        button.addEventListener("click", () => { input.value = text; run(); });
        return [button, " "];
      }));
      input.value = input.value || (m.about.examples ?? [""])[0];
      go.disabled = false;
    } catch (error) {
      translator = null;
      status.textContent = `could not load ${about}: ${error.message}`;
    }
  }

  async function run() {
    if (!translator) return;
    go.disabled = true;
    try {
      const beam = Number(decoding.value);
      const result = await translator.translate(input.value, beam);
      const parts = [element("p", { class: "translator-translation", style: "font-size: 1.25em; font-weight: 600" }, result.text),
        element("p", { class: "translator-time" }, `${beam === 1 ? "greedy" : `beam ${beam}`}, ${result.ms.toFixed(0)} ms`)];
      if (result.finished) {
        parts.push(element("ol", { class: "translator-beam" }, ...result.finished.map((f) =>
          element("li", {}, `${f.text} (log P / lp = ${f.score.toFixed(3)})`))));
      }
      parts.push(attentionMap(result, translator.meta.n_heads));
      output.replaceChildren(...parts);
      output.dataset.translation = result.text;
    } catch (error) {
      status.textContent = `translation failed: ${error.message}`;
    } finally {
      go.disabled = false;
    }
  }

  go.addEventListener("click", run);
  input.addEventListener("keydown", (event) => { if (event.key === "Enter") run(); });
  choose.addEventListener("change", () => {
    files.hidden = choose.value !== "";
    if (choose.value) load(Translator.fromUrl(new URL(`${choose.value}/`, base)), choose.selectedOptions[0].text);
  });
  files.addEventListener("change", () => load(Translator.fromFiles(files.files), "your model"));
  if (index.models.length) await load(Translator.fromUrl(new URL(`${index.models[0].folder}/`, base)), index.models[0].label);
  root.dataset.ready = "true";
}

const root = document.getElementById("translator");
if (root) mount(root);
