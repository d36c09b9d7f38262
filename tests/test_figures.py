"""Tests of transformer/figures.py (book/intro.md)."""

import ast
from pathlib import Path

import pytest

import transformer
from transformer import TransformerConfig


def test_only_the_drawing_modules_import_matplotlib():
    """The model, data, training and deployment modules hold no drawing code: no import of
    matplotlib anywhere in them, not even inside a function; figures and attention_maps
    draw."""
    drawing = {"figures.py", "attention_maps.py"}
    importers = set()
    for path in Path(transformer.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            if any(name.split(".")[0] == "matplotlib" for name in names):
                importers.add(path.name)
    assert importers == drawing


def test_draw_architecture_labels_the_boxes_with_the_configuration():
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from transformer.figures import draw_architecture

    config = TransformerConfig(src_vocab_size=500, tgt_vocab_size=500, d_model=96, n_heads=3, d_ff=200, n_layers=5)
    fig, ax = plt.subplots()
    labels = [label for label, _, _ in draw_architecture(config, ax)]
    texts = {t.get_text() for t in ax.texts}
    plt.close(fig)
    # Figure 1 of the paper: 2 sub-layers per encoder layer, 3 per decoder layer, each with Add & Norm
    assert labels.count("Add & Norm") == 5
    assert labels.count("Feed forward 96 -> 200 -> 96") == 2
    assert "Multi-head self-attention\nh = 3, d_k = 32" in labels
    assert "Masked multi-head self-attention\nh = 3, d_k = 32" in labels
    assert "Linear 96 -> 500 (tied)" in labels
    assert {"N = 5 x", "Inputs", "Outputs (shifted right)"} <= texts
