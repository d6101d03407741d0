"""Cutting checked rows into blocks (pipelines/blocks.py): by rows or by bytes, rows one at a time and
checked tables mixed, every row once and in order; and the positions rows leave with."""

import numpy as np
import pyarrow as pa
import pytest

from smlaunch.pipelines.blocks import ROW_OVERHEAD_BYTES, BlockCutter, UnitPositions, rows_table
from smlaunch.pipelines.order import LAST, NO_SEEK, UNIT_SHIFT, seek_point, split_positions, split_seek

COLUMNS = ("image", "label", "id")


def row(i: int, size: int = 100) -> dict:
    return {"image": bytes([i % 256]) * size, "label": i % 10, "id": i}


def table(ids: range, size: int = 100) -> pa.Table:
    rows = [row(i, size) for i in ids]
    return rows_table({name: [r[name] for r in rows] for name in COLUMNS})


def cut(cutter: BlockCutter, items) -> list[pa.Table]:
    out = []
    for item in items:
        out += cutter.add_table(item) if isinstance(item, pa.Table) else cutter.add_row(item)
    return out + cutter.rest()


def test_rows_one_at_a_time_fill_blocks_of_the_row_count_and_the_rest_leaves_last():
    blocks = cut(BlockCutter(COLUMNS, 4, None), [row(i) for i in range(10)])
    assert [b.num_rows for b in blocks] == [4, 4, 2]
    assert [i for b in blocks for i in b.column("id").to_pylist()] == list(range(10))
    assert blocks[0].schema == pa.schema([("image", pa.binary()), ("label", pa.int64()), ("id", pa.int64())])


def test_rows_and_tables_mixed_come_out_in_order_in_whole_blocks():
    items = [row(0), row(1), table(range(2, 12)), row(12), table(range(13, 14)), table(range(14, 14)), row(14)]
    blocks = cut(BlockCutter(COLUMNS, 4, None), items)
    assert [i for b in blocks for i in b.column("id").to_pylist()] == list(range(15))
    assert [b.num_rows for b in blocks] == [4, 4, 4, 3]


@pytest.mark.parametrize("size", [10, 100, 3000])
def test_blocks_cut_by_bytes_reach_the_target_and_lose_no_row(size):
    target = 4096
    items = [row(i, size) for i in range(50)] + [table(range(50, 400), size)] + [row(i, size) for i in range(400, 420)]
    blocks = cut(BlockCutter(COLUMNS, 64, target), items)
    assert [i for b in blocks for i in b.column("id").to_pylist()] == list(range(420))
    assert all(b.nbytes >= target * 0.9 for b in blocks[:-1]), [b.nbytes for b in blocks]
    assert all(b.nbytes <= 2 * target + size + ROW_OVERHEAD_BYTES for b in blocks), [b.nbytes for b in blocks]


def test_a_table_of_one_to_one_and_a_half_targets_is_handed_on_whole():
    one = table(range(0, 30), 100)  # 30 rows of 100 bytes + overhead: about 3.6 KB
    blocks = BlockCutter(COLUMNS, 64, int(one.nbytes * 0.8)).add_table(one)
    assert len(blocks) == 1 and blocks[0].num_rows == 30


def test_positions_count_each_unit_s_rows_and_mark_its_last_row_kept():
    units = UnitPositions()
    got = [units.of_row((7, False))[0], units.of_row((3, False))[0], units.of_row((7, True))[0]]
    assert got == [7 << UNIT_SHIFT, 3 << UNIT_SHIFT, (7 << UNIT_SHIFT) | 1 | LAST]
    pos, seek = units.of_table((3, True), 2)
    assert pos.to_pylist() == [(3 << UNIT_SHIFT) | 1, (3 << UNIT_SHIFT) | 2 | LAST]
    assert seek.to_pylist() == [NO_SEEK, NO_SEEK]  # a table is read whole: no seek into it
    assert units.of_table((5, False), 2)[0].to_pylist() == [5 << UNIT_SHIFT, (5 << UNIT_SHIFT) | 1]
    waiting = [5 << UNIT_SHIFT, (5 << UNIT_SHIFT) | 1, 9 << UNIT_SHIFT]
    units.end_skipped(5, waiting)  # unit 5's last record was bad: its last row kept gets the bit
    assert waiting == [5 << UNIT_SHIFT, (5 << UNIT_SHIFT) | 1 | LAST, 9 << UNIT_SHIFT]
    assert units.counts == {}  # nothing left open


def test_a_record_row_s_seek_holds_its_end_and_the_samples_skipped_before_it():
    """A resumed read enters a file at a row's seek: past the row's record, numbering samples on
    from the row's own index, which is ahead of its ordinal by the samples the check skipped."""
    units = UnitPositions({4: 10})  # a resumed read entered unit 4 at ordinal 10
    pos, seek = units.of_row((4, False, 5000, 12))  # sample 12 (two skipped before), ending at byte 5000
    assert split_positions(np.array([pos]))[1][0] == 10
    assert split_seek(seek) == (5000, 2)
    assert units.of_row((4, True))[1] == NO_SEEK  # nothing follows a unit's last row
    assert seek_point(1 << 43, 0) == NO_SEEK and seek_point(10, 1 << 20) == NO_SEEK  # past what one int64 packs
