"""The order a File or FastFile channel is read in: per epoch, and across the units of a read task.

SGD wants a new, well-mixed order every epoch. Listings are sorted, and sorted is by class for an
image folder and for shards a converter wrote class by class; read as listed, a batch holds one or
two classes (WebDataset shards of the digits, one class per shard, trained to 0.80 validation
accuracy where the same samples shuffled reached 0.99). So, for a shuffled channel (the train
channel by default):

* the units (files, or Parquet row groups) are permuted at every epoch, seeded by the job's seed,
  the channel and the epoch (`epoch_order`), so a retried read task and a resumed job read the
  same order for that epoch, and the next epoch another one;
* each read task reads a contiguous run of that permutation (`task_runs`), `open_units` units at
  a time, one sample from each in turn (`interleave`), as WebDataset's shard shuffle and MosaicML
  Streaming's block shuffles do: a batch then holds samples of many shards, whatever the shards'
  own order;
* the trainer draws batches through a shuffle buffer (`ShuffleConfig.buffer_rows`).

A sample's place in the epoch's order is its position (`pos`, one int64): the index of its unit
in the epoch's permutation, the ordinal of the sample among the rows its unit yielded, and a bit
on the unit's last row. Positions are what a checkpoint resumes from (`pipelines.position`): they
do not depend on the world size, the read tasks or which rank drew the sample. A row of a record
file (TFRecord, RecordIO, text, a WebDataset shard) also carries where reading its unit can start
again after it (`seek`: `seek_point`), so a resumed epoch seeks past a unit's drawn rows instead
of reading them again.
"""

from __future__ import annotations

import zlib
from collections import deque
from collections.abc import Iterable, Iterator

import numpy as np

UNIT_SHIFT = 32
LAST = 1 << 31
"""Set on the last row a unit yields: with the ordinal it says how many rows the unit had."""
ORDINAL_MASK = LAST - 1
PIECE_ROWS = 16
"""Rows of a checked table (a Parquet row group) handed on per turn when units are interleaved."""


SEEK_SHIFT = 20
NO_SEEK = -1
"""A row's `seek` where its unit cannot be entered after it: a Parquet row group or an image file
(read whole), a shard's last sample, or an offset or count past what `seek_point` packs."""


def seek_point(end: int, skipped: int) -> int:
    """Where a unit's read can start again after a row, packed in one int64: the file offset just
    past the row's record (`end`, below 8 TiB) and the samples of the unit skipped as bad before
    it (below 2^20), which the resumed read adds to the row count to go on numbering samples as
    the first read did (a sample's derived id holds its record's index)."""
    if end < 0 or end >= 1 << (63 - SEEK_SHIFT) or not 0 <= skipped < 1 << SEEK_SHIFT:
        return NO_SEEK
    return (end << SEEK_SHIFT) | skipped


def split_seek(seek: int) -> tuple[int, int]:
    """(file offset, samples skipped before it) of a `seek_point`."""
    return seek >> SEEK_SHIFT, seek & ((1 << SEEK_SHIFT) - 1)


def position(unit: int, ordinal: int, last: bool = False) -> int:
    return (unit << UNIT_SHIFT) | (LAST if last else 0) | ordinal


def split_positions(pos: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(unit, ordinal, last) of an int64 array of positions."""
    pos = np.asarray(pos, dtype=np.int64)
    return pos >> UNIT_SHIFT, pos & ORDINAL_MASK, (pos & LAST) != 0


def epoch_order(count: int, channel: str, seed: int, epoch: int | None) -> np.ndarray:
    """The order of `count` listed units in `epoch` (1-based): a permutation seeded by the job's
    seed, the channel and the epoch; None (an unshuffled channel): one order fixed by the channel's
    name in every epoch, still not the sorted listing, so a read task's share of an image folder
    is not one class (validation accuracy of a 50-step digits job fell from over 0.3 to 0.14-0.23
    with a sorted read)."""
    key = [zlib.crc32(channel.encode())] if epoch is None else [seed & 0xFFFFFFFF, zlib.crc32(channel.encode()), epoch]
    return np.random.Generator(np.random.PCG64(key)).permutation(count)


def task_runs(count: int, tasks: int) -> list[range]:
    """`tasks` contiguous runs of positions 0..count-1, as even as possible (none empty).

    Contiguous, not every n-th: a task reads its run in order, so what the ranks have consumed at
    any moment is one prefix per task plus what is in flight, which a checkpoint stores as a few
    ranges (`pipelines.position`)."""
    tasks = max(1, min(tasks, count))
    bounds = [count * g // tasks for g in range(tasks + 1)]
    return [range(bounds[g], bounds[g + 1]) for g in range(tasks)]


def interleave(units: Iterable[Iterator], open_units: int) -> Iterator:
    """One item from each of `open_units` unit iterators in turn; a finished one is replaced by the
    next unit, so at most `open_units` units are open (file handles, a Parquet row group each)."""
    pending = iter(units)
    active: deque = deque()
    for unit in pending:
        active.append(unit)
        if len(active) >= open_units:
            break
    while active:
        unit = active.popleft()
        item = next(unit, _END)
        if item is _END:
            nxt = next(pending, None)
            if nxt is not None:
                active.append(nxt)
            continue
        yield item
        active.append(unit)


_END = object()


def labels_per_batch(labels: np.ndarray, batch: int) -> float:
    """Mean distinct labels per batch of `batch` consecutive labels (full batches only): how mixed
    an order is, compared with a uniform random permutation of the same labels in the bench."""
    labels = np.asarray(labels)
    full = len(labels) // batch * batch
    if full == 0:
        return 0.0
    rows = np.sort(labels[:full].reshape(-1, batch), axis=1)
    return float(((rows[:, 1:] != rows[:, :-1]).sum(axis=1) + 1).mean())
