// The translator's controls in the page: a model (the book's, or one the reader exports and
// chooses from disk), a sentence, greedy or beam search; the translation, its time, the
// beam's finished hypotheses, the encoder-decoder attention map of the output and, for a
// model exported with maps.onnx, the explorer of every head (explorer.js, the package's);
// and, asked for, the beam search of the sentence step by step (beamsearch.js).
import { Translator } from "./translate.js";
import "./explorer.js"; // defines window.renderAttentionExplorer
import "./beamsearch.js"; // defines window.renderBeamSearch

// matplotlib's "Blues", which the book's attention maps use (0 white, 1 dark blue)
const BLUES = ["#f7fbff", "#deebf7", "#c6dbef", "#9ecae1", "#6baed6", "#4292c6", "#2171b5",
  "#08519c", "#08306b"].map((c) => [1, 3, 5].map((i) => parseInt(c.slice(i, i + 2), 16)));

function blue(weight) {
  const x = Math.min(Math.max(weight, 0), 1) * (BLUES.length - 1), i = Math.min(Math.floor(x), BLUES.length - 2);
  const [a, b] = [BLUES[i], BLUES[i + 1]];
  return `rgb(${a.map((v, c) => Math.round(v + (b[c] - v) * (x - i))).join(",")})`;
}

// A token as a label: the tokenizer's word-start marker "\u2581" shown as a space (a row or
// column per token still)
const label = (token) => token.replaceAll("\u2581", " ");

// The controls in the book's theme (pydata-sphinx-theme's colours), kept inside the column
const STYLE = `
#translator select, #translator input, #translator button {
  font: inherit; font-size: 0.95em; max-width: 100%; box-sizing: border-box;
  color: var(--pst-color-text-base); background: var(--pst-color-background);
  border: 1px solid var(--pst-color-border); border-radius: 0.25rem; padding: 0.3em 0.6em; }
#translator input[type=text] { width: min(100%, 32em); }
#translator button { cursor: pointer; }
#translator button:disabled { cursor: default; opacity: 0.6; }
#translator button.translator-go { color: #fff; background: var(--pst-color-primary);
  border-color: var(--pst-color-primary); font-weight: 600; }
#translator button.translator-example { font-size: 0.85em; margin: 0 0.2em 0.3em 0; }`;

function element(tag, attributes = {}, ...children) {
  const svg = ["svg", "rect", "text", "g", "title"].includes(tag);
  const node = svg ? document.createElementNS("http://www.w3.org/2000/svg", tag) : document.createElement(tag);
  for (const [key, value] of Object.entries(attributes)) node.setAttribute(key, value);
  node.append(...children);
  return node;
}

// The map as the book draws it: a row per output token (labelled left), a column per
// source token (labelled below), darker where the output token attended more.
// It is drawn at least 400 px wide: a short sentence's map is scaled up, labels with it.
export function attentionMap(result, heads) {
  const output = result.output.map(label), source = result.source.map(label);
  const cell = 18, font = 11, widest = (labels) => Math.max(...labels.map((l) => l.length)) * 6.5 + 8;
  const left = widest(output), bottom = widest(source);
  const width = left + cell * source.length, height = cell * output.length + bottom;
  const scale = Math.max(1, 400 / width);
  const svg = element("svg", { width: Math.round(width * scale), height: Math.round(height * scale),
    viewBox: `0 0 ${width} ${height}`, class: "attention-map",
    role: "img", "aria-label": `attention map, ${output.length} by ${source.length}` });
  result.map.forEach((weights, i) => {
    svg.append(element("text", { x: left - 4, y: cell * i + cell * 0.7, "text-anchor": "end", "font-size": font }, output[i]));
    weights.forEach((w, j) => svg.append(element("rect", { x: left + cell * j, y: cell * i, width: cell, height: cell,
      fill: blue(w), "data-weight": w.toFixed(4) }, element("title", {}, `${output[i].trim()} → ${source[j].trim()}: ${w.toFixed(2)}`))));
  });
  source.forEach((text, j) => {
    const x = left + cell * j + cell * 0.65, y = cell * output.length + 4;
    svg.append(element("text", { x, y, transform: `rotate(-90 ${x} ${y})`, "text-anchor": "end", "font-size": font }, text));
  });
  return element("figure", { style: "overflow-x: auto; max-width: 100%; margin: 0" }, svg, element("figcaption", {},
    `Encoder-decoder attention of the last decoder layer, the mean of its ${heads} heads: a row per output token, a column per source token.`));
}

// The explorer's data (attention_maps.AttentionExplorer's): each kind's queries, keys and
// weights, the decoder's keys being the tokens it reads, <bos> first.
export function explorer(result, maps, heads) {
  const output = result.output.map(label), source = result.source.map(label);
  const [encoder, decoder, cross] = maps, reads = ["<bos>", ...output.slice(0, -1)];
  const kinds = [["encoder self-attention", source, source, encoder],
    ["decoder self-attention", output, reads, decoder],
    ["encoder-decoder attention", output, source, cross]];
  const data = { heads, kinds: kinds.map(([name, queries, keys, layers]) => ({ name, queries, keys, layers })) };
  const root = element("div", { class: "attention-explorer" });
  window.renderAttentionExplorer(root, data);
  return element("figure", { style: "margin: 1em 0 0" }, element("figcaption", {},
    "Every head of every layer, on this translation: choose the attention, the layer and the head (or their mean); hover over a query."), root);
}

export async function mount(root) {
  if (!document.getElementById("translator-style")) {
    document.head.append(element("style", { id: "translator-style" }, STYLE));
  }
  const base = new URL(root.dataset.models, document.baseURI);
  const index = await (await fetch(new URL("index.json", base))).json();
  const choose = element("select", { "aria-label": "model" },
    ...index.models.map((m) => element("option", { value: m.folder }, m.label)),
    element("option", { value: "" }, "your own exported model (choose its files)…"));
  const files = element("input", { type: "file", multiple: "", accept: ".onnx,.json", hidden: "" });
  const input = element("input", { type: "text", "aria-label": "sentence" });
  // the beam's option takes its k from the model loaded (model.json's beam_size)
  const beamOption = element("option", { value: "", disabled: "" }, "beam search");
  const decoding = element("select", { "aria-label": "decoding" },
    element("option", { value: "1" }, "greedy"), beamOption);
  const go = element("button", { type: "button", class: "translator-go", disabled: "" }, "Translate");
  const status = element("p", { class: "translator-status", "aria-live": "polite" });
  const examples = element("p", { class: "translator-examples" });
  const output = element("div", { class: "translator-output" });
  root.replaceChildren(element("p", {}, choose, " ", files), examples,
    element("p", {}, input, " ", decoding, " ", go), status, output);

  let translator = null;
  async function load(promise, about) {
    go.disabled = true;
    output.replaceChildren(); // the last model's translation and explorer
    status.textContent = `loading ${about}…`;
    try {
      const started = performance.now();
      translator = await promise;
      const m = translator.meta;
      beamOption.value = String(m.beam_size);
      beamOption.textContent = `beam search, k = ${m.beam_size}`;
      beamOption.disabled = false;
      status.textContent = `${about}: ${m.n_layers} layers, ${m.n_heads} heads, ${m.vocab_size.toLocaleString("en")} tokens, loaded in ${Math.round(performance.now() - started)} ms` +
        (m.lowercase ? "; it was trained on lowercased text, so it reads your sentence lowercased and writes lowercase" : "");
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

  // the explorer of every head, once the reader has asked for it (its graph, maps.onnx,
  // is fetched then: a first visit does not download it); before, the button that asks
  let exploring = false;
  async function explorerOf(result) {
    if (!exploring) {
      const ask = element("button", { type: "button", class: "translator-explore" },
        "Explore every head of every layer");
      ask.addEventListener("click", async () => {
        exploring = ask.disabled = true;
        ask.textContent = "loading maps.onnx…";
        try {
          ask.replaceWith(await explorerOf(result));
        } catch (error) {
          exploring = false;
          ask.replaceWith(`could not load maps.onnx: ${error.message}`);
        }
      });
      return element("p", {}, ask);
    }
    const maps = await translator.attentionMaps(result.ids.src, result.ids.output);
    return maps ? explorer(result, maps, translator.meta.n_heads) : element("p", {},
      "This model's folder has no maps.onnx: export it again (python -m transformer export) to explore every head.");
  }

  // the beam search of the sentence, step by step, once the reader asks for it
  function searchOf(text) {
    const ask = element("button", { type: "button", class: "translator-search" },
      "Show the beam search, step by step");
    ask.addEventListener("click", async () => {
      ask.disabled = true;
      try {
        const { trace, ms } = await translator.trace(text); // model.json's k and alpha
        const root = element("div", { class: "beam-search" });
        ask.parentElement.replaceWith(element("figure", { style: "margin: 1em 0 0" },
          element("figcaption", {}, `The beam search (k = ${trace.beam_size}) of this sentence, step by step, ` +
            `traced by the page in ${ms.toFixed(0)} ms. Click a step for its candidates and what it attended to.`), root));
        window.renderBeamSearch(root, trace);
      } catch (error) {
        ask.replaceWith(`could not trace the search: ${error.message}`);
      }
    });
    return element("p", {}, ask);
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
          element("li", {}, `${f.text} (log P / lp = ${f.score.toFixed(3)})`))),
        element("p", { class: "translator-beam-note", style: "font-size: 0.9em" },
          "The finished hypotheses, best first, scored by log P / lp: log P is the sum of the " +
          `tokens' log-probabilities, lp = ((5 + length) / 6)^${translator.meta.alpha} the length penalty. The search ` +
          "stops as soon as no prefix still growing can beat the best finished score, so fewer " +
          `than ${beam} may have finished.`));
      }
      parts.push(searchOf(input.value), attentionMap(result, translator.meta.n_heads),
        await explorerOf(result));
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
    const entry = index.models.find((m) => m.folder === choose.value);
    if (entry) load(Translator.fromUrl(new URL(`${entry.folder}/`, base)), entry.about ?? entry.label);
  });
  files.addEventListener("change", () => load(Translator.fromFiles(files.files), "your model"));
  const first = index.models[0];
  if (first) await load(Translator.fromUrl(new URL(`${first.folder}/`, base)), first.about ?? first.label);
  root.dataset.ready = "true";
}

const root = document.getElementById("translator");
if (root) mount(root);
