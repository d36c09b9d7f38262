# Generated from book/data.md by tools/export.py: edit the chapter.
"""Batches as tensors: the padded Batch, and a tokenized split held in flat arrays from
which batches are gathered, padded or packed."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields

import numpy as np
import torch
from torch import Tensor

from transformer.tokenizer import BOS, EOS, PAD


@dataclass
class Batch:
    """src (batch, n), tgt_in (batch, m) = <bos> y, tgt_out (batch, m) = y <eos>;
    right-padded.

    n_tokens: the target tokens the loss is computed on (padding excluded).
    src_segments, tgt_segments: for packed rows (see Packing), the sentence number of
    each position, 0 at padding; None for one sentence per row.
    """

    src: Tensor
    tgt_in: Tensor
    tgt_out: Tensor
    n_tokens: int
    src_segments: Tensor | None = None
    tgt_segments: Tensor | None = None

    @property
    def segments(self) -> tuple[Tensor, Tensor] | None:
        """(src_segments, tgt_segments) of packed rows, else None."""
        if self.src_segments is None:
            return None
        return self.src_segments, self.tgt_segments

    def _apply(self, function: Callable[[Tensor], Tensor]) -> Batch:
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        return Batch(**{
            k: function(v) if isinstance(v, Tensor) else v for k, v in values.items()
        })

    def to(self, device: torch.device | str) -> Batch:
        return self._apply(lambda t: t.to(device, non_blocking=True))

    def pin_memory(self) -> Batch:
        """A copy in page-locked memory, from which copies to a GPU run
        asynchronously."""
        return self._apply(Tensor.pin_memory)


def _pad(sequences: Sequence[list[int]]) -> Tensor:
    out = torch.full((len(sequences), max(len(s) for s in sequences)), PAD)
    for row, sequence in enumerate(sequences):
        out[row, : len(sequence)] = torch.tensor(sequence, dtype=torch.long)
    return out


def collate(pairs: Sequence[tuple[list[int], list[int]]]) -> Batch:
    """Token-id pairs (without special tokens) -> a padded Batch, one sentence at a
    time."""
    return Batch(
        src=_pad([s + [EOS] for s, _ in pairs]),
        tgt_in=_pad([[BOS] + t for _, t in pairs]),
        tgt_out=_pad([t + [EOS] for _, t in pairs]),
        n_tokens=sum(len(t) + 1 for _, t in pairs),
    )


def pair_lengths(pairs: Sequence[tuple[list[int], list[int]]]) -> list[tuple[int, int]]:
    """Lengths with the special tokens: (len(src) + 1, len(tgt) + 1)."""
    return [(len(s) + 1, len(t) + 1) for s, t in pairs]


def round_up(n: np.ndarray | int, multiple: int) -> np.ndarray | int:
    """n rounded up to a multiple of `multiple` (elementwise on an array)."""
    return -(-n // multiple) * multiple


@dataclass
class TokenizedSplit:
    """The token ids of a split's pairs (special tokens not stored), as flat arrays.

    Pair i's source is src_ids[src_offsets[i] : src_offsets[i + 1]], its target
    likewise; the id arrays may be memory-mapped files.
    """

    src_ids: np.ndarray
    src_offsets: np.ndarray  # int64, len(self) + 1 entries
    tgt_ids: np.ndarray
    tgt_offsets: np.ndarray

    @classmethod
    def from_pairs(cls, pairs: Sequence[tuple[list[int], list[int]]]) -> TokenizedSplit:
        sides = []
        for side in (0, 1):
            sentences = [pair[side] for pair in pairs]
            lengths = np.array([len(s) for s in sentences], dtype=np.int64)
            offsets = np.concatenate([[0], np.cumsum(lengths)])
            sides += [
                np.array([i for s in sentences for i in s], dtype=np.int64),
                offsets,
            ]
        return cls(*sides)

    def __len__(self) -> int:
        return len(self.src_offsets) - 1

    def lengths(self) -> np.ndarray:
        """(n, 2): source and target lengths with their special tokens (<eos>,
        <bos>)."""
        return np.stack([np.diff(self.src_offsets), np.diff(self.tgt_offsets)], 1) + 1

    def batch(self, indices: np.ndarray, pad_multiple: int = 1) -> Batch:
        """The pairs `indices` as a Batch, lengths padded up to a multiple of
        pad_multiple."""
        indices = np.asarray(indices, dtype=np.int64)
        src, src_len = _gather(self.src_ids, self.src_offsets, indices, 0, pad_multiple)
        tgt_out, tgt_len = _gather(
            self.tgt_ids, self.tgt_offsets, indices, 0, pad_multiple
        )
        tgt_in, _ = _gather(self.tgt_ids, self.tgt_offsets, indices, 1, pad_multiple)
        rows = np.arange(len(indices))
        src[rows, src_len], tgt_out[rows, tgt_len], tgt_in[:, 0] = EOS, EOS, BOS
        tensors = (torch.from_numpy(a) for a in (src, tgt_in, tgt_out))
        return Batch(*tensors, n_tokens=int(tgt_len.sum()) + len(indices))

    def packed_batch(
        self, indices: np.ndarray, rows: np.ndarray, n_rows: int,
        row_lengths: tuple[int, int],
    ) -> Batch:
        """The pairs `indices` packed into n_rows rows of row_lengths (source, target)
        tokens, pair k in row rows[k], after the pairs before it in that row."""
        indices, rows = np.asarray(indices, np.int64), np.asarray(rows, np.int64)
        lengths = self.lengths()[indices]
        source = (self.src_ids, self.src_offsets, indices, rows,
                  _starts(lengths[:, 0], rows), (n_rows, row_lengths[0]))
        target = (self.tgt_ids, self.tgt_offsets, indices, rows,
                  _starts(lengths[:, 1], rows), (n_rows, row_lengths[1]))
        src, src_segments = _pack(*source, bos=False)
        tgt_in, tgt_segments = _pack(*target, bos=True)
        tgt_out, _ = _pack(*target, bos=False)
        n_tokens = int(lengths[:, 1].sum())
        return Batch(src, tgt_in, tgt_out, n_tokens, src_segments, tgt_segments)


def _gather(
    ids, offsets, indices, shift, pad_multiple
) -> tuple[np.ndarray, np.ndarray]:
    """Rows of `ids` for `indices`, placed from column `shift` in a PAD-filled array
    with one free column for the special token; returns the array and the row
    lengths."""
    starts, lengths = offsets[indices], offsets[indices + 1] - offsets[indices]
    width = round_up(int(lengths.max(initial=0)) + 1, pad_multiple)
    out = np.full((len(indices), width), PAD, dtype=np.int64)
    row = np.repeat(np.arange(len(indices)), lengths)
    column = np.arange(lengths.sum()) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    out[row, column + shift] = ids[np.repeat(starts, lengths) + column]
    return out, lengths


def _pack(ids, offsets, indices, rows, starts, shape, bos: bool):
    """Each pair's ids with <bos> before (bos) or <eos> after, at its row and start;
    returns the (rows, row_length) ids and segments."""
    first, lengths = offsets[indices], offsets[indices + 1] - offsets[indices] + 1
    pair = np.repeat(np.arange(len(indices)), lengths)
    place = np.arange(lengths.sum()) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    real = place >= 1 if bos else place < lengths[pair] - 1
    values = np.full(len(pair), BOS if bos else EOS, dtype=np.int64)
    values[real] = ids[first[pair[real]] + place[real] - bos]
    out, segments = np.full(shape, PAD, np.int64), np.zeros(shape, np.int64)
    at = rows[pair] * shape[1] + starts[pair] + place
    out.flat[at], segments.flat[at] = values, pair + 1
    return torch.from_numpy(out), torch.from_numpy(segments)


def _starts(lengths: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Where each pair starts in its row: after the pairs before it in that row."""
    by_row = np.argsort(rows, kind="stable")
    size = lengths[by_row]
    before = np.cumsum(size) - size
    new_row = np.r_[True, rows[by_row][1:] != rows[by_row][:-1]]
    starts = np.empty_like(before)
    starts[by_row] = before - np.maximum.accumulate(np.where(new_row, before, 0))
    return starts


__all__ = [
    'Batch',
    'collate',
    'pair_lengths',
    'round_up',
    'TokenizedSplit',
]
