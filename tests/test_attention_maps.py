"""Tests of transformer/attention_maps.py (book/attention_maps.md)."""

import matplotlib

matplotlib.use("Agg")

import json  # noqa: E402

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from transformer import (  # noqa: E402
    Transformer,
    TransformerConfig,
    attention_weights,
    greedy_decode,
    plot_attention,
    train_tokenizer,
    trace_search,
)
from transformer.attention import padding_mask, scaled_dot_product_attention  # noqa: E402
from transformer.tokenizer import BOS, EOS, PAD  # noqa: E402


def _model():
    torch.manual_seed(0)
    return Transformer(TransformerConfig(src_vocab_size=30, tgt_vocab_size=30, d_model=32, n_heads=4, d_ff=64,
                                         n_layers=2, dropout=0.1))


def test_weights_of_every_layer_with_their_shapes_and_the_model_unchanged():
    model = _model().train()
    src, tgt = torch.randint(4, 30, (2, 7)), torch.randint(4, 30, (2, 5))
    src[1, 5:] = PAD
    weights = attention_weights(model, src, tgt)
    assert sorted(weights) == sorted([f"encoder.{i}.self" for i in range(2)] + [f"decoder.{i}.self" for i in range(2)]
                                     + [f"decoder.{i}.cross" for i in range(2)])
    assert weights["encoder.0.self"].shape == (2, 4, 7, 7)
    assert weights["decoder.1.self"].shape == (2, 4, 5, 5)
    assert weights["decoder.1.cross"].shape == (2, 4, 5, 7)
    for w in weights.values():
        torch.testing.assert_close(w.sum(-1), torch.ones(w.shape[:-1]))
    assert torch.all(weights["decoder.0.cross"][1, :, :, 5:] == 0), "padding gets no weight"
    assert torch.all(weights["decoder.0.self"][..., torch.ones(5, 5, dtype=torch.bool).triu(1)] == 0), "causal"
    assert model.training, "the training mode is restored"
    for module in model.modules():
        assert not module._forward_hooks and not module._forward_pre_hooks, "the hooks are removed"
    model.eval()
    torch.testing.assert_close(model(src, tgt), model(src, tgt))


def test_the_first_encoder_layer_weights_are_the_explicit_formula():
    model = _model().eval()
    src = torch.randint(4, 30, (1, 6))
    weights = attention_weights(model, src, torch.randint(4, 30, (1, 3)))
    attention = model.encoder.layers[0].self_attn
    x = model.src_positions(model.src_embed(src))
    if model.config.norm_first:
        x = model.encoder.layers[0].sublayers[0].norm(x)
    split = lambda t: t.view(1, 6, 4, 8).transpose(1, 2)  # noqa: E731
    q, k, v = (x @ w.T + b for w, b in zip(attention.w_qkv.weight.split(32), attention.w_qkv.bias.split(32)))
    _, expected = scaled_dot_product_attention(split(q), split(k), split(v), padding_mask(src, PAD))
    torch.testing.assert_close(weights["encoder.0.self"], expected)


def test_plot_attention_labels_queries_and_keys_and_checks_the_shape():
    fig, ax = plt.subplots()
    plot_attention(torch.full((2, 3), 1 / 3), ["a", "b"], ["x", "y", "z"], ax, "head 1")
    # a row per query, as in the mask figures: the image is the weights themselves
    assert [t.get_text() for t in ax.get_yticklabels()] == ["a", "b"]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["x", "y", "z"]
    assert (ax.get_ylabel(), ax.get_xlabel()) == ("query", "key")
    assert ax.images[0].get_array().shape == (2, 3)
    with pytest.raises(ValueError, match=r"\(queries, keys\) = \(2, 3\)"):
        plot_attention(torch.zeros(3, 2), ["a", "b"], ["x", "y", "z"], ax)
    plt.close(fig)


def _number_tokenizer():
    from transformer import number_corpus
    from transformer.tokenizer import train_tokenizer

    corpus = number_corpus()
    return train_tokenizer((text for pair in corpus.splits["train"] for text in pair), 60)


def test_the_explorer_holds_every_weight_of_the_translation_it_shows():
    from transformer.attention_maps import explore
    from transformer.tokenizer import BOS, EOS
    from transformer.decoding import greedy_decode

    tokenizer = _number_tokenizer()
    torch.manual_seed(0)
    size = tokenizer.get_vocab_size()
    model = Transformer(TransformerConfig(src_vocab_size=size, tgt_vocab_size=size, d_model=32, n_heads=4,
                                          d_ff=64, n_layers=2))
    sentence = "three hundred and forty-seven"
    data = explore(model, tokenizer, sentence).data
    src = tokenizer.encode(sentence, add_special_tokens=False).ids + [EOS]
    out = greedy_decode(model.eval(), torch.tensor([src]))[0].tolist()  # the oracle's decode
    out = out[: out.index(EOS) + 1] if EOS in out else out
    weights = attention_weights(model, torch.tensor([src]), torch.tensor([[BOS, *out[:-1]]]))
    token = tokenizer.id_to_token
    kinds = {kind["name"]: kind for kind in data["kinds"]}
    assert list(kinds) == ["encoder self-attention", "decoder self-attention", "encoder-decoder attention"]
    assert data["heads"] == 4
    assert kinds["encoder self-attention"]["queries"] == [token(i) for i in src]
    assert kinds["encoder-decoder attention"]["queries"] == [token(i) for i in out]
    assert kinds["decoder self-attention"]["keys"] == ["<bos>", *(token(i) for i in out[:-1])]
    for name, key in [("encoder self-attention", "encoder.{}.self"), ("decoder self-attention", "decoder.{}.self"),
                      ("encoder-decoder attention", "decoder.{}.cross")]:
        assert len(kinds[name]["layers"]) == 2
        for layer, shown in enumerate(kinds[name]["layers"]):
            torch.testing.assert_close(torch.tensor(shown), weights[key.format(layer)][0], atol=6e-5, rtol=0)  # rounded to 1e-4


def test_the_explorer_refuses_weights_that_do_not_fit_its_tokens():
    from transformer.attention_maps import AttentionExplorer, explore

    model = _model()
    weights = attention_weights(model, torch.randint(4, 30, (1, 6)), torch.randint(4, 30, (1, 4)))
    source, output = [f"s{i}" for i in range(6)], [f"o{i}" for i in range(4)]
    AttentionExplorer(weights, source, output)  # fits
    with pytest.raises(ValueError, match=r"encoder.0.self must have shape \(heads, queries, keys\) = \(4, 5, 5\); got \(4, 6, 6\)"):
        AttentionExplorer(weights, source[:5], output)
    with pytest.raises(ValueError, match="no 'decoder.0.cross'"):
        AttentionExplorer({k: w for k, w in weights.items() if "cross" not in k}, source, output)
    with pytest.raises(TypeError, match="one string; got list"):
        explore(model, _number_tokenizer(), ["two words"])


def test_the_explorer_page_keeps_a_closing_tag_in_a_token_out_of_its_script():
    from transformer.attention_maps import AttentionExplorer

    weights = attention_weights(_model(), torch.randint(4, 30, (1, 2)), torch.randint(4, 30, (1, 2)))
    html = AttentionExplorer(weights, ["</script>", "b"], ["x", "y"])._repr_html_()
    assert html.count("</script>") == 1 and html.endswith("</script>")
    assert "renderAttentionExplorer(document.getElementById(" in html


def test_trace_search_reads_the_attention_that_chose_each_token_and_shows_in_a_notebook():
    """Each step's attention is the last decoder layer's encoder-decoder attention of
    each prefix's last position, read by attention_weights on the whole prefix; greedy's
    output is greedy_decode's; the view's data is JSON, and its HTML cannot end its own
    script."""
    torch.manual_seed(4)
    tokenizer = train_tokenizer(iter(["one two three </script>", "four five six"] * 4), vocab_size=40)
    vocab = tokenizer.get_vocab_size()
    model = Transformer(TransformerConfig(src_vocab_size=vocab, tgt_vocab_size=vocab, d_model=32, n_heads=4,
                                          d_ff=64, n_layers=2, dropout=0.0)).eval()
    trace = trace_search(model, tokenizer, "one two </script> four", beam_size=3)
    src = torch.tensor([tokenizer.encode("one two </script> four", add_special_tokens=False).ids + [EOS]])
    assert trace.source == src[0].tolist()
    step = trace.steps[2]
    tgt = torch.tensor([[BOS, *p] for p in step.prefixes])
    weights = attention_weights(model, src.expand(len(tgt), -1), tgt)["decoder.1.cross"][:, :, -1]
    torch.testing.assert_close(torch.tensor(step.attention), weights)
    greedy = greedy_decode(model, src)[0].tolist()
    assert trace.greedy == greedy[: greedy.index(EOS) + 1] if EOS in greedy else greedy
    data = json.loads(json.dumps(trace.to_dict()))
    assert data["tokens"][str(EOS)] == "<eos>" and len(data["steps"]) == len(trace.steps)
    assert data["steps"][2]["attention"][0][0] == pytest.approx(weights[0, 0].tolist(), abs=5e-5)
    with pytest.raises(TypeError, match="sentence must be one string; got list"):
        trace_search(model, tokenizer, ["one two"])
    html = trace._repr_html_()
    assert "renderBeamSearch(document.getElementById" in html
    assert html.count("</script>") == html.count("<script>") == 1, "the data cannot close the script"
