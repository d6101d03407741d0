"""Where an epoch stands, in a state that does not grow with the data: what a checkpoint resumes
from, and the epoch's exactly-once check.

A File or FastFile channel's rows carry their position in the epoch's order (`pipelines.order`):
unit, ordinal, and a bit on a unit's last row; a record file's rows also carry where the file can
be read on from after them (`seek`: a byte offset). Each rank keeps what it drew since the last
merge (`DrawnPositions`, 16 bytes a row); at a checkpoint and at the epoch's end rank 0 gathers
and merges them into an `EpochPosition`:

* the units whose every row was drawn, as ranges of unit indices: each read task reads a
  contiguous run of the epoch's order, so what is done is one prefix per task plus the blocks in
  flight, a few ranges however large the epoch;
* the units partly drawn (in flight, interleaved, or in a rank's shuffle buffer), each with the
  ordinals drawn, as ranges, and the seek past its drawn head (ordinals 0..k-1).

This replaces the list of every id drawn (`consumed_ids`): 10 MB at ImageNet, 800 MB at 100M
samples, which a spot interruption's grace could not write. On resume the reader leaves the done
units unread, enters a partial shard at its head's seek (a Parquet row group or an image is read
whole), and drops the drawn ordinals past it before they are decoded (`file_reader`), whatever
the world size, since positions do not depend on which rank drew a row. A position drawn twice, or a unit
left incomplete at the epoch's end, is what the report's exactly-once check counts.
"""

from __future__ import annotations

import zlib

import numpy as np

from smlaunch.pipelines.order import NO_SEEK, split_positions


class DrawnPositions:
    """One rank's positions drawn since the last `take`, with their rows' seeks."""

    def __init__(self):
        self.parts: list[np.ndarray] = []
        self.seeks: list[np.ndarray] = []
        self.used = False

    def add(self, pos, seek=None) -> None:
        pos = _int64(pos)
        self.parts.append(pos)
        self.seeks.append(np.full(len(pos), NO_SEEK, np.int64) if seek is None else _int64(seek))
        self.used = True

    def take(self) -> np.ndarray:
        """A (2, rows) array: positions, and their seeks."""
        out = (
            np.stack([np.concatenate(self.parts), np.concatenate(self.seeks)])
            if self.parts
            else np.zeros((2, 0), np.int64)
        )
        self.parts, self.seeks = [], []
        return out


def _int64(values) -> np.ndarray:
    return np.asarray(values.cpu().numpy() if hasattr(values, "cpu") else values, dtype=np.int64).ravel()


class EpochPosition:
    """Rank 0's merged position of one epoch (see the module's docstring)."""

    def __init__(self, epoch: int):
        self.epoch = epoch
        self.starts = np.zeros(0, np.int64)  # done units: [starts[i], ends[i])
        self.ends = np.zeros(0, np.int64)
        self.partial: dict[int, tuple[np.ndarray, int | None]] = {}  # unit -> (sorted ordinals, rows or None)
        self.seeks: dict[int, tuple[int, int]] = {}
        """Partial units a resumed read can enter past their drawn head: unit -> (ordinals drawn
        from 0 on, the seek of the last of them: `order.seek_point`)."""
        self.delivered = 0
        self.duplicates = 0

    # --- merging -----------------------------------------------------------------------------

    def merge(self, parts) -> None:
        """Add drawn positions: one rank's `DrawnPositions.take()`, or the list of every rank's
        (a bare array of positions, without seeks, too)."""
        parts = [_with_seeks(part) for part in (parts if isinstance(parts, (list, tuple)) else [parts])]
        both = np.concatenate(parts, axis=1) if parts else np.zeros((2, 0), np.int64)
        if both.shape[1] == 0:
            return
        self.delivered += both.shape[1]
        pos, first, counts = np.unique(both[0], return_index=True, return_counts=True)
        seek = both[1][first]
        self.duplicates += int((counts - 1).sum())
        units, ordinals, last = split_positions(pos)
        in_done = self.is_done(units)
        self.duplicates += int(in_done.sum())
        units, ordinals, last, seek = units[~in_done], ordinals[~in_done], last[~in_done], seek[~in_done]
        if len(units) == 0:
            return
        # Sorted by unit, then ordinal, the last row (its bit above every ordinal) at the end of its
        # unit: a unit not seen before is complete when it holds its last row and as many rows as it had.
        starts = np.r_[0, np.flatnonzero(np.diff(units)) + 1]
        ends = np.r_[starts[1:], len(units)]
        heads = units[starts]
        complete = last[ends - 1] & (ends - starts == ordinals[ends - 1] + 1)
        if self.partial:
            complete &= ~np.isin(heads, np.fromiter(self.partial, np.int64, len(self.partial)))
        done = [heads[complete]]
        for g in np.flatnonzero(~complete).tolist():  # units in flight: bounded by the rows in flight
            unit = int(heads[g])
            span = slice(int(starts[g]), int(ends[g]))
            if self._merge_unit(unit, ordinals[span], last[span], seek[span]):
                done.append(np.array([unit], np.int64))
        self._add_done(np.concatenate(done))

    def _merge_unit(self, unit: int, mine: np.ndarray, last: np.ndarray, seek: np.ndarray) -> bool:
        """Merge rows of a unit drawn in part; True when it is now complete."""
        rows = int(mine[last][0]) + 1 if last.any() else None
        held, known = self.partial.get(unit, (np.zeros(0, np.int64), None))
        both = np.union1d(held, mine)
        self.duplicates += len(held) + len(mine) - len(both)
        rows = rows if rows is not None else known
        if rows is not None and len(both) >= rows:
            self.partial.pop(unit, None)
            self.seeks.pop(unit, None)
            return True
        self.partial[unit] = (both, rows)
        # The drawn head: ordinals 0..head-1. A read resumed after it needs the seek of its last
        # row; drawn in an earlier merge, it is not here, and the seek kept (an earlier one) stands.
        gaps = np.flatnonzero(both != np.arange(len(both)))
        head = int(gaps[0]) if len(gaps) else len(both)
        at = np.searchsorted(mine, head - 1)
        if head and at < len(mine) and mine[at] == head - 1 and seek[at] != NO_SEEK:
            self.seeks[unit] = (head, int(seek[at]))
        return False

    def _add_done(self, units: np.ndarray) -> None:
        if len(units) == 0:
            return
        units = np.unique(units)
        breaks = np.flatnonzero(np.diff(units) != 1) + 1
        starts = np.concatenate([self.starts, units[np.r_[0, breaks]]])
        ends = np.concatenate([self.ends, units[np.r_[breaks - 1, len(units) - 1]] + 1])
        order = np.argsort(starts, kind="stable")
        starts, ends = starts[order], ends[order]
        # Merge touching ranges: a range starts a new run where it begins past every earlier end.
        reach = np.maximum.accumulate(ends)
        new = np.r_[True, starts[1:] > reach[:-1]]
        self.starts = starts[new]
        self.ends = np.maximum.reduceat(ends, np.flatnonzero(new))

    def is_done(self, units: np.ndarray) -> np.ndarray:
        """Whether each unit is in a done range."""
        if len(self.starts) == 0:
            return np.zeros(len(units), bool)
        i = np.searchsorted(self.starts, units, side="right") - 1
        return (i >= 0) & (units < self.ends[np.maximum(i, 0)])

    @property
    def units_done(self) -> int:
        return int((self.ends - self.starts).sum())

    def drawn_ordinals(self) -> dict[int, np.ndarray]:
        """The partly drawn units' drawn ordinals (what a resumed read drops)."""
        return {unit: ordinals for unit, (ordinals, _) in self.partial.items()}

    # --- the checkpoint's form ---------------------------------------------------------------

    def state(self) -> dict:
        """A few KiB however large the epoch: ranges delta-coded and compressed."""
        units = np.fromiter(self.partial, np.int64, len(self.partial))
        rows = np.array([self.partial[u][1] if self.partial[u][1] is not None else -1 for u in units], np.int64)
        lists = [_ranges(self.partial[u][0]) for u in units]
        seeks = [self.seeks.get(u, (0, NO_SEEK)) for u in units.tolist()]
        return {
            "version": 2,
            "epoch": self.epoch,
            "delivered": self.delivered,
            "duplicates": self.duplicates,
            "done": _pack(np.column_stack([self.starts, self.ends]).ravel()),
            "partial_units": _pack(units),
            "partial_rows": _pack(rows),
            "partial_counts": _pack(np.array([len(r) for r in lists], np.int64)),
            "partial_ranges": _pack(np.concatenate(lists) if lists else np.zeros(0, np.int64)),
            "partial_heads": _pack(np.array([head for head, _ in seeks], np.int64)),
            "partial_seeks": _pack(np.array([seek for _, seek in seeks], np.int64)),
        }

    @classmethod
    def from_state(cls, state: dict) -> EpochPosition:
        out = cls(state["epoch"])
        out.delivered, out.duplicates = state["delivered"], state["duplicates"]
        done = _unpack(state["done"]).reshape(-1, 2)
        out.starts, out.ends = done[:, 0].copy(), done[:, 1].copy()
        units, rows = _unpack(state["partial_units"]), _unpack(state["partial_rows"])
        counts, ranges = _unpack(state["partial_counts"]), _unpack(state["partial_ranges"])
        at = 0
        for unit, known, count in zip(units.tolist(), rows.tolist(), counts.tolist(), strict=False):
            pairs = ranges[at : at + count].reshape(-1, 2)
            at += count
            ordinals = np.concatenate([np.arange(a, b) for a, b in pairs]) if len(pairs) else np.zeros(0, np.int64)
            out.partial[unit] = (ordinals.astype(np.int64), None if known < 0 else known)
        if "partial_seeks" in state:  # version 1 had none: its partial units are read from their start
            heads, seeks = _unpack(state["partial_heads"]), _unpack(state["partial_seeks"])
            out.seeks = {
                unit: (head, seek)
                for unit, head, seek in zip(units.tolist(), heads.tolist(), seeks.tolist(), strict=False)
                if seek != NO_SEEK
            }
        return out


def state_bytes(state: dict) -> int:
    """What a position state adds to a checkpoint, as pickled."""
    import pickle

    return len(pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL))


def _with_seeks(part) -> np.ndarray:
    """A (2, rows) array of positions and seeks, from a `DrawnPositions.take()` or bare positions."""
    part = np.asarray(part, np.int64)
    if part.ndim == 2:
        return part
    return np.stack([part, np.full(len(part), NO_SEEK, np.int64)])


def _ranges(sorted_values: np.ndarray) -> np.ndarray:
    """[start, end) pairs, flattened, of sorted distinct integers."""
    if len(sorted_values) == 0:
        return np.zeros(0, np.int64)
    breaks = np.flatnonzero(np.diff(sorted_values) != 1) + 1
    starts = sorted_values[np.r_[0, breaks]]
    ends = sorted_values[np.r_[breaks - 1, len(sorted_values) - 1]] + 1
    return np.column_stack([starts, ends]).ravel().astype(np.int64)


def _pack(values: np.ndarray) -> bytes:
    """Delta-coded values as zigzag LEB128 varints, zlib-compressed: the lengths of done runs and
    gaps between them, mostly a byte each, compress close to their entropy."""
    deltas: np.ndarray = np.diff(np.asarray(values, np.int64), prepend=0)
    zig = ((deltas << 1) ^ (deltas >> 63)).astype(np.uint64)
    width = np.ones(len(zig), np.int64)
    for k in range(1, 10):
        width += zig >= np.uint64(1 << (7 * k))
    out = np.zeros(int(width.sum()), np.uint8)
    at = np.r_[0, np.cumsum(width)[:-1]]
    for k in range(10):
        here = width > k
        if not here.any():
            break
        byte = (zig[here] >> np.uint64(7 * k)) & np.uint64(0x7F)
        more = (width[here] > k + 1).astype(np.uint8) << 7
        out[at[here] + k] = byte.astype(np.uint8) | more
    return zlib.compress(out.tobytes(), 9)


def _unpack(data: bytes) -> np.ndarray:
    raw = np.frombuffer(zlib.decompress(data), np.uint8)
    if len(raw) == 0:
        return np.zeros(0, np.int64)
    ends = np.flatnonzero(raw < 0x80)  # a varint's last byte has no continuation bit
    starts = np.r_[0, ends[:-1] + 1]
    zig = np.zeros(len(ends), np.uint64)
    for k in range(10):
        here = starts + k <= ends
        if not here.any():
            break
        zig[here] |= (raw[starts[here] + k].astype(np.uint64) & np.uint64(0x7F)) << np.uint64(7 * k)
    deltas = (zig >> np.uint64(1)).astype(np.int64) ^ -(zig & np.uint64(1)).astype(np.int64)
    return np.cumsum(deltas).astype(np.int64)
