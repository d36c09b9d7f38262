// The attention explorer: every head of every layer of a Transformer's three kinds of
// attention, on one sentence, as a heat map (a row per query, a column per key, as the
// book's maps) or as the paper's Figures 3-5 draw it (a line from each query to each key,
// its opacity the weight); below, every head of the layer at a glance. Plain SVG, no
// framework: attention_maps.explore renders it in a notebook, with PyTorch's weights.
//
// data: {heads: h, kinds: [{name, queries: [token], keys: [token],
//                          layers: [[h][queries][keys] weights]}]}
(function () {
  const SVG = "http://www.w3.org/2000/svg";
  const COLOUR = "#2171b5"; // matplotlib's Blues at 0.7: seen on light and dark pages
  const CELL = 22, LABEL = 7.5, FONT = 12; // px: a heat-map cell, a label's character, its font
  const WIDEST = 400; // px: the main view is drawn at least this wide, labels scaled with it

  function node(name, attrs, parent, ns = SVG) {
    const e = ns ? document.createElementNS(ns, name) : document.createElement(name);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
    if (parent) parent.appendChild(e);
    return e;
  }

  // one head's (queries x keys) weights, or the mean of the layer's heads
  function weightsOf(kind, layer, head) {
    const heads = kind.layers[layer];
    if (head !== "mean") return heads[head];
    return heads[0].map((row, q) =>
      row.map((_, k) => heads.reduce((sum, w) => sum + w[q][k], 0) / heads.length));
  }

  function text(svg, x, y, label, attrs = {}) {
    const t = node("text", { x, y, fill: "currentColor", "font-size": FONT, ...attrs }, svg);
    t.textContent = label;
    return t;
  }

  // a heat map; labels (and the hover) only where `state` is given (the main view)
  function heatMap(w, kind, state, cell) {
    const left = state ? Math.max(...kind.queries.map((t) => t.length)) * LABEL + 6 : 0;
    const top = state ? Math.max(...kind.keys.map((t) => t.length)) * LABEL + 6 : 0;
    const width = left + cell * kind.keys.length, height = top + cell * kind.queries.length;
    const scale = state ? Math.max(1, WIDEST / width) : 1; // a short sentence's map, scaled up
    const svg = node("svg", { width: Math.round(width * scale), height: Math.round(height * scale),
                              viewBox: `0 0 ${width} ${height}`, role: "img", class: "explorer-heat" });
    w.forEach((row, q) => row.forEach((weight, k) => {
      const dim = state && state.hover !== null && state.hover !== q;
      node("rect", { x: left + k * cell, y: top + q * cell, width: cell, height: cell,
                     fill: COLOUR, "fill-opacity": dim ? weight * 0.25 : weight,
                     "data-query": q, "data-key": k, "data-weight": weight }, svg);
    }));
    node("rect", { x: left, y: top, width: width - left, height: height - top, fill: "none",
                   stroke: "currentColor", "stroke-opacity": 0.3 }, svg);
    if (!state) return svg;
    kind.keys.forEach((t, k) => text(svg, left + k * cell + cell * 0.7, top - 4, t,
      { transform: `rotate(-90 ${left + k * cell + cell * 0.7} ${top - 4})` }));
    kind.queries.forEach((t, q) => {
      const label = text(svg, left - 4, top + q * cell + cell * 0.7, t,
        { "text-anchor": "end", "data-query": q, style: "cursor: default" });
      label.addEventListener("mouseenter", () => state.set({ hover: q }));
      label.addEventListener("mouseleave", () => state.set({ hover: null }));
    });
    return svg;
  }

  // the paper's drawing: queries in the left column, keys in the right, one line each
  function lineView(w, kind, state) {
    const widest = (tokens) => Math.max(...tokens.map((t) => t.length)) * LABEL;
    const left = widest(kind.queries) + 8, gap = 200, row = 24;
    const width = left + gap + widest(kind.keys) + 8;
    const height = row * Math.max(kind.queries.length, kind.keys.length) + 4;
    const svg = node("svg", { width, height, viewBox: `0 0 ${width} ${height}`,
                              role: "img", class: "explorer-lines" });
    w.forEach((weights, q) => weights.forEach((weight, k) => {
      const dim = state.hover !== null && state.hover !== q;
      node("line", { x1: left, y1: q * row + row / 2, x2: left + gap, y2: k * row + row / 2,
                     stroke: COLOUR, "stroke-width": 2.5,
                     "stroke-opacity": dim ? weight * 0.1 : weight,
                     "data-query": q, "data-key": k, "data-weight": weight }, svg);
    }));
    kind.queries.forEach((t, q) => {
      const label = text(svg, left - 4, q * row + row / 2 + 4, t,
        { "text-anchor": "end", "data-query": q });
      label.addEventListener("mouseenter", () => state.set({ hover: q }));
      label.addEventListener("mouseleave", () => state.set({ hover: null }));
    });
    kind.keys.forEach((t, k) => text(svg, left + gap + 4, k * row + row / 2 + 4, t));
    return svg;
  }

  function select(label, options, value, onChange, parent) {
    const wrap = node("label", { style: "margin-right: 1em; white-space: nowrap" }, parent,
                      null);
    wrap.append(label + " ");
    const s = node("select", { "data-control": label }, wrap, null);
    options.forEach(([v, name]) => {
      const o = node("option", { value: v }, s, null);
      o.textContent = name;
      o.selected = String(v) === String(value);
    });
    s.addEventListener("change", () => onChange(s.value));
  }

  window.renderAttentionExplorer = function (root, data) {
    const range = (n) => [...Array(n).keys()];
    const state = { kind: 0, layer: 0, head: 0, view: "heat map", hover: null };
    state.set = (change) => { Object.assign(state, change); draw(); };
    function draw() {
      root.replaceChildren();
      root.style.color = "inherit";
      const kind = data.kinds[state.kind];
      const controls = node("div", { style: "margin-bottom: 0.5em" }, root, null);
      select("attention", data.kinds.map((k, i) => [i, k.name]), state.kind,
        (v) => state.set({ kind: +v, hover: null }), controls);
      // layers and heads counted from 1, as the book's figures count them
      select("layer", range(kind.layers.length).map((i) => [i + 1, i + 1]), state.layer + 1,
        (v) => state.set({ layer: v - 1 }), controls);
      select("head", [...range(data.heads).map((i) => [i + 1, i + 1]), ["mean", "mean"]],
        state.head === "mean" ? "mean" : state.head + 1,
        (v) => state.set({ head: v === "mean" ? v : v - 1 }), controls);
      select("view", [["heat map", "heat map"], ["lines", "lines (Figures 3-5)"]],
        state.view, (v) => state.set({ view: v }), controls);
      const w = weightsOf(kind, state.layer, state.head);
      const main = node("div", { class: "explorer-main", style: "overflow-x: auto" }, root,
                        null);
      main.appendChild(state.view === "lines" ? lineView(w, kind, state)
                                               : heatMap(w, kind, state, CELL));
      const small = node("div", { class: "explorer-heads", style:
        "display: flex; flex-wrap: wrap; gap: 8px; margin-top: 0.5em" }, root, null);
      range(data.heads).forEach((head) => {
        const figure = node("div", { "data-head": head, style: "cursor: pointer; " +
          `outline: ${head === state.head ? "2px solid " + COLOUR : "none"}` }, small, null);
        figure.appendChild(heatMap(weightsOf(kind, state.layer, head), kind, null, 7));
        node("div", { style: "font-size: 12px; text-align: center" }, figure, null)
          .textContent = `head ${head + 1}`;
        figure.addEventListener("click", () => state.set({ head }));
      });
    }
    draw();
  };
})();
