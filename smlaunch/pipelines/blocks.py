"""Checked rows into Ray Data blocks, and each row's position in its epoch (`rows.row_blocks`).

A block holds `rows_per_block` rows (a Pipe stream's: the chain's batch), or, given `block_bytes`,
as many rows as reach that many bytes: a File-mode read task's output is merged by Ray Data into
blocks of its target size anyway, and handing it 64-row tables to merge (and a Parquet row group
cut into 64-row slices to join again) took 20,000-row passes 153 -> 117 ms for Parquet and
242 -> 232 ms for an image folder (BENCHMARKS.md, formats).

Rows arrive one at a time (a record, a tar member) or as tables already checked column-wise (a
Parquet row group, an image folder's files); both end in the same blocks, in order.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from smlaunch.pipelines.order import LAST, NO_SEEK, UNIT_SHIFT, position, seek_point

ROW_OVERHEAD_BYTES = 20
"""What a row holds in an Arrow block besides its image bytes: the image's 4-byte offset, the
label and the id (8 bytes each); counted so that blocks cut by bytes match `Table.nbytes`."""


class BlockCutter:
    """Rows in, blocks out: `add_row` and `add_table` return the blocks that filled (often none),
    `rest` the last, partial one. `columns` name a row's values (`image` first: its bytes count)."""

    def __init__(self, columns: tuple[str, ...], rows_per_block: int, block_bytes: int | None):
        self.columns, self.rows_per_block, self.block_bytes = columns, rows_per_block, block_bytes
        self.rows: dict[str, list] = {name: [] for name in columns}
        """Rows added one at a time and not yet in a block, by column."""
        self.row_bytes = 0
        self.carry: pa.Table | None = None
        """Rows of added tables (and rows before them) not yet in a block."""

    def add_row(self, row: dict) -> list[pa.Table]:
        for name in self.columns:
            self.rows[name].append(row[name])
        self.row_bytes += _payload(row) + ROW_OVERHEAD_BYTES
        carried_rows, carried_bytes = (self.carry.num_rows, self.carry.nbytes) if self.carry else (0, 0)
        if self.block_bytes:
            full = carried_bytes + self.row_bytes >= self.block_bytes
        else:
            full = carried_rows + len(self.rows["id"]) >= self.rows_per_block
        return [self._take()] if full else []

    def add_table(self, table: pa.Table) -> list[pa.Table]:
        """Whole blocks of the rows so far and `table`; what is left over waits for the next."""
        parts = [t for t in (self.carry, self._row_table(), table) if t is not None and t.num_rows]
        self.carry = None
        if not parts:
            return []
        whole = pa.concat_tables(parts)
        if self.block_bytes and whole.nbytes < self.block_bytes * 3 // 2:
            # Ray's output buffer hands a block of 1 to 1.5 times its target on as it is.
            if whole.nbytes >= self.block_bytes:
                return [whole]
            self.carry = whole
            return []
        if self.block_bytes:
            step = -(-self.block_bytes * whole.num_rows // whole.nbytes)
        else:
            step = self.rows_per_block
        cut = whole.num_rows - whole.num_rows % step
        if cut < whole.num_rows:
            self.carry = whole.slice(cut)
        return [whole.slice(start, step) for start in range(0, cut, step)]

    def rest(self) -> list[pa.Table]:
        return [self._take()] if self.carry is not None or self.rows["id"] else []

    def _take(self) -> pa.Table:
        rows = self._row_table()
        block = (
            self.carry
            if rows is None
            else rows
            if self.carry is None
            else pa.concat_tables([self.carry, rows]).combine_chunks()
        )
        self.carry = None
        return block

    def _row_table(self) -> pa.Table | None:
        """The rows added one at a time as a table (None when there are none), and cleared."""
        if not self.rows["id"]:
            return None
        table = rows_table(self.rows)
        self.rows, self.row_bytes = {name: [] for name in self.columns}, 0
        return table


INT_COLUMNS = ("label", "id", "pos", "seek")


def rows_table(rows: dict[str, list]) -> pa.Table:
    """Rows by column as a block: binary images, int64 labels, ids (and positions); a channel's
    own fields (`pipelines.named_fields`) as Arrow infers them (a record's member bytes: binary)."""
    return pa.table(
        {
            name: pa.array(values, pa.binary() if name == "image" else pa.int64() if name in INT_COLUMNS else None)
            for name, values in rows.items()
        }
    )


def _payload(row: dict) -> int:
    """The bytes of a row's binary fields: the image's, or a named channel's (a mask's too)."""
    return sum(len(v) for v in row.values() if isinstance(v, (bytes, bytearray)))


class UnitPositions:
    """Each row's position (`pipelines.order`) from its unit's tag `(unit, last)`, or
    `(unit, last, end, sample)` for a record file's sample (its record's end offset and its index
    among the unit's samples, for the row's `seek`): the ordinal counts the rows the unit yielded
    so far, so a skipped record shifts nothing, and the last bit goes on the unit's final row kept.
    `starts`: a resumed read's first ordinal of each unit it entered past its start."""

    def __init__(self, starts: dict[int, int] | None = None):
        self.counts: dict[int, int] = dict(starts or {})
        """Rows each open unit yielded so far."""

    def of_row(self, tag: tuple) -> tuple[int, int]:
        """(position, seek) of the unit's next row."""
        unit, last, *at = tag
        ordinal = self.counts.pop(unit, 0)
        if not last:
            self.counts[unit] = ordinal + 1
        seek = seek_point(at[0], at[1] - ordinal) if at and not last else NO_SEEK
        return position(unit, ordinal, last), seek

    def of_table(self, tag: tuple, count: int) -> tuple[pa.Array, pa.Array]:
        """Positions and seeks of a checked table's `count` rows, all of unit `tag[0]` (read whole:
        no seek)."""
        unit, last, *_ = tag
        start = self.counts.pop(unit, 0)
        pos = (unit << UNIT_SHIFT) | np.arange(start, start + count, dtype=np.int64)
        if last and count:
            pos[-1] |= LAST
        elif not last:
            self.counts[unit] = start + count
        return pa.array(pos, pa.int64()), no_seeks(count)

    def end_skipped(self, unit: int, waiting: list[int]) -> None:
        """A unit's last record was skipped: its last row kept, if still `waiting` for a block,
        gets the bit. (Already handed on, it cannot: the unit then stays open in the epoch's
        position, and is read again on resume with its drawn rows dropped, as a unit in flight is.)"""
        self.counts.pop(unit, None)
        for i in range(len(waiting) - 1, -1, -1):
            if waiting[i] >> UNIT_SHIFT == unit:
                waiting[i] |= LAST
                return


def no_seeks(count: int) -> pa.Array:
    return pa.array(np.full(count, NO_SEEK, np.int64), pa.int64())
