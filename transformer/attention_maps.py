# Generated from book/attention_maps.md by tools/export.py: edit the chapter.
"""Attention weights of a trained model, and heat maps of them (the paper's Figures
3-5)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

import torch
import torch.nn.functional as F
from tokenizers import Tokenizer
from torch import Tensor

from transformer.decoding import (
    DECODING,
    BeamTrace,
    beam_search,
    encode_sources,
    greedy_decode,
    length_penalty,
    next_token_log_probs,
    script_view,
)
from transformer.model import Transformer
from transformer.tokenizer import BOS, EOS


@torch.no_grad()
def attention_weights(
    model: Transformer, src: Tensor, tgt: Tensor, check_ids: bool = True
) -> dict[str, Tensor]:
    """Every attention layer's weights for src (batch, n) and decoder input tgt (batch,
    m).

    Keys "encoder.I.self" (batch, h, n, n), "decoder.I.self" (batch, h, m, m) and
    "decoder.I.cross" (batch, h, m, n) for each layer I; computed in eval mode.
    check_ids: see Transformer.forward (off where a graph is traced).
    """
    names = {}
    for i, layer in enumerate(model.encoder.layers):
        names[layer.self_attn] = f"encoder.{i}.self"
    for i, layer in enumerate(model.decoder.layers):
        names[layer.self_attn] = f"decoder.{i}.self"
        names[layer.cross_attn] = f"decoder.{i}.cross"
    weights: dict[str, Tensor] = {}
    handles = []
    # each hook holds its name: a traced graph calls it with a copy of the module
    for module, name in names.items():
        handles.append(
            module.register_forward_pre_hook(
                lambda _, args, kwargs: (args, {**kwargs, "need_weights": True}),
                with_kwargs=True,
            )
        )
        handles.append(
            module.register_forward_hook(
                lambda _, __, output, name=name: weights.__setitem__(name, output[1])
            )
        )
    was_training = model.training
    model.eval()
    try:
        model(src, tgt, check_ids=check_ids)
    finally:
        for handle in handles:
            handle.remove()
        model.train(was_training)
    return weights


def plot_attention(
    weights: Tensor,
    queries: Sequence[str],
    keys: Sequence[str],
    ax=None,
    title: str | None = None,
):
    """Heat map of one head's weights (n_queries, n_keys): a row per query, labelled on
    the left, a column per key, labelled below. Returns the matplotlib axes (its image,
    for a colorbar, is ax.images[0])."""
    import matplotlib.pyplot as plt  # optional: only this function needs it

    if weights.shape != (len(queries), len(keys)):
        raise ValueError(
            f"weights must have shape (queries, keys) = ({len(queries)}, {len(keys)}); "
            f"got {tuple(weights.shape)}"
        )
    ax = ax if ax is not None else plt.gca()
    ax.imshow(weights.float().cpu().numpy(), cmap="Blues", vmin=0, vmax=1)
    ax.set_xticks(range(len(keys)), keys, rotation=90)
    ax.set_yticks(range(len(queries)), queries)
    ax.set_xlabel("key", fontsize=8)
    ax.set_ylabel("query", fontsize=8)
    if title:
        ax.set_title(title, fontsize=9)
    return ax


class AttentionExplorer:
    """Every head of every layer of the three kinds of attention on one sentence, shown
    in a notebook (or any page) by explorer.js. weights: attention_weights's dict for
    one sentence; source: its tokens; output: the tokens each decoder query predicts."""

    def __init__(
        self, weights: dict[str, Tensor], source: Sequence[str], output: Sequence[str]
    ):
        decoder_inputs = ["<bos>", *output[:-1]]  # the tokens the decoder reads
        kinds = {"encoder self-attention": ("encoder.{}.self", source, source),
                 "decoder self-attention": ("decoder.{}.self", output, decoder_inputs),
                 "encoder-decoder attention": ("decoder.{}.cross", output, source)}
        self.data: dict = {"heads": None, "kinds": []}
        for name, (key, queries, keys) in kinds.items():
            layers = []
            while key.format(len(layers)) in weights:
                w = torch.as_tensor(weights[key.format(len(layers))])  # or NumPy's
                w = w[0] if w.dim() == 4 and w.size(0) == 1 else w  # a batch of one
                heads = self.data["heads"] or w.size(0)
                if tuple(w.shape) != (heads, len(queries), len(keys)):
                    raise ValueError(
                        f"{key.format(len(layers))} must have shape (heads, queries, "
                        f"keys) = ({heads}, {len(queries)}, {len(keys)}); got "
                        f"{tuple(w.shape)}")
                self.data["heads"] = heads
                layers.append((w.double() * 1e4).round().div(1e4).tolist())
            if not layers:
                raise ValueError(f"weights has no {key.format(0)!r}: expected "
                                 "attention_weights's dict")
            self.data["kinds"].append({"name": name, "queries": list(queries),
                                       "keys": list(keys), "layers": layers})

    def _repr_html_(self) -> str:
        return script_view("explorer.js", "renderAttentionExplorer", self.data,
                           "attention-explorer")


def one_sentence(
    model: Transformer, tokenizer: Tokenizer, sentence: str
) -> tuple[list[int], Tensor]:
    """`sentence`'s source ids (ending in <eos>) and their batch of one on the model's
    device; `sentence` must be one string."""
    if not isinstance(sentence, str):
        raise TypeError(f"sentence must be one string; got {type(sentence).__name__}")
    ids = encode_sources(tokenizer, [sentence], model.config.max_len)[0]
    return ids, torch.tensor([ids], device=next(model.parameters()).device)


@contextlib.contextmanager
def in_eval_mode(model: Transformer) -> Iterator[Transformer]:
    """The model in eval mode (no dropout) for the block, then in the mode it had."""
    was_training = model.training
    model.eval()
    try:
        yield model
    finally:
        model.train(was_training)


@torch.no_grad()
def explore(
    model: Transformer, tokenizer: Tokenizer, sentence: str, beam_size: int = 1
) -> AttentionExplorer:
    """The attention explorer of `model` translating `sentence` (one string)."""
    ids, src = one_sentence(model, tokenizer, sentence)
    with in_eval_mode(model):
        if beam_size == 1:
            out = greedy_decode(model, src)[0].tolist()
        else:
            out = beam_search(model, src, beam_size).tokens[0, 0].tolist()
    out = out[: out.index(EOS) + 1] if EOS in out else out
    tgt = torch.tensor([[BOS, *out[:-1]]], device=src.device)  # what the decoder reads
    token = tokenizer.id_to_token
    return AttentionExplorer(attention_weights(model, src, tgt),
                             [token(i) for i in ids], [token(i) for i in out])


@torch.no_grad()
def trace_search(
    model: Transformer, tokenizer: Tokenizer, sentence: str,
    beam_size: int = DECODING.beam_size, alpha: float = DECODING.alpha,
) -> BeamTrace:
    """The beam search of `sentence` (one string), traced; shown in a notebook."""
    ids, src = one_sentence(model, tokenizer, sentence)
    device, trace = src.device, BeamTrace(ids, beam_size, alpha, tokenizer.id_to_token)
    with in_eval_mode(model):
        beam_search(model, src, beam_size, alpha, trace=trace)
        greedy = greedy_decode(model, src)[0].tolist()
        trace.greedy = greedy[: greedy.index(EOS) + 1] if EOS in greedy else greedy
        out = torch.tensor([trace.greedy], device=device)
        reads = F.pad(out[:, :-1], (1, 0), value=BOS)  # greedy's output, shifted
        log_p = next_token_log_probs(model(src, reads)[0])
        trace.greedy_score = float(log_p.gather(1, out.T).sum()
                                   / length_penalty(len(trace.greedy), alpha))
        cross = f"decoder.{len(model.decoder.layers) - 1}.cross"
        for step in trace.steps:
            tgt = torch.tensor([[BOS, *prefix] for prefix in step.prefixes],
                               device=device)
            weights = attention_weights(model, src.expand(len(tgt), -1), tgt)[cross]
            step.attention = weights[:, :, -1].tolist()
    return trace


__all__ = [
    'attention_weights',
    'plot_attention',
    'AttentionExplorer',
    'one_sentence',
    'in_eval_mode',
    'explore',
    'trace_search',
]
