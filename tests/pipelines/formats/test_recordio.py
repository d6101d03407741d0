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
    with pytest.raises(
        RecordError, match=r"record at byte 0 claims 536870911 bytes \(536870912 with padding\), more than the 4 left"
    ):
        list(read_records(io.BytesIO(claim + b"abcd")))


# Skipping damage: resynchronise on the next aligned magic that starts a record, as dmlc does.

SPLIT = b"head" + MAGIC_BYTES + b"middle!!" + MAGIC_BYTES + b"tail"  # encodes as first, middle, last


@pytest.fixture(params=[None, 32, 4096], ids=["4MiB", "chunk32", "chunk4k"])
def chunk(request, monkeypatch):
    """Run under small read buffers too, so parts and resyncs straddle many refills."""
    from smlaunch.pipelines.formats import framing

    if request.param:
        monkeypatch.setattr(framing, "CHUNK", request.param)
    return request.param


def framed(records):
    offsets, data = [], b""
    for record in records:
        offsets.append(len(data))
        data += encode_record(record)
    return data, offsets


def read_skipping(data: bytes, tmp_path):
    path = tmp_path / "damaged.rec"
    path.write_bytes(data)
    messages = []
    records = list(recordio.read_file(path, on_corrupt=lambda e: messages.append(str(e)) or True))
    return records, messages


RECORDS = [b"r0", b"x" * 1001, SPLIT, b"", b"abc", SPLIT * 3, b"y" * 5000, b"last"]


def test_round_trip_whatever_the_buffer_size(tmp_path, chunk):
    data, _ = framed(RECORDS)
    assert read_skipping(data, tmp_path) == (RECORDS, [])


@pytest.mark.parametrize("damaged", [1, 2, 5])  # a whole record, a multipart one, a bigger multipart one
def test_bad_magic_skips_to_the_next_record(tmp_path, chunk, damaged):
    data, offsets = framed(RECORDS)
    at = offsets[damaged]
    bad = data[:at] + b"\0\0\0\0" + data[at + 4 :]
    records, messages = read_skipping(bad, tmp_path)
    assert records == RECORDS[:damaged] + RECORDS[damaged + 1 :]
    assert len(messages) == 1 and f"byte {at} does not start with the RecordIO magic" in messages[0]
    with pytest.raises(RecordError, match=f"byte {at} does not start with the RecordIO magic"):
        list(read_records(io.BytesIO(bad)))


def test_garbage_between_records_is_one_region(tmp_path, chunk):
    data, offsets = framed(RECORDS)
    at = offsets[4]
    orphan = MAGIC_BYTES + struct.pack("<I", 2 << 29 | 4)  # a middle part's header: not a record start
    garbage = b"\x01\x02\x03\x04" + orphan + b"junk" * 50
    records, messages = read_skipping(data[:at] + garbage + data[at:], tmp_path)
    assert records == RECORDS and len(messages) == 1 and f"byte {at} " in messages[0]
    # Misaligned garbage: like dmlc, only offsets a multiple of 4 after the damage are tried, so
    # nothing after it is found; the region runs to the end and the stream ends.
    records, messages = read_skipping(data[:at] + b"\x01\x02\x03" + data[at:], tmp_path)
    assert records == RECORDS[:4] and len(messages) == 1 and f"byte {at} " in messages[0]


def test_a_multipart_record_missing_its_first_part(tmp_path, chunk):
    data, offsets = framed(RECORDS)
    first_part = 8 + 4  # header + b"head"
    bad = data[: offsets[2]] + data[offsets[2] + first_part :]
    records, messages = read_skipping(bad, tmp_path)
    assert records == RECORDS[:2] + RECORDS[3:]
    assert messages == [f"{tmp_path / 'damaged.rec'}: middle part at byte {offsets[2]} without a first part"]
    with pytest.raises(RecordError, match=f"middle part at byte {offsets[2]} without a first part"):
        list(read_records(io.BytesIO(bad)))


def test_a_multipart_record_missing_its_last_part(tmp_path, chunk):
    data, offsets = framed(RECORDS)
    last_part = 8 + 4  # header + b"tail"
    bad = data[: offsets[3] - last_part] + data[offsets[3] :]
    records, messages = read_skipping(bad, tmp_path)
    assert records == RECORDS[:2] + RECORDS[3:]  # the record at the damage offset is kept
    assert messages == [
        f"{tmp_path / 'damaged.rec'}: part at byte {offsets[3] - last_part} starts a record "
        f"before the one at byte {offsets[2]} ended"
    ]
    records, messages = read_skipping(data[: offsets[3] - last_part], tmp_path)
    assert records == RECORDS[:2] and messages == [
        f"{tmp_path / 'damaged.rec'}: multipart record at byte {offsets[2]} has no last part"
    ]


@pytest.mark.parametrize(
    "cut,message",
    [
        (3, "truncated record header"),
        (10, "claims 1001 bytes"),
        (1008, "claims 1001 bytes (1004 with padding), more than the 1000 left"),
    ],
)
def test_a_truncated_tail_is_reported_once_then_the_stream_ends(tmp_path, chunk, cut, message):
    data, offsets = framed(RECORDS)
    records, messages = read_skipping(data[: offsets[1] + cut], tmp_path)
    assert records == RECORDS[:1]
    assert len(messages) == 1 and message in messages[0] and f"at byte {offsets[1]}" in messages[0]
