"""The public reader `iter_records`: every format from files and from a real FIFO."""

import io
import os
import re
import struct
import threading

import pytest

from smlaunch.pipelines.formats import RecordError, iter_records, recordio, tfrecord


def feed_fifo(path, data: bytes):
    os.mkfifo(path)

    def write():
        with open(path, "wb") as f:
            f.write(data)

    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    return thread


def test_text_and_whole_files(tmp_path):
    (tmp_path / "a.txt").write_bytes(b"one\n\nthree\nlast-unterminated")
    assert list(iter_records(tmp_path / "a.txt", "text")) == [b"one", b"", b"three", b"last-unterminated"]
    (tmp_path / "img.jpg").write_bytes(b"\xff\xd8jpeg")
    assert list(iter_records(tmp_path / "img.jpg", "whole")) == [b"\xff\xd8jpeg"]
    with pytest.raises(ValueError, match="unknown record format 'csv'; formats: tfrecord, recordio, text, whole"):
        list(iter_records(tmp_path / "a.txt", "csv"))


@pytest.mark.parametrize("module,format", [(tfrecord, "tfrecord"), (recordio, "recordio")])
def test_records_stream_from_a_fifo(tmp_path, module, format):
    records = [os.urandom(n) for n in (0, 1, 100, 4096, 100_000)]
    writer = feed_fifo(tmp_path / "train_0", b"".join(module.encode_record(r) for r in records))
    with open(tmp_path / "train_0", "rb") as stream:
        assert list(iter_records(stream, format)) == records
    writer.join(5)


def test_a_length_of_2_to_the_60_on_a_fifo_is_refused_not_allocated(tmp_path):
    length = struct.pack("<Q", 2**60)
    header = length + struct.pack("<I", tfrecord.masked_crc(length))
    writer = feed_fifo(tmp_path / "train_0", header + b"x" * 100)
    with open(tmp_path / "train_0", "rb") as stream:
        with pytest.raises(RecordError, match=r"train_0: record at byte 0 claims 1152921504606846976 bytes"):
            list(iter_records(stream, "tfrecord"))
    writer.join(5)


def feed_fifo_slowly(path, data: bytes, piece: int = 1000):
    """A writer in small pieces, so the reader sees short reads and damage straddles them."""
    os.mkfifo(path)

    def write():
        with open(path, "wb", buffering=0) as f:
            for start in range(0, len(data), piece):
                f.write(data[start : start + piece])

    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    return thread


def damaged_stream(module, records, damage):
    """The encoded records with `damage(offset)` -> (start, end, replacement) applied to some of them;
    returns the bytes and the offsets of the damaged records."""
    offsets, data = [], b""
    for record in records:
        offsets.append(len(data))
        data += module.encode_record(record)
    hit = []
    for index in sorted(damage, reverse=True):
        start, end, replacement = damage[index](offsets[index])
        if callable(replacement):
            replacement = replacement(data[start:end])
        data = data[:start] + replacement + data[end:]
        hit.append(offsets[index])
    return data, sorted(hit)


def flipped(old: bytes) -> bytes:
    """Every bit inverted: a constant replacement is no damage when the random byte already equals it
    (1 run in 256 passed a "damaged" record through as good)."""
    return bytes(b ^ 0xFF for b in old)


RECORDS = [os.urandom(n) for n in (10, 0, 3000, 100, 70_000, 5, 200, 9)]
BAD_LENGTH_CRC = {
    "tfrecord": lambda at: (at + 9, at + 10, flipped),  # a byte of the length CRC
    "recordio": lambda at: (at, at + 4, b"XXXX"),  # the magic
}
BAD_DATA = {
    "tfrecord": lambda at: (at + 12, at + 13, flipped),  # a data byte
    "recordio": lambda at: (at + 4, at + 8, struct.pack("<I", 3 << 29 | 4)),  # a last part, orphaned
}


@pytest.mark.parametrize("module,format", [(tfrecord, "tfrecord"), (recordio, "recordio")])
def test_damage_in_a_fifo_is_skipped_and_every_good_record_comes_back(tmp_path, module, format):
    data, hit = damaged_stream(module, RECORDS, {2: BAD_LENGTH_CRC[format], 4: BAD_DATA[format]})
    writer = feed_fifo_slowly(tmp_path / "train_0", data)
    seen = []
    with open(tmp_path / "train_0", "rb") as stream:
        records = list(iter_records(stream, format, "chan", on_corrupt=lambda e: seen.append(str(e)) or True))
    writer.join(5)
    assert records == [r for i, r in enumerate(RECORDS) if i not in (2, 4)]
    assert [int(re.search(r"\bbyte (\d+)", m)[1]) for m in seen] == hit, seen
    assert all(m.startswith("chan: ") for m in seen)


@pytest.mark.parametrize("module,format", [(tfrecord, "tfrecord"), (recordio, "recordio")])
def test_max_corrupted_skips_that_many_regions_then_raises(tmp_path, module, format):
    data, hit = damaged_stream(module, RECORDS, {1: BAD_LENGTH_CRC[format], 5: BAD_DATA[format]})
    (tmp_path / "f").write_bytes(data)
    assert list(iter_records(tmp_path / "f", format, max_corrupted=2)) == [
        r for i, r in enumerate(RECORDS) if i not in (1, 5)
    ]
    records = iter_records(tmp_path / "f", format, max_corrupted=1)
    assert [next(records) for _ in range(4)] == [RECORDS[0]] + RECORDS[2:5]
    with pytest.raises(RecordError, match=rf"/f: .*\bbyte {hit[1]}\b"):
        next(records)
    with pytest.raises(RecordError, match=rf"/f: .*\bbyte {hit[0]}\b"):
        list(iter_records(tmp_path / "f", format))
    writer = feed_fifo(tmp_path / "train_0", data)
    with open(tmp_path / "train_0", "rb") as stream:
        with pytest.raises(RecordError, match=rf"train_0: .*\bbyte {hit[1]}\b"):
            list(iter_records(stream, format, max_corrupted=1))
    writer.join(5)


def test_skip_options_are_checked_at_once_and_ignored_by_unframed_formats(tmp_path):
    with pytest.raises(ValueError, match="max_corrupted or on_corrupt, not both"):
        iter_records(tmp_path / "missing", "tfrecord", max_corrupted=1, on_corrupt=lambda e: True)
    with pytest.raises(ValueError, match="max_corrupted must be a count >= 0"):
        iter_records(tmp_path / "missing", "tfrecord", max_corrupted=-1)
    (tmp_path / "a.txt").write_bytes(b"one\ntwo")
    assert list(iter_records(tmp_path / "a.txt", "text", max_corrupted=3)) == [b"one", b"two"]
    assert list(iter_records(tmp_path / "a.txt", "whole", on_corrupt=lambda e: True)) == [b"one\ntwo"]


def test_an_8_byte_record_s_lost_data_and_crc_leave_a_frame_that_tfrecord_cannot_tell_from_a_record():
    """TFRecord's own ambiguity, which every skipping reader meets: when an 8-byte record loses its
    data and data CRC (12 bytes), its header followed by the next header is a whole valid record
    (the next length field as data, its length CRC as data CRC). It comes back; the next record,
    whose header it took, is reported as damage, and reading resumes at the one after."""
    records = [b"A" * 8, b"B" * 8, b"C" * 300, b"D" * 3]
    data = b"".join(tfrecord.encode_record(r) for r in records)
    damaged = data[:36] + data[48:]  # record 1's data and data CRC gone
    calls = []
    got = list(tfrecord.read_records(io.BytesIO(damaged), "f", lambda e: calls.append(e) or True))
    assert got == [b"A" * 8, (300).to_bytes(8, "little"), b"D" * 3]
    assert [str(e) for e in calls] == ["f: bad length CRC in record at byte 48"]


@pytest.mark.parametrize("chunk", [16, 100, None])
def test_random_damage_never_hangs_or_escapes_on_corrupt(tmp_path, monkeypatch, chunk):
    """Flipped bits, inserted and deleted bytes, cut tails: skipping always ends without an error,
    TFRecord returns only frames whose both CRCs hold, in order (true records, or the one frame the
    format cannot tell from one: an 8-byte record's header followed by the next header, above), and
    a stream that reads without skipping reads the same with it. Seeded: the same cases every run
    (a random seed once failed 1 run in 11 on that frame)."""
    import random

    from smlaunch.pipelines.formats import framing

    if chunk:
        monkeypatch.setattr(framing, "CHUNK", chunk)
    rng = random.Random(f"damage-{chunk}")
    for _ in range(1000):
        records = [rng.randbytes(rng.choice([0, 3, 8, 300, 2000])) for _ in range(rng.randint(0, 8))]
        for module, format in ((tfrecord, "tfrecord"), (recordio, "recordio")):
            data = bytearray(b"".join(module.encode_record(r) for r in records))
            for _ in range(rng.randint(1, 3)):
                at = rng.randrange(len(data) + 1)
                kind = rng.randrange(4)
                if kind == 0 and at < len(data):
                    data[at] ^= 1 << rng.randrange(8)
                elif kind == 1:
                    data[at:at] = rng.randbytes(rng.randint(1, 20))
                elif kind == 2:
                    del data[at : at + rng.randint(1, 20)]
                else:
                    del data[at:]
            (tmp_path / "f").write_bytes(bytes(data))
            calls = []
            got = list(iter_records(tmp_path / "f", format, on_corrupt=lambda e, calls=calls: calls.append(e) or True))
            if format == "tfrecord":
                rest, length_fields = iter(records), {len(r).to_bytes(8, "little") for r in records}
                # an in-order subsequence, but for that frame (checked first: `in rest` consumes)
                assert all(record in length_fields or record in rest for record in got)
            try:
                assert list(iter_records(tmp_path / "f", format)) == got and not calls
            except RecordError as error:
                assert calls and str(calls[0]) == str(error)
