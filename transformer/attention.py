# Generated from book/attention.md by tools/export.py: edit the chapter.
"""Scaled dot-product attention, masks and multi-head attention (§3.2 of the paper).

Mask convention, for the whole package: a boolean mask is True where a query MAY attend
to a key, as in torch.nn.functional.scaled_dot_product_attention (and the opposite of
the key_padding_mask of torch.nn.MultiheadAttention, which is True where a key is
ignored).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from transformer.fast import FastPaths, attention_for_cpu_training


def scaled_dot_product_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    mask: Tensor | None = None,
    dropout_p: float = 0.0,
) -> tuple[Tensor, Tensor]:
    """softmax(Q K^T / sqrt(d_k)) V, the paper's equation (1), written out.

    Shapes: query (..., n_q, d_k), key (..., n_k, d_k), value (..., n_k, d_v); mask is
    boolean, broadcastable to (..., n_q, n_k), True where a query may attend to a key.
    Returns the output (..., n_q, d_v) and the attention weights (..., n_q, n_k).
    """
    d_k = query.size(-1)
    scores = query @ key.transpose(-2, -1) / math.sqrt(d_k)  # (..., n_q, n_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = scores.softmax(dim=-1)
    if dropout_p > 0.0:
        weights = F.dropout(weights, p=dropout_p)
    return weights @ value, weights


def padding_mask(tokens: Tensor, pad_id: int) -> Tensor:
    """True at real tokens: ids (batch, n) -> mask (batch, 1, 1, n).

    The mask broadcasts over the heads and the queries.
    """
    return (tokens != pad_id)[:, None, None, :]


def causal_mask(
    n_queries: int, n_keys: int | None = None, device: torch.device | None = None
) -> Tensor:
    """True where query i may attend to key j, i.e. j <= i: a (n_queries, n_keys) lower
    triangle.

    With n_keys > n_queries the queries are the newest n_queries positions of a sequence
    of n_keys (incremental decoding): query i sits at position i + n_keys - n_queries.
    """
    n_keys = n_queries if n_keys is None else n_keys
    return torch.ones(n_queries, n_keys, dtype=torch.bool, device=device).tril(
        n_keys - n_queries
    )


def local_mask(n: int, r: int, device: torch.device | None = None) -> Tensor:
    """True where |i - j| <= r: restricted self-attention (§4) over the neighbourhood
    of 2r + 1 positions centred on each query (r is the half-width; the paper's size is
    2r + 1).
    """
    if r < 0:
        raise ValueError(f"the neighbourhood r must be >= 0; got {r}")
    position = torch.arange(n, device=device)
    return (position[:, None] - position[None, :]).abs() <= r


def head_sizes(
    d_model: int, n_heads: int, d_k: int | None = None, d_v: int | None = None
) -> tuple[int, int]:
    """(d_k, d_v) of h = n_heads heads on d_model: each d_model / h unless given
    (§3.2.2). Raises ValueError on sizes that are not positive integers, or on a
    d_model that h does not divide when d_k or d_v is left to it."""
    for name, value in (("d_model", d_model), ("n_heads", n_heads)):
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise ValueError(f"{name} must be a positive integer; got {value!r}")
    for name, value in (("d_k", d_k), ("d_v", d_v)):
        if value is not None and (
            not isinstance(value, int) or isinstance(value, bool) or value <= 0
        ):
            raise ValueError(
                f"{name} must be a positive integer or None (d_model // n_heads); "
                f"got {value!r}"
            )
    if (d_k is None or d_v is None) and d_model % n_heads != 0:
        raise ValueError(
            "d_model must be divisible by n_heads to give d_k = d_v = "
            f"d_model / n_heads; got d_model={d_model}, n_heads={n_heads} "
            "(or pass d_k and d_v explicitly)"
        )
    return d_model // n_heads if d_k is None else d_k, (
        d_model // n_heads if d_v is None else d_v
    )


class MultiHeadAttention(nn.Module):
    """Multi-head attention, MultiHead(Q, K, V) = Concat(head_1..head_h) W^O.

    Args:
        d_model: width of the inputs and of the output.
        n_heads: number of heads h.
        d_k, d_v: width of each head's queries/keys and values; default d_model // h.
        dropout: dropout on the attention weights (0 in the paper).
        bias: whether the projections have biases.

    Shapes: query (batch, n_q, d_model); key and value (batch, n_k, d_model); mask
    boolean, broadcastable to (batch, h, n_q, n_k), True where a query may attend to a
    key. Returns (output (batch, n_q, d_model), weights (batch, h, n_q, n_k) or None).
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_k: int | None = None,
        d_v: int | None = None,
        dropout: float = 0.0,
        bias: bool = True,
    ):
        super().__init__()
        self.d_k, self.d_v = head_sizes(d_model, n_heads, d_k, d_v)
        self.d_model, self.n_heads = d_model, n_heads
        self.dropout = dropout
        # W^Q, W^K and W^V stacked: rows [0, h d_k), [h d_k, 2 h d_k),
        # [2 h d_k, 2 h d_k + h d_v)
        self.sizes = [n_heads * self.d_k, n_heads * self.d_k, n_heads * self.d_v]
        self.w_qkv = nn.Linear(d_model, sum(self.sizes), bias=bias)
        self.w_o = nn.Linear(n_heads * self.d_v, d_model, bias=bias)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Xavier-uniform W^Q, W^K, W^V (each on its own) and W^O; zero biases."""
        for block in self.w_qkv.weight.split(self.sizes):
            nn.init.xavier_uniform_(block)
        nn.init.xavier_uniform_(self.w_o.weight)
        for linear in (self.w_qkv, self.w_o):
            if linear.bias is not None:
                nn.init.zeros_(linear.bias)

    def _project(self, x: Tensor, first: int, last: int) -> Tensor:
        """x times the stacked blocks first..last of (W^Q, W^K, W^V), in one matrix
        product."""
        start, stop = sum(self.sizes[:first]), sum(self.sizes[: last + 1])
        bias = self.w_qkv.bias
        return F.linear(
            x, self.w_qkv.weight[start:stop], None if bias is None else bias[start:stop]
        )

    def _split_heads(self, x: Tensor, d: int) -> Tensor:
        batch, n, _ = x.shape
        return x.view(batch, n, self.n_heads, d).transpose(1, 2)  # (batch, h, n, d)

    def _heads(
        self, query: Tensor, key: Tensor, value: Tensor, cache: KeyValueCache | None
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Q W^Q, K W^K, V W^V split into heads, (batch, h, n, d), keys and values from
        the cache where it holds them."""
        if cache is not None and cache.static and cache.key is not None:
            q, (k, v) = self._project(query, 0, 0), (cache.key, cache.value)
            return self._split_heads(q, self.d_k), k, v
        if query is key and key is value:  # self-attention: one product
            q, k, v = self._project(query, 0, 2).split(self.sizes, -1)
        elif key is value:  # encoder-decoder attention: one product for K and V
            q = self._project(query, 0, 0)
            k, v = self._project(key, 1, 2).split(self.sizes[1:], -1)
        else:
            inputs = (query, key, value)
            q, k, v = (self._project(x, i, i) for i, x in enumerate(inputs))
        k, v = self._split_heads(k, self.d_k), self._split_heads(v, self.d_v)
        if cache is not None:  # the new positions join those held
            k, v = cache.append(k, v)
        return self._split_heads(q, self.d_k), k, v

    def _check_inputs(self, query: Tensor, key: Tensor, value: Tensor) -> None:
        for name, x in (("query", query), ("key", key), ("value", value)):
            if x.dim() != 3 or x.size(-1) != self.d_model:
                raise ValueError(
                    f"{name} must have shape (batch, length, d_model={self.d_model}); "
                    f"got {tuple(x.shape)}"
                )
        same_batch = query.size(0) == key.size(0) == value.size(0)
        if not same_batch or key.size(1) != value.size(1):
            shapes = [tuple(x.shape) for x in (query, key, value)]
            raise ValueError(
                "query, key and value must share the batch size, and key and value "
                f"the length; got {', '.join(map(str, shapes))}"
            )

    def _check_mask(self, mask: Tensor, n_q: int, n_k: int, batch: int) -> None:
        expected = (batch, self.n_heads, n_q, n_k)
        if mask.dtype != torch.bool:
            raise TypeError(
                "mask must be a boolean tensor (True = may attend); "
                f"got dtype {mask.dtype}"
            )
        if mask.dim() > 4 or any(
            m not in (1, e) for m, e in zip(reversed(mask.shape), reversed(expected))
        ):
            raise ValueError(
                f"mask must broadcast to (batch, heads, query, key) = {expected}; "
                f"got shape {tuple(mask.shape)}"
            )

    def forward(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        mask: Tensor | None = None,
        is_causal: bool = False,
        cache: KeyValueCache | None = None,
        need_weights: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """Attend from `query` to `key`/`value`; is_causal adds the causal mask.

        With a cache, key and value hold only the new positions (self-attention) or are
        ignored after the first step (static cache of encoder-decoder attention).
        """
        self._check_inputs(query, key, value)
        batch, n_q, _ = query.shape
        q, k, v = self._heads(query, key, value, cache)  # Q W^Q_i, K W^K_i, V W^V_i
        if mask is not None:
            self._check_mask(mask, n_q, k.size(2), batch)
        heads, weights = attend(
            q, k, v, mask, is_causal, self.dropout, self.training, need_weights
        )
        concat = heads.transpose(1, 2).reshape(batch, n_q, self.n_heads * self.d_v)
        return self.w_o(concat), weights


def attend(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    mask: Tensor | None = None,
    is_causal: bool = False,
    dropout: float = 0.0,
    training: bool = False,
    need_weights: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """Attention(Q, K, V) of heads (batch, h, n, d), by the kernel that suits the call:
    the written-out function if the weights are wanted, attention_for_cpu_training
    when training on a CPU, PyTorch's fused kernel otherwise. Returns (output, weights
    or None); dropout on the weights applies only when training."""
    n_q, n_k = query.size(-2), key.size(-2)
    cpu_training = training and query.device.type == "cpu" and torch.is_grad_enabled()
    cpu_training = cpu_training and FastPaths.enabled
    dropout_p = dropout if training else 0.0
    written_out = need_weights or cpu_training
    if is_causal and (mask is not None or n_q != n_k or written_out):
        causal = causal_mask(n_q, n_k, device=query.device)
        mask, is_causal = (causal if mask is None else mask & causal), False
    if need_weights:
        return scaled_dot_product_attention(query, key, value, mask, dropout_p)
    if cpu_training:
        return attention_for_cpu_training(query, key, value, mask, dropout_p), None
    output = F.scaled_dot_product_attention(
        query, key, value, attn_mask=mask, dropout_p=dropout_p, is_causal=is_causal
    )
    return output, None


@dataclass
class KeyValueCache:
    """Projected keys and values of one attention layer, kept between decoding steps.

    Self-attention appends the new positions at every step (static=False);
    encoder-decoder attention projects the encoder output on the first step and reuses
    it (static=True).
    """

    static: bool = False
    key: Tensor | None = None  # (batch, h, steps, d_k)
    value: Tensor | None = None  # (batch, h, steps, d_v)

    @property
    def steps(self) -> int:
        """Positions held. A size of the key tensor, so that under torch.export it stays
        symbolic; len() must return a Python int and would fix it to the example's."""
        return 0 if self.key is None else self.key.size(2)

    def __len__(self) -> int:
        return self.steps

    def append(self, key: Tensor, value: Tensor) -> tuple[Tensor, Tensor]:
        """Add the new positions' keys and values (batch, h, new, d); returns all the
        positions held."""
        if self.key is not None:
            key = torch.cat([self.key, key], 2)
            value = torch.cat([self.value, value], 2)
        self.key, self.value = key, value
        return key, value

    def reorder(self, index: Tensor) -> None:
        """Keep the batch rows `index` (beam search: the hypotheses that survive a
        step)."""
        if self.key is not None:
            self.key, self.value = self.key.index_select(
                0, index
            ), self.value.index_select(0, index)


def segment_mask(query_segments: Tensor, key_segments: Tensor) -> Tensor:
    """True where a query may attend to a key of a packed row: the same sentence, or a
    query at padding (segment 0). Segments (batch, n_q) and (batch, n_k) number the
    sentences of each row -> mask (batch, 1, n_q, n_k)."""
    query, key = query_segments[:, None, :, None], key_segments[:, None, None, :]
    return (query == key) | (query == 0)


__all__ = [
    'scaled_dot_product_attention',
    'padding_mask',
    'causal_mask',
    'local_mask',
    'head_sizes',
    'MultiHeadAttention',
    'attend',
    'KeyValueCache',
    'segment_mask',
]
