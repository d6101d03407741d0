"""From a channel's files and streams to the rows the pipeline takes: `image` bytes, `label`, `id`.

Every record format ends here as samples, each with a place (`record 12`, `row 40`, `sample
n03/abc at byte 10240`) so an error names the channel, the file and the sample:

* tfrecord / recordio: a `tf.train.Example` per record, its features named by the channel's
  `fields` (default `image/encoded`, `image/class/label`, `id`), or an augmented manifest's
  attributes, one record each, regrouped by `attribute_names`;
* webdataset: tar members grouped by key, the image and label picked by extension;
* parquet: rows of the chosen row groups;
* image_folder: one file per sample, labelled by its class folder.

A sample without an id gets one derived from where it is (`derived_id`: its file's path in the
channel and its record, row or byte offset there; a Pipe stream's from its image bytes), so it
still names the sample in the exactly-once accounting, and the same image in two places is two
samples. A sample that cannot be used (a missing image or
label, a label that is not a class) goes to the channel's corrupt-record policy like a damaged
record: fail by default, or skip and count up to `max_corrupted_records`. Rows leave in Arrow
blocks of `channel.block_rows` (the chain's batch size), across files, so a stream is never held
whole and a folder of small images does not become a block per image.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Iterator
from typing import BinaryIO

import google_crc32c
import pyarrow as pa

from smlaunch.cluster.plan import ChannelPlan
from smlaunch.errors import DataError
from smlaunch.pipelines.blocks import ROW_OVERHEAD_BYTES, BlockCutter, UnitPositions, rows_table
from smlaunch.pipelines.corrupt import skip_policy
from smlaunch.pipelines.formats import CHANNEL_FORMATS, PositionedRecords, RecordError, iter_records
from smlaunch.pipelines.formats.example import example_values
from smlaunch.pipelines.order import LAST, NO_SEEK, UNIT_SHIFT

Sample = tuple[str, bytes | None, object, object]
"""(where in the source, image bytes or None, label as found, id as found or None; or the record's
`DataError` in place of the id when it did not parse)."""


ID_MASK = (1 << 63) - 1
MEMBER_STEP = 0x9E3779B97F4A7C15 & ID_MASK
"""Odd, so `member * MEMBER_STEP` is one-to-one modulo 2^63: the members of one file never share an
id, and `pipelines.places` can take the member back out of an id."""


def derived_id(key: str | bytes, member: int = 0) -> int:
    """A 63-bit id from where a sample is: `key` its file's path relative to the channel directory
    (`member` the record's index, the row's, or a tar sample's byte offset in it; 0 for a file that
    is one image), or, for a Pipe stream, which has no place that stays put between epochs, the
    image bytes. Stable across runs and hosts, and wide enough that distinct places of a large
    dataset do not collide (one CRC-32 would, past ~77k images).

    Two CRCs of different polynomials side by side (zlib's CRC-32, and CRC-32C in hardware via
    google-crc32c) of the key, plus `member` times an odd constant, modulo 2^63. Not a cryptographic
    hash: ids only tell a dataset's own samples apart. Derived from the place, not the image
    bytes (ids up to 2026-11 were), so byte-identical images in two files are two samples, and
    reading a folder of photo-sized images no longer pays a CRC over every image. (A checkpoint
    written mid-epoch by a version that derived ids from the bytes holds ids this one does not
    make: resumed here, that epoch's read rows are read again.)"""
    data = key.encode() if isinstance(key, str) else key
    base = ((zlib.crc32(data) << 32) | google_crc32c.value(data)) >> 1
    return (base + member * MEMBER_STEP) & ID_MASK if member else base


def derived_ids(paths: Iterable[str]) -> list[int]:
    """`derived_id(path)` of each path (files that are one image each), in one loop."""
    crc32, crc32c = zlib.crc32, google_crc32c.value
    return [((crc32(key) << 32) | crc32c(key)) >> 1 for key in (path.encode() for path in paths)]


def member_ids(key: str, first: int, count: int) -> pa.Array:
    """`derived_id(key, n)` for n in `first`..`first + count - 1` (a Parquet row group's rows)."""
    import numpy as np

    members = np.arange(first, first + count, dtype=np.uint64)
    ids = (np.uint64(derived_id(key)) + members * np.uint64(MEMBER_STEP)) & np.uint64(ID_MASK)
    return pa.array(ids.astype(np.int64), pa.int64())


def _place_key(channel: ChannelPlan, source: str) -> str | None:
    """What a derived id of `source`'s samples is made from: the file's path relative to the
    channel directory (`<opt_ml>/input/data/<channel>/`, the same on every host and run), or None
    for a Pipe stream (its ids come from the image bytes)."""
    if channel.input_mode == "Pipe":
        return None
    return source.rpartition(f"/input/data/{channel.name}/")[2]


def example_row(record: bytes, fields=("image/encoded", "image/class/label", "id")) -> tuple[bytes, int, int]:
    """(image, label, id) of one tf.train.Example record, as a File-mode read makes its row."""
    image, label, ident = example_values(record, fields)
    return _checked(image, label, ident, None, "image, label", False)


def channel_records(channel: ChannelPlan, stream, source: str) -> Iterator[bytes]:
    """The records of one file or FIFO of `channel`, corrupt ones handled by its skip policy."""
    return iter_records(
        stream, channel.record_format, source, on_corrupt=skip_policy(channel.name, channel.max_corrupted_records)
    )


def record_samples(channel: ChannelPlan, records: Iterable[bytes], source: str, first: int = 0) -> Iterator[Sample]:
    """Samples of tf.train.Example records, or of an augmented manifest's attribute records;
    `first`: the index of the first (a read resumed inside a file goes on numbering from there)."""
    names = channel.attribute_names
    if names:
        for n, unit in enumerate(group_attributes(records, len(names), source), first):
            yield (
                f"{source} row {n}",
                unit[0],
                unit[1].decode(errors="replace"),
                unit[2].decode(errors="replace") if len(names) > 2 else None,
            )
        return
    fields = tuple(channel.fields)
    key = None if channel.id_required else _place_key(channel, source)
    from smlaunch.pipelines.named_fields import is_named

    if is_named(channel):
        yield from _named_records(channel, records, source, first, key)
        return
    for n, record in enumerate(records, first):
        try:
            image, label, ident = example_values(record, fields)
        except DataError as exc:
            yield f"{source} record {n}", None, None, exc
            continue
        yield f"{source} record {n}", image, label, ident if ident is not None or key is None else derived_id(key, n)


def _named_records(channel: ChannelPlan, records: Iterable[bytes], source: str, first: int, key: str | None):
    """`NamedSample`s of tf.train.Example records for a channel naming its features."""
    from smlaunch.pipelines.formats.example import example_features
    from smlaunch.pipelines.named_fields import NamedSample, batch_fields

    named = {name: feature for name, feature in batch_fields(channel).items() if feature}
    for n, record in enumerate(records, first):
        where = f"{source} record {n}"
        try:
            values = example_features(record, named)
        except DataError as exc:
            yield NamedSample(where, {}, exc)
            continue
        ident = values.pop("id", None)
        if ident is None and key is not None:
            ident = derived_id(key, n)
        elif ident is None:  # a Pipe stream: no place that stays put, so the record's bytes
            ident = derived_id(record)
        yield NamedSample(where, values, ident)


def unit_samples(
    channel: ChannelPlan,
    stream: BinaryIO,
    source: str,
    group: int | None,
    num_classes: int | None,
    offset: int = 0,
    first: int = 0,
) -> Iterator[tuple[int, Sample | pa.Table]]:
    """(where the file can be read on from after it, or `order.NO_SEEK`; the sample or checked
    table) of one read unit of a File channel: a file of records or a tar shard (its stream
    standing at `offset`, `first` the index of its next sample), or a Parquet row group `group`.
    The format's layout picks the reader (`formats.spec`)."""
    layout = CHANNEL_FORMATS[channel.record_format].layout
    if layout == "row_groups":
        return (
            (NO_SEEK, item)
            for item in parquet_samples(channel, stream, source, None if group is None else [group], num_classes)
        )
    if layout == "tar":
        return (
            (NO_SEEK if end is None else end, sample)
            for end, sample in webdataset_spans(channel, stream, source, offset)
        )
    records = PositionedRecords(
        stream, channel.record_format, source, skip_policy(channel.name, channel.max_corrupted_records)
    )
    return ((records.end, sample) for sample in record_samples(channel, records, source, first))


def webdataset_samples(channel: ChannelPlan, stream: BinaryIO, source: str) -> Iterator[Sample]:
    return (sample for _, sample in webdataset_spans(channel, stream, source))


def webdataset_spans(
    channel: ChannelPlan, stream: BinaryIO, source: str, start: int = 0
) -> Iterator[tuple[int | None, Sample]]:
    """(offset of the next sample or None, sample) of a stream standing at offset `start`."""
    from smlaunch.pipelines.formats.webdataset import iter_spans, pick
    from smlaunch.pipelines.named_fields import NamedSample, batch_fields, is_named

    image_ext, label_ext, id_ext = channel.fields
    named = {k: v for k, v in batch_fields(channel).items() if v and k != "id"} if is_named(channel) else None
    policy = skip_policy(channel.name, channel.max_corrupted_records)
    place = None if channel.id_required else _place_key(channel, source)
    try:
        for offset, end, sample in iter_spans(stream, source, start):
            key = sample["__key__"].decode(errors="replace")
            ident: bytes | int | None = pick(sample, id_ext) if id_ext else None
            ident = ident if ident is not None or place is None else derived_id(place, offset)
            where = f"{source} sample {key} at byte {offset}"
            if named is not None:
                if ident is None:  # a Pipe stream's sample: its id from its members' bytes
                    ident = derived_id(b"".join(pick(sample, ext) or b"" for ext in named.values()))
                yield end, NamedSample(where, {name: pick(sample, ext) for name, ext in named.items()}, ident)
                continue
            image = pick(sample, image_ext) if image_ext else None  # None: `_checked` says no image
            yield end, (where, image, pick(sample, label_ext) if label_ext else None, ident)
    except RecordError as exc:
        if policy is None or not policy(exc):
            raise DataError(f"channel '{channel.name}': {exc}") from None


def parquet_samples(
    channel: ChannelPlan, stream, source: str, row_groups: list[int] | None, num_classes: int | None = None
) -> Iterator[Sample | pa.Table]:
    """The chosen row groups: each as one checked table when its columns pass the checks, or row
    by row (to name the bad row and apply the skip policy) when they do not. Row by row costs
    several times the read itself (bench/formats.py), so a clean row group never takes that path."""
    from smlaunch.pipelines.formats.parquet import group_rows, iter_groups
    from smlaunch.pipelines.named_fields import batch_fields, is_named

    fields = batch_fields(channel)
    key = None if channel.id_required else _place_key(channel, source)
    for start, table in iter_groups(stream, source, row_groups, fields):
        if is_named(channel):
            yield _named_group(channel, table, fields, num_classes, key, source, start)
            continue
        block = _checked_columns(table, fields, num_classes, channel.id_required, key, start)
        if block is not None:
            yield block
            continue
        for n, data, value, ident in group_rows(table, start, fields):
            yield f"{source} row {n}", data, value, ident if ident is not None or key is None else derived_id(key, n)


def _named_group(
    channel: ChannelPlan,
    table: pa.Table,
    fields: dict,
    num_classes: int | None,
    key: str | None,
    source: str,
    start: int,
) -> pa.Table:
    """A row group of a channel naming its fields (`named_fields`), with its ids: the id column's
    (integers, none missing), else derived from the file and row."""
    from smlaunch.pipelines.named_fields import named_table

    if fields.get("id"):
        ids = table.column(fields["id"])
        if ids.null_count or not pa.types.is_integer(ids.type):
            raise DataError(
                f"channel '{channel.name}': {source}: the id column {fields['id']} must hold integers, "
                f"none missing (it holds {ids.type}, {ids.null_count} missing)"
            )
        ids = ids.combine_chunks().cast(pa.int64())
    else:
        ids = member_ids(key or source, start, table.num_rows)
    return named_table(channel, table, fields, num_classes, ids, source, start)


def _checked_columns(
    table: pa.Table, fields: dict, num_classes: int | None, id_required: bool, key: str | None = None, start: int = 0
) -> pa.Table | None:
    """`table` as a block, if every row would pass `_checked`, judged column-wise; None if some
    row might not (or the columns need a per-row conversion, as string labels do). Rows without
    an id column get `derived_id(key, row)`, the table's rows counted from `start` (from the
    image bytes when `key` is None)."""
    import pyarrow.compute as pc

    images, labels = table.column(fields["image"]), table.column(fields["label"])
    if table.num_rows == 0 or images.null_count or labels.null_count or not pa.types.is_integer(labels.type):
        return None
    bounds = pc.min_max(labels)
    if (
        pc.min(pc.binary_length(images)).as_py() == 0
        or bounds["min"].as_py() < 0
        or (num_classes is not None and bounds["max"].as_py() >= num_classes)
    ):
        return None
    if fields.get("id"):
        ids = table.column(fields["id"])
        if ids.null_count or not pa.types.is_integer(ids.type):
            return None
        try:
            ids = ids.cast(pa.int64())  # a safe cast: an id past int64 fails, and takes the per-row path
        except pa.ArrowInvalid:
            return None
    elif id_required:
        return None
    else:
        ids = (
            member_ids(key, start, table.num_rows)
            if key is not None
            else pa.array([derived_id(image) for image in images.to_pylist()], pa.int64())
        )
    return pa.table({"image": images.cast(pa.binary()), "label": labels.cast(pa.int64()), "id": ids}).combine_chunks()


def folder_tables(
    files: Iterable[tuple], num_classes: int | None, block_bytes: int, prefix: str = "", positions: bool = False
) -> Iterator[pa.Table | Sample]:
    """An image folder's `(path, bytes, label)` files as checked Arrow tables of about
    `block_bytes` (see `row_blocks`); `prefix` + path names a file in an error. With `positions`,
    each file comes with its unit index (`(path, bytes, label, unit)`) and the tables carry a `pos`
    column (a file is a unit of one row: `pipelines.order`), for `row_blocks(positions=True)`.

    A file is one sample with a known class, so the only checks are an empty file and a label at or
    above `num_classes`; such a file is handed on as a `Sample` (between the tables, in order), for
    `row_blocks` to name it and apply the skip policy. With `read_task.folder_files`, the
    reader does 1.8x the files per second of the per-sample path (BENCHMARKS.md, formats)."""
    images: list[bytes] = []
    labels: list[int] = []
    units: list[int] = []
    paths: list[str] = []
    pending = 0

    def table() -> pa.Table:
        columns: dict[str, list] = {"image": images, "label": labels, "id": derived_ids(paths)}
        if positions:
            columns["pos"] = [(unit << UNIT_SHIFT) | LAST for unit in units]
            columns["seek"] = [NO_SEEK] * len(units)  # a file is read whole
        return rows_table(columns)

    for path, data, label, *unit in files:
        if not data or (num_classes is not None and label >= num_classes):
            if images:
                yield table()
                images, labels, units, paths, pending = [], [], [], [], 0
            sample = (prefix + path, data, label, None)
            yield ((unit[0], True), sample) if positions else sample
            continue
        images.append(data)
        labels.append(label)
        paths.append(path)
        if positions:
            units.append(unit[0])
        pending += len(data) + ROW_OVERHEAD_BYTES
        if pending >= block_bytes:
            yield table()
            images, labels, units, paths, pending = [], [], [], [], 0
    if images:
        yield table()


def row_blocks(
    channel: ChannelPlan,
    samples: Iterable,
    num_classes: int | None = None,
    block_bytes: int | None = None,
    positions: bool = False,
    starts: dict[int, int] | None = None,
) -> Iterator[pa.Table]:
    """Arrow blocks of checked rows (`blocks.BlockCutter`: `channel.block_rows` rows each, or about
    `block_bytes`); every error names the channel, the source and the sample. A table among the
    samples holds rows already checked column-wise (`parquet_samples`, `folder_tables`).

    With `positions`, each item comes tagged `((unit, last[, end, sample]), item)`, `last` on a
    unit's final item (or untagged: a table that has its `pos` column already), and every row
    leaves with its position and seek (`blocks.UnitPositions`; `starts`: a resumed read's first
    ordinals)."""
    from smlaunch.pipelines.named_fields import NamedCheck, is_named, row_columns

    columns = row_columns(channel) if is_named(channel) else ("image", "label", "id")
    cutter = BlockCutter(columns + (("pos", "seek") if positions else ()), channel.block_rows, block_bytes)
    check = NamedCheck(channel, num_classes) if is_named(channel) else _SampleCheck(channel, num_classes)
    units = UnitPositions(starts)
    try:
        for entry in samples:
            tag, item = entry if positions and not isinstance(entry, pa.Table) else (None, entry)
            if isinstance(item, pa.Table):  # already checked, column-wise
                if tag is not None:
                    pos, seek = units.of_table(tag, item.num_rows)
                    item = item.append_column("pos", pos).append_column("seek", seek)
                for block in cutter.add_table(item):  # not `yield from` a list: Ray's streaming tasks send
                    yield block
                continue
            row = check(item)
            if row is None:  # skipped under the channel's max_corrupted_records
                if tag is not None and tag[1]:
                    units.end_skipped(tag[0], cutter.rows["pos"])
                continue
            if tag is not None:
                row["pos"], row["seek"] = units.of_row(tag)
            for block in cutter.add_row(row):
                yield block
    except RecordError as exc:
        raise DataError(f"channel '{channel.name}': {exc}") from None
    except DataError as exc:
        message = str(exc)
        raise DataError(
            message if message.startswith("channel '") else f"channel '{channel.name}': {message}"
        ) from None
    for block in cutter.rest():
        yield block


class _SampleCheck:
    """A sample as a row (`{"image", "label", "id"}`), or None when it is bad and the channel's
    corrupt-record policy skips it; a bad sample past the policy raises, naming where it is."""

    def __init__(self, channel: ChannelPlan, num_classes: int | None):
        self.channel, self.num_classes = channel, num_classes
        self.policy = skip_policy(channel.name, channel.max_corrupted_records)
        self.need = _need(channel)

    def __call__(self, sample: Sample) -> dict | None:
        where, image, label, ident = sample
        try:
            image, label, ident = _checked(image, label, ident, self.num_classes, self.need, self.channel.id_required)
        except DataError as exc:
            error = DataError(f"channel '{self.channel.name}': {where}: {exc}")
            if self.policy is None or not self.policy(error):
                raise error from None
            return None
        return {"image": image, "label": label, "id": ident}


def _checked(image, label, ident, num_classes: int | None, need: str, id_required: bool) -> tuple[bytes, int, int]:
    if isinstance(ident, Exception):  # the record itself did not parse
        raise DataError(str(ident))
    if not image:
        raise DataError(f"no image ({need})")
    if label is None:
        raise DataError(f"no label ({need})")
    try:
        value = int(label.strip() if isinstance(label, (bytes, str)) else label)
    except (TypeError, ValueError):
        raise DataError(f"label {label!r} is not an integer class index") from None
    if value < 0 or (num_classes is not None and value >= num_classes):
        bound = f"0..{num_classes - 1} (model.num_classes: {num_classes})" if num_classes else "0 or more"
        raise DataError(f"label {value} is not a class index {bound}")
    if ident is None:
        if id_required:
            raise DataError(f"no id ({need})")
        return bytes(image), value, derived_id(image)
    try:
        return bytes(image), value, int(ident.strip() if isinstance(ident, (bytes, str)) else ident)
    except (TypeError, ValueError):
        raise DataError(f"id {ident!r} is not an integer") from None


def _need(channel: ChannelPlan) -> str:
    if channel.attribute_names:
        return f"attributes {', '.join(channel.attribute_names)}: image, integer label[, integer id]"
    spec = CHANNEL_FORMATS[channel.record_format]
    if spec.fields is None:
        return "an image file in a class folder"
    image, label, ident = channel.fields
    return (
        f"{spec.field_kind} {image}, {label}"
        + (f", {ident}" if ident else "")
        + "; set the channel's fields to rename them"
    )


def group_attributes(records: Iterable[bytes], count: int, source: str) -> Iterator[tuple[bytes, ...]]:
    """Consecutive records regrouped into tuples of `count` attributes (one manifest line each)."""
    group: list[bytes] = []
    rows = 0
    for record in records:
        group.append(record)
        if len(group) == count:
            yield tuple(group)
            group = []
            rows += 1
    if group:
        raise DataError(
            f"{source}: the stream ended inside row {rows} after {len(group)} of {count} attributes; "
            "do the channel's attribute_names match the job's AttributeNames?"
        )
