"""Parquet files: one row per sample, row groups as the unit of parallel reading.

A row group is the smallest part of a Parquet file that can be read alone (its columns' pages
and statistics are self-contained), so a channel of a few large files still spreads over every
read task: tasks take row groups, not files. Only the image, label and id columns are read.

The image column may be plain binary, or a struct with a `bytes` field: the Hugging Face
`datasets` `Image` feature's layout (`{"bytes": ..., "path": ...}`), which is what
`Dataset.to_parquet` writes. A struct row whose `bytes` is null (an image stored by path only)
cannot be read here and is an error naming the file and row.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, BinaryIO

from smlaunch.errors import DataError

if TYPE_CHECKING:
    import pyarrow as pa  # imported where used: the format table is read by the config, which does not need Arrow


def matches(head: bytes) -> bool:
    return head[:4] == b"PAR1"


def open_parquet(stream: BinaryIO | str, source: str):
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        return pq.ParquetFile(stream)
    except (pa.ArrowInvalid, OSError) as exc:
        raise DataError(f"{source}: not a readable Parquet file ({exc})") from None


def describe(stream: BinaryIO | str, source: str, label: str | None) -> tuple[int, int, int | None]:
    """(row groups, rows, largest label in the statistics, or None when a row group has none): what
    the footer alone tells, so a listing knows an epoch's rows and classes without reading a page."""
    metadata = open_parquet(stream, source).metadata
    groups, rows = metadata.num_row_groups, metadata.num_rows
    if label is None:
        return groups, rows, None
    names = [metadata.schema.column(i).path for i in range(metadata.num_columns)]
    if label not in names:
        return groups, rows, None
    index = names.index(label)
    largest = None
    for g in range(groups):
        stats = metadata.row_group(g).column(index).statistics
        if stats is None or not stats.has_min_max:
            return groups, rows, None
        largest = stats.max if largest is None else max(largest, stats.max)
    return groups, rows, largest


def iter_groups(
    stream: BinaryIO | str, source: str, row_groups: list[int] | None, fields: dict[str, str | None]
) -> Iterator[tuple[int, pa.Table]]:
    """(row number in the file of its first row, table) of each chosen row group, holding only
    the columns `fields` names (batch name -> column; None: not read), the image as binary."""
    import pyarrow as pa

    file = open_parquet(stream, source)
    schema = file.schema_arrow
    wanted = list(dict.fromkeys(column for column in fields.values() if column))
    missing = [name for name in wanted if name not in schema.names]
    if missing:
        shown = ", ".join(f"{k}: {v}" for k, v in fields.items() if v)
        raise DataError(
            f"{source}: no column {', '.join(missing)} (columns: {', '.join(schema.names)}); set the "
            f"channel's fields (now {{{shown}}})"
        )
    starts = _group_starts(file.metadata)
    for group in range(file.metadata.num_row_groups) if row_groups is None else row_groups:
        try:  # one thread: a pass already runs one read task per CPU, and Arrow's pool only competed with them
            table = file.read_row_group(group, columns=wanted, use_threads=False)
        except (pa.ArrowInvalid, OSError) as exc:
            raise DataError(f"{source}: row group {group} is unreadable ({exc})") from None
        if fields.get("image"):
            image = table.schema.get_field_index(fields["image"])
            table = table.set_column(image, fields["image"], _image_bytes(table.column(image), source))
        yield starts[group], table


def group_rows(
    table: pa.Table, start: int, fields: dict[str, str | None]
) -> Iterator[tuple[int, bytes, object, object]]:
    """(row number in the file, image bytes, label, id or None) of one row group, row by row:
    the slow path, taken to name the row a column-wise check found wrong."""
    images = table.column(fields["image"]).to_pylist()
    labels = table.column(fields["label"]).to_pylist()
    ids = table.column(fields["id"]).to_pylist() if fields.get("id") else [None] * len(labels)
    for n, (image, label, sample) in enumerate(zip(images, labels, ids, strict=False)):
        yield start + n, image, label, sample


def _group_starts(metadata) -> list[int]:
    starts, total = [], 0
    for g in range(metadata.num_row_groups):
        starts.append(total)
        total += metadata.row_group(g).num_rows
    return starts


def _image_bytes(column: pa.ChunkedArray, source: str) -> pa.ChunkedArray:
    import pyarrow as pa

    kind = column.type
    if pa.types.is_struct(kind):
        if kind.get_field_index("bytes") < 0:
            raise DataError(f"{source}: the image column is a struct without a `bytes` field ({kind})")
        column = pa.chunked_array([chunk.field("bytes") for chunk in column.chunks], kind.field("bytes").type)
        kind = column.type
    if not (pa.types.is_binary(kind) or pa.types.is_large_binary(kind)):
        raise DataError(
            f"{source}: the image column holds {kind}, not encoded image bytes (binary, or a struct with a bytes field)"
        )
    return column
