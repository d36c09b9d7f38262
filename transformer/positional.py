# Generated from book/positional.md by tools/export.py: edit the chapter.
"""Sinusoidal positional encoding and learned positional embeddings (§3.5 of the
paper)."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn


def sinusoidal_positional_encoding(n_positions: int, d_model: int) -> Tensor:
    """The (n_positions, d_model) sinusoid table.

    PE[pos, 2i] = sin(pos / 10000^(2i/d_model)),
    PE[pos, 2i+1] = cos(pos / 10000^(2i/d_model)).
    """
    if d_model <= 0 or d_model % 2 != 0:
        raise ValueError(
            f"d_model must be a positive even number (sin/cos pairs); got {d_model}"
        )
    if n_positions < 0:
        raise ValueError(f"n_positions must be >= 0; got {n_positions}")
    position = torch.arange(n_positions, dtype=torch.float64)[
        :, None
    ]  # (n_positions, 1)
    frequency = torch.exp(
        -math.log(10000.0) * torch.arange(0, d_model, 2, dtype=torch.float64) / d_model
    )
    angle = position * frequency  # (n_positions, d_model / 2)
    table = torch.empty(n_positions, d_model, dtype=torch.float64)
    table[:, 0::2], table[:, 1::2] = angle.sin(), angle.cos()
    return table.float()


class SinusoidalPositionalEncoding(nn.Module):
    """Adds the sinusoidal table: x (batch, n, d_model) -> x + PE[start:start + n]."""

    def __init__(self, d_model: int, max_len: int = 1024):
        super().__init__()
        self.d_model = d_model
        self.register_buffer(
            "table", sinusoidal_positional_encoding(max_len, d_model), persistent=False
        )

    def forward(
        self, x: Tensor, start: int = 0, positions: Tensor | None = None
    ) -> Tensor:
        end = start + x.size(1)  # positions, if given, are below x.size(1)
        table = (
            self.table
            if end <= len(self.table)
            else sinusoidal_positional_encoding(end, self.d_model).to(x.device)
        )
        rows = table[start:end] if positions is None else table[positions]
        return x + rows.to(x.dtype)


class LearnedPositionalEmbedding(nn.Module):
    """Adds a learned vector per position: x (batch, n, d_model) ->
    x + P[start:start + n]."""

    def __init__(self, d_model: int, max_len: int = 1024):
        super().__init__()
        self.max_len = max_len
        self.embedding = nn.Embedding(max_len, d_model)
        nn.init.normal_(self.embedding.weight, std=d_model**-0.5)

    def forward(
        self, x: Tensor, start: int = 0, positions: Tensor | None = None
    ) -> Tensor:
        end = start + x.size(1)  # positions, if given, are below x.size(1)
        if end > self.max_len:
            raise ValueError(
                f"learned positional embeddings cover {self.max_len} positions "
                f"(max_len); got a sequence reaching position {end}"
            )
        weight = self.embedding.weight
        rows = weight[start:end] if positions is None else weight[positions]
        return x + rows.to(x.dtype)


def segment_positions(segments: Tensor) -> Tensor:
    """The position of each token within its sentence: segments (batch, n) numbers
    the sentences packed in each row (0: padding); positions restart at 0 wherever
    the number changes."""
    index = torch.arange(segments.size(1), device=segments.device).expand_as(segments)
    changes = torch.ones_like(segments, dtype=torch.bool)
    changes[:, 1:] = segments[:, 1:] != segments[:, :-1]
    starts = torch.where(changes, index, 0).cummax(dim=1).values
    return index - starts


__all__ = [
    'sinusoidal_positional_encoding',
    'SinusoidalPositionalEncoding',
    'LearnedPositionalEmbedding',
    'segment_positions',
]
