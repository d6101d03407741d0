"""An epoch read from a sealed cache: its chunks stand for the channel's files.

The shards' chunks are the epoch's units (`seal.cache_units`: a batch's rows each, however big
the shard that holds them): permuted per epoch by the job's seed, the channel and the epoch
(`order.epoch_order`, as files are), each read task a run of that order, `open_units` chunks
mixed at a time by a permutation drawn from the same seed, each read with one ranged read. A
row's position is its chunk's place in the epoch's order and its ordinal among the chunk's rows,
so a checkpoint taken in a cached epoch resumes it exactly (`pipelines.position`), whatever the
ranks. Rows leave with their original ids (the accounting checks each sample once per epoch, as
uncached). A field whose rows share a dtype and shape (images of one size, labels) leaves as one
array, its rows gathered from the window's chunks straight into the block (the one copy of the
pixels a cached read makes: `_block`); any other field leaves as `blobs`, which the chain turns
back into arrays before the random rest of the chain.

Where a read runs on the host the chain would run its rows on (`pipelines.dataset.tail_in_read`),
the read task runs the random rest itself (`tail`: the job's `ops.chain.Chain`) on each
block before it leaves, and the chain passes the rows on (`TAILED_COLUMN`): moving the
prefix's pixels through Ray's object store to the chain's task cost more CPU than the rest of a
cached epoch (`CachedTail`).
"""

from __future__ import annotations

from functools import partial

import numpy as np
import pyarrow as pa

CACHED_COLUMN = "_cached"
"""Set on every row a cached read yields: the chain skips the prefix for them (`ops.chain`)."""
TAILED_COLUMN = "_tailed"
"""Set on every row whose read ran the random rest of the chain too: the chain passes them on."""
TASK_UNITS = 64
"""Chunks per read task at most: a lost host's retry rereads at most this many."""


def epoch_source(manifest: dict | None, fingerprint: str | None, resume: dict | None):
    """Where an epoch is read from: (the manifest, or None for the channel's files; the position to
    resume from; a line, where the epoch starts over). A resumed epoch is read from what its
    positions count in (`EpochProgress.space`, the checkpoint's): the files where the checkpoint
    came before the cache was sealed, though it is sealed now. Positions over a cache that is not
    sealed here (deleted, another cache_dir) count nothing the files have: the epoch starts over."""
    space = None if resume is None else resume.get("space")
    if resume is None or (manifest is not None and space == fingerprint):
        return manifest, resume, None
    if space is None:
        return None, resume, None
    return (
        manifest,
        None,
        (
            f"the epoch's checkpoint counted its place in cache {space}, which is not sealed here: the epoch "
            "starts over (its samples drawn before the stop are drawn again)"
        ),
    )


def cache_read_tasks(
    root: str, manifest: dict, channel, seed: int, epoch: int, readers: int, resume, per_task_row_limit, tail=None
) -> list:
    """The read tasks of an epoch over the cache at `root` (`manifest`'s chunks); `resume`: the
    epoch's position to go on from (None: from its start); `tail`: the chain the blocks go through
    before they leave (`ops.chain.Chain`; None: the rows leave as the prefix made them)."""
    from ray.data.block import BlockMetadata
    from ray.data.datasource import ReadTask

    from smlaunch.pipelines.cache.seal import cache_units
    from smlaunch.pipelines.order import epoch_order, task_runs

    units = cache_units(manifest)
    order = epoch_order(len(units), channel.name, seed, epoch if channel.shuffle else None)
    done = drawn = None
    if resume is not None:
        from smlaunch.pipelines.position import EpochPosition

        position = EpochPosition.from_state(resume)
        done, drawn = position.is_done, position.drawn_ordinals()
    tasks = []
    count = max(1, min(len(units), max(readers, -(-len(units) // TASK_UNITS))))
    for run in task_runs(len(units), count):
        places = np.arange(run.start, run.stop, dtype=np.int64)
        if done is not None:
            places = places[~done(places)]
        if not len(places):
            continue
        picked = [(int(place), units[int(order[place])]) for place in places]
        own = {p: drawn[p] for p, _ in picked if p in drawn} if drawn else {}
        meta = BlockMetadata(num_rows=sum(u[3] for _, u in picked), size_bytes=None, exec_stats=None, input_files=None)
        read = partial(
            read_cached,
            root,
            picked,
            own,
            channel.open_units,
            channel.block_rows,
            [seed, epoch, int(places[0])],
            tail,
        )
        read.__name__ = f"read_{channel.name}_cache"  # type: ignore[attr-defined]  # a partial takes attributes
        tasks.append(ReadTask(read, meta, per_task_row_limit=per_task_row_limit))
    return tasks


def read_cached(root: str, picked: list, drawn: dict, open_units: int, block_rows: int, seed: list, tail=None):
    """The rows of `picked` ((place, `seal.cache_units`' unit) each), `open_units` chunks mixed at
    a time, in Arrow tables of `block_rows` rows; rows `drawn` before a resume are left out. With
    a `tail` (the job's `ops.chain.Chain`), each block leaves as it made it (`_tailed_block`)."""
    from smlaunch.pipelines.cache.store import CacheStore

    store = CacheStore(root)
    rng = np.random.default_rng(seed)
    for start in range(0, len(picked), max(1, open_units)):
        tables = [
            _chunk_table(store, place, entry, drawn.get(place)) for place, entry in picked[start : start + open_units]
        ]
        tables = [t for t in tables if t.num_rows]
        if not tables:
            continue
        window = pa.concat_tables(tables, promote_options="none")
        arrays = _uniform_fields(window)
        order = rng.permutation(window.num_rows)
        for offset in range(0, window.num_rows, block_rows):
            rows = order[offset : offset + block_rows]
            yield _block(window, arrays, rows) if tail is None else _tailed_block(window, arrays, rows, tail)


def _uniform_fields(window: pa.Table) -> dict[str, tuple[list[np.ndarray], np.ndarray]]:
    """Each field whose rows share one dtype and shape across the window's chunks: (an array of its
    rows a chunk, over the bytes read; where each chunk starts in the window). The chain then gets
    one array (a tensor column for images), not a Python object a row; other fields stay blobs."""
    from smlaunch.pipelines.cache.blobs import uniform_view

    out: dict[str, tuple[list[np.ndarray], np.ndarray]] = {}
    for name in window.column_names:
        if not pa.types.is_large_binary(window.schema.field(name).type):  # id, positions
            continue
        found = [uniform_view(chunk) for chunk in window.column(name).chunks]
        views = [v for v in found if v is not None]
        if len(views) < len(found) or len({(v.dtype, v.shape[1:]) for v in views}) != 1:
            continue
        out[name] = (views, np.cumsum(np.asarray([0] + [len(v) for v in views], np.int64)))
    return out


def _block(window: pa.Table, arrays: dict, rows: np.ndarray) -> pa.Table:
    """The window's `rows`, in that order, as one table: the uniform fields (`arrays`) copied row by
    row into one fresh array each (the read's one copy of the pixels), the rest by Arrow's `take`."""
    from ray.data.extensions import ArrowTensorArray

    taken = window.drop_columns(list(arrays)).take(pa.array(rows))
    columns = {}
    for name in window.column_names:
        if name not in arrays:
            columns[name] = taken.column(name)
            continue
        views, starts = arrays[name]
        out = _gathered(views, starts, rows)
        columns[name] = pa.array(out) if out.ndim == 1 else ArrowTensorArray.from_numpy(out)
    return pa.table(columns)


def _tailed_block(window: pa.Table, arrays: dict, rows: np.ndarray, tail) -> pa.Table:
    """The window's `rows` as the chain's batch (the uniform fields gathered as in `_block`, the
    rest as NumPy), through `tail`, as the block Ray Data would have made of the chain's output."""
    from ray.data.block import BlockAccessor

    taken = window.drop_columns(list(arrays)).take(pa.array(rows))
    batch = {name: taken.column(name).to_numpy(zero_copy_only=False) for name in taken.column_names}
    batch.update({name: _gathered(views, starts, rows) for name, (views, starts) in arrays.items()})
    out = tail(batch)
    out[TAILED_COLUMN] = np.ones(len(out["id"]), np.int8)
    return BlockAccessor.batch_to_block(out)


def _gathered(views: list[np.ndarray], starts: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """The window's `rows` of one uniform field (its chunks' `views`, starting at `starts`), copied
    into one fresh array."""
    chunk = np.searchsorted(starts, rows, side="right") - 1
    local = rows - starts[chunk]
    out = np.empty((len(rows), *views[0].shape[1:]), views[0].dtype)
    for i, (c, r) in enumerate(zip(chunk.tolist(), local.tolist(), strict=True)):
        out[i] = views[c][r]
    return out


def _chunk_table(store, place: int, entry: list, drawn) -> pa.Table:
    """One chunk's rows as a table: its fields' blobs, `id`, their positions, the cached flag;
    without the ids the manifest drops (another shard holds them) and the ordinals `drawn`."""
    from smlaunch.pipelines.order import LAST, NO_SEEK, UNIT_SHIFT

    name, start, end, _, dropped = entry
    shard = store.read_chunk(name, start, end)
    ids = shard.column("id").to_numpy()
    keep = ~np.isin(ids, np.asarray(dropped, np.int64)) if dropped else np.ones(len(ids), bool)
    rows = np.flatnonzero(keep)
    ordinals = np.arange(len(rows), dtype=np.int64)
    pos = (np.int64(place) << UNIT_SHIFT) | ordinals
    if len(pos):
        pos[-1] |= LAST
    table = shard if keep.all() else shard.take(pa.array(rows))
    table = (
        table.append_column("pos", pa.array(pos, pa.int64()))
        .append_column("seek", pa.array(np.full(len(rows), NO_SEEK, np.int64)))
        .append_column(CACHED_COLUMN, pa.array(np.ones(len(rows), np.int8)))
    )
    if drawn is not None and len(drawn):
        table = table.filter(pa.array(~np.isin(ordinals, np.asarray(drawn, np.int64))))
    return table
