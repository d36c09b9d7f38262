"""Tests of transformer/feed_forward.py (book/feed_forward.md)."""

import pytest
import torch

from transformer.feed_forward import PositionwiseFeedForward


def test_relu_ffn_is_the_papers_formula():
    ffn = PositionwiseFeedForward(16, 64)
    x = torch.randn(2, 5, 16)
    expected = torch.relu(x @ ffn.w_1.weight.T + ffn.w_1.bias) @ ffn.w_2.weight.T + ffn.w_2.bias
    torch.testing.assert_close(ffn(x), expected)


def test_equals_two_kernel_size_one_convolutions():
    ffn = PositionwiseFeedForward(16, 64)
    conv_1, conv_2 = torch.nn.Conv1d(16, 64, 1), torch.nn.Conv1d(64, 16, 1)
    with torch.no_grad():
        conv_1.weight.copy_(ffn.w_1.weight[:, :, None]), conv_1.bias.copy_(ffn.w_1.bias)
        conv_2.weight.copy_(ffn.w_2.weight[:, :, None]), conv_2.bias.copy_(ffn.w_2.bias)
        x = torch.randn(3, 7, 16)
        torch.testing.assert_close(conv_2(torch.relu(conv_1(x.transpose(1, 2)))).transpose(1, 2), ffn(x), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("activation", sorted(PositionwiseFeedForward.ACTIVATIONS))
def test_every_variant_acts_on_each_position_separately(activation):
    ffn = PositionwiseFeedForward(16, 64, activation).eval()
    x = torch.randn(2, 6, 16)
    with torch.no_grad():
        whole = ffn(x)
        one_by_one = torch.cat([ffn(x[:, i : i + 1]) for i in range(6)], dim=1)
    torch.testing.assert_close(whole, one_by_one)


def test_gated_variants_multiply_by_a_linear_gate():
    ffn = PositionwiseFeedForward(16, 64, "swiglu")
    x = torch.randn(4, 16)
    expected = ffn.w_2(torch.nn.functional.silu(ffn.w_1(x)) * ffn.v(x))
    torch.testing.assert_close(ffn(x), expected)
    assert PositionwiseFeedForward(16, 64, "relu").v is None


def test_bad_activation_and_sizes_raise():
    with pytest.raises(ValueError, match="activation must be one of .*got 'tanh'"):
        PositionwiseFeedForward(16, 64, "tanh")
    with pytest.raises(ValueError, match="d_ff must be a positive integer; got 0"):
        PositionwiseFeedForward(16, 0)
