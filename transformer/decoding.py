# Generated from book/decoding.md by tools/export.py: edit the chapter, not this file.
"""Greedy decoding with a key/value cache, and translation of sentences (§6 of the paper)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from tokenizers import Tokenizer
from torch import Tensor

from transformer.attention import padding_mask
from transformer.data import BOS, EOS, PAD
from transformer.model import Transformer


@torch.no_grad()
def greedy_decode(
    model: Transformer, src: Tensor, max_len: int | None = None, use_cache: bool = True
) -> Tensor:
    """The most probable token at each step: src (batch, n) -> ids (batch, <= max_len).

    The output excludes <bos>; after a sentence's <eos> it holds <pad>. max_len defaults
    to n + 50. use_cache=False recomputes the whole prefix every step (for comparison).
    """
    max_len = src.size(1) + 50 if max_len is None else max_len
    memory, memory_mask = model.encode(src), padding_mask(src, model.config.pad_id)
    cache = model.new_cache() if use_cache else None
    prefix = torch.full((src.size(0), 1), BOS, dtype=torch.long, device=src.device)
    finished = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
    for _ in range(max_len):
        logits = model.decode(
            prefix[:, -1:] if use_cache else prefix, memory, memory_mask, cache
        )[:, -1]
        token = logits.argmax(-1).masked_fill(finished, PAD)
        prefix = torch.cat([prefix, token[:, None]], dim=1)
        finished |= token == EOS
        if finished.all():
            break
    return prefix[:, 1:]


@torch.no_grad()
def translate(
    model: Transformer,
    tokenizer: Tokenizer,
    sentences: Sequence[str],
    batch_size: int = 64,
) -> list[str]:
    """Greedy translations of `sentences`, in their order."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    encoded = [
        e.ids + [EOS]
        for e in tokenizer.encode_batch(list(sentences), add_special_tokens=False)
    ]
    order = sorted(range(len(encoded)), key=lambda i: len(encoded[i]))
    outputs: list[str] = [""] * len(encoded)
    for start in range(0, len(order), batch_size):
        chunk = order[start : start + batch_size]
        src = torch.full(
            (len(chunk), max(len(encoded[i]) for i in chunk)), PAD, dtype=torch.long
        )
        for row, i in enumerate(chunk):
            src[row, : len(encoded[i])] = torch.tensor(encoded[i])
        for i, ids in zip(chunk, greedy_decode(model, src.to(device)).tolist()):
            outputs[i] = tokenizer.decode(ids[: ids.index(EOS)] if EOS in ids else ids)
    model.train(was_training)
    return outputs


__all__ = ['greedy_decode', 'translate']
