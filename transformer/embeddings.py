# Generated from book/embeddings.md by tools/export.py: edit the chapter.
"""Token embeddings scaled by sqrt(d_model) and the pre-softmax projection (§3.4 of the
paper)."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn


def check_token_ids(tokens: Tensor, vocab_size: int, name: str = "tokens") -> None:
    """Raise unless `tokens` is an integer tensor of ids in [0, vocab_size)."""
    if tokens.dtype not in (torch.int64, torch.int32):
        raise TypeError(
            f"{name} must be integer token ids (torch.long); got dtype {tokens.dtype}"
        )
    if tokens.numel() == 0 or torch.compiler.is_compiling():
        return
    low, high = torch.aminmax(tokens)
    if low < 0 or high >= vocab_size:
        raise ValueError(
            f"{name} must be token ids in [0, {vocab_size}) (the vocabulary size); "
            f"got ids from {low.item()} to {high.item()}"
        )


class Embeddings(nn.Module):
    """Learned token embeddings multiplied by sqrt(d_model).

    The table is initialized N(0, 1/d_model), so rows have norm ~1 when it doubles as
    the pre-softmax projection and scaled embeddings have components of scale ~1. Shape:
    ids (batch, n) -> (batch, n, d_model).
    """

    def __init__(self, vocab_size: int, d_model: int):
        super().__init__()
        self.vocab_size, self.d_model = vocab_size, d_model
        self.embedding = nn.Embedding(vocab_size, d_model)
        nn.init.normal_(self.embedding.weight, std=d_model**-0.5)

    def forward(self, tokens: Tensor, check_ids: bool = True) -> Tensor:
        if check_ids:  # False where the ids were checked before (a prepared corpus)
            check_token_ids(tokens, self.vocab_size)
        return self.embedding(tokens) * math.sqrt(self.d_model)


class OutputProjection(nn.Module):
    """The pre-softmax linear transformation: (batch, n, d_model) -> logits (batch, n,
    vocab_size).

    Pass `shared` (an Embeddings) to use its table as the weight, as the paper does.
    """

    def __init__(self, d_model: int, vocab_size: int, shared: Embeddings | None = None):
        super().__init__()
        self.linear = nn.Linear(d_model, vocab_size, bias=False)
        if shared is not None:
            if shared.embedding.weight.shape != self.linear.weight.shape:
                raise ValueError(
                    "a shared embedding must be (vocab_size, d_model) = "
                    f"{tuple(self.linear.weight.shape)}; "
                    f"got {tuple(shared.embedding.weight.shape)}"
                )
            self.linear.weight = shared.embedding.weight

    def forward(self, x: Tensor) -> Tensor:
        return self.linear(x)


__all__ = [
    'check_token_ids',
    'Embeddings',
    'OutputProjection',
]
