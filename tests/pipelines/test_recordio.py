"""RecordIO framing: round trips (multipart included), interop with the training toolkit, corruption."""

import io
import struct

import pytest

from smlaunch.pipelines.formats import recordio
from smlaunch.pipelines.formats.recordio import MAGIC, RecordError, encode_record, read_records

MAGIC_BYTES = struct.pack("<I", MAGIC)


def roundtrip(records):
    return list(read_records(io.BytesIO(b"".join(encode_record(r) for r in records))))


def test_plain_records_roundtrip_with_padding():
    records = [b"", b"a", b"ab", b"abc", b"abcd", b"x" * 1001]
    data = b"".join(encode_record(r) for r in records)
    assert len(encode_record(b"abc")) == 12 and len(encode_record(b"abcd")) == 12
    assert roundtrip(records) == records
    assert len(data) % 4 == 0


def test_a_payload_holding_the_magic_is_split_into_parts_and_comes_back_whole():
    payload = b"head" + MAGIC_BYTES + b"middle!!" + MAGIC_BYTES + b"tail"
    encoded = encode_record(payload)
    flags = []
    stream = io.BytesIO(encoded)
    while header := stream.read(8):
        _, lrecord = struct.unpack("<II", header)
        flags.append(lrecord >> 29)
        stream.read((lrecord & (2**29 - 1)) + (-(lrecord & (2**29 - 1)) % 4))
    assert flags == [1, 2, 3]
    assert roundtrip([b"before", payload, b"after"]) == [b"before", payload, b"after"]
    unaligned = b"ab" + MAGIC_BYTES + b"cd"  # not 4-byte aligned: no split
    assert len(roundtrip([unaligned])) == 1 and encode_record(unaligned)[4:8] == struct.pack("<I", 8)


def test_reads_what_the_sagemaker_training_toolkit_writes(tmp_path):
    from sagemaker_training.recordio import _write_recordio

    buffer = io.BytesIO()
    for record in (b"one", b"three", b"x" * 33):
        _write_recordio(buffer, record)
    assert list(read_records(io.BytesIO(buffer.getvalue()))) == [b"one", b"three", b"x" * 33]
    path = tmp_path / "data.rec"
    assert recordio.write_records(path, [b"one", b"two"]) == 2
    assert list(recordio.read_file(path)) == [b"one", b"two"]


def test_corruption_names_the_offset():
    good = encode_record(b"abcd")
    with pytest.raises(RecordError, match=r"<stream>: byte 12 does not start with the RecordIO magic"):
        list(read_records(io.BytesIO(good + b"\0" * 12)))
    with pytest.raises(RecordError, match="record at byte 12 claims 4 bytes, more than the 2 left"):
        list(read_records(io.BytesIO(good + good[:10])))
    with pytest.raises(RecordError, match="truncated record header at byte 12"):
        list(read_records(io.BytesIO(good + good[:5])))
    with pytest.raises(RecordError, match="last part at byte 0 without a first part"):
        list(read_records(io.BytesIO(struct.pack("<II", MAGIC, 3 << 29 | 4) + b"abcd")))
    first = struct.pack("<II", MAGIC, 1 << 29 | 4) + b"abcd"
    with pytest.raises(RecordError, match="multipart record at byte 0 has no last part"):
        list(read_records(io.BytesIO(first)))
    with pytest.raises(RecordError, match="part at byte 12 starts a record before the one at byte 0 ended"):
        list(read_records(io.BytesIO(first + good)))


def test_a_huge_length_is_refused_before_allocating():
    claim = struct.pack("<II", MAGIC, (2**29 - 1))  # 512 MiB claimed, 4 bytes present
    with pytest.raises(RecordError, match=r"record at byte 0 claims 536870911 bytes \(536870912 with padding\), more than the 4 left"):
        list(read_records(io.BytesIO(claim + b"abcd")))
