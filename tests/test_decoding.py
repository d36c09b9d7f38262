"""Tests of transformer/decoding.py (book/decoding.md)."""

import torch

from transformer import Transformer, TransformerConfig, greedy_decode, train_tokenizer, translate
from transformer.data import EOS, PAD

SMALL = dict(src_vocab_size=40, tgt_vocab_size=40, d_model=32, n_heads=4, d_ff=64, n_layers=2, dropout=0.0)


def test_cached_and_uncached_greedy_decoding_agree():
    torch.manual_seed(0)
    model = Transformer(TransformerConfig(**SMALL)).eval()
    src = torch.randint(4, 40, (5, 9))
    src[2, 6:] = PAD
    cached, uncached = greedy_decode(model, src, max_len=15), greedy_decode(model, src, max_len=15, use_cache=False)
    assert torch.equal(cached, uncached)
    assert cached.size(1) <= 15


def test_greedy_takes_the_argmax_of_the_full_decoder_at_every_step():
    torch.manual_seed(1)
    model = Transformer(TransformerConfig(**SMALL)).eval()
    src = torch.randint(4, 40, (2, 6))
    out = greedy_decode(model, src, max_len=6)
    prefix = torch.full((2, 1), 2)
    for step in range(out.size(1)):
        logits = model(src, prefix)[:, -1]
        expected = logits.argmax(-1)
        finished = (out[:, :step] == EOS).any(1)
        assert torch.equal(out[:, step][~finished], expected[~finished])
        assert torch.all(out[:, step][finished] == PAD)
        prefix = torch.cat([prefix, out[:, step : step + 1]], 1)


def test_translate_keeps_order_and_handles_empty_lines():
    torch.manual_seed(0)
    tokenizer = train_tokenizer(iter(["one two three", "eins zwei drei"] * 5), vocab_size=40)
    config = TransformerConfig(**{**SMALL, "src_vocab_size": tokenizer.get_vocab_size(), "tgt_vocab_size": tokenizer.get_vocab_size()})
    model = Transformer(config).train()
    sentences = ["one two three", "", "three", "one two three one two three"]
    outputs = translate(model, tokenizer, sentences, batch_size=2)
    assert len(outputs) == 4 and all(isinstance(o, str) for o in outputs)
    assert outputs == [translate(model, tokenizer, [s])[0] for s in sentences], "batching and sorting change nothing"
    assert model.training, "translate restores the training mode"
