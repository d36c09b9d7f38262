# Generated from book/model.md by tools/export.py: edit the chapter.
"""Encoder and decoder stacks, the full Transformer and its configuration (§3.1 of the
paper)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields

import torch
from torch import Tensor, nn

from transformer.attention import (
    KeyValueCache,
    MultiHeadAttention,
    head_sizes,
    padding_mask,
    segment_mask,
)
from transformer.embeddings import Embeddings, OutputProjection, check_token_ids
from transformer.fast import Dropout, LayerNorm
from transformer.feed_forward import PositionwiseFeedForward
from transformer.positional import (
    LearnedPositionalEmbedding,
    SinusoidalPositionalEncoding,
    segment_positions,
)
from transformer.presets import PAPER, PRESETS, TABLE3


@dataclass
class TransformerConfig:
    """Hyperparameters of the Transformer; the defaults are the paper's base model.

    d_k and d_v default to d_model // n_heads. dropout is P_drop (§5.4), applied to
    every sub-layer output and to the sums of embeddings and positional encodings;
    attention_dropout and activation_dropout (inside attention and the FFN) are 0 in
    the paper.
    norm_first=False is the paper's post-LN, LayerNorm(x + Sublayer(x)); True is pre-LN.
    share_embeddings ties the source and target embeddings (one shared vocabulary);
    tie_output ties the target embedding and the pre-softmax projection.
    """

    src_vocab_size: int = PAPER.vocab_size
    tgt_vocab_size: int = PAPER.vocab_size
    d_model: int = 512
    n_heads: int = 8
    d_ff: int = 2048
    n_layers: int = 6
    d_k: int | None = None
    d_v: int | None = None
    dropout: float = 0.1
    attention_dropout: float = 0.0
    activation_dropout: float = 0.0
    activation: str = "relu"
    norm_first: bool = False
    positional: str = "sinusoidal"
    max_len: int = 1024
    share_embeddings: bool = True
    tie_output: bool = True
    pad_id: int = 0
    layer_norm_eps: float = 1e-6

    def __post_init__(self) -> None:
        self._check_sizes()
        self._check_rates()
        self._check_choices()

    def _check_sizes(self) -> None:
        """Widths, counts and lengths: positive integers; heads that divide d_model."""
        for name in ("src_vocab_size", "tgt_vocab_size", "n_layers", "max_len"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"{name} must be a positive integer; got {value!r}")
        head_sizes(self.d_model, self.n_heads, self.d_k, self.d_v)
        PositionwiseFeedForward.check(self.d_model, self.d_ff, self.activation)

    def _check_rates(self) -> None:
        """Dropout rates in [0, 1), switches True or False, a positive LayerNorm
        epsilon."""
        for name in ("dropout", "attention_dropout", "activation_dropout"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
                raise ValueError(f"{name} must be in [0, 1); got {value!r}")
        for name in ("norm_first", "share_embeddings", "tie_output"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(
                    f"{name} must be True or False; got {getattr(self, name)!r}"
                )
        eps = self.layer_norm_eps
        if not isinstance(eps, (int, float)) or not 0 < eps < float("inf"):
            raise ValueError(
                f"layer_norm_eps must be a positive finite number; got {eps!r}"
            )

    def _check_choices(self) -> None:
        """Named options, and what they need of the sizes."""
        if self.positional not in ("sinusoidal", "learned"):
            raise ValueError(
                f"positional must be 'sinusoidal' or 'learned'; got {self.positional!r}"
            )
        if self.positional == "sinusoidal" and self.d_model % 2 != 0:
            raise ValueError(
                f"sinusoidal positions need an even d_model; got {self.d_model}"
            )
        if self.share_embeddings and self.src_vocab_size != self.tgt_vocab_size:
            raise ValueError(
                "share_embeddings needs one shared vocabulary; "
                f"got src_vocab_size={self.src_vocab_size} "
                f"and tgt_vocab_size={self.tgt_vocab_size} (set share_embeddings=False)"
            )
        if not isinstance(self.pad_id, int) or not 0 <= self.pad_id < min(
            self.src_vocab_size, self.tgt_vocab_size
        ):
            raise ValueError(
                "pad_id must be a token id of both vocabularies, "
                f"in [0, {min(self.src_vocab_size, self.tgt_vocab_size)}); "
                f"got {self.pad_id}"
            )

    @classmethod
    def preset(cls, name: str, **overrides) -> TransformerConfig:
        """The model of the preset `name` (PRESETS: tiny, small, base or big), with
        `overrides`."""
        if name not in PRESETS:
            names = ", ".join(PRESETS)
            raise ValueError(f"preset must be one of {names}; got {name!r}")
        return cls(**{**PRESETS[name].model, **overrides})

    @classmethod
    def base(cls, **overrides) -> TransformerConfig:
        """The paper's base model (63M parameters): N=6, d_model=512, d_ff=2048, h=8."""
        return cls.preset("base", **overrides)

    @classmethod
    def big(cls, **overrides) -> TransformerConfig:
        """The paper's big model (EN-DE): d_model=1024, d_ff=4096, h=16, P_drop=0.3."""
        return cls.preset("big", **overrides)

    @classmethod
    def small(cls, **overrides) -> TransformerConfig:
        """A model for a laptop CPU: N=3, d_model=256, d_ff=1024, h=4."""
        return cls.preset("small", **overrides)

    @classmethod
    def tiny(cls, **overrides) -> TransformerConfig:
        """Wu et al.'s Transformer-tiny, pre-LN: N=4, d_model=128, d_ff=256, h=4."""
        return cls.preset("tiny", **overrides)

    @classmethod
    def table3(cls, **overrides) -> dict[str, TransformerConfig]:
        """The architectural rows of Table 3 (TABLE3), each a variation of the base
        model, by label."""
        return {label: cls(**{**row, **overrides}) for label, row in TABLE3.items()}

    def to_dict(self) -> dict:
        """The fields as a plain dict (what a checkpoint stores)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


class SublayerConnection(nn.Module):
    """A residual connection around a sub-layer, with dropout and layer normalization.

    post-LN (the paper): LayerNorm(x + Dropout(Sublayer(x)));
    pre-LN (norm_first):  x + Dropout(Sublayer(LayerNorm(x))).
    Shape: (batch, n, d_model) -> (batch, n, d_model).
    """

    def __init__(
        self, d_model: int, dropout: float, norm_first: bool = False, eps: float = 1e-6
    ):
        super().__init__()
        self.norm = LayerNorm(d_model, eps=eps)
        self.dropout = Dropout(dropout)
        self.norm_first = norm_first

    def forward(self, x: Tensor, sublayer: Callable[[Tensor], Tensor]) -> Tensor:
        if self.norm_first:
            return x + self.dropout(sublayer(self.norm(x)))
        return self.norm(x + self.dropout(sublayer(x)))


def to_autocast_dtype(x: Tensor) -> Tensor:
    """x in autocast's dtype where autocast is on for x's device; x otherwise."""
    device = x.device.type  # is_autocast_available: a graph break in torch 2.11
    if device != "meta" and torch.is_autocast_enabled(device):
        return x.to(torch.get_autocast_dtype(device))
    return x


def _attention(config: TransformerConfig) -> MultiHeadAttention:
    return MultiHeadAttention(
        config.d_model, config.n_heads, config.d_k, config.d_v, config.attention_dropout
    )


def _sublayer(config: TransformerConfig) -> SublayerConnection:
    return SublayerConnection(
        config.d_model, config.dropout, config.norm_first, config.layer_norm_eps
    )


class EncoderLayer(nn.Module):
    """Self-attention then the FFN, each inside a SublayerConnection.

    Shapes: x (batch, n, d_model); mask broadcastable to (batch, h, n, n), True = may
    attend.
    """

    def __init__(self, config: TransformerConfig):
        super().__init__()
        self.self_attn = _attention(config)
        self.feed_forward = PositionwiseFeedForward(
            config.d_model, config.d_ff, config.activation, config.activation_dropout
        )
        self.sublayers = nn.ModuleList([_sublayer(config) for _ in range(2)])

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        x = self.sublayers[0](x, lambda x: self.self_attn(x, x, x, mask=mask)[0])
        return self.sublayers[1](x, self.feed_forward)


class Encoder(nn.Module):
    """N encoder layers, and a final LayerNorm when pre-LN.

    Shape: (batch, n, d_model) -> (batch, n, d_model).
    """

    def __init__(self, config: TransformerConfig):
        super().__init__()
        self.layers = nn.ModuleList(
            [EncoderLayer(config) for _ in range(config.n_layers)]
        )
        self.norm = (
            LayerNorm(config.d_model, eps=config.layer_norm_eps)
            if config.norm_first
            else nn.Identity()
        )

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        for layer in self.layers:
            x = layer(x, mask)
        return self.norm(x)


class DecoderLayer(nn.Module):
    """Masked self-attention, encoder-decoder attention, then the FFN, each in a
    SublayerConnection.

    Shapes: x (batch, m, d_model); memory (batch, n, d_model); memory_mask broadcastable
    to (batch, h, m, n), True = may attend. cache: (self-attention cache,
    cross-attention cache), with x holding only the new positions. self_mask (packed
    rows): the self-attention's mask, to which the causal mask is added.
    """

    def __init__(self, config: TransformerConfig):
        super().__init__()
        self.self_attn = _attention(config)
        self.cross_attn = _attention(config)
        self.feed_forward = PositionwiseFeedForward(
            config.d_model, config.d_ff, config.activation, config.activation_dropout
        )
        self.sublayers = nn.ModuleList([_sublayer(config) for _ in range(3)])

    def forward(
        self,
        x: Tensor,
        memory: Tensor,
        memory_mask: Tensor | None = None,
        cache: tuple[KeyValueCache, KeyValueCache] | None = None,
        self_mask: Tensor | None = None,
    ) -> Tensor:
        self_cache, cross_cache = cache if cache is not None else (None, None)
        x = self.sublayers[0](
            x,
            lambda x: self.self_attn(
                x, x, x, mask=self_mask, is_causal=True, cache=self_cache
            )[0],
        )
        x = self.sublayers[1](
            x,
            lambda x: self.cross_attn(
                x, memory, memory, mask=memory_mask, cache=cross_cache
            )[0],
        )
        return self.sublayers[2](x, self.feed_forward)


class Decoder(nn.Module):
    """N decoder layers, and a final LayerNorm when pre-LN.

    Shape: (batch, m, d_model) -> (batch, m, d_model).
    """

    def __init__(self, config: TransformerConfig):
        super().__init__()
        self.layers = nn.ModuleList(
            [DecoderLayer(config) for _ in range(config.n_layers)]
        )
        self.norm = (
            LayerNorm(config.d_model, eps=config.layer_norm_eps)
            if config.norm_first
            else nn.Identity()
        )

    def forward(
        self,
        x: Tensor,
        memory: Tensor,
        memory_mask: Tensor | None = None,
        cache: list[tuple[KeyValueCache, KeyValueCache]] | None = None,
        self_mask: Tensor | None = None,
    ) -> Tensor:
        for i, layer in enumerate(self.layers):
            layer_cache = None if cache is None else cache[i]
            x = layer(x, memory, memory_mask, layer_cache, self_mask)
        return self.norm(x)


class Transformer(nn.Module):
    """The encoder-decoder Transformer of "Attention Is All You Need".

    Shapes: src (batch, n) and tgt (batch, m) token ids, right-padded with
    config.pad_id; forward returns logits (batch, m, tgt_vocab_size).
    """

    def __init__(self, config: TransformerConfig):
        super().__init__()
        self.config = config
        self.src_embed = Embeddings(config.src_vocab_size, config.d_model)
        self.tgt_embed = (
            self.src_embed
            if config.share_embeddings
            else Embeddings(config.tgt_vocab_size, config.d_model)
        )
        positions = (config.d_model, config.max_len)
        if config.positional == "sinusoidal":  # one table of encodings for both sides
            shared = SinusoidalPositionalEncoding(*positions)
            self.src_positions = self.tgt_positions = shared
        else:
            self.src_positions = LearnedPositionalEmbedding(*positions)
            self.tgt_positions = LearnedPositionalEmbedding(*positions)
        self.dropout = Dropout(config.dropout)
        self.encoder = Encoder(config)
        self.decoder = Decoder(config)
        stacks = [*self.encoder.modules(), *self.decoder.modules()]
        for module in stacks:
            if isinstance(module, nn.Linear):
                nn.init.xavier_uniform_(module.weight)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
        for module in stacks:  # W^Q, W^K and W^V Xavier-initialized each on its own
            if isinstance(module, MultiHeadAttention):
                module.reset_parameters()
        self.output = OutputProjection(
            config.d_model,
            config.tgt_vocab_size,
            self.tgt_embed if config.tie_output else None,
        )
        if not config.tie_output:
            nn.init.normal_(self.output.linear.weight, std=config.d_model**-0.5)

    def _check_ids(self, tokens: Tensor, name: str, check_range: bool) -> None:
        if tokens.dim() != 2:
            raise ValueError(
                f"{name} must be token ids of shape (batch, length); "
                f"got shape {tuple(tokens.shape)}"
            )
        if tokens.size(1) == 0:
            raise ValueError(
                f"{name} must hold at least one token; got shape {tuple(tokens.shape)}"
            )
        if check_range:
            vocab_size = getattr(self.config, f"{name}_vocab_size")  # name: src or tgt
            check_token_ids(tokens, vocab_size, name)

    def encode(self, src: Tensor, check_ids: bool = True) -> Tensor:
        """Source ids (batch, n) -> encoder output `memory` (batch, n, d_model), in
        autocast's dtype under autocast (decode it under the same autocast).

        check_ids=False skips the range check of the ids (see Embeddings).
        """
        self._check_ids(src, "src", check_ids)
        x = self.dropout(self.src_positions(self.src_embed(src, check_ids=False)))
        return self.encoder(to_autocast_dtype(x), padding_mask(src, self.config.pad_id))

    def decode(
        self,
        tgt: Tensor,
        memory: Tensor,
        memory_mask: Tensor | None = None,
        cache: list[tuple[KeyValueCache, KeyValueCache]] | None = None,
        check_ids: bool = True,
        project: bool = True,
    ) -> Tensor:
        """Target ids (batch, m), memory (batch, n, d_model) -> logits (batch, m,
        tgt_vocab).

        memory_mask is padding_mask(src, pad_id), (batch, 1, 1, n). With a cache from
        new_cache(), tgt holds only the tokens after those already decoded.
        project=False: the decoder's output (batch, m, d_model), before the output
        projection (for a loss that applies it itself: fast.output_loss).
        """
        self._check_ids(tgt, "tgt", check_ids)
        if (
            memory.dim() != 3
            or memory.size(0) != tgt.size(0)
            or memory.size(2) != self.config.d_model
        ):
            raise ValueError(
                f"memory must have shape (batch={tgt.size(0)}, n, "
                f"d_model={self.config.d_model}); got {tuple(memory.shape)}"
            )
        start = 0 if cache is None else cache[0][0].steps
        x = self.tgt_embed(tgt, check_ids=False)
        x = self.dropout(self.tgt_positions(x, start=start))
        y = self.decoder(to_autocast_dtype(x), memory, memory_mask, cache)
        return self.output(y) if project else y

    def forward(
        self, src: Tensor, tgt: Tensor, check_ids: bool = True,
        segments: tuple[Tensor, Tensor] | None = None, project: bool = True,
    ) -> Tensor:
        """Source ids (batch, n), shifted target ids (batch, m) -> logits (batch, m,
        tgt_vocab). segments: (source, target) sentence numbers of packed rows (see
        Several sentences in one row); project: see decode."""
        if src.dim() == 2 and tgt.dim() == 2 and src.size(0) != tgt.size(0):
            raise ValueError(
                f"src and tgt must have the same batch size; got {src.size(0)} and "
                f"{tgt.size(0)}"
            )
        if segments is not None:
            return self._packed(src, tgt, *segments, check_ids, project)
        memory = self.encode(src, check_ids)
        mask = padding_mask(src, self.config.pad_id)
        return self.decode(tgt, memory, mask, check_ids=check_ids, project=project)

    def new_cache(self) -> list[tuple[KeyValueCache, KeyValueCache]]:
        """Empty key/value caches for incremental decoding: (self, cross) for each
        decoder layer."""
        layers = self.decoder.layers
        return [(KeyValueCache(), KeyValueCache(static=True)) for _ in layers]

    def _packed(
        self, src: Tensor, tgt: Tensor, src_segments: Tensor, tgt_segments: Tensor,
        check_ids: bool = True, project: bool = True,
    ) -> Tensor:
        """forward on packed rows: ids and their segments, (batch, n) and (batch, m)."""
        sides = (("src", src, src_segments), ("tgt", tgt, tgt_segments))
        for name, ids, segments in sides:
            self._check_ids(ids, name, check_ids)
            if segments.shape != ids.shape:
                raise ValueError(
                    f"{name}_segments must have the shape of {name} "
                    f"{tuple(ids.shape)}; got {tuple(segments.shape)}"
                )
        x = self.src_embed(src, check_ids=False)
        x = self.src_positions(x, positions=segment_positions(src_segments))
        x = to_autocast_dtype(self.dropout(x))
        memory = self.encoder(x, segment_mask(src_segments, src_segments))
        y = self.tgt_embed(tgt, check_ids=False)
        y = self.tgt_positions(y, positions=segment_positions(tgt_segments))
        cross = segment_mask(tgt_segments, src_segments)
        own = segment_mask(tgt_segments, tgt_segments)
        y = to_autocast_dtype(self.dropout(y))
        y = self.decoder(y, memory, cross, self_mask=own)
        return self.output(y) if project else y


__all__ = [
    'TransformerConfig',
    'SublayerConnection',
    'to_autocast_dtype',
    'EncoderLayer',
    'Encoder',
    'DecoderLayer',
    'Decoder',
    'Transformer',
]
