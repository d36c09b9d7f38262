# Generated from book/deploy.md by tools/export.py: edit the chapter.
"""The trained model outside Python: the encoder and one cached decoding step as ONNX
graphs (export_onnx), and translation with them through onnxruntime
(OnnxTranslator)."""

from __future__ import annotations

import copy
import json
import logging
import os
import shutil
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from tokenizers import Tokenizer
from torch import Tensor, nn

from transformer.attention import KeyValueCache, padding_mask
from transformer.attention_maps import attention_weights
from transformer.decoding import (
    DECODING,
    BeamTrace,
    encode_sources,
    length_penalty,
    next_token_log_probs,
)
from transformer.files import building_folder
from transformer.model import Transformer
from transformer.tokenizer import BOS, EOS, PAD, lowercases
from transformer.utils import __version__


class EncoderGraph(nn.Module):
    """src (batch, n) -> memory (batch, n, d_model) and, for each decoder layer, the
    keys and values of its encoder-decoder attention (batch, h, n, d_k): what every
    decoding step attends to, computed once."""

    def __init__(self, model: Transformer):
        super().__init__()
        self.model = model

    def forward(self, src: Tensor) -> tuple[Tensor, ...]:
        memory = self.model.encode(src, check_ids=False)
        projected = []
        for layer in self.model.decoder.layers:
            cache = KeyValueCache(static=True)  # a static cache fills on its first call
            layer.cross_attn(memory[:, :1], memory, memory, cache=cache)
            projected += [cache.key, cache.value]
        return (memory, *projected)


class StepGraph(nn.Module):
    """One decoding step with its caches as tensors.

    Inputs: the newest token of each row (batch, 1); the source ids (batch, n), for
    their padding mask; memory; `rows`, the past row each row continues; then each
    layer's self-attention keys and values so far (batch, h, t, d_k), then its
    encoder-decoder keys and values. Outputs: log-probabilities of the next token
    (batch, vocab), the last layer's encoder-decoder attention weights of this step
    (batch, h, n), and the self-attention keys and values one step longer.
    """

    def __init__(self, model: Transformer):
        super().__init__()
        self.model, self.n_layers = model, len(model.decoder.layers)

    def forward(
        self, tokens: Tensor, src: Tensor, memory: Tensor, rows: Tensor, *caches: Tensor
    ) -> tuple[Tensor, ...]:
        past, cross = caches[: 2 * self.n_layers], caches[2 * self.n_layers :]
        cache = [
            (
                KeyValueCache(key=past[i].index_select(0, rows),
                              value=past[i + 1].index_select(0, rows)),
                KeyValueCache(static=True, key=cross[i], value=cross[i + 1]),
            )
            for i in range(0, 2 * self.n_layers, 2)
        ]
        mask = padding_mask(src, self.model.config.pad_id)
        last, weights = self.model.decoder.layers[-1].cross_attn, []
        hooks = [  # the attention weights of the last layer, as attention_weights does
            last.register_forward_pre_hook(
                lambda _, args, kwargs: (args, {**kwargs, "need_weights": True}),
                with_kwargs=True),
            last.register_forward_hook(lambda _, __, out: weights.append(out[1])),
        ]
        try:
            logits = self.model.decode(tokens, memory, mask, cache, check_ids=False)
        finally:
            for hook in hooks:
                hook.remove()
        present = [t for own, _ in cache for t in (own.key, own.value)]
        return (next_token_log_probs(logits[:, -1]), weights[0][:, :, -1], *present)


class MapsGraph(nn.Module):
    """src (batch, n) and the decoder's input tgt (batch, m) -> every attention weight,
    stacked by kind: encoder self-attention (batch, layers, h, n, n), decoder self-
    attention (batch, layers, h, m, m), encoder-decoder (batch, layers, h, m, n)."""

    def __init__(self, model: Transformer):
        super().__init__()
        self.model = model

    def forward(self, src: Tensor, tgt: Tensor) -> tuple[Tensor, ...]:
        weights = attention_weights(self.model, src, tgt, check_ids=False)
        kinds = [("encoder.{}.self", self.model.encoder),
                 ("decoder.{}.self", self.model.decoder),
                 ("decoder.{}.cross", self.model.decoder)]
        return tuple(
            torch.stack([weights[key.format(i)] for i in range(len(stack.layers))], 1)
            for key, stack in kinds)


def _graph_names(n_layers: int) -> dict[str, list[str]]:
    """Input and output names of the graphs."""
    def per_layer(kind: str) -> list[str]:
        parts = ("key", "value")
        return [f"{kind}_{part}_{i}" for i in range(n_layers) for part in parts]

    return {
        "encoder_inputs": ["src"],
        "encoder_outputs": ["memory", *per_layer("cross")],
        "step_inputs": ["tokens", "src", "memory", "rows", *per_layer("past"),
                        *per_layer("cross")],
        "step_outputs": ["log_probs", "attention", *per_layer("present")],
        "maps_inputs": ["src", "tgt"],
        "maps_outputs": ["encoder_self", "decoder_self", "cross"],
    }


def _check_dynamic(path: Path, dynamic: dict[str, list[int]]) -> None:
    """Refuse a graph whose input lost a dynamic size (fixed to the example's)."""
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph
    for value in graph.input:
        dims = value.type.tensor_type.shape.dim
        axes = dynamic.get(value.name, [])
        fixed = [axis for axis in axes if not dims[axis].dim_param]
        if fixed:
            raise RuntimeError(
                f"{path.name}: input {value.name} has fixed size(s) at axes {fixed} "
                "that must stay dynamic; the exporter specialized them"
            )


def _export(module, args, path, input_names, output_names, dynamic_shapes) -> None:
    """One graph, its weights inside the file; the exporter's notes on torch internals
    (operators of torchvision, which it looks for; its own deprecations) silenced."""
    registration = logging.getLogger("torch.onnx._internal.exporter._registration")
    level = registration.level
    try:
        registration.setLevel(logging.ERROR)
        with warnings.catch_warnings():
            for message in (".*isinstance.treespec, LeafSpec", ".*The axis name: "):
                warnings.filterwarnings("ignore", message=message)
            torch.onnx.export(module.eval(), args, str(path), dynamo=True,
                              opset_version=20, input_names=input_names,
                              output_names=output_names, dynamic_shapes=dynamic_shapes,
                              external_data=False, verbose=False)
    finally:
        registration.setLevel(level)
    flat = [*dynamic_shapes[:-1], *dynamic_shapes[-1]] if len(args) > len(
        dynamic_shapes) else dynamic_shapes  # the step's caches: one tuple of *caches
    _check_dynamic(path, {name: list(axes) for name, axes in zip(input_names, flat)})


def int8_weights(w: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray]:
    """int8 integers q and float32 scales s with w ≈ q * s: a scale per slice of `w`
    along `axis` (the axis the maximum runs over), its largest |w| mapped to 127."""
    scale = np.abs(w).max(axis=axis, keepdims=True) / 127
    scale[scale == 0] = 1  # an all-zero slice
    return np.round(w / scale).astype(np.int8), scale.astype(np.float32)


def quantize_int8(path: Path) -> None:
    """Replace the ONNX graph at `path` by one that stores each float32 matrix that
    MatMul multiplies by (a scale per output column) or Gather reads (one per row) as
    int8, rebuilt in float32 as the graph loads (see int8_weights)."""
    import onnx
    import onnxruntime
    from onnx import TensorProto, helper, numpy_helper

    folded = path.with_name(f"{path.stem}.folded.onnx")
    options = onnxruntime.SessionOptions()
    level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_BASIC  # standard operators
    options.graph_optimization_level = level
    options.optimized_model_filepath = str(folded)
    try:
        onnxruntime.InferenceSession(str(path), options,
                                     providers=["CPUExecutionProvider"])
        proto = onnx.load(str(folded))
    finally:
        folded.unlink(missing_ok=True)
    graph, uses = proto.graph, {}
    for node in graph.node:
        for index, name in enumerate(node.input):
            uses.setdefault(name, set()).add((node.op_type, index))
    axes = {frozenset({("MatMul", 1)}): 0, frozenset({("Gather", 0)}): 1}
    rebuild = []
    for weight in list(graph.initializer):
        w, name = numpy_helper.to_array(weight), weight.name
        axis = axes.get(frozenset(uses.get(name, ())))
        if axis is None or w.ndim != 2 or w.dtype != np.float32:
            continue
        q, scale = int8_weights(w, axis)
        graph.initializer.remove(weight)
        graph.initializer.extend([numpy_helper.from_array(q, f"{name}.int8"),
                                  numpy_helper.from_array(scale, f"{name}.scale")])
        rebuild += [helper.make_node("Cast", [f"{name}.int8"], [f"{name}.float"],
                                     to=TensorProto.FLOAT),
                    helper.make_node("Mul", [f"{name}.float", f"{name}.scale"], [name])]
    nodes = [*rebuild, *graph.node]
    del graph.node[:]
    graph.node.extend(nodes)
    onnx.save(proto, str(path))


def export_onnx(
    model: Transformer, tokenizer: Tokenizer, out: str | Path,
    about: dict | None = None, overwrite: bool = False, int8: bool = False,
) -> dict:
    """Write out/encoder.onnx, out/step.onnx, out/maps.onnx, out/tokenizer.json and
    out/model.json (what a runtime needs; `about`: where the model came from). Returns
    model.json's content. overwrite: replace an existing `out`; int8: weights as int8
    (see quantize_int8)."""
    out = Path(out)
    if out.exists() and not overwrite:
        raise FileExistsError(f"{out} exists; pass overwrite=True (--overwrite) to "
                              "replace it")
    model = copy.deepcopy(model).float().cpu().eval()  # the hooks go on a copy
    config, n_layers = model.config, len(model.decoder.layers)
    attention = model.decoder.layers[0].self_attn
    d_k, d_v = attention.d_k, attention.d_v
    names = _graph_names(n_layers)
    # the lengths' bounds are the positions' (max_len): an exporter that had to find
    # them would trace every graph twice
    Dim, longest = torch.export.Dim, config.max_len
    batch, n, m = Dim("batch"), Dim("n", max=longest), Dim("m", max=longest)
    past = Dim("past", max=longest - 1)  # the step's own position is the last
    src = torch.full((2, 6), min(4, config.src_vocab_size - 1))
    src[1, 4:] = PAD
    # traced without autograd: the graphs are for inference, and tracing is faster
    with building_folder(out) as holding, torch.no_grad():
        encoder = EncoderGraph(model)
        memory, *cross = encoder(src)
        _export(encoder, (src,), holding / "encoder.onnx", names["encoder_inputs"],
                names["encoder_outputs"], ({0: batch, 1: n},))
        caches = [torch.zeros(2, config.n_heads, 3, d) for d in (d_k, d_v) * n_layers]
        # the newest tokens as a tensor of their own: a view of src (src[:, :1]) makes
        # torch.export guard on its base, which the graph does not have (a 1-layer model
        # failed to export)
        step_args = (src[:, :1].clone(), src, memory, torch.arange(2), *caches, *cross)
        cache_shapes = ({0: batch, 2: past},) * len(caches) + ({0: batch, 2: n},) * len(
            cross)  # *caches: one tuple
        shapes = ({0: batch}, {0: batch, 1: n}, {0: batch, 1: n}, {0: batch},
                  cache_shapes)
        _export(StepGraph(model), step_args, holding / "step.onnx",
                names["step_inputs"], names["step_outputs"], shapes)
        tgt = torch.full((2, 5), min(4, config.tgt_vocab_size - 1))
        _export(MapsGraph(model), (src, tgt), holding / "maps.onnx",
                names["maps_inputs"], names["maps_outputs"],
                ({0: batch, 1: n}, {0: batch, 1: m}))
        for graph in ("encoder", "step", "maps") if int8 else ():
            quantize_int8(holding / f"{graph}.onnx")
        (holding / "tokenizer.json").write_text(tokenizer.to_str())
        meta = {
            "format": "transformer-onnx-1", "package_version": __version__,
            "pad_id": PAD, "bos_id": BOS, "eos_id": EOS,
            "max_len": config.max_len, "n_layers": n_layers, "n_heads": config.n_heads,
            "d_k": d_k, "d_v": d_v, "vocab_size": config.tgt_vocab_size,
            "lowercase": lowercases(tokenizer), "extra_len": DECODING.extra_len,
            "beam_size": DECODING.beam_size, "alpha": DECODING.alpha,
            "weights": "int8" if int8 else "float32", **names,
            "about": about or {},
        }
        (holding / "model.json").write_text(json.dumps(meta, indent=1) + "\n")
    return meta


def quantize_export(
    folder: str | Path, out: str | Path, overwrite: bool = False
) -> dict:
    """Write to `out` the export in `folder` (export_onnx's, float32) with int8 weights,
    as export_onnx(..., int8=True) would, without tracing the model again. Returns the
    new model.json's content."""
    folder, out = Path(folder), Path(out)
    meta_file = folder / "model.json"
    if not meta_file.is_file():
        raise FileNotFoundError(f"{folder} holds no model.json: not an exported model")
    meta = json.loads(meta_file.read_text())
    if meta.get("weights") != "float32":
        raise ValueError(f"{folder} holds {meta.get('weights')!r} weights; expected a "
                         "float32 export (export_onnx without int8)")
    if out.exists() and not overwrite:
        raise FileExistsError(f"{out} exists; pass overwrite=True to replace it")
    with building_folder(out) as holding:
        for name in ("encoder", "step", "maps", "tokenizer"):
            suffix = ".json" if name == "tokenizer" else ".onnx"
            shutil.copyfile(folder / f"{name}{suffix}", holding / f"{name}{suffix}")
        for graph in ("encoder", "step", "maps"):
            quantize_int8(holding / f"{graph}.onnx")
        meta["weights"] = "int8"
        (holding / "model.json").write_text(json.dumps(meta, indent=1) + "\n")
    return meta


def onnx_threads(threads: int | None) -> int:
    """onnxruntime's threads within an operator: `threads`, else $OMP_NUM_THREADS where
    it is a number, else 0 (onnxruntime's default: one per physical core)."""
    if threads is None:
        value = os.environ.get("OMP_NUM_THREADS", "")
        return int(value) if value.isdigit() and int(value) > 0 else 0
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads must be a positive integer or None; got {threads!r}")
    return threads


class OnnxModel:
    """An exported model in onnxruntime (no torch): the sessions of export_onnx's
    graphs, model.json (self.meta) and the tokenizer; the steps every search is made
    of (start, decode_step, limit); greedy decoding, the log P of an output, and every
    attention weight (attention_maps). OnnxTranslator adds beam search and its
    trace."""

    def __init__(self, folder: str | Path, threads: int | None = None):
        """threads: onnxruntime's threads within an operator; None: $OMP_NUM_THREADS
        where it is a number (as torch reads it), else onnxruntime's one per core
        (see onnx_threads)."""
        import onnxruntime

        folder = Path(folder)
        meta = folder / "model.json"
        if not meta.is_file():
            raise FileNotFoundError(
                f"{folder} holds no model.json: not an exported model (python -m "
                "transformer export writes one)")
        self.meta = json.loads(meta.read_text())
        if missing := [k for k in DECODING_KEYS if k not in self.meta]:
            raise ValueError(f"{meta} has no {', '.join(missing)} (written by an "
                             "older version): export the model again")
        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = onnx_threads(threads)
        self.encoder, self.step = (
            onnxruntime.InferenceSession(str(folder / f"{name}.onnx"), options,
                                         providers=["CPUExecutionProvider"])
            for name in ("encoder", "step"))
        maps = folder / "maps.onnx"  # not in the folders of older exports
        self.maps = onnxruntime.InferenceSession(
            str(maps), options, providers=["CPUExecutionProvider"]
        ) if maps.is_file() else None

    def limit(self, src: list[int]) -> int:
        """The most output tokens for source ids `src`: its length + extra_len, at most
        max_len."""
        return min(len(src) + self.meta["extra_len"], self.meta["max_len"])

    def start(self, src: list[int], k: int = 1) -> dict[str, np.ndarray | list]:
        """The encoder, run once on source ids `src`, and what k rows of decoding
        steps read: the source (k, n), memory and each layer's encoder-decoder keys and
        values (k rows each), and empty caches (k, h, 0, d_k)."""
        m = self.meta
        source = np.repeat(np.array([src], dtype=np.int64), k, 0)
        encoded = self.encoder.run(None, {"src": source[:1]})
        memory, *cross = (np.repeat(x, k, 0) for x in encoded)
        past = [np.zeros((k, m["n_heads"], 0, d), np.float32)
                for d in (m["d_k"], m["d_v"]) * m["n_layers"]]
        return {"source": source, "memory": memory, "cross": cross, "past": past}

    def decode_step(self, state: dict, tokens: list[int], rows: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray]:
        """One step of the step graph: row i reads token tokens[i] and continues the
        cached row rows[i]. Returns the log-probabilities (rows, vocab) and the
        attention weights (rows, h, n); the state's caches move on."""
        inputs = [np.array([[t] for t in tokens], dtype=np.int64), state["source"],
                  state["memory"], rows, *state["past"], *state["cross"]]
        feeds = dict(zip(self.meta["step_inputs"], inputs))
        log_probs, attention, *state["past"] = self.step.run(None, feeds)
        return log_probs, attention

    def greedy(self, src: list[int]) -> tuple[list[int], np.ndarray]:
        """Output ids of source ids `src` (ending in <eos>), without <bos> and <eos>,
        and the attention weights of each output step (steps, h, n)."""
        state, tokens, weights = self.start(src), [self.meta["bos_id"]], []
        for _ in range(self.limit(src)):
            log_probs, attention = self.decode_step(state, tokens[-1:], ONE_ROW)
            weights.append(attention[0])
            token = int(log_probs[0].argmax())
            if token == self.meta["eos_id"]:
                break
            tokens.append(token)
        return tokens[1:], np.stack(weights)

    def log_prob(self, src: list[int], ids: list[int]) -> np.float32:
        """log P of output ids `ids` (through <eos> if it ends) for source ids `src`."""
        state, total, previous = self.start(src), np.float32(0), self.meta["bos_id"]
        for token in ids:
            log_probs, _ = self.decode_step(state, [previous], ONE_ROW)
            total, previous = total + log_probs[0, token], token
        return total

    def attention_maps(
        self, src: list[int], output: list[int]
    ) -> dict[str, np.ndarray]:
        """Every attention weight of the model reading source ids `src` and,
        teacher-forced, `output` (both ending in <eos>): attention_weights's keys, each
        (h, queries, keys)."""
        if self.maps is None:
            raise FileNotFoundError("this folder has no maps.onnx (exported by an "
                                    "older version): export the model again")
        tgt = [self.meta["bos_id"], *output[:-1]]  # the decoder reads output, shifted
        inputs = {"src": np.array([src], np.int64), "tgt": np.array([tgt], np.int64)}
        encoder, decoder, cross = (w[0] for w in self.maps.run(None, inputs))
        maps = {f"encoder.{i}.self": w for i, w in enumerate(encoder)}
        for i, (own, other) in enumerate(zip(decoder, cross)):
            maps.update({f"decoder.{i}.self": own, f"decoder.{i}.cross": other})
        return maps


DECODING_KEYS = ("beam_size", "alpha", "extra_len")  # model.json's: DECODING's


ONE_ROW = np.zeros(1, np.int64)  # the row a one-row search continues


class OnnxTranslator(OnnxModel):
    """Translation with an exported model: sentences in, sentences out (translate),
    greedy or by beam search (beam), and the search of one sentence traced step by
    step (trace). The search's defaults, beam_size and alpha, are model.json's (export
    writes DECODING's)."""

    def translate(
        self, sentences: Sequence[str], beam_size: int = 1, alpha: float | None = None,
    ) -> list[str]:
        """Translations of `sentences`, in their order: greedy (beam_size=1), or
        beam search (see beam)."""
        encoded = encode_sources(self.tokenizer, sentences, self.meta["max_len"])
        if beam_size == 1:
            return [self.tokenizer.decode(self.greedy(ids)[0]) for ids in encoded]
        return [self.tokenizer.decode(self.beam(ids, beam_size, alpha)[0])
                for ids in encoded]

    def decoding(self, beam_size: int | None, alpha: float | None) -> tuple[int, float]:
        """beam_size and alpha, model.json's where None."""
        return (self.meta["beam_size"] if beam_size is None else beam_size,
                self.meta["alpha"] if alpha is None else alpha)

    def beam(
        self, src: list[int], beam_size: int | None = None, alpha: float | None = None,
        trace: BeamTrace | None = None,
    ) -> tuple[list[int], np.ndarray]:
        """beam_search's best hypothesis for source ids `src`: its ids without <bos> and
        <eos>, and its attention weights (steps, h, n); trace records each step.
        beam_size and alpha: model.json's where None."""
        (k, alpha), m = self.decoding(beam_size, alpha), self.meta
        limit, state = self.limit(src), self.start(src, k)
        alive, history = [[m["bos_id"]]] * k, [[]] * k
        alive_logp = np.array([0.0] + [-np.inf] * (k - 1), np.float32)  # as torch sums
        rows, done = np.arange(k), []  # done: (score, ids, weights, log P), best first
        for t in range(1, limit + 1):
            log_probs, attention = self.decode_step(state, [a[-1] for a in alive], rows)
            candidates = (alive_logp[:, None] + log_probs).ravel()
            top = np.argsort(-candidates, kind="stable")[: 2 * k]
            logp, (row, token) = candidates[top], divmod(top, log_probs.shape[1])
            ended = ((token == m["eos_id"]) | (t >= limit)) & np.isfinite(logp)
            scores = np.where(ended, logp / length_penalty(t, alpha), -np.inf)
            done += [(scores[j], alive[row[j]][1:] + [token[j]],
                      history[row[j]] + [attention[row[j]]], logp[j])
                     for j in np.flatnonzero(ended)]
            done = sorted(done, key=lambda d: -d[0])[:k]  # stable: the earlier on ties
            going = np.where(ended, -np.inf, logp)
            keep = np.argsort(-going, kind="stable")[:k]
            bound = going[keep[0]] / length_penalty(limit, alpha)
            if trace is not None:
                trace.add(t, [a[1:] for a in alive], alive_logp, log_probs, logp, row,
                          token, scores, keep, bound, attention)
            alive_logp = going[keep]
            if t >= limit or (done[0][0] if done else -np.inf) >= bound:
                break
            rows = row[keep]
            alive = [alive[r] + [token[j]] for r, j in zip(rows, keep)]
            history = [history[r] + [attention[r]] for r in rows]
        if trace is not None:
            trace.end([d[1] for d in done], [d[3] for d in done], [d[0] for d in done])
        ids, weights = [int(i) for i in done[0][1]], np.stack(done[0][2])
        return (ids[:-1] if ids[-1] == m["eos_id"] else ids), weights

    def trace(
        self, sentence: str, beam_size: int | None = None, alpha: float | None = None,
    ) -> BeamTrace:
        """beam's trace of `sentence` (one string), greedy's output beside it (beam_size
        and alpha: model.json's where None)."""
        if not isinstance(sentence, str):
            raise TypeError(
                f"sentence must be one string; got {type(sentence).__name__}")
        beam_size, alpha = self.decoding(beam_size, alpha)
        src = encode_sources(self.tokenizer, [sentence], self.meta["max_len"])[0]
        trace = BeamTrace(src, beam_size, alpha, self.tokenizer.id_to_token)
        self.beam(src, beam_size, alpha, trace)
        greedy = self.greedy(src)[0]  # without its <eos>, unless cut at the limit
        trace.greedy = greedy + [self.meta["eos_id"]] * (len(greedy) < self.limit(src))
        penalty = length_penalty(len(trace.greedy), alpha)
        trace.greedy_score = float(self.log_prob(src, trace.greedy) / penalty)
        return trace


__all__ = [
    'EncoderGraph',
    'StepGraph',
    'MapsGraph',
    'int8_weights',
    'quantize_int8',
    'export_onnx',
    'quantize_export',
    'onnx_threads',
    'OnnxModel',
    'OnnxTranslator',
]
