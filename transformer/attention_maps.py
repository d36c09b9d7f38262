# Generated from book/attention_maps.md by tools/export.py: edit the chapter.
"""Attention weights of a trained model, and heat maps of them (the paper's Figures
3-5)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from transformer.model import Transformer


@torch.no_grad()
def attention_weights(
    model: Transformer, src: Tensor, tgt: Tensor
) -> dict[str, Tensor]:
    """Every attention layer's weights for src (batch, n) and decoder input tgt (batch,
    m).

    Keys "encoder.I.self" (batch, h, n, n), "decoder.I.self" (batch, h, m, m) and
    "decoder.I.cross" (batch, h, m, n) for each layer I; computed in eval mode.
    """
    names = {}
    for i, layer in enumerate(model.encoder.layers):
        names[layer.self_attn] = f"encoder.{i}.self"
    for i, layer in enumerate(model.decoder.layers):
        names[layer.self_attn] = f"decoder.{i}.self"
        names[layer.cross_attn] = f"decoder.{i}.cross"
    weights: dict[str, Tensor] = {}
    handles = []
    for module in names:
        handles.append(
            module.register_forward_pre_hook(
                lambda _, args, kwargs: (args, {**kwargs, "need_weights": True}),
                with_kwargs=True,
            )
        )
        handles.append(
            module.register_forward_hook(
                lambda module, _, output: weights.__setitem__(names[module], output[1])
            )
        )
    was_training = model.training
    model.eval()
    try:
        model(src, tgt)
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


__all__ = [
    'attention_weights',
    'plot_attention',
]
