import io
import os
import struct

import pytest

from smlaunch.pipelines.formats import example
from smlaunch.pipelines.formats.example import decode_example, encode_example, example_values
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
        {"image/encoded": [b"\xff\xd8jpeg"], "label": [7], "f": [0.5, 2.0]}
    ]


def test_tfrecord_package_reads_what_we_write(tmp_path):
    from tfrecord.reader import tfrecord_loader

    write_records(tmp_path / "ours.tfrecord", [encode_example({"image/encoded": b"abc", "label": -7})])
    (row,) = list(tfrecord_loader(str(tmp_path / "ours.tfrecord"), None))
    assert row["image/encoded"] == b"abc" and row["label"].tolist() == [-7]


def _corrupt(data: bytes, position: int) -> bytes:
    return data[:position] + bytes([data[position] ^ 0xFF]) + data[position + 1 :]


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
    features = {
        "image/encoded": b"\xff\xd8jpeg",
        "image/class/label": 7,
        "id": 123456789012,
        "neg": -5,
        "floats": [0.5, -1.25],
        "many": [b"a", b"b"],
    }
    decoded = decode_example(encode_example(features))
    assert decoded == {
        "image/encoded": [b"\xff\xd8jpeg"],
        "image/class/label": [7],
        "id": [123456789012],
        "neg": [-5],
        "floats": [0.5, -1.25],
        "many": [b"a", b"b"],
    }


def test_example_decodes_unpacked_ints():
    # int64_list with one unpacked value (wire type 0), as some writers emit.
    feature = b"\x1a\x02\x08\x05"  # Feature.int64_list { value: 5 } unpacked
    entry = b"\x0a\x01k" + b"\x12" + bytes([len(feature)]) + feature
    example = b"\x0a" + bytes([len(entry) + 2]) + b"\x0a" + bytes([len(entry)]) + entry
    assert decode_example(example) == {"k": [5]}


@pytest.mark.parametrize("parser", ["protobuf", "pure Python"])
def test_example_values_take_the_first_of_each_named_feature(tmp_path, monkeypatch, parser):
    """What a TFRecord read takes from each record, parsed by upb, or by the pure-Python codec
    where protobuf is missing; the record is the `tfrecord` package's."""
    from tfrecord.writer import TFRecordWriter

    if parser == "pure Python":
        monkeypatch.setattr(example, "_example_class", lambda: None)
    writer = TFRecordWriter(str(tmp_path / "ref.tfrecord"))
    writer.write(
        {"img": (b"\xff\xd8jpeg", "byte"), "cls": ([7, 8], "int"), "f": ([0.5, 2.0], "float"), "none": ([], "int")}
    )
    writer.close()
    (record,) = read_file(tmp_path / "ref.tfrecord")
    assert example_values(record, ("img", "cls", "f", "none", "absent", None)) == (
        b"\xff\xd8jpeg",
        7,
        0.5,
        None,
        None,
        None,
    )
    with pytest.raises(Exception, match="^not a tf.train.Example"):
        example_values(record[:-3], ("img",))


# Skipping damage: `on_corrupt` sees one error per damaged region, good records come back in order.


class Skips:
    """An `on_corrupt` that skips everything and keeps the messages."""

    def __init__(self):
        self.messages = []

    def __call__(self, error):
        self.messages.append(str(error))
        return True


def _records(n, seed=0):
    import random

    rng = random.Random(seed)
    return [bytes(rng.getrandbits(8) for _ in range(rng.choice([0, 1, 7, 100, 1000, 5000]))) for _ in range(n)]


def _framed(records):
    """The encoded stream and each record's byte offset."""
    offsets, data = [], b""
    for record in records:
        offsets.append(len(data))
        data += encode_record(record)
    return data, offsets


@pytest.fixture(params=[None, 64, 4096], ids=["4MiB", "chunk64", "chunk4k"])
def chunk(request, monkeypatch):
    """Run under small read buffers too, so records and resyncs straddle many refills."""
    from smlaunch.pipelines.formats import framing

    if request.param:
        monkeypatch.setattr(framing, "CHUNK", request.param)
    return request.param


def test_round_trip_whatever_the_buffer_size(tmp_path, chunk):
    records = _records(40) + [b"z" * 70_000]
    write_records(tmp_path / "r.tfrecord", records)
    assert list(read_file(tmp_path / "r.tfrecord")) == records


def test_bad_data_crc_skips_only_that_record(tmp_path, chunk):
    records = _records(10)
    data, offsets = _framed(records)
    (tmp_path / "d").write_bytes(_corrupt(data, offsets[4] + 12))  # first data byte, or its CRC if empty
    skips = Skips()
    assert list(read_file(tmp_path / "d", on_corrupt=skips)) == records[:4] + records[5:]
    assert skips.messages == [f"{tmp_path / 'd'}: bad data CRC in record at byte {offsets[4]}"]
    with pytest.raises(RecordError, match=f"bad data CRC in record at byte {offsets[4]}"):
        list(read_file(tmp_path / "d"))


@pytest.mark.parametrize("where", [0, 3, 8, 11])  # a length byte, or one of its CRC
def test_bad_length_crc_resynchronises_on_the_next_header(tmp_path, chunk, where):
    records = _records(12, seed=where)
    data, offsets = _framed(records)
    (tmp_path / "l").write_bytes(_corrupt(data, offsets[5] + where))
    skips = Skips()
    assert list(read_file(tmp_path / "l", on_corrupt=skips)) == records[:5] + records[6:]
    assert skips.messages == [f"{tmp_path / 'l'}: bad length CRC in record at byte {offsets[5]}"]
    with pytest.raises(RecordError, match=f"bad length CRC in record at byte {offsets[5]}"):
        list(read_file(tmp_path / "l"))


def test_garbage_between_records_is_one_region(tmp_path, chunk):
    records = _records(6, seed=3)
    data, offsets = _framed(records)
    damaged = data[: offsets[3]] + os.urandom(3000) + data[offsets[3] :]
    (tmp_path / "g").write_bytes(damaged)
    skips = Skips()
    assert list(read_file(tmp_path / "g", on_corrupt=skips)) == records
    assert len(skips.messages) == 1 and f"at byte {offsets[3]}" in skips.messages[0]


def test_damage_running_to_the_end_ends_the_stream(tmp_path, chunk):
    records = _records(5, seed=4)
    data, offsets = _framed(records)
    (tmp_path / "e").write_bytes(data[: offsets[3] + 1] + b"\xff" * 40)  # no header verifies after it
    skips = Skips()
    assert list(read_file(tmp_path / "e", on_corrupt=skips)) == records[:3]
    assert len(skips.messages) == 1 and f"bad length CRC in record at byte {offsets[3]}" in skips.messages[0]


@pytest.mark.parametrize("cut,message", [(5, "truncated record header"), (20, "claims"), (-1, "claims")])
def test_a_truncated_tail_is_reported_once_then_the_stream_ends(tmp_path, chunk, cut, message):
    records = [b"a" * 100, b"b" * 100, b"c" * 100]
    data, offsets = _framed(records)
    (tmp_path / "t").write_bytes(data[: offsets[2] + cut] if cut > 0 else data[:cut])
    skips = Skips()
    assert list(read_file(tmp_path / "t", on_corrupt=skips)) == records[:2]
    assert len(skips.messages) == 1
    assert message in skips.messages[0] and f"at byte {offsets[2]}" in skips.messages[0]


def test_a_truncated_record_on_a_stream_of_unknown_size(chunk):
    class Pipe(io.RawIOBase):
        """Unseekable, and hands out at most 7 bytes a read: a FIFO's short reads."""

        def __init__(self, data):
            self.data = memoryview(data)

        def readable(self):
            return True

        def readinto(self, buffer):
            n = min(7, len(buffer), len(self.data))
            buffer[:n], self.data = self.data[:n], self.data[n:]
            return n

    records = _records(8, seed=5)
    data, offsets = _framed(records)
    assert list(read_records(io.BufferedReader(Pipe(data)), "p")) == records
    with pytest.raises(RecordError, match=f"p: truncated record at byte {offsets[7]}"):
        list(read_records(io.BufferedReader(Pipe(data[:-3])), "p"))
    skips = Skips()
    damaged = _corrupt(_corrupt(data[:-3], offsets[2] + 2), offsets[5] + 12)
    assert list(read_records(Pipe(damaged), "p", on_corrupt=skips)) == records[:2] + records[3:5] + records[6:7]
    assert [m.split(" at byte ")[1] for m in skips.messages] == [str(offsets[2]), str(offsets[5]), str(offsets[7])]


def test_on_corrupt_false_raises_and_its_own_exception_propagates():
    data, offsets = _framed([b"one", b"two", b"three"])
    damaged = _corrupt(data, offsets[1] + 13)
    seen = []
    reader = read_records(io.BytesIO(damaged), "s", on_corrupt=lambda e: seen.append(e) and False)
    assert next(reader) == b"one"
    with pytest.raises(RecordError, match=f"s: bad data CRC in record at byte {offsets[1]}"):
        next(reader)
    assert len(seen) == 1 and isinstance(seen[0], RecordError)

    def stop(error):
        raise KeyError("stop")

    with pytest.raises(KeyError):
        list(read_records(io.BytesIO(damaged), "s", on_corrupt=stop))
