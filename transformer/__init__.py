"""The Transformer of "Attention Is All You Need" (Vaswani et al., 2017).

Each module is generated from one chapter of the book (see the first line of each file).
"""

from .attention import scaled_dot_product_attention, padding_mask, causal_mask, KeyValueCache, MultiHeadAttention
from .embeddings import check_token_ids, Embeddings, OutputProjection
from .feed_forward import PositionwiseFeedForward
from .model import TransformerConfig, SublayerConnection, EncoderLayer, Encoder, DecoderLayer, Decoder, Transformer
from .positional import sinusoidal_positional_encoding, SinusoidalPositionalEncoding, LearnedPositionalEmbedding

__all__ = ['scaled_dot_product_attention', 'padding_mask', 'causal_mask', 'KeyValueCache', 'MultiHeadAttention', 'check_token_ids', 'Embeddings', 'OutputProjection', 'PositionwiseFeedForward', 'TransformerConfig', 'SublayerConnection', 'EncoderLayer', 'Encoder', 'DecoderLayer', 'Decoder', 'Transformer', 'sinusoidal_positional_encoding', 'SinusoidalPositionalEncoding', 'LearnedPositionalEmbedding']
