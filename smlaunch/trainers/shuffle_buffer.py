"""The train worker's shuffle buffer (`channels.train.shuffle.buffer_rows`): each batch is drawn at
random from the rows received and not yet drawn, and the buffer grows with what has arrived.

Ray Data's own (`iter_torch_batches(local_shuffle_buffer_size=N)`, its `ShufflingBatcher`) yields
no batch until it holds 1.5 N rows and a batch more: 1,600 rows at N = 1024 and batches of 64,
all read and preprocessed before the first step, and again at every epoch's start. On a cold
disk of small files (this VM reads 300-600 a second) that fill was seconds of the first step on a
1.28M-file folder (BENCHMARKS.md, scale 2026-11-29), and on a small channel it held back most of
an epoch before its first step. The mix it buys is mostly there already: each epoch reads its files
in a new random order, `open_units` of them at a time across the pass (`pipelines.order`); the
buffer mixes rows across read tasks, blocks and hosts.

So here the buffer keeps at least half the rows received so far, up to N: the first batch is
drawn from the first two batches' rows, the k-th from about k + 1 batches' rows, and from 2 N rows
on from N to N + a batch (Ray's ranges from N / 2 to 1.5 N). Every row is drawn once; the last
rows of the pass leave in random order, the final batch partial as Ray's. The rows stay where the
batches arrive: with `iter_torch_batches(device="cuda")`, on the train worker's GPU (N rows of
uint8 3 x 224 x 224 images: 154 MB), copied as the buffer is drawn from (a gather of the buffer
per batch), so the batches' transfer stays in Ray's prefetch thread.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np


class ShuffleBuffer:
    """Batches of `batch_size` rows drawn at random from a buffer of up to `rows` rows (see the
    module's docstring); `seed` makes the draw repeatable (the job's seed and the epoch). A batch
    is a dict of columns: torch tensors, NumPy arrays or lists, one row per item."""

    def __init__(self, rows: int, batch_size: int, seed: int):
        if rows < 1 or batch_size < 1:
            raise ValueError(f"a shuffle buffer needs rows >= 1 and batch_size >= 1 (got {rows}, {batch_size})")
        self.rows, self.batch_size = rows, batch_size
        self._rng = np.random.default_rng(seed)

    def __call__(self, batches: Iterable[dict]) -> Iterator[dict]:
        pool: dict | None = None
        received = 0
        for batch in batches:
            count = _rows(batch)
            if not count:
                continue
            received += count
            pool = batch if pool is None else {name: _cat(pool[name], batch[name]) for name in pool}
            while _rows(pool) - self.batch_size >= min(self.rows, received // 2):
                out, pool = self._draw(pool, self.batch_size)
                yield out
        while pool is not None and _rows(pool):
            out, pool = self._draw(pool, min(self.batch_size, _rows(pool)))
            yield out

    def _draw(self, pool: dict, count: int) -> tuple[dict, dict]:
        """`count` rows at random out of `pool`, and the rest."""
        order = self._rng.permutation(_rows(pool))
        return (
            {name: _take(values, order[:count]) for name, values in pool.items()},
            {name: _take(values, order[count:]) for name, values in pool.items()},
        )


def _rows(batch: dict) -> int:
    return len(next(iter(batch.values()))) if batch else 0


def _cat(a, b):
    if isinstance(a, np.ndarray):
        return np.concatenate([a, b])
    if isinstance(a, list):
        return a + list(b)
    import torch

    return torch.cat([a, b])


def _take(values, index: np.ndarray):
    if isinstance(values, np.ndarray):
        return values[index]
    if isinstance(values, list):
        return [values[i] for i in index.tolist()]
    import torch

    return values[torch.as_tensor(index, device=values.device)]
