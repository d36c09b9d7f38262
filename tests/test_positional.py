"""Tests of transformer/positional.py (book/positional.md)."""

import math

import pytest
import torch

from transformer.positional import (
    LearnedPositionalEmbedding,
    SinusoidalPositionalEncoding,
    sinusoidal_positional_encoding,
)


def test_table_values_follow_the_formula():
    pe = sinusoidal_positional_encoding(50, 16)
    assert pe.shape == (50, 16)
    torch.testing.assert_close(pe[0], torch.tensor([0.0, 1.0] * 8))
    pos, i = 37, 3
    assert math.isclose(pe[pos, 2 * i].item(), math.sin(pos / 10000 ** (2 * i / 16)), abs_tol=1e-6)
    assert math.isclose(pe[pos, 2 * i + 1].item(), math.cos(pos / 10000 ** (2 * i / 16)), abs_tol=1e-6)


def test_sinusoidal_module_extends_past_max_len_and_honours_start():
    module = SinusoidalPositionalEncoding(16, max_len=8)
    x = torch.zeros(1, 12, 16)
    torch.testing.assert_close(module(x)[0], sinusoidal_positional_encoding(12, 16))
    torch.testing.assert_close(module(x[:, :2], start=9)[0], sinusoidal_positional_encoding(11, 16)[9:])


def test_learned_positions_reject_sequences_longer_than_max_len():
    module = LearnedPositionalEmbedding(16, max_len=8)
    assert module(torch.zeros(2, 8, 16)).shape == (2, 8, 16)
    with pytest.raises(ValueError, match=r"cover 8 positions \(max_len\); got a sequence reaching position 9"):
        module(torch.zeros(2, 9, 16))
    with pytest.raises(ValueError, match="reaching position 9"):
        module(torch.zeros(2, 1, 16), start=8)


def test_odd_d_model_is_rejected():
    with pytest.raises(ValueError, match="positive even number.*got 15"):
        sinusoidal_positional_encoding(10, 15)
