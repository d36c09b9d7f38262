// The beam search of one sentence, drawn as it grew: a column per step, the step's 2k best
// candidates in it (best first), a line from each to the prefix it extends; kept ones
// solid, finished ones (ended with <eos>, or at the maximum length) outlined in green with
// their score, pruned ones faded; the winner's path filled. Above the beam, greedy
// decoding's tokens on the same steps, in orange from where they part from the winner.
// Clicking a step shows its candidates and what each prefix attended to in the source.
// Plain SVG, no framework: decoding.BeamTrace renders it in a notebook, the deploy
// chapter's page from the page's own search. data: BeamTrace.to_dict().
(function () {
  const SVG = "http://www.w3.org/2000/svg";
  const BLUE = "#2171b5", GREEN = "#2ca02c", ORANGE = "#e6550d";
  const BOX = 36, GAP = 6, CHAR = 7.5, TOP = 58; // px: a box's height, between boxes
  const FONT = 12;

  function node(name, attrs, parent, ns = SVG) {
    const e = ns ? document.createElementNS(ns, name) : document.createElement(name);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
    if (parent) parent.appendChild(e);
    return e;
  }

  function text(parent, x, y, label, attrs = {}) {
    const t = node("text", { x, y, fill: "currentColor", "font-size": FONT, ...attrs }, parent);
    t.textContent = label;
    return t;
  }

  const signed = (x) => (x === null ? "−∞" : x.toFixed(2).replace("-", "−"));

  window.renderBeamSearch = function (root, data) {
    const name = (id) => data.tokens[String(id)] ?? `<${id}>`;
    const word = (id) => name(id).replaceAll("\u2581", " ").trim() || name(id);
    const sentence = (ids) => ids.map((id) => name(id)).join("").replaceAll("\u2581", " ")
      .replace("<eos>", "").trim();
    const same = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);
    const winner = data.finished[0]?.ids ?? [];
    const parts = data.greedy.findIndex((id, i) => id !== winner[i]); // -1: no parting
    const state = { step: Math.max(0, parts) < data.steps.length ? Math.max(0, parts) : 0,
                    head: "mean" };

    // x of each column (column 0 holds <bos>); a column as wide as its widest label
    const greedyWidth = (t) => (t <= data.greedy.length ? word(data.greedy[t - 1]).length * CHAR + 14 : 0);
    const widths = [44, ...data.steps.map((s) => Math.max(58, greedyWidth(s.t), ...s.candidates.map(
      (c) => word(c.token).length * CHAR + 22)))];
    const xs = widths.reduce((acc, w) => [...acc, acc.at(-1) + w + 18], [8]);
    const rows = Math.max(1, ...data.steps.map((s) => s.candidates.length));
    const width = xs.at(-1) + 150, height = TOP + rows * (BOX + GAP) + 20; // room for the parting's label

    function tree() {
      const svg = node("svg", { width, height, viewBox: `0 0 ${width} ${height}`, role: "img",
        class: "beam-tree", "aria-label": `beam search, ${data.steps.length} steps` });
      const y = (i) => TOP + i * (BOX + GAP);
      const at = [new Map([[0, y(0)]])]; // each step's slot -> y of the box it came from
      text(svg, 8 + 22, TOP - 28, "greedy:", { "text-anchor": "middle", "font-size": 11,
        "font-style": "italic" });
      node("rect", { x: 8, y: y(0), width: 44, height: BOX, rx: 4, fill: "none",
        stroke: "currentColor", "stroke-opacity": 0.5 }, svg);
      text(svg, 30, y(0) + 22, "<bos>", { "text-anchor": "middle", "font-size": 11 });
      data.steps.forEach((step, s) => {
        const x = xs[s + 1], w = widths[s + 1], slots = new Map();
        const head = text(svg, x + w / 2, 12, `step ${step.t}`, { "text-anchor": "middle",
          "font-size": 11, "font-weight": s === state.step ? 700 : 400,
          style: "cursor: pointer", "data-step": s });
        head.addEventListener("click", () => { state.step = s; draw(); });
        const g = data.greedy[s]; // greedy's token at this step
        if (g !== undefined) {
          const apart = parts >= 0 && s >= parts;
          text(svg, x + w / 2, TOP - 28, word(g), { "text-anchor": "middle",
            fill: apart ? ORANGE : "currentColor", "font-weight": s === parts ? 700 : 400,
            class: "beam-greedy", "data-apart": apart });
        }
        if (s === parts) {
          node("line", { x1: x - 9, x2: x - 9, y1: 18, y2: height - 14, stroke: ORANGE,
            "stroke-dasharray": "4 3" }, svg);
          text(svg, x - 6, height - 4, "greedy and the beam part here", { "font-size": 11,
            fill: ORANGE, class: "beam-parting" });
        }
        step.candidates.forEach((c, i) => {
          const prefix = [...step.prefixes[c.row], c.token];
          const path = same(prefix, winner.slice(0, prefix.length));
          const from = at[s].get(c.row) ?? y(0);
          const fade = c.fate === "pruned" ? 0.35 : 1;
          node("path", { d: `M ${xs[s] + widths[s]} ${from + BOX / 2} C ${x - 9} ${from + BOX / 2}, ` +
            `${x - 9} ${y(i) + BOX / 2}, ${x} ${y(i) + BOX / 2}`, fill: "none",
            stroke: path ? BLUE : "currentColor", "stroke-width": path ? 2.5 : 1,
            "stroke-opacity": path ? 1 : 0.35 * fade }, svg);
          const box = node("g", { class: `beam-candidate beam-${c.fate}`, "data-step": s,
            "data-on-path": path, opacity: fade, style: "cursor: pointer" }, svg);
          node("rect", { x, y: y(i), width: w, height: BOX, rx: 4,
            fill: path ? BLUE : c.fate === "finished" ? GREEN : BLUE,
            "fill-opacity": path ? 0.9 : c.fate === "finished" ? 0.12 : 0.08,
            stroke: c.fate === "finished" ? GREEN : path ? BLUE : "currentColor",
            "stroke-width": c.fate === "finished" ? 2 : 1,
            "stroke-dasharray": c.fate === "pruned" ? "3 2" : "none" }, box);
          const ink = path ? { fill: "#fff" } : {};
          text(box, x + w / 2, y(i) + 15, word(c.token) + (c.fate === "finished" ? " ✓" : ""),
            { "text-anchor": "middle", "font-weight": 600, ...ink });
          text(box, x + w / 2, y(i) + 30, c.fate === "finished" ? `s ${signed(c.score)}`
            : signed(c.log_prob), { "text-anchor": "middle", "font-size": 10, ...ink });
          node("title", {}, box).textContent = `step ${step.t}: "${sentence(step.prefixes[c.row])}" + ` +
            `"${word(c.token)}"; log P(token) ${signed(c.token_log_prob)}, log P ${signed(c.log_prob)}` +
            (c.fate === "finished" ? `, score log P / lp ${signed(c.score)}: finished`
              : c.fate === "kept" ? `: kept (row ${c.slot + 1} of the next step)`
                : ": pruned (below the k kept)");
          box.addEventListener("click", () => { state.step = s; draw(); });
          if (c.fate === "kept") slots.set(c.slot, y(i));
        });
        at.push(slots);
      });
      return svg;
    }

    // the chosen step: its candidates as a table, and each prefix's attention over the source
    function details() {
      const step = data.steps[state.step], box = node("div", { class: "beam-step" }, null, null);
      node("p", { style: "margin: 0.6em 0 0.3em; font-weight: 600" }, box, null).textContent =
        `Step ${step.t}: the ${step.candidates.length} best extensions of the beam's prefixes`;
      const table = node("table", { class: "beam-candidates", style: "border-collapse: collapse; font-size: 0.9em" }, box, null);
      const cell = "padding: 4px 10px; border-bottom: 1px solid rgba(128,128,128,0.3); text-align: ";
      const headRow = node("tr", {}, node("thead", {}, table, null), null);
      ["prefix", "+ token", "log P(token)", "log P", "score", "what became of it"].forEach((h, i) =>
        (node("th", { style: cell + (i < 2 ? "left" : "right") }, headRow, null).textContent = h));
      const body = node("tbody", {}, table, null);
      step.candidates.forEach((c) => {
        const tr = node("tr", { style: c.fate === "pruned" ? "opacity: 0.55" : "" }, body, null);
        [sentence(step.prefixes[c.row]) || "<bos>", word(c.token), signed(c.token_log_prob),
          signed(c.log_prob), c.score === null ? "" : signed(c.score),
          c.fate === "kept" ? `kept: row ${c.slot + 1}` : c.fate === "finished" ? "finished"
            : "pruned"].forEach((v, i) =>
          (node("td", { style: cell + (i < 2 ? "left" : "right") }, tr, null).textContent = v));
      });
      if (!step.attention) return box;
      const live = step.prefixes.map((_, r) => r).filter((r) => step.log_probs[r] !== null);
      const heads = step.attention[0].length;
      const label = node("label", { style: "display: block; margin: 0.6em 0 0.3em" }, box, null);
      label.append("What each prefix attended to in the source as it chose this step's token (the last decoder layer's encoder-decoder attention), head ");
      const choose = node("select", { "data-control": "head" }, label, null);
      [...Array(heads).keys()].map((h) => [h, h + 1]).concat([["mean", "mean"]]).forEach(([v, n]) => {
        const o = node("option", { value: v }, choose, null);
        o.textContent = n;
        o.selected = String(v) === String(state.head);
      });
      choose.addEventListener("change", () => { state.head = choose.value; draw(); });
      const source = data.source.map(word), prefixes = live.map((r) => sentence(step.prefixes[r]) || "<bos>");
      const cellPx = 22, left = Math.min(280, Math.max(...prefixes.map((p) => p.length)) * CHAR + 10);
      const top = Math.max(...source.map((s) => s.length)) * CHAR + 8;
      const w = left + cellPx * source.length, h = top + cellPx * live.length;
      const svg = node("svg", { width: w, height: h, viewBox: `0 0 ${w} ${h}`, role: "img",
        class: "beam-attention" }, node("div", { style: "overflow-x: auto" }, box, null));
      live.forEach((r, q) => {
        const weights = step.attention[r], row = weights[0].map((_, j) => state.head === "mean"
          ? weights.reduce((sum, head) => sum + head[j], 0) / heads : weights[+state.head][j]);
        const p = prefixes[q].length * CHAR > left - 10 ? "…" + prefixes[q].slice(-Math.floor((left - 10) / CHAR) + 1) : prefixes[q];
        text(svg, left - 4, top + q * cellPx + 15, p, { "text-anchor": "end" });
        row.forEach((weight, j) => node("title", {}, node("rect", { x: left + j * cellPx,
          y: top + q * cellPx, width: cellPx, height: cellPx, fill: BLUE, "fill-opacity": weight,
          "data-weight": weight }, svg)).textContent = `${source[j]}: ${weight.toFixed(2)}`);
      });
      source.forEach((s, j) => {
        const x = left + j * cellPx + 15;
        text(svg, x, top - 4, s, { transform: `rotate(-90 ${x} ${top - 4})` });
      });
      return box;
    }

    function summary() {
      const p = node("p", { class: "beam-summary", style: "margin: 0 0 0.5em" }, null, null);
      const best = data.finished[0], last = data.steps.at(-1);
      const stop = last.bound !== null && best && best.score >= last.bound
        ? `it stopped at step ${last.t}, when no prefix still growing could beat that score (the best of them at most ${signed(last.bound)})`
        : `it stopped at step ${last.t}, the maximum length`;
      p.append(`Beam search (k = ${data.beam_size}, α = ${data.alpha}) chose “${sentence(winner)}”, score ${signed(best?.score ?? null)} (log P / lp, lp the length penalty); ${stop}. `);
      const greedyScore = data.greedy_score === null || data.greedy_score === undefined ? ""
        : `, score ${signed(data.greedy_score)} by the same measure`;
      p.append(parts < 0 ? "Greedy decoding chose the same." : `Greedy decoding chose “${sentence(data.greedy)}”${greedyScore}. They part at step ${parts + 1}: greedy took “${word(data.greedy[parts])}”, the most probable next token after their common prefix; the beam kept other prefixes too, and the one that won took “${parts < winner.length ? word(winner[parts]) : "nothing more"}”.`);
      return p;
    }

    function key() {
      const p = node("p", { class: "beam-key", style: "margin: 0 0 0.4em; font-size: 0.85em" }, null, null);
      p.textContent = "Each box: a token (often a piece of a word, joined to the next) and the log P of its whole prefix so far. " +
        `A column holds a step's ${2 * data.beam_size} best extensions, best first: the ${data.beam_size} best that go on are kept (solid), ` +
        "the others pruned (dashed, faded); green with ✓: finished, with its score log P / lp. Filled: the winner's path. " +
        `The top row is greedy decoding. ${data.steps.length > 8 ? "Scroll sideways for every step." : ""}`;
      return p;
    }

    function draw() {
      const scroll = root.querySelector(".beam-scroll")?.scrollLeft ?? null;
      root.replaceChildren(summary(), key());
      root.style.color = "inherit";
      const wrap = node("div", { class: "beam-scroll", style: "overflow-x: auto; max-width: 100%" }, root, null);
      wrap.appendChild(tree());
      root.appendChild(details());
      // first drawn with the parting in sight (a column before it at the left edge)
      if (scroll !== null) wrap.scrollLeft = scroll;
      else if (parts > 0) wrap.scrollLeft = xs[parts - 1] - 8;
    }
    draw();
  };
})();
