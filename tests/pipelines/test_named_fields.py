"""Rows of channels that name their own fields (`pipelines.named_fields`), from files the users'
tools wrote: Parquet by pandas (float columns, a float list), TFRecords by the `tfrecord` package
(bytes, int64 and float list features), WebDataset shards by webdataset's TarWriter (a mask member
beside the image). Each field leaves under its batch name as the data holds it; a record missing a
field is named in one line, or skipped and counted under `max_corrupted_records`."""

from __future__ import annotations

import pyarrow as pa
import pytest

from smlaunch.cluster.plan import channel_plan
from smlaunch.config.channel import ChannelConfig
from smlaunch.errors import DataError
from smlaunch.pipelines.formats import iter_records
from smlaunch.pipelines.rows import parquet_samples, record_samples, row_blocks, webdataset_samples


def _channel(folder, fmt: str, fields: dict, skip: int = 0):
    return channel_plan(
        "train",
        ChannelConfig(source=str(folder), record_format=fmt, fields=fields, max_corrupted_records=skip),
        ("algo-2",),
        block_rows=64,
    )


def _rows(channel, samples) -> pa.Table:
    return pa.concat_tables(list(row_blocks(channel, samples)))


@pytest.mark.ray  # the run's corrupt-record counter is a Ray actor
def test_parquet_columns_by_their_batch_names_and_dtypes_and_a_null_is_named_or_skipped(tmp_path, data_cluster):
    import numpy as np
    import pandas as pd

    from smlaunch.pipelines.corrupt import start_counter

    frame = pd.DataFrame(
        {
            "f0": np.arange(10, dtype=np.float32) / 2,
            "f1": np.arange(10, dtype=np.float64),
            "target": np.linspace(0, 1, 10),
            "count": np.arange(10, dtype=np.int32),
            "vec": [[float(i), float(i) + 0.5] for i in range(10)],
        }
    )
    frame.loc[4, "target"] = None
    path = tmp_path / "part-0.parquet"
    frame.to_parquet(path, row_group_size=5, index=False)
    fields = {"a": "f0", "b": "f1", "y": "target", "n": "count", "v": "vec"}

    def read(channel):
        with open(path, "rb") as stream:
            return _rows(channel, parquet_samples(channel, stream, str(path), None))

    with pytest.raises(DataError, match=rf"channel 'train': {path} row 4: no y \(column target is null\)"):
        read(_channel(tmp_path, "parquet", fields))
    start_counter({"train": 1}, {})
    table = read(_channel(tmp_path, "parquet", fields, skip=1))
    assert table.column_names == ["a", "b", "y", "n", "v", "id"]
    assert table.num_rows == 9 and table.column("n").to_pylist() == [0, 1, 2, 3, 5, 6, 7, 8, 9]
    assert (table.schema.field("a").type, table.schema.field("b").type, table.schema.field("n").type) == (
        pa.float32(),
        pa.float64(),
        pa.int32(),
    )
    assert table.column("v").to_pylist()[0] == [0.0, 0.5]


@pytest.mark.ray  # the run's corrupt-record counter is a Ray actor
def test_tfrecord_features_of_every_kind_written_by_the_tfrecord_package(tmp_path, data_cluster):
    from tfrecord import TFRecordWriter

    path = tmp_path / "shard-0.tfrecord"
    writer = TFRecordWriter(str(path))
    for i in range(6):
        features = {
            "image/encoded": (b"jpeg-%d" % i, "byte"),
            "boxes": ([0.1 * i, 0.2, 0.3, 0.4], "float"),
            "count": (i, "int"),
            "weight": (0.5 * i, "float"),
        }
        if i != 3:
            features["tokens"] = ([i, i + 1, i + 2], "int")
        writer.write(features)
    writer.close()
    fields = {"image": "image/encoded", "boxes": "boxes", "count": "count", "weight": "weight", "tokens": "tokens"}

    def read(channel):
        with open(path, "rb") as stream:
            return _rows(channel, record_samples(channel, iter_records(stream, "tfrecord", str(path)), str(path)))

    with pytest.raises(DataError, match=rf"channel 'train': {path} record 3: no tokens \(tokens\)"):
        read(_channel(tmp_path, "tfrecord", fields))
    from smlaunch.pipelines.corrupt import start_counter

    start_counter({"train": 1}, {})
    table = read(_channel(tmp_path, "tfrecord", fields, skip=1))
    assert table.column_names == ["image", "boxes", "count", "weight", "tokens", "id"]
    assert table.column("image").to_pylist() == [b"jpeg-%d" % i for i in (0, 1, 2, 4, 5)]
    assert table.column("count").to_pylist() == [0, 1, 2, 4, 5]
    assert table.column("tokens").to_pylist()[1] == [1, 2, 3]
    assert table.column("boxes").to_pylist()[1] == pytest.approx([0.1, 0.2, 0.3, 0.4])
    assert table.column("weight").to_pylist() == pytest.approx([0.0, 0.5, 1.0, 2.0, 2.5])
    assert len(set(table.column("id").to_pylist())) == 5  # derived from file and record


def test_webdataset_members_by_extension_and_a_sample_without_its_mask_is_named(tmp_path):
    import webdataset as wds

    folder = tmp_path / "shards"
    folder.mkdir()
    path = folder / "shard-0000.tar"
    with wds.TarWriter(str(path)) as sink:
        for i in range(4):
            sample = {"__key__": f"scene{i}", "jpg": b"image-%d" % i, "json": b'{"i": %d}' % i}
            if i != 2:
                sample["mask.png"] = b"mask-%d" % i
            sink.write(sample)
    fields = {"image": "jpg", "mask": "mask.png", "meta": "json"}
    channel = _channel(folder, "webdataset", fields)
    with open(path, "rb") as stream, pytest.raises(DataError, match=r"sample scene2 at byte \d+: no mask \(mask.png\)"):
        _rows(channel, webdataset_samples(channel, stream, str(path)))
    with open(path, "rb") as stream:
        first = list(
            row_blocks(
                channel, (s for s, _ in zip(webdataset_samples(channel, stream, str(path)), range(2), strict=False))
            )
        )
    table = pa.concat_tables(first)
    assert table.column_names == ["image", "mask", "meta", "id"]
    assert table.column("mask").to_pylist() == [b"mask-0", b"mask-1"] and table.column("meta")[1].as_py() == b'{"i": 1}'
