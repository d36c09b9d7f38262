# Generated from book/feed_forward.md by tools/export.py: edit the chapter.
"""The position-wise feed-forward network (§3.3 of the paper), with GELU and gated
variants."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn


class PositionwiseFeedForward(nn.Module):
    """FFN(x) = max(0, x W_1 + b_1) W_2 + b_2 on each position separately (the paper's
    equation 2).

    Args:
        d_model: input and output width.
        d_ff: inner width.
        activation: "relu" (the paper), "gelu", or a gated variant: "reglu",
            "geglu", "swiglu", computing (f(x W_1) * x V) W_2.
        dropout: dropout on the inner activations (0 in the paper).

    Shape: (..., d_model) -> (..., d_model).
    """

    ACTIVATIONS = {
        "relu": F.relu,
        "gelu": F.gelu,
        "reglu": F.relu,
        "geglu": F.gelu,
        "swiglu": F.silu,
    }

    @classmethod
    def check(cls, d_model: int, d_ff: int, activation: str) -> None:
        """Raise ValueError unless the widths are positive integers and the
        activation one of ACTIVATIONS (the model's configuration calls it too)."""
        for name, value in (("d_model", d_model), ("d_ff", d_ff)):
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"{name} must be a positive integer; got {value!r}")
        if activation not in cls.ACTIVATIONS:
            raise ValueError(
                f"activation must be one of {sorted(cls.ACTIVATIONS)}; got "
                f"{activation!r}"
            )

    def __init__(
        self, d_model: int, d_ff: int, activation: str = "relu", dropout: float = 0.0
    ):
        super().__init__()
        self.check(d_model, d_ff, activation)
        self.activation = activation
        self.w_1 = nn.Linear(d_model, d_ff)
        self.v = nn.Linear(d_model, d_ff) if activation.endswith("glu") else None
        self.w_2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        hidden = self.ACTIVATIONS[self.activation](self.w_1(x))  # (..., d_ff)
        if self.v is not None:
            hidden = hidden * self.v(x)
        return self.w_2(self.dropout(hidden))


__all__ = [
    'PositionwiseFeedForward',
]
