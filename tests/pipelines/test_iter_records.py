"""The public reader `iter_records`: every format from files and from a real FIFO."""

import os
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
