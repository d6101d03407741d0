import io
import struct

import pytest

from smlaunch.pipelines.formats.example import decode_example, encode_example
from smlaunch.pipelines.formats.tfrecord import RecordError, encode_record, read_file, read_records, write_records


def test_tfrecord_round_trip(tmp_path):
    records = [b"", b"a", bytes(range(256)) * 40]
    assert write_records(tmp_path / "x.tfrecord", records) == 3
    assert list(read_file(tmp_path / "x.tfrecord")) == records


def test_reads_what_the_tfrecord_package_writes(tmp_path):
    """Independent check of framing, CRCs and Example encoding (the package uses protobuf)."""
    from tfrecord.writer import TFRecordWriter

    writer = TFRecordWriter(str(tmp_path / "ref.tfrecord"))
    writer.write({"image/encoded": (b"\xff\xd8jpeg", "byte"), "label": (7, "int"), "f": ([0.5, 2.0], "float")})
    writer.close()
    assert [decode_example(r) for r in read_file(tmp_path / "ref.tfrecord")] == [
        {"image/encoded": [b"\xff\xd8jpeg"], "label": [7], "f": [0.5, 2.0]}]


def test_tfrecord_package_reads_what_we_write(tmp_path):
    from tfrecord.reader import tfrecord_loader

    write_records(tmp_path / "ours.tfrecord", [encode_example({"image/encoded": b"abc", "label": -7})])
    (row,) = list(tfrecord_loader(str(tmp_path / "ours.tfrecord"), None))
    assert row["image/encoded"] == b"abc" and row["label"].tolist() == [-7]


def _corrupt(data: bytes, position: int) -> bytes:
    return data[:position] + bytes([data[position] ^ 0xFF]) + data[position + 1:]


def test_bad_length_crc_names_the_offset():
    first = encode_record(b"first")
    stream = first + _corrupt(encode_record(b"second"), 3)
    with pytest.raises(RecordError, match=f"s: bad length CRC in record at byte {len(first)}"):
        list(read_records(io.BytesIO(stream), "s"))


def test_records_before_damage_are_returned_then_error():
    first = encode_record(b"good")
    reader = read_records(io.BytesIO(first + _corrupt(encode_record(b"bad!"), 14)), "chan/f")
    assert next(reader) == b"good"
    with pytest.raises(RecordError, match=f"chan/f: bad data CRC in record at byte {len(first)}"):
        next(reader)


def test_truncated_tail(tmp_path):
    data = encode_record(b"a" * 100)
    (tmp_path / "t").write_bytes(data + data[:50])
    reader = read_file(tmp_path / "t")
    assert next(reader) == b"a" * 100
    with pytest.raises(RecordError, match="at byte 116"):
        next(reader)


def test_huge_length_is_refused_without_allocating(tmp_path):
    from smlaunch.pipelines.formats.tfrecord import masked_crc

    length = struct.pack("<Q", 1 << 60)
    (tmp_path / "h").write_bytes(length + struct.pack("<I", masked_crc(length)) + b"x" * 10)
    with pytest.raises(RecordError, match=r"claims 1152921504606846976 bytes"):
        list(read_file(tmp_path / "h"))


def test_example_round_trip_and_negative_ints():
    features = {"image/encoded": b"\xff\xd8jpeg", "image/class/label": 7, "id": 123456789012,
                "neg": -5, "floats": [0.5, -1.25], "many": [b"a", b"b"]}
    decoded = decode_example(encode_example(features))
    assert decoded == {"image/encoded": [b"\xff\xd8jpeg"], "image/class/label": [7], "id": [123456789012],
                       "neg": [-5], "floats": [0.5, -1.25], "many": [b"a", b"b"]}


def test_example_decodes_unpacked_ints():
    # int64_list with one unpacked value (wire type 0), as some writers emit.
    feature = b"\x1a\x02\x08\x05"  # Feature.int64_list { value: 5 } unpacked
    entry = b"\x0a\x01k" + b"\x12" + bytes([len(feature)]) + feature
    example = b"\x0a" + bytes([len(entry) + 2]) + b"\x0a" + bytes([len(entry)]) + entry
    assert decode_example(example) == {"k": [5]}
