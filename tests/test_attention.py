"""Tests of transformer/attention.py (book/attention.md)."""

import pytest
import torch
import torch.nn.functional as F

import transformer.attention as attention_module
from transformer import MultiHeadAttention, scaled_dot_product_attention
from transformer.attention import (
    KeyValueCache,
    attend,
    attention_for_cpu_training,
    causal_mask,
    padding_mask,
)


@pytest.fixture(autouse=True)
def seed():
    torch.manual_seed(0)


def test_explicit_formula_equals_fused_kernel_with_and_without_masks():
    q, k, v = torch.randn(2, 4, 5, 16), torch.randn(2, 4, 7, 16), torch.randn(2, 4, 7, 8)
    keys = torch.tensor([[1, 2, 3, 4, 5, 0, 0], [1, 2, 3, 4, 5, 6, 7]])
    for mask in (None, padding_mask(keys, pad_id=0), causal_mask(5, 7)):
        ours, weights = scaled_dot_product_attention(q, k, v, mask)
        fused = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        torch.testing.assert_close(ours, fused, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(weights.sum(-1), torch.ones(2, 4, 5))
        if mask is not None:
            assert torch.all(weights.masked_select(~mask.expand_as(weights)) == 0)


def test_attend_computes_the_written_out_function_by_each_kernel():
    """Every path attend can take, against the hand-built mask (the causal triangle aligned
    bottom-right, as a step of decoding needs) and the written-out equation (1)."""
    q = torch.randn(2, 4, 3, 8, requires_grad=True)
    k, v = torch.randn(2, 4, 6, 8), torch.randn(2, 4, 6, 8)
    keys = torch.tensor([[1] * 6, [1] * 4 + [0] * 2])
    for mask in (None, padding_mask(keys, 0)):
        full = causal_mask(3, 6) if mask is None else mask & causal_mask(3, 6)
        expected, weights = scaled_dot_product_attention(q, k, v, full)
        for training in (False, True):  # training on a CPU: the written-out path
            out, none = attend(q, k, v, mask, is_causal=True, training=training)
            torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
            assert none is None
        out, drawn = attend(q, k, v, mask, is_causal=True, need_weights=True)
        torch.testing.assert_close(drawn, weights)
    square = attend(q, q, q, is_causal=True)[0]  # n_q == n_k: the fused kernel's flag
    expected, _ = scaled_dot_product_attention(q, q, q, causal_mask(3))
    torch.testing.assert_close(square, expected, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(square, attend(q, q, q)[0], atol=1e-3), "the mask mattered"


def test_only_training_on_a_cpu_takes_the_written_out_path(monkeypatch):
    calls = []

    def counted(*args):
        calls.append(1)
        return attention_for_cpu_training(*args)

    monkeypatch.setattr(attention_module, "attention_for_cpu_training", counted)
    layer, x = MultiHeadAttention(16, 2), torch.randn(2, 3, 16)
    layer(x, x, x, is_causal=True)
    assert len(calls) == 1, "training, autograd on"
    with torch.no_grad():
        layer(x, x, x, is_causal=True)
    layer.eval()(x, x, x, is_causal=True)  # evaluation (and export) with autograd on
    assert len(calls) == 1, "no grad or eval mode: PyTorch's kernels"


def test_multi_head_attention_trains_on_a_cpu_through_the_written_out_path():
    """With autograd on, a CPU layer takes attention_for_cpu_training; without, torch's
    kernel. Same outputs, and the same gradients as torch.nn.MultiheadAttention's."""
    ours = MultiHeadAttention(32, 4)
    theirs = torch.nn.MultiheadAttention(32, 4, batch_first=True)
    _load_into_torch(ours, theirs)
    x = torch.randn(2, 6, 32)
    ids = torch.tensor([[1] * 6, [1, 1, 1, 0, 0, 0]])
    out, _ = ours(x, x, x, mask=padding_mask(ids, 0), is_causal=True)
    expected, _ = theirs(x, x, x, key_padding_mask=ids == 0, attn_mask=~causal_mask(6))
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
    with torch.no_grad():
        fused, _ = ours(x, x, x, mask=padding_mask(ids, 0), is_causal=True)
    torch.testing.assert_close(out, fused, atol=1e-5, rtol=1e-5)
    out.square().sum().backward()
    expected.square().sum().backward()
    torch.testing.assert_close(ours.w_qkv.weight.grad, theirs.in_proj_weight.grad, atol=1e-4, rtol=1e-4)


def test_masks_follow_the_true_means_attend_convention():
    ids = torch.tensor([[7, 8, 0]])
    assert padding_mask(ids, 0).tolist() == [[[[True, True, False]]]]
    assert causal_mask(3).tolist() == [[True, False, False], [True, True, False], [True, True, True]]
    # two new queries at the end of a sequence of four keys
    assert causal_mask(2, 4).tolist() == [[True, True, True, False], [True, True, True, True]]


def _load_into_torch(ours: MultiHeadAttention, theirs: torch.nn.MultiheadAttention) -> None:
    with torch.no_grad():
        theirs.in_proj_weight.copy_(ours.w_qkv.weight)  # W^Q, W^K, W^V stacked, in this order
        theirs.in_proj_bias.copy_(ours.w_qkv.bias)
        theirs.out_proj.weight.copy_(ours.w_o.weight)
        theirs.out_proj.bias.copy_(ours.w_o.bias)


def test_multi_head_attention_equals_torch_given_the_same_weights():
    ours = MultiHeadAttention(32, 4).eval()
    theirs = torch.nn.MultiheadAttention(32, 4, batch_first=True).eval()
    _load_into_torch(ours, theirs)
    query, memory = torch.randn(3, 5, 32), torch.randn(3, 6, 32)
    ids = torch.tensor([[1] * 6, [1, 1, 1, 1, 0, 0], [1, 1, 0, 0, 0, 0]])
    with torch.no_grad():
        out, weights = ours(query, memory, memory, mask=padding_mask(ids, 0), need_weights=True)
        expected, expected_weights = theirs(
            query, memory, memory, key_padding_mask=ids == 0, need_weights=True, average_attn_weights=False
        )
        torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(weights, expected_weights, atol=1e-6, rtol=1e-5)
        # causal self-attention: torch's attn_mask is True where attention is NOT allowed
        out, _ = ours(query, query, query, is_causal=True)
        expected, _ = theirs(query, query, query, attn_mask=~causal_mask(5))
        torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)


def test_fast_path_equals_weights_path_with_causal_and_padding_masks_together():
    layer = MultiHeadAttention(32, 4).eval()
    x = torch.randn(2, 6, 32)
    mask = padding_mask(torch.tensor([[1] * 6, [1, 1, 1, 0, 0, 0]]), 0)
    with torch.no_grad():
        fast, _ = layer(x, x, x, mask=mask, is_causal=True)
        explicit, weights = layer(x, x, x, mask=mask, is_causal=True, need_weights=True)
    torch.testing.assert_close(fast, explicit, atol=1e-5, rtol=1e-5)
    assert torch.all(weights[1, :, 4, 3:] == 0) and torch.all(weights[:, :, 0, 1:] == 0)


def test_self_attention_cache_equals_full_causal_attention():
    layer = MultiHeadAttention(32, 4).eval()
    x = torch.randn(2, 6, 32)
    with torch.no_grad():
        full, _ = layer(x, x, x, is_causal=True)
        cache = KeyValueCache()
        first, _ = layer(x[:, :2], x[:, :2], x[:, :2], is_causal=True, cache=cache)  # a prefix of two
        rest = [layer(x[:, t : t + 1], x[:, t : t + 1], x[:, t : t + 1], is_causal=True, cache=cache)[0] for t in range(2, 6)]
    torch.testing.assert_close(torch.cat([first, *rest], 1), full, atol=1e-5, rtol=1e-5)
    assert len(cache) == 6


def test_static_cache_projects_memory_once_and_reorders():
    layer = MultiHeadAttention(32, 4).eval()
    query, memory = torch.randn(3, 1, 32), torch.randn(3, 5, 32)
    cache = KeyValueCache(static=True)
    with torch.no_grad():
        first, _ = layer(query, memory, memory, cache=cache)
        again, _ = layer(query, torch.zeros_like(memory), torch.zeros_like(memory), cache=cache)  # memory ignored now
        torch.testing.assert_close(first, again)
        cache.reorder(torch.tensor([2, 0]))
        reordered, _ = layer(query[[2, 0]], memory[[2, 0]], memory[[2, 0]], cache=cache)
    torch.testing.assert_close(reordered, first[[2, 0]])


def test_d_k_and_d_v_can_differ_from_d_model_over_h():
    layer = MultiHeadAttention(32, 4, d_k=4, d_v=16)
    assert layer.sizes == [16, 16, 64] and layer.w_qkv.out_features == 96 and layer.w_o.in_features == 64
    assert layer(torch.randn(2, 3, 32), torch.randn(2, 5, 32), torch.randn(2, 5, 32))[0].shape == (2, 3, 32)


def test_bad_configuration_and_inputs_raise_clear_errors():
    with pytest.raises(ValueError, match="d_model must be divisible by n_heads.*d_model=30, n_heads=4"):
        MultiHeadAttention(30, 4)
    layer = MultiHeadAttention(32, 4)
    x = torch.randn(2, 5, 32)
    with pytest.raises(ValueError, match=r"mask must broadcast to \(batch, heads, query, key\) = \(2, 4, 5, 5\); got shape \(2, 5\)"):
        layer(x, x, x, mask=torch.ones(2, 5, dtype=torch.bool))
    with pytest.raises(TypeError, match="mask must be a boolean tensor"):
        layer(x, x, x, mask=torch.ones(2, 1, 1, 5))
    with pytest.raises(ValueError, match=r"query must have shape \(batch, length, d_model=32\); got \(2, 5, 16\)"):
        layer(torch.randn(2, 5, 16), x, x)
    with pytest.raises(ValueError, match="must share the batch size"):
        layer(x, x[:1], x[:1])


@pytest.mark.gpu
@pytest.mark.parametrize("masks", ["none", "causal", "padding", "causal and padding"])
def test_fused_kernels_in_bf16_on_cuda_equal_the_formula_in_float64(masks):
    """A fused kernel (flash or memory-efficient attention; the math fallback is switched off) on
    bf16 operands against softmax(QK^T / sqrt(d_k)) V written out in float64 on the CPU.
    Tolerance: relative error ||out - ref|| / ||ref|| under 1e-2, what bf16 operands allow
    (8 bits of mantissa: about 4e-3 per rounding)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    batch, n, d_model, h = 4, 40, 256, 8
    d_k = d_model // h
    layer = MultiHeadAttention(d_model, h).cuda().eval()
    x = torch.randn(batch, n, d_model, device="cuda")
    tokens = torch.arange(n)[None] < torch.tensor([40, 33, 17, 5])[:, None]  # True: a word, False: padding
    mask = padding_mask(tokens.long(), 0).cuda() if "padding" in masks else None
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]):
            out, _ = layer(x, x, x, mask=mask, is_causal="causal" in masks)
    assert out.dtype == torch.bfloat16
    w, b = layer.w_qkv.weight.double().cpu(), layer.w_qkv.bias.double().cpu()
    x64 = x.double().cpu()
    q, k, v = (  # W^Q, W^K, W^V are the row blocks of w_qkv
        (x64 @ w[i * d_model : (i + 1) * d_model].T + b[i * d_model : (i + 1) * d_model])
        .view(batch, n, h, d_k).transpose(1, 2)
        for i in range(3)
    )
    scores = q @ k.transpose(-1, -2) / d_k**0.5
    allowed = torch.ones(batch, 1, n, n, dtype=torch.bool)
    if "causal" in masks:
        allowed &= torch.ones(n, n, dtype=torch.bool).tril()
    if "padding" in masks:
        allowed &= tokens[:, None, None, :]
    heads = torch.softmax(scores.masked_fill(~allowed, float("-inf")), -1) @ v
    ref = heads.transpose(1, 2).reshape(batch, n, d_model) @ layer.w_o.weight.double().cpu().T
    ref += layer.w_o.bias.double().cpu()
    error = (out.double().cpu() - ref).norm() / ref.norm()
    assert error < 1e-2, f"relative error {error:.2e}"
