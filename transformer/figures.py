# Generated from book/intro.md by tools/export.py: edit the chapter.
"""The paper's figures drawn from a configuration: Figure 1, the model's architecture.

The model, data and training modules never import matplotlib: this module, and
attention_maps for Figures 3 to 5, import it when they draw.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from transformer.model import TransformerConfig


_FIGURE_COLOURS = {
    "attention": "#f6d7a7",
    "ffn": "#b9e0f2",
    "norm": "#f1f1c8",
    "embed": "#f3c4c4",
    "out": "#d3d3f0",
}


def _box(ax, drawn: list, x: float, y: float, label: str, kind: str, w=3.9, hgt=0.62):
    """A rounded box centred at (x, y), recorded in `drawn` as (label, x, y)."""
    from matplotlib.patches import FancyBboxPatch

    patch = FancyBboxPatch((x - w / 2, y - hgt / 2), w, hgt, boxstyle="round,pad=0.04")
    patch.set(fc=_FIGURE_COLOURS[kind], ec="black", lw=0.8)
    ax.add_patch(patch)
    ax.text(x, y, label, ha="center", va="center", fontsize=8.5, color="black")
    drawn.append((label, x, y))


def _arrow(ax, x0: float, y0: float, x1: float, y1: float) -> None:
    ax.annotate(
        "", (x1, y1), (x0, y0), arrowprops=dict(arrowstyle="->", lw=0.9, color="black")
    )


def _stack(ax, drawn: list, x: float, parts, y0: float, n_layers: int, left: bool):
    """One layer of a stack, each sub-layer with its Add & Norm and residual; returns
    ys."""
    from matplotlib.patches import FancyBboxPatch

    ys, y = [], y0
    for label, kind in parts:
        _box(ax, drawn, x, y, label, kind)
        ys.append(y)
        y += 0.8
        _box(ax, drawn, x, y, "Add & Norm", "norm", hgt=0.45)
        side = x - 2.08  # the residual connection around the sub-layer
        ax.plot([x, side, side], [ys[-1] - 0.4, ys[-1] - 0.4, y], color="black", lw=0.7)
        _arrow(ax, side, y, x - 1.95, y)
        ys.append(y)
        y += 0.8
    frame = FancyBboxPatch(
        (x - 2.25, y0 - 0.55), 4.5, y - y0 + 0.15, boxstyle="round,pad=0.05"
    )
    frame.set(fc="none", ec="grey", lw=1.2)
    ax.add_patch(frame)
    ax.text(
        x + (-2.45 if left else 2.45),
        (y0 + y) / 2 - 0.4,
        f"N = {n_layers} x",
        ha="right" if left else "left",
        va="center",
        fontsize=9,
    )
    for a, b in zip(ys, ys[1:]):
        _arrow(ax, x, a + 0.3, x, b - 0.25)
    return ys


def draw_architecture(
    config: TransformerConfig, ax=None
) -> list[tuple[str, float, float]]:
    """The paper's Figure 1 for `config` (needs matplotlib), drawn bottom-up with the
    configuration's sizes on `ax` (default: the current axes); returns [(label, x, y)].
    """
    import matplotlib.pyplot as plt  # optional: only the drawing needs it

    ax = ax if ax is not None else plt.gca()
    d, h, d_ff, drawn = config.d_model, config.n_heads, config.d_ff, []
    d_k = config.d_k or d // h
    sides = [(2.5, "Inputs", config.src_vocab_size),
             (8.5, "Outputs (shifted right)", config.tgt_vocab_size)]
    for x, side, vocab in sides:
        ax.text(x, -0.2, side, ha="center", fontsize=9)
        embedding = f"Embedding {vocab:,} x {d}\nscaled by sqrt({d})"
        _box(ax, drawn, x, 0.6, embedding, "embed")
        ax.text(x + 0.15, 1.5, "+ positional encoding", va="center", fontsize=9)
        _arrow(ax, x, 0.0, x, 0.3)
        _arrow(ax, x, 0.92, x, 2.05)
    heads = f"h = {h}, d_k = {d_k}"
    feed_forward = (f"Feed forward {d} -> {d_ff} -> {d}", "ffn")
    encoder = [(f"Multi-head self-attention\n{heads}", "attention"), feed_forward]
    enc = _stack(ax, drawn, 2.5, encoder, 2.4, config.n_layers, left=True)
    decoder = [
        (f"Masked multi-head self-attention\n{heads}", "attention"),
        ("Multi-head attention\nover the encoder's output", "attention"),
        feed_forward,
    ]
    dec = _stack(ax, drawn, 8.5, decoder, 2.4, config.n_layers, left=False)
    top = dec[-1] + 1.1
    tied = " (tied)" if config.tie_output else ""
    _box(ax, drawn, 8.5, top, f"Linear {d} -> {config.tgt_vocab_size:,}{tied}", "out")
    _box(ax, drawn, 8.5, top + 0.8, "Softmax", "out", hgt=0.45)
    ax.text(8.5, top + 1.5, "Output probabilities", ha="center", fontsize=9)
    for y0, y1 in [
        (dec[-1] + 0.25, top - 0.3),
        (top + 0.3, top + 0.57),
        (top + 1.02, top + 1.4),
    ]:
        _arrow(ax, 8.5, y0, 8.5, y1)
    route = enc[-1] + 0.9  # the encoder's output, to every decoder layer
    ax.plot(
        [2.5, 2.5, 5.5, 5.5],
        [enc[-1] + 0.25, route, route, dec[2]],
        color="black",
        lw=0.9,
    )
    _arrow(ax, 5.5, dec[2], 6.55, dec[2])
    ax.text(4.0, route + 0.2, "keys and values", fontsize=9, ha="center")
    ax.set_xlim(-1.2, 12.2)
    ax.set_ylim(-0.5, top + 1.9)
    ax.axis("off")
    return drawn


__all__ = [
    'draw_architecture',
]
