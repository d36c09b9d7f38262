"""Tests of transformer/model.py (book/model.md)."""


import pytest
import torch

from transformer import Transformer, TransformerConfig
from transformer.attention import causal_mask, padding_mask
from transformer.model import DecoderLayer, EncoderLayer

SMALL = dict(src_vocab_size=60, tgt_vocab_size=60, d_model=32, n_heads=4, d_ff=64, n_layers=2, dropout=0.0)


@pytest.fixture(autouse=True)
def seed():
    torch.manual_seed(0)


def _copy_attention(ours, theirs):
    theirs.in_proj_weight.copy_(ours.w_qkv.weight)
    theirs.in_proj_bias.copy_(ours.w_qkv.bias)
    theirs.out_proj.weight.copy_(ours.w_o.weight)
    theirs.out_proj.bias.copy_(ours.w_o.bias)


def _copy_common(ours, theirs):
    for ours_linear, their_linear in ((ours.feed_forward.w_1, theirs.linear1), (ours.feed_forward.w_2, theirs.linear2)):
        their_linear.weight.copy_(ours_linear.weight)
        their_linear.bias.copy_(ours_linear.bias)
    norms = [theirs.norm1, theirs.norm2] + ([theirs.norm3] if hasattr(theirs, "norm3") else [])
    for sublayer, norm in zip(ours.sublayers, norms):
        norm.weight.copy_(sublayer.norm.weight)
        norm.bias.copy_(sublayer.norm.bias)
    _copy_attention(ours.self_attn, theirs.self_attn)


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_layer_equals_torch(norm_first):
    config = TransformerConfig(**SMALL, norm_first=norm_first)
    ours = EncoderLayer(config).eval()
    theirs = torch.nn.TransformerEncoderLayer(
        32, 4, 64, dropout=0.0, batch_first=True, norm_first=norm_first, layer_norm_eps=config.layer_norm_eps
    ).eval()
    ours.sublayers[0].norm.weight.data.uniform_(0.5, 1.5)  # non-trivial norms, so a swap would show
    ours.sublayers[1].norm.bias.data.uniform_(-0.5, 0.5)
    with torch.no_grad():
        _copy_common(ours, theirs)
        x = torch.randn(3, 7, 32)
        ids = torch.tensor([[1] * 7, [1] * 5 + [0] * 2, [1] * 3 + [0] * 4])
        out = ours(x, padding_mask(ids, 0))
        expected = theirs(x, src_key_padding_mask=ids == 0)
    # torch's fast path returns zeros at padded positions; compare the real ones
    real = ids != 0
    torch.testing.assert_close(out[real], expected[real], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_layer_equals_torch(norm_first):
    config = TransformerConfig(**SMALL, norm_first=norm_first)
    ours = DecoderLayer(config).eval()
    theirs = torch.nn.TransformerDecoderLayer(
        32, 4, 64, dropout=0.0, batch_first=True, norm_first=norm_first, layer_norm_eps=config.layer_norm_eps
    ).eval()
    ours.sublayers[2].norm.weight.data.uniform_(0.5, 1.5)
    with torch.no_grad():
        _copy_common(ours, theirs)
        _copy_attention(ours.cross_attn, theirs.multihead_attn)
        x, memory = torch.randn(3, 6, 32), torch.randn(3, 7, 32)
        src = torch.tensor([[1] * 7, [1] * 5 + [0] * 2, [1] * 3 + [0] * 4])
        out = ours(x, memory, padding_mask(src, 0))
        expected = theirs(x, memory, tgt_mask=~causal_mask(6), memory_key_padding_mask=src == 0)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)


def test_base_model_forward_on_random_ids():
    model = Transformer(TransformerConfig.base()).eval()
    src, tgt = torch.randint(1, 37000, (2, 11)), torch.randint(1, 37000, (2, 9))
    with torch.no_grad():
        assert model(src, tgt).shape == (2, 9, 37000)
    assert sum(p.numel() for p in model.parameters()) == 63_082_496


def test_a_future_target_token_cannot_change_an_earlier_output():
    model = Transformer(TransformerConfig(**SMALL)).eval()
    src, tgt = torch.randint(1, 60, (2, 8)), torch.randint(1, 60, (2, 6))
    changed = tgt.clone()
    changed[:, 4] = (changed[:, 4] % 59) + 1
    with torch.no_grad():
        a, b = model(src, tgt), model(src, changed)
    torch.testing.assert_close(a[:, :4], b[:, :4])
    assert not torch.allclose(a[:, 4:], b[:, 4:])


@pytest.mark.parametrize("positional", ["sinusoidal", "learned"])
def test_padding_the_source_does_not_change_the_output(positional):
    model = Transformer(TransformerConfig(**SMALL, positional=positional)).eval()
    src, tgt = torch.randint(1, 60, (2, 8)), torch.randint(1, 60, (2, 6))
    padded = torch.cat([src, torch.zeros(2, 5, dtype=torch.long)], dim=1)
    with torch.no_grad():
        torch.testing.assert_close(model(padded, tgt), model(src, tgt), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    "options",
    [{}, {"share_embeddings": False, "tie_output": False, "src_vocab_size": 50}, {"norm_first": True, "activation": "swiglu"}],
)
def test_gradients_reach_every_parameter(options):
    model = Transformer(TransformerConfig(**{**SMALL, **options}, positional="learned", max_len=8))
    src, tgt = torch.randint(1, 50, (4, 8)), torch.randint(1, 60, (4, 8))
    model(src, tgt).logsumexp(-1).sum().backward()
    for name, parameter in model.named_parameters():
        assert parameter.grad is not None and parameter.grad.abs().sum() > 0, name


def test_incremental_decoding_with_the_cache_equals_full_decoding():
    model = Transformer(TransformerConfig(**SMALL)).eval()
    src = torch.tensor([[5, 6, 7, 8, 9], [5, 6, 7, 0, 0]])
    tgt = torch.randint(1, 60, (2, 7))
    with torch.no_grad():
        memory, mask = model.encode(src), padding_mask(src, 0)
        full = model.decode(tgt, memory, mask)
        cache = model.new_cache()
        steps = [model.decode(tgt[:, :3], memory, mask, cache)]  # a prefix, then one token at a time
        steps += [model.decode(tgt[:, j : j + 1], memory, mask, cache) for j in range(3, 7)]
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-5, rtol=1e-5)


def test_weights_are_shared_as_configured():
    shared = Transformer(TransformerConfig(**SMALL))
    assert shared.src_embed is shared.tgt_embed and shared.output.linear.weight is shared.tgt_embed.embedding.weight
    separate = Transformer(TransformerConfig(**SMALL, share_embeddings=False, tie_output=False))
    assert separate.src_embed is not separate.tgt_embed
    assert separate.output.linear.weight is not separate.tgt_embed.embedding.weight


def test_presets_and_table3_variants():
    base, big = TransformerConfig.base(), TransformerConfig.big()
    assert (base.d_model, base.d_ff, base.n_heads, base.n_layers, base.dropout) == (512, 2048, 8, 6, 0.1)
    assert (big.d_model, big.d_ff, big.n_heads, big.n_layers, big.dropout) == (1024, 4096, 16, 6, 0.3)
    assert TransformerConfig.big(dropout=0.1).dropout == 0.1
    rows = TransformerConfig.table3(src_vocab_size=100, tgt_vocab_size=100)
    assert rows["(A) h=1"].n_heads == 1 and rows["(E) learned positions"].positional == "learned"
    assert all(config.src_vocab_size == 100 for config in rows.values())


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"d_model": 30, "n_heads": 4}, "d_model must be divisible by n_heads.*d_model=30, n_heads=4"),
        ({"dropout": 1.0}, r"dropout must be in \[0, 1\); got 1.0"),
        ({"n_layers": 0}, "n_layers must be a positive integer; got 0"),
        ({"activation": "tanh"}, "activation must be one of"),
        ({"positional": "rope"}, "positional must be 'sinusoidal' or 'learned'"),
        ({"src_vocab_size": 50}, "share_embeddings needs one shared vocabulary"),
        ({"pad_id": 60}, r"pad_id must be a token id of both vocabularies, in \[0, 60\); got 60"),
        ({"layer_norm_eps": -1e-6}, "layer_norm_eps must be a positive finite number; got -1e-06"),
        ({"layer_norm_eps": float("nan")}, "layer_norm_eps must be a positive finite number; got nan"),
        ({"norm_first": "no"}, "norm_first must be True or False; got 'no'"),
        ({"tie_output": 1}, "tie_output must be True or False; got 1"),
        ({"dropout": "0.1"}, r"dropout must be in \[0, 1\); got '0.1'"),
        ({"d_k": 8.0}, "d_k must be a positive integer or None"),
    ],
)
def test_inconsistent_configs_raise(options, message):
    with pytest.raises(ValueError, match=message):
        TransformerConfig(**{**SMALL, **options})


def test_bad_inputs_raise_clear_errors():
    model = Transformer(TransformerConfig(**SMALL, positional="learned", max_len=10))
    ok = torch.randint(1, 60, (2, 5))
    with pytest.raises(ValueError, match=r"src must be token ids in \[0, 60\).*got ids from 1 to 60"):
        model(torch.tensor([[1, 60]]), ok[:1])
    with pytest.raises(ValueError, match=r"tgt must be token ids of shape \(batch, length\); got shape \(5,\)"):
        model(ok, ok[0])
    with pytest.raises(ValueError, match="same batch size; got 2 and 1"):
        model(ok, ok[:1])
    with pytest.raises(ValueError, match=r"cover 10 positions \(max_len\); got a sequence reaching position 11"):
        model(torch.randint(1, 60, (2, 11)), ok)
    with pytest.raises(ValueError, match=r"memory must have shape \(batch=2, n, d_model=32\)"):
        model.decode(ok, torch.randn(2, 5, 16))


@pytest.mark.parametrize("norm_first", [False, True])
def test_under_autocast_the_residual_stream_is_kept_in_its_dtype(norm_first):
    """Every layer's output, the encoder's memory and the decoder's output are bf16 under
    autocast (fp32 without), and the logits stay within bf16's rounding of fp32's."""
    model = Transformer(TransformerConfig(**SMALL, norm_first=norm_first)).eval()
    src, tgt = torch.randint(1, 60, (3, 9)), torch.randint(1, 60, (3, 6))
    stacks = [model.encoder, model.decoder, *model.encoder.layers, *model.decoder.layers]
    dtypes = []
    for module in stacks:
        module.register_forward_hook(lambda module, args, out: dtypes.append(out.dtype))
    with torch.no_grad():
        reference = model(src, tgt)
        assert set(dtypes) == {torch.float32}
        dtypes.clear()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = model(src, tgt)
    assert dtypes == [torch.bfloat16] * len(stacks), dtypes
    torch.testing.assert_close(logits.float(), reference, atol=0.1, rtol=0.05)
    dtypes.clear()
    segments = torch.ones_like(src), torch.ones_like(tgt)  # one sentence a row, packed
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        packed = model(src, tgt, segments=segments)
    assert dtypes == [torch.bfloat16] * len(stacks), dtypes
    torch.testing.assert_close(packed.float(), reference, atol=0.1, rtol=0.05)


@pytest.mark.gpu
@pytest.mark.parametrize("length", [64, 192, 320])
def test_a_bf16_training_step_with_masks_is_finite_at_lengths_64_mod_128_on_cuda(length):
    """cuDNN's attention backward returned NaN with an attention mask when the sequence length
    is 64 mod 128 (pytorch issue 196678); whatever kernel SDPA picks, the step must be finite."""
    config = TransformerConfig(src_vocab_size=100, tgt_vocab_size=100, d_model=128, n_heads=2, d_ff=256,
                               n_layers=2, dropout=0.1, max_len=512)
    model = Transformer(config).cuda().train()
    src = torch.randint(4, 100, (4, length), device="cuda")
    tgt = torch.randint(4, 100, (4, length), device="cuda")
    src[0, length // 2 :] = tgt[1, length // 3 :] = config.pad_id  # padding masks as well as the causal one
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = model(src, tgt)
    loss = torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), tgt.flatten(), ignore_index=config.pad_id)
    loss.backward()
    assert torch.isfinite(loss)
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def _packed_row(pairs, src_length, tgt_length):
    """One packed row of (source ids, target ids) pairs and its segments, padded to the lengths."""
    def side(k):
        ids = [i for pair in pairs for i in pair[k]]
        segments = [n + 1 for n, pair in enumerate(pairs) for _ in pair[k]]
        length = (src_length, tgt_length)[k]
        return torch.tensor([ids + [0] * (length - len(ids))]), torch.tensor([segments + [0] * (length - len(ids))])
    (src, src_seg), (tgt, tgt_seg) = side(0), side(1)
    return src, tgt, (src_seg, tgt_seg)


PAIRS = [([5, 6, 7], [1, 11, 12]), ([8, 9], [1, 13]), ([5, 7, 9, 6, 40], [1, 14, 15, 16]), ([22], [1])]


@pytest.mark.parametrize("options", [{}, {"norm_first": True}, {"positional": "learned"}])
def test_a_packed_row_gives_each_sentence_its_logits_and_gradients_alone(options):
    """Oracle: each sentence through the unpacked model on its own. The packed row's loss is the
    sum of the sentences' losses, and so are its gradients."""
    model = Transformer(TransformerConfig(**{**SMALL, **options})).double()
    src, tgt, segments = _packed_row(PAIRS, 14, 12)
    answers = torch.randint(4, 60, tgt.shape)
    packed = model(src, tgt, segments=segments)
    loss = torch.nn.functional.cross_entropy(packed[0], answers[0], reduction="none")[segments[1][0] > 0].sum()
    grads = torch.autograd.grad(loss, list(model.parameters()), allow_unused=True)
    total, alone_grads = 0.0, None
    for k, (s, t) in enumerate(PAIRS):
        at = segments[1][0] == k + 1
        alone = model(torch.tensor([s]), torch.tensor([t]))[0]
        torch.testing.assert_close(packed[0, at], alone, rtol=1e-10, atol=1e-10)
        one = torch.nn.functional.cross_entropy(alone, answers[0, at], reduction="sum")
        g = torch.autograd.grad(one, list(model.parameters()), allow_unused=True)
        alone_grads = g if alone_grads is None else [a if b is None else (b if a is None else a + b) for a, b in zip(alone_grads, g)]
        total = total + one
    torch.testing.assert_close(loss, total, rtol=1e-10, atol=0)
    for (name, _), a, b in zip(model.named_parameters(), grads, alone_grads):
        assert (a is None) == (b is None), name
        if a is not None:
            torch.testing.assert_close(a, b, rtol=1e-8, atol=1e-12, msg=name)


def test_no_sentence_of_a_packed_row_sees_another():
    """Exhaustive over the sentences of the row: changing every token of one sentence changes its
    own logits and no other sentence's."""
    model = Transformer(TransformerConfig(**SMALL)).eval()
    src, tgt, segments = _packed_row(PAIRS, 14, 12)
    with torch.no_grad():
        before = model(src, tgt, segments=segments)
        for k in range(len(PAIRS)):
            changed_src = src.masked_fill(segments[0] == k + 1, 50)
            changed_tgt = tgt.masked_fill((segments[1] == k + 1) & (tgt != 1), 51)  # keep <bos>
            after = model(changed_src, changed_tgt, segments=segments)
            moved = (after - before).abs().amax(-1)[0] > 1e-6  # (m,)
            real = segments[1][0] > 0
            assert moved[segments[1][0] == k + 1].all(), k
            assert not moved[real & (segments[1][0] != k + 1)].any(), k


def test_packed_segments_must_match_their_ids():
    model = Transformer(TransformerConfig(**SMALL))
    src, tgt, (src_seg, tgt_seg) = _packed_row(PAIRS, 14, 12)
    with pytest.raises(ValueError, match=r"tgt_segments must have the shape of tgt \(1, 12\); got \(1, 11\)"):
        model(src, tgt, segments=(src_seg, tgt_seg[:, :-1]))


def test_presets_are_the_published_shapes():
    """Table 3's base and big, Wu et al.'s Transformer-tiny (pre-LN here), and small."""
    shape = lambda c: (c.n_layers, c.d_model, c.n_heads, c.d_ff, c.dropout, c.norm_first)  # noqa: E731
    assert shape(TransformerConfig.preset("base")) == (6, 512, 8, 2048, 0.1, False)
    assert shape(TransformerConfig.preset("big")) == (6, 1024, 16, 4096, 0.3, False)
    assert shape(TransformerConfig.preset("tiny")) == (4, 128, 4, 256, 0.3, True)
    assert shape(TransformerConfig.preset("small")) == (3, 256, 4, 1024, 0.1, False)
    assert TransformerConfig.preset("tiny", norm_first=False, dropout=0.1).dropout == 0.1
    with pytest.raises(ValueError, match="preset must be one of tiny, small, base, big; got 'huge'"):
        TransformerConfig.preset("huge")
