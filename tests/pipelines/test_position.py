"""An epoch's position: merged from every rank's drawn positions in any order, a unit done once
all its rows are drawn, a position drawn twice counted, and a checkpoint state that round-trips
and stays a few KiB however large the epoch (1.28M single-file units, and 100M samples in
100k shards)."""

import numpy as np

from smlaunch.pipelines.order import LAST, NO_SEEK, SEEK_SHIFT, UNIT_SHIFT, position, seek_point
from smlaunch.pipelines.position import EpochPosition, state_bytes


def shard_rows(unit: int, rows: int) -> np.ndarray:
    pos = (unit << UNIT_SHIFT) | np.arange(rows, dtype=np.int64)
    pos[-1] |= LAST
    return pos


def test_units_are_done_when_every_row_is_drawn_whatever_the_order_or_rank():
    p = EpochPosition(3)
    rows = np.concatenate([shard_rows(u, 5) for u in range(4)] + [np.array([position(9, 0, True)])])
    rng = np.random.default_rng(1)
    order = rng.permutation(len(rows))
    p.merge([rows[order[:7]], rows[order[7:12]]])  # two ranks' parts
    assert p.units_done + len(p.partial) <= 5
    p.merge(rows[order[12:]])
    assert (p.units_done, p.partial, p.duplicates, p.delivered) == (5, {}, 0, 21)
    assert p.starts.tolist() == [0, 9] and p.ends.tolist() == [4, 10]
    p.merge(np.array([rows[3], position(9, 0, True)]))  # drawn again: counted, nothing else changes
    assert (p.units_done, p.duplicates, p.delivered) == (5, 2, 23)


def test_partial_units_keep_their_drawn_ordinals_through_a_checkpoint():
    p = EpochPosition(2)
    p.merge(np.concatenate([shard_rows(0, 10)[[0, 1, 2, 7]], shard_rows(1, 3)]))
    q = EpochPosition.from_state(p.state())
    assert q.epoch == 2 and q.units_done == 1 and q.is_done(np.array([0, 1, 2])).tolist() == [False, True, False]
    assert {u: o.tolist() for u, o in q.drawn_ordinals().items()} == {0: [0, 1, 2, 7]}
    q.merge(shard_rows(0, 10)[[3, 4, 5, 6, 8]])
    assert 0 in q.partial  # the last row not drawn yet: its count is unknown
    q.merge(shard_rows(0, 10)[[9]])
    assert q.units_done == 2 and not q.partial and q.duplicates == 0


def test_a_partial_unit_keeps_the_seek_past_its_drawn_head_through_a_checkpoint():
    """Rank 0 keeps, for each shard in flight, where a resumed read enters it: past ordinals 0..k-1
    drawn, at the seek the row k-1 carried. A head grown past rows drawn in an earlier merge keeps
    the earlier seek (reading on from there drops the drawn rows); a finished shard drops it."""
    rows = shard_rows(0, 10)
    seeks = np.array([seek_point(100 * (o + 1), 0) for o in range(10)])
    p = EpochPosition(1)
    p.merge(np.stack([rows[[0, 1, 2, 5]], seeks[[0, 1, 2, 5]]]))
    assert p.seeks == {0: (3, seek_point(300, 0))}
    q = EpochPosition.from_state(p.state())
    assert q.seeks == p.seeks and {u: o.tolist() for u, o in q.drawn_ordinals().items()} == {0: [0, 1, 2, 5]}
    q.merge(np.stack([rows[[3, 4, 6]], seeks[[3, 4, 6]]]))
    assert q.seeks == {0: (7, seek_point(700, 0))}
    q.merge(np.stack([rows[[8]], seeks[[8]]]))
    q.merge(np.stack([rows[[7]], np.full(1, NO_SEEK)]))  # the head's new last row (8) came in an earlier merge
    assert q.seeks == {0: (7, seek_point(700, 0))}
    q.merge(np.stack([rows[[9]], seeks[[9]]]))
    assert q.units_done == 1 and not q.partial and not q.seeks
    old = EpochPosition.from_state({k: v for k, v in p.state().items() if k not in ("partial_heads", "partial_seeks")})
    assert old.partial.keys() == {0} and old.seeks == {}  # a version-1 state: the shard is read from its start


def in_flight_epoch(
    units: int,
    rows_per_unit: int,
    tasks: int,
    open_units: int,
    drawn_fraction: float,
    in_flight_rows: int,
    seed: int = 0,
) -> EpochPosition:
    """An epoch read by `tasks` contiguous runs of units, `open_units` interleaved per task, each
    task `drawn_fraction` of the way through, with `in_flight_rows` rows per task read but not drawn."""
    p = EpochPosition(1)
    bounds = np.linspace(0, units, tasks + 1).astype(np.int64)
    rng = np.random.default_rng(seed)
    for start, end in zip(bounds[:-1], bounds[1:], strict=False):
        total = (end - start) * rows_per_unit
        reached = int(total * drawn_fraction)
        unit = start + np.arange(total) % open_units + (np.arange(total) // (open_units * rows_per_unit)) * open_units
        ordinal = (np.arange(total) // open_units) % rows_per_unit
        keep = (np.arange(total) < reached) & (unit < end)
        keep[max(reached - in_flight_rows, 0) : reached] &= rng.random(min(in_flight_rows, reached)) < 0.5
        pos = (unit[keep] << UNIT_SHIFT) | ordinal[keep] | np.where(ordinal[keep] == rows_per_unit - 1, LAST, 0)
        seek = np.full(len(pos), NO_SEEK) if rows_per_unit == 1 else (ordinal[keep] + 1) * 110_000 << SEEK_SHIFT
        p.merge(np.stack([pos, seek]))
    return p


def test_the_state_stays_small_at_imagenet_and_at_100m_samples():
    imagenet = in_flight_epoch(1_281_167, 1, tasks=256, open_units=1, drawn_fraction=0.6, in_flight_rows=512)
    assert imagenet.units_done > 500_000 and state_bytes(imagenet.state()) < 64 * 1024
    web = in_flight_epoch(100_000, 1000, tasks=256, open_units=4, drawn_fraction=0.5, in_flight_rows=512)
    assert web.delivered > 45_000_000 and state_bytes(web.state()) < 64 * 1024
