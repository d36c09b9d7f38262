// The translator of the deploy chapter: an exported model (python -m transformer export)
// run in the page by onnxruntime-web (WebAssembly), tokenized by @huggingface/tokenizers.
// Greedy decoding and beam search are OnnxTranslator's (transformer/deploy.py), step for
// step, in float32 where it sums and divides, so the page gives Python's translations.
import * as ort from "./vendor/ort.wasm.min.mjs";
import { Tokenizer } from "./vendor/tokenizers.min.mjs";

ort.env.wasm.wasmPaths = new URL("./vendor/", import.meta.url).href;
ort.env.wasm.numThreads = 1; // threads need cross-origin isolation, which static hosts lack

const FILES = ["model.json", "tokenizer.json", "encoder.onnx", "step.onnx"];
// the decoding defaults that model.json carries (python -m transformer export writes
// transformer.decoding.DECODING's): the page types none of its own
const DECODING = ["beam_size", "alpha", "extra_len"];
const MAPS = "maps.onnx"; // every attention weight, teacher-forced: the explorer's
const OPTIONS = { executionProviders: ["wasm"], graphOptimizationLevel: "all" };
const f32 = Math.fround;

function int64(values, dims) {
  return new ort.Tensor("int64", BigInt64Array.from(values, BigInt), dims);
}

function repeatRows(tensor, k) {
  // (1, ...) -> (k, ...): the same sentence in each row of the beam
  const data = new Float32Array(tensor.data.length * k);
  for (let r = 0; r < k; r++) data.set(tensor.data, r * tensor.data.length);
  return new ort.Tensor("float32", data, [k, ...tensor.dims.slice(1)]);
}

function row(tensor, r) {
  // one row of a (batch, ...) tensor's data
  const size = tensor.data.length / tensor.dims[0];
  return tensor.data.slice(r * size, (r + 1) * size);
}

function lengthPenalty(length, alpha) {
  return ((5 + length) / 6) ** alpha; // GNMT's, as transformer.decoding.length_penalty
}

// Indices of the n largest values, larger first, the lower index first on ties: what
// OnnxTranslator's stable sort of the negated values gives, without sorting them all.
function largest(values, n) {
  const best = [];
  for (let i = 0; i < values.length; i++) {
    const v = values[i];
    if (best.length === n && !(v > values[best[n - 1]])) continue;
    let j = Math.min(best.length, n - 1);
    while (j > 0 && v > values[best[j - 1]]) j--;
    best.splice(j, 0, i);
    if (best.length > n) best.pop();
  }
  return best;
}

const descending = (x, y) => (y > x) - (y < x); // -Infinity ties stay in order

// decoding.BeamTrace: what a traced search did at each step, recorded from its own values
// (-Infinity as null, as Python's JSON); toDict() is BeamTrace.to_dict()
const finite = (x) => (x === -Infinity ? null : x);

class BeamTrace {
  constructor(source, k, alpha, tokenizer) {
    Object.assign(this, { source, k, alpha, tokenizer, steps: [], finished: [], greedy: [],
      greedyScore: null });
  }

  add(t, prefixes, prefixLogp, logProbs, logp, from, token, scores, keep, bound, attention) {
    const vocab = logProbs.dims[1], [rows, h, n] = attention.dims;
    const candidates = [];
    logp.forEach((v, j) => {
      if (v === -Infinity) return; // an extension of an empty slot
      const slot = keep.indexOf(j);
      const fate = scores[j] !== -Infinity ? "finished" : slot >= 0 ? "kept" : "pruned";
      candidates.push({ row: from[j], token: token[j], log_prob: v,
        token_log_prob: logProbs.data[from[j] * vocab + token[j]], score: finite(scores[j]),
        fate, slot: fate === "kept" ? slot : null });
    });
    const weights = Array.from({ length: rows }, (_, r) => Array.from({ length: h }, (_, i) =>
      Array.from(attention.data.subarray((r * h + i) * n, (r * h + i + 1) * n))));
    this.steps.push({ t, prefixes, log_probs: Array.from(prefixLogp, finite), candidates,
      bound: finite(bound), attention: weights });
  }

  end(done) {
    this.finished = done.map((d) => ({ ids: d.ids, log_prob: d.logp, score: d.score }));
  }

  toDict() {
    const ids = new Set([...this.source, ...this.greedy, ...this.finished.flatMap((f) => f.ids),
      ...this.steps.flatMap((s) => s.candidates.map((c) => c.token))]);
    const round = (w) => Math.round(w * 1e4) / 1e4; // as the attention explorer's
    const steps = this.steps.map((s) => ({ ...s, attention: s.attention.map((r) =>
      r.map((head) => head.map(round))) }));
    return { source: this.source, beam_size: this.k, alpha: this.alpha, steps,
      greedy: this.greedy, greedy_score: this.greedyScore, finished: this.finished, tokens: Object.fromEntries([...ids]
        .sort((a, b) => a - b).map((id) => [String(id), this.tokenizer.id_to_token(id) ?? `<${id}>`])) };
  }
}

export class Translator {
  constructor(meta, tokenizer, encoder, step, read) {
    Object.assign(this, { meta, tokenizer, encoder, step, read, maps: undefined });
  }

  // read: a function from a file name to its content (JSON parsed, or bytes, or null for
  // maps.onnx where it is missing), from a URL fetch or from a File the reader chose. The
  // four files now; maps.onnx when the explorer first asks for it (loadMaps).
  static async load(read) {
    const [meta, tokenizerJson, encoder, step] = await Promise.all(FILES.map(read));
    if (meta.format !== "transformer-onnx-1") {
      throw new Error(`model.json has format ${JSON.stringify(meta.format)}; expected ` +
        '"transformer-onnx-1" (python -m transformer export writes it)');
    }
    const missing = DECODING.filter((key) => !(key in meta));
    if (missing.length) {
      throw new Error(`model.json has no ${missing.join(", ")} (written by an older version): ` +
        "export the model again (python -m transformer export)");
    }
    const sessions = await Promise.all([encoder, step].map(
      (bytes) => ort.InferenceSession.create(bytes, OPTIONS)));
    const tokenizer = new Tokenizer(tokenizerJson, {});
    return new Translator(meta, tokenizer, ...sessions, read);
  }

  loadMaps() {
    // the maps graph's session, read and started once (two calls before it is ready share
    // one fetch); null for a folder without it; a failed load may be tried again
    this.maps ??= (async () => {
      const bytes = await this.read(MAPS);
      return bytes && ort.InferenceSession.create(bytes, OPTIONS);
    })().catch((error) => { this.maps = undefined; throw error; });
    return this.maps;
  }

  static fromUrl(base) {
    return Translator.load(async (name) => {
      const response = await fetch(new URL(name, base));
      if (name === MAPS && response.status === 404) return null;
      if (!response.ok) throw new Error(`${name}: HTTP ${response.status}`);
      return name.endsWith(".json") ? response.json() : new Uint8Array(await response.arrayBuffer());
    });
  }

  static fromFiles(fileList) {
    const files = new Map(Array.from(fileList, (file) => [file.name, file]));
    const missing = FILES.filter((name) => !files.has(name));
    if (missing.length) {
      throw new Error(`choose the four files of an exported model (and maps.onnx, to explore ` +
        `every head); missing: ${missing.join(", ")}`);
    }
    return Translator.load(async (name) => {
      const file = files.get(name);
      if (!file) return null; // maps.onnx, which older exports lack
      return name.endsWith(".json") ? JSON.parse(await file.text()) : new Uint8Array(await file.arrayBuffer());
    });
  }

  encode(text) {
    // token ids + <eos>, cut to max_len (translate's _encode_sources)
    const ids = text.length ? this.tokenizer.encode(text, { add_special_tokens: false }).ids : [];
    return [...ids, this.meta.eos_id].slice(0, this.meta.max_len);
  }

  decode(ids) {
    if (!ids.length) return "";
    return this.tokenizer.decode(ids, { skip_special_tokens: true, clean_up_tokenization_spaces: false });
  }

  tokens(ids) {
    return ids.map((id) => this.tokenizer.id_to_token(id) ?? `<${id}>`);
  }

  async start(src, k) {
    // the encoder once, then k rows of everything the steps need
    const m = this.meta;
    const source = int64(src, [1, src.length]);
    const out = await this.encoder.run({ src: source });
    const [memory, ...cross] = m.encoder_outputs.map((name) => repeatRows(out[name], k));
    const past = [];
    for (let i = 0; i < m.n_layers; i++) {
      for (const d of [m.d_k, m.d_v]) {
        past.push(new ort.Tensor("float32", new Float32Array(0), [k, m.n_heads, 0, d]));
      }
    }
    const rows = Array(k).fill(src);
    return { source: int64(rows.flat(), [k, src.length]), memory, cross, past };
  }

  async decodeStep(state, tokens, rows) {
    // one decoder step: log-probabilities (Float32Array per row), attention, new caches
    const m = this.meta;
    const inputs = [int64(tokens, [tokens.length, 1]), state.source, state.memory,
      int64(rows, [rows.length]), ...state.past, ...state.cross];
    const feeds = Object.fromEntries(m.step_inputs.map((name, i) => [name, inputs[i]]));
    const out = await this.step.run(feeds);
    state.past = m.step_outputs.slice(2).map((name) => out[name]);
    return { logProbs: out.log_probs, attention: out.attention };
  }

  limit(src) {
    return Math.min(src.length + this.meta.extra_len, this.meta.max_len);
  }

  async greedy(src) {
    // OnnxTranslator.greedy: ids without <bos> and <eos>, and each step's attention (h, n)
    const state = await this.start(src, 1);
    const tokens = [this.meta.bos_id], weights = [];
    for (let t = 0; t < this.limit(src); t++) {
      const { logProbs, attention } = await this.decodeStep(state, [tokens.at(-1)], [0]);
      weights.push(row(attention, 0));
      const token = largest(logProbs.data, 1)[0]; // argmax, the first on ties
      if (token === this.meta.eos_id) break;
      tokens.push(token);
    }
    return { ids: tokens.slice(1), weights, finished: null };
  }

  async beam(src, k = this.meta.beam_size, alpha = this.meta.alpha, trace = null) {
    // OnnxTranslator.beam: the best hypothesis as greedy's, and the k finished ones;
    // trace (a BeamTrace) records each step; k and alpha: model.json's by default
    const m = this.meta, limit = this.limit(src), state = await this.start(src, k);
    let alive = Array(k).fill([m.bos_id]), history = Array(k).fill([]);
    let aliveLogp = Float32Array.from({ length: k }, (_, i) => (i ? -Infinity : 0));
    let rows = [...Array(k).keys()], done = [];
    for (let t = 1; t <= limit; t++) {
      const { logProbs, attention } = await this.decodeStep(state, alive.map((a) => a.at(-1)), rows);
      const vocab = logProbs.dims[1];
      const candidates = new Float32Array(k * vocab); // float32 sums, as numpy's
      for (let i = 0; i < candidates.length; i++) {
        candidates[i] = aliveLogp[Math.floor(i / vocab)] + logProbs.data[i];
      }
      const top = largest(candidates, Math.min(2 * k, candidates.length));
      const logp = top.map((i) => candidates[i]);
      const from = top.map((i) => Math.floor(i / vocab)), token = top.map((i) => i % vocab);
      const ended = token.map((id, j) => (id === m.eos_id || t >= limit) && logp[j] !== -Infinity);
      const penalty = f32(lengthPenalty(t, alpha));
      const scores = logp.map((v, j) => (ended[j] ? f32(v / penalty) : -Infinity));
      top.forEach((_, j) => {
        if (!ended[j]) return;
        done.push({ score: scores[j], logp: logp[j], ids: [...alive[from[j]].slice(1), token[j]],
          weights: [...history[from[j]], row(attention, from[j])] });
      });
      done = done.sort((a, b) => descending(a.score, b.score)).slice(0, k); // stable
      const open = logp.map((v, j) => (ended[j] ? -Infinity : v));
      const keep = [...open.keys()].sort((a, b) => descending(open[a], open[b])).slice(0, k);
      const bound = f32(open[keep[0]] / f32(lengthPenalty(limit, alpha)));
      trace?.add(t, alive.map((a) => a.slice(1)), aliveLogp, logProbs, logp, from, token, scores,
        keep, bound, attention);
      aliveLogp = Float32Array.from(keep, (j) => open[j]);
      const best = done.length ? done[0].score : -Infinity;
      if (t >= limit || best >= bound) break;
      rows = keep.map((j) => from[j]);
      alive = keep.map((j) => [...alive[from[j]], token[j]]);
      history = rows.map((r) => [...history[r], row(attention, r)]);
    }
    trace?.end(done);
    const strip = (ids) => (ids.at(-1) === m.eos_id ? ids.slice(0, -1) : ids);
    const finished = done.map((d) => ({ ids: strip(d.ids), score: d.score }));
    return { ids: finished[0].ids, weights: done[0].weights, finished };
  }

  async trace(text, k = this.meta.beam_size, alpha = this.meta.alpha) {
    // OnnxTranslator.trace: the beam search of one sentence step by step, greedy's output
    // beside it, as BeamTrace.to_dict() (what beamsearch.js draws); and the time
    const started = performance.now();
    const src = this.encode(text), trace = new BeamTrace(src, k, alpha, this.tokenizer);
    await this.beam(src, k, alpha, trace);
    const greedy = (await this.greedy(src)).ids;
    trace.greedy = greedy.length < this.limit(src) ? [...greedy, this.meta.eos_id] : greedy;
    const penalty = f32(lengthPenalty(trace.greedy.length, alpha)); // as NumPy divides
    trace.greedyScore = f32((await this.logProb(src, trace.greedy)) / penalty);
    return { trace: trace.toDict(), ms: performance.now() - started };
  }

  async logProb(src, ids) {
    // OnnxTranslator.log_prob: the step graph fed `ids`, their log-probabilities summed
    // in float32
    const state = await this.start(src, 1);
    let total = 0, previous = this.meta.bos_id;
    for (const token of ids) {
      const { logProbs } = await this.decodeStep(state, [previous], [0]);
      total = f32(total + logProbs.data[token]);
      previous = token;
    }
    return total;
  }

  async attentionMaps(src, output) {
    // OnnxTranslator.attention_maps: the model reads the source ids and, teacher-forced,
    // the output ids (ending in <eos>); for each of maps_outputs (encoder self-, decoder
    // self- and encoder-decoder attention), its layers' heads' rows of weights; null
    // without maps.onnx
    const maps = await this.loadMaps();
    if (!maps) return null;
    const m = this.meta, tgt = [m.bos_id, ...output.slice(0, -1)];
    const out = await maps.run({ src: int64(src, [1, src.length]),
      tgt: int64(tgt, [1, tgt.length]) });
    return m.maps_outputs.map((name) => {
      const { data, dims: [, layers, heads, queries, keys] } = out[name];
      return Array.from({ length: layers }, (_, l) => Array.from({ length: heads }, (_, h) =>
        Array.from({ length: queries }, (_, q) => {
          const start = ((l * heads + h) * queries + q) * keys;
          return Array.from(data.subarray(start, start + keys));
        })));
    });
  }

  async translate(text, beam = 1, alpha = this.meta.alpha) {
    // the translation of one sentence, its tokens both sides (and their ids, for
    // attentionMaps), the mean of the last layer's heads for each output step (rows:
    // output tokens and <eos>), and the time
    const started = performance.now();
    const src = this.encode(text);
    const result = beam === 1 ? await this.greedy(src) : await this.beam(src, beam, alpha);
    const h = this.meta.n_heads, n = src.length;
    const map = result.weights.map((w) => Array.from({ length: n }, (_, j) => {
      let sum = 0;
      for (let head = 0; head < h; head++) sum += w[head * n + j];
      return sum / h;
    }));
    const output = [...result.ids, this.meta.eos_id].slice(0, map.length);
    return {
      text: this.decode(result.ids), ms: performance.now() - started,
      source: this.tokens(src), output: this.tokens(output), map, ids: { src, output },
      finished: result.finished?.map((f) => ({ text: this.decode(f.ids), score: f.score })),
    };
  }
}
