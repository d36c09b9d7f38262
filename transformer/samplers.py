# Generated from book/data.md by tools/export.py: edit the chapter.
"""Which pairs form each batch: batches by token count, packed rows, each rank's share,
the stream of batches prepared ahead in a background thread, and a run's batch feed."""

from __future__ import annotations

import contextlib
import math
import queue
import threading
from collections.abc import Iterator, Sequence
from typing import Protocol

import numpy as np
import torch

from transformer.batches import Batch, TokenizedSplit, round_up
from transformer.devices import PAD_MULTIPLE, default_pin_memory


def _rank_share(batches: list, rank: int, world_size: int) -> list:
    """Every world_size-th batch from `rank` on, the same number for every rank (the
    last few batches of an epoch dropped)."""
    if world_size == 1:
        return batches
    if len(batches) < world_size:
        raise ValueError(
            f"{len(batches)} batches cannot be shared by {world_size} processes"
        )
    kept = len(batches) - len(batches) % world_size
    return batches[:kept][rank::world_size]


class TokenBatchSampler:
    """Batches of pair indices whose padded size stays within max_tokens per side.

    lengths: (source length, target length) per pair, special tokens included; an (n, 2)
    array or a sequence of pairs. Each rank of world_size gets every world_size-th batch
    (the same number on every rank).
    """

    def __init__(
        self,
        lengths: np.ndarray | Sequence[tuple[int, int]],
        max_tokens: int,
        shuffle: bool = True,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
        pad_multiple: int = 1,
    ):
        lengths = np.asarray(lengths, dtype=np.int64).reshape(-1, 2)
        self.width = round_up(
            lengths.max(axis=1), pad_multiple
        )  # padded size of a pair
        too_long = np.flatnonzero(self.width > max_tokens)
        if len(too_long):
            raise ValueError(
                f"max_tokens={max_tokens} is smaller than {len(too_long)} pair(s) "
                "alone "
                f"(the longest has {self.width.max()} tokens with padding); "
                "raise max_tokens or filter them"
            )
        if not 0 <= rank < world_size:
            raise ValueError(
                f"rank must be in [0, world_size={world_size}); got {rank}"
            )
        self.max_tokens, self.shuffle, self.seed = max_tokens, shuffle, seed
        self.rank, self.world_size, self.pad_multiple = rank, world_size, pad_multiple

    def __len__(self) -> int:
        return len(self.epoch(0))

    def batch(self, split: TokenizedSplit, indices: np.ndarray) -> Batch:
        """The tensors of one planned batch (see TokenizedSplit below)."""
        return split.batch(indices, self.pad_multiple)

    def epoch(self, epoch: int) -> list[np.ndarray]:
        """This rank's batches for one epoch, each an array of pair indices."""
        rng = np.random.default_rng([self.seed % 2**32, epoch])
        n = len(self.width)
        order = rng.permutation(n) if self.shuffle else np.arange(n)
        # sorted by width; ties stay shuffled
        order = order[np.argsort(self.width[order], kind="stable")]
        width = self.width[order]
        batches, start = [], 0
        # the padded size of the first k pairs from start: k * width[k - 1]
        while start < n:
            window = width[start : start + self.max_tokens // width[start]]
            padded = np.arange(1, len(window) + 1) * window  # increasing
            size = int(np.searchsorted(padded, self.max_tokens, side="right"))
            batches.append(order[start : start + size])
            start += size
        if self.shuffle:
            batches = [batches[i] for i in rng.permutation(len(batches))]
        return _rank_share(batches, self.rank, self.world_size)


class BatchStream:
    """Endless (batch, epoch, next index) from a sampler's epochs, starting at (epoch,
    index).

    prefetch: batches prepared ahead by a background thread (0: none); pin_memory: pin
    them for asynchronous copies to a GPU.
    """

    def __init__(
        self,
        split: TokenizedSplit,
        sampler: TokenBatchSampler | PackedBatchSampler,
        epoch: int = 0,
        index: int = 0,
        prefetch: int = 4,
        pin_memory: bool = False,
    ):
        self.split, self.sampler, self.epoch, self.index = split, sampler, epoch, index
        self.prefetch, self.pin = prefetch, pin_memory

    def _generate(self) -> Iterator[tuple[Batch, int, int]]:
        epoch, index = self.epoch, self.index
        while True:
            plan = self.sampler.epoch(epoch)  # planned once per epoch
            for i in range(index, len(plan)):
                batch = self.sampler.batch(self.split, plan[i])
                yield (batch.pin_memory() if self.pin else batch), epoch, i + 1
            epoch, index = epoch + 1, 0

    def __iter__(self) -> Iterator[tuple[Batch, int, int]]:
        if self.prefetch == 0:
            yield from self._generate()
            return
        ready, stop = queue.Queue(self.prefetch), threading.Event()

        def hand_over(item: object) -> bool:  # False once the consumer has stopped
            while not stop.is_set():
                with contextlib.suppress(queue.Full):
                    ready.put(item, timeout=0.1)
                    return True
            return False

        def produce() -> None:
            try:
                for item in self._generate():
                    if not hand_over(item):
                        return
            except Exception as error:  # raised in the consumer
                hand_over(error)

        thread = threading.Thread(target=produce, daemon=True, name="batch-prefetch")
        thread.start()
        try:
            while True:
                item = ready.get()
                if isinstance(item, Exception):
                    raise item
                yield item
        finally:
            stop.set()
            thread.join()


class BatchSettings(Protocol):
    """What the batches of a run read of its settings (a TrainingConfig has them)."""

    max_tokens: int
    accumulate: int
    pack_length: int | None
    seed: int


def rank_sampler(
    lengths: np.ndarray,
    config: BatchSettings,
    rank: int,
    world_size: int,
    pad_multiple: int,
) -> TokenBatchSampler | PackedBatchSampler:
    """The batches of process `rank`: max_tokens per update, over ranks and accumulated
    batches; packed rows if config.pack_length is set."""
    parts = world_size * config.accumulate
    shared = dict(seed=config.seed, rank=rank, world_size=world_size)
    try:
        if config.pack_length is not None:
            return PackedBatchSampler(lengths, config.max_tokens // parts,
                                      config.pack_length, **shared)
        return TokenBatchSampler(lengths, config.max_tokens // parts,
                                 pad_multiple=pad_multiple, **shared)
    except ValueError as error:
        raise ValueError(
            f"max_tokens={config.max_tokens} per update, over {world_size} process(es) "
            f"x {config.accumulate} accumulated batch(es), leaves "
            f"{config.max_tokens // parts} per batch: {error}"
        ) from error


class TrainBatches:
    """The training batches of one process, in its sampler's order from (epoch, index)
    on, prepared ahead in a background thread and moved to `device`."""

    def __init__(self, split: TokenizedSplit,
                 sampler: TokenBatchSampler | PackedBatchSampler, prefetch: int,
                 device: torch.device):
        self.split, self.sampler, self.prefetch = split, sampler, prefetch
        self.device = device
        self.epoch, self.index = 0, 0  # the position of the next batch
        self._stream: Iterator[tuple[Batch, int, int]] | None = None

    def next(self) -> Batch:
        if self._stream is None:
            self._stream = iter(BatchStream(
                self.split, self.sampler, self.epoch, self.index, self.prefetch,
                pin_memory=default_pin_memory(self.device),
            ))
        batch, self.epoch, self.index = next(self._stream)
        return batch.to(self.device)

    def seek(self, epoch: int, index: int) -> None:
        """Continue from batch `index` of epoch `epoch` (a checkpoint's position)."""
        self.close()
        self.epoch, self.index = epoch, index

    def close(self) -> None:
        """Stop the background thread; a later `next` starts another."""
        if self._stream is not None:
            self._stream.close()
            self._stream = None


def row_lengths(lengths: np.ndarray, row_length: int) -> tuple[int, int]:
    """(source, target) row lengths for pairs of these (n, 2) lengths: row_length for
    the side with more tokens, the other's in proportion to its share and at least its
    longest sentence, rounded up to a multiple of PAD_MULTIPLE (at most row_length)."""
    totals, longest = lengths.sum(axis=0), lengths.max(axis=0, initial=0)
    long = int(np.argmax(totals))  # the side with more tokens
    share = math.ceil(row_length * int(totals[1 - long]) / max(int(totals[long]), 1))
    other = round_up(max(share, int(longest[1 - long])), PAD_MULTIPLE)
    other = min(other, row_length)
    return (row_length, other) if long == 0 else (other, row_length)


def pack_rows(lengths: np.ndarray, row_length: tuple[int, int]) -> np.ndarray:
    """Best fit decreasing: the row of each pair (rows numbered from 0), so that no row
    holds more than row_length[0] source or row_length[1] target tokens. lengths:
    (n, 2), in the order in which ties are taken."""
    g = math.gcd(*row_length)
    unit = np.array([row_length[1] // g, row_length[0] // g])  # per token, each side
    need = lengths * unit  # both sides on one scale, a row holding `full` units
    full, width = row_length[0] * int(unit[0]), need.max(axis=1)
    room = [[] for _ in range(full + 1)]  # room[c]: rows with c units of room
    nonempty = 0  # bit c set: room[c] holds a row
    free, rows = [], np.empty(len(lengths), dtype=np.int64)
    for i in np.argsort(-width, kind="stable").tolist():
        (a, b), w = need[i].tolist(), int(width[i])
        fits = nonempty >> w  # buckets of room >= w, from w on
        if fits:
            c = w + (fits & -fits).bit_length() - 1  # the least room that fits
            row = room[c].pop()
            if not room[c]:
                nonempty &= ~(1 << c)
        else:
            row = len(free)
            free.append([full, full])
        free[row][0] -= a
        free[row][1] -= b
        rows[i] = row
        c = min(free[row])
        room[c].append(row)
        nonempty |= 1 << c
    return rows


class PackedBatchSampler:
    """Batches of max_tokens // row_length rows, whole pairs packed into them
    (pack_rows; row lengths per side from row_lengths). lengths, shuffle, seed, rank
    and world_size as for TokenBatchSampler."""

    def __init__(
        self,
        lengths: np.ndarray | Sequence[tuple[int, int]],
        max_tokens: int,
        row_length: int,
        shuffle: bool = True,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
    ):
        self.lengths = np.asarray(lengths, dtype=np.int64).reshape(-1, 2)
        if not len(self.lengths):
            raise ValueError("no pairs to pack")
        too_long = np.flatnonzero(self.lengths.max(axis=1) > row_length)
        if len(too_long):
            raise ValueError(
                f"row_length={row_length} is shorter than {len(too_long)} pair(s) (the "
                f"longest has {self.lengths.max()} tokens on one side); raise it"
            )
        self.rows = max_tokens // row_length
        if self.rows == 0:
            raise ValueError(
                f"max_tokens={max_tokens} holds no row of row_length={row_length}"
            )
        if not 0 <= rank < world_size:
            raise ValueError(
                f"rank must be in [0, world_size={world_size}); got {rank}"
            )
        self.max_tokens, self.row_length = max_tokens, row_length
        self.row_lengths = row_lengths(self.lengths, row_length)
        self.shuffle, self.seed = shuffle, seed
        self.rank, self.world_size = rank, world_size

    def __len__(self) -> int:
        return len(self.epoch(0))

    def epoch(self, epoch: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """This rank's batches for one epoch: (pair indices, row of each pair)."""
        rng = np.random.default_rng([self.seed % 2**32, epoch])
        n = len(self.lengths)
        order = rng.permutation(n) if self.shuffle else np.arange(n)
        row = pack_rows(self.lengths[order], self.row_lengths)
        n_rows = int(row.max(initial=-1)) + 1
        place = rng.permutation(n_rows) if self.shuffle else np.arange(n_rows)
        slot = place[row]  # the rows in their shuffled order
        by_slot = np.argsort(slot, kind="stable")
        order, slot = order[by_slot], slot[by_slot]
        cuts = np.searchsorted(slot, np.arange(self.rows, n_rows, self.rows))
        batches = [
            (indices, rows % self.rows)
            for indices, rows in zip(np.split(order, cuts), np.split(slot, cuts))
        ]
        return _rank_share(batches, self.rank, self.world_size)

    def batch(
        self, split: TokenizedSplit, item: tuple[np.ndarray, np.ndarray]
    ) -> Batch:
        """The tensors of one planned batch: (rows, row length) on each side."""
        return split.packed_batch(*item, self.rows, self.row_lengths)


__all__ = [
    'TokenBatchSampler',
    'BatchStream',
    'BatchSettings',
    'rank_sampler',
    'TrainBatches',
    'row_lengths',
    'pack_rows',
    'PackedBatchSampler',
]
