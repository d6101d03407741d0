"""Rows of a Parquet file as `row_blocks` makes them: clean row groups checked column-wise, the
others row by row, in the file's order and in blocks of `block_rows`, a bad row named; and the ids
of samples without one, derived from where they are."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from smlaunch.cluster.plan import channel_plan
from smlaunch.config.channel import ChannelConfig
from smlaunch.errors import DataError
from smlaunch.pipelines.rows import derived_id, parquet_samples, row_blocks

IMAGES = [bytes([n % 251, n // 251, 7]) * 5 for n in range(150)]
LABELS = [n % 10 for n in range(150)]


def write(path, groups: list[pa.Table]):
    with pq.ParquetWriter(path, groups[0].schema) as writer:
        for table in groups:
            writer.write_table(table)


def group(lo, hi, labels=None, kind=None):
    kind = kind or pa.int64()
    return pa.table(
        {
            "image": pa.array(IMAGES[lo:hi], pa.binary()),
            "label": pa.array(labels if labels is not None else LABELS[lo:hi], kind),
        }
    )


def blocks(*paths, num_classes=10, block_bytes=None):
    channel = channel_plan(
        "pq", ChannelConfig(source=str(paths[0].parent), record_format="parquet"), ("algo-2",), block_rows=64
    )

    def samples():
        for path in paths:
            with open(path, "rb") as stream:
                yield from parquet_samples(channel, stream, str(path), None, num_classes)

    return list(row_blocks(channel, samples(), num_classes, block_bytes))


def place_ids(*paths, rows=50):
    """The derived ids of `rows` rows in each of `paths` (read from outside a channel directory,
    the whole path is the place)."""
    return [derived_id(str(path), n) for path in paths for n in range(rows)]


def test_clean_and_row_by_row_groups_keep_the_order_in_full_blocks(tmp_path):
    # The middle file's labels are strings, read row by row; the others are checked column-wise.
    paths = [tmp_path / f"part-{n}.parquet" for n in range(3)]
    write(paths[0], [group(0, 30), group(30, 50)])
    write(paths[1], [group(50, 100, [str(v) for v in LABELS[50:100]], pa.string())])
    write(paths[2], [group(100, 150, kind=pa.uint8())])
    got = blocks(*paths)
    assert [b.num_rows for b in got] == [64, 64, 22]
    table = pa.concat_tables(got)
    assert table.column("image").to_pylist() == IMAGES
    assert table.column("label").to_pylist() == LABELS
    assert table.column("id").to_pylist() == place_ids(*paths)
    assert table.schema == pa.schema([("image", pa.binary()), ("label", pa.int64()), ("id", pa.int64())])


def test_blocks_cut_by_bytes_take_whole_row_groups_and_rows_until_the_size_in_order(tmp_path):
    """A File-mode read cuts blocks by bytes (Ray Data's target block size): clean row groups pass
    whole or joined until the size, rows read one by one fill blocks to it; every row once, in order."""
    paths = [tmp_path / f"part-{n}.parquet" for n in range(3)]
    write(paths[0], [group(0, 30), group(30, 50)])
    write(paths[1], [group(50, 100, [str(v) for v in LABELS[50:100]], pa.string())])
    write(paths[2], [group(100, 150, kind=pa.uint8())])
    got = blocks(*paths, block_bytes=1000)
    # Each block but the last about the size (Ray Data hands a block under 1.5x its target on as
    # it is), whether cut from row groups or filled by rows read one by one.
    assert all(900 <= b.nbytes < 1500 for b in got[:-1]), [b.nbytes for b in got]
    assert sum(b.num_rows for b in got) == 150
    table = pa.concat_tables(got)
    assert table.column("image").to_pylist() == IMAGES
    assert table.column("id").to_pylist() == place_ids(*paths)


@pytest.mark.parametrize(
    "labels, message",
    [
        ([*LABELS[50:57], None, *LABELS[58:100]], "row 57: no label (columns image, label;"),
        ([*LABELS[50:60], 12, *LABELS[61:100]], "row 60: label 12 is not a class index 0..9 (model.num_classes: 10)"),
    ],
)
def test_a_bad_row_in_a_clean_looking_file_is_named(tmp_path, labels, message):
    path = tmp_path / "bad.parquet"
    write(path, [group(0, 50), group(50, 100, labels), group(100, 150)])
    with pytest.raises(DataError) as info:
        blocks(path)
    assert str(info.value).startswith(f"channel 'pq': {path} {message}"), info.value


def test_ids_come_from_the_place_in_the_channel_not_from_the_bytes(tmp_path):
    """The same images in two files are two samples; the same file under another host's or run's
    channel directory keeps its ids (clean row groups, column-wise, and rows read one by one agree)."""
    hosts = [tmp_path / h / "opt/ml/input/data/pq" for h in ("algo-2", "algo-3")]
    for folder in hosts:
        folder.mkdir(parents=True)
        write(folder / "a.parquet", [group(0, 40)])
        write(folder / "b.parquet", [group(0, 40, [str(v) for v in LABELS[:40]], pa.string())])  # row by row
    read = [pa.concat_tables(blocks(folder / "a.parquet", folder / "a.parquet")) for folder in hosts]
    assert read[0].column("id").to_pylist() == read[1].column("id").to_pylist()
    ids = read[0].column("id").to_pylist()[:40]
    assert ids == [derived_id("a.parquet", n) for n in range(40)]
    assert pa.concat_tables(blocks(hosts[1] / "b.parquet")).column("id").to_pylist() == [
        derived_id("b.parquet", n) for n in range(40)
    ]
    assert len(set(ids) | {derived_id("b.parquet", n) for n in range(40)}) == 80  # same bytes, other file


def test_an_id_leads_back_to_its_file_and_member():
    from smlaunch.pipelines.places import SamplePlaces

    files = [(f"n{c:03d}/{n:05d}.JPEG", 110_000) for c in range(20) for n in range(500)]
    assert SamplePlaces("image_folder", files).find(derived_id("n007/00042.JPEG")) == "n007/00042.JPEG"
    assert SamplePlaces("image_folder", files).find(derived_id("n007/00042.JPEG", 1)) is None
    shards = [(f"shard-{n:04d}.tar", 10**9) for n in range(100)]
    assert (
        SamplePlaces("webdataset", shards).find(derived_id("shard-0003.tar", 512_000))
        == "shard-0003.tar sample at byte 512000"
    )
    assert SamplePlaces("tfrecord", shards).find(derived_id("shard-0099.tar", 7)) == "shard-0099.tar record 7"
    assert SamplePlaces("parquet", shards).find(12345) is None  # an id the data gave


def test_derived_ids_are_stable_and_tell_near_identical_images_apart():
    """The id of a Pipe stream's sample without one (from its image bytes): the same in every
    process (no salted hash), and distinct for images one bit apart, of equal length, as re-encodes
    and crops of one photo often are."""
    import os

    image = bytes(range(256)) * 64
    assert derived_id(image) == derived_id(bytes(image)) == 8361937079681550039
    variants = {
        image[:n] + bytes([image[n] ^ (1 << bit)]) + image[n + 1 :]
        for n in range(0, len(image), 97)
        for bit in range(8)
    }
    assert len({derived_id(v) for v in variants}) == len(variants)
    randoms = [os.urandom(700) for _ in range(20000)]
    assert len({derived_id(r) for r in randoms}) == len(set(randoms))
    assert all(0 <= derived_id(r) < 2**63 for r in randoms[:100])
    assert derived_id("n01440764/n01440764_10026.JPEG") == derived_id(b"n01440764/n01440764_10026.JPEG")
    assert all(0 <= derived_id("a.tar", m) < 2**63 for m in (1, 2**40, 2**62))
