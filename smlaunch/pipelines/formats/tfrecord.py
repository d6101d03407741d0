"""TFRecord framing: reader and writer, both CRCs verified.

    record := length:uint64 | masked_crc32c(length bytes):uint32 | data | masked_crc32c(data):uint32

all little-endian, CRC-32C masked as TensorFlow does (../shared/notes/sagemaker.md §5.4). A corrupt
or truncated record raises `RecordError` naming the source and the byte offset of the record; a
length field larger than what is left of a file is refused before anything is allocated.

With `on_corrupt`, damage is skipped instead: a bad data CRC skips that record (its length CRC
verified, so the framing after it holds); a bad length CRC means the framing is lost, so the
reader scans forward byte by byte for the next header whose length CRC verifies and whose length
fits; a truncated or oversized record ends the stream, as nothing after it can be trusted.

One damage the framing itself cannot show: an 8-byte record that loses exactly its data and data
CRC leaves its header followed by the next header, and those 24 bytes are a valid 8-byte record
(the next length field as data, its length CRC as data CRC). Any reader checking both CRCs
returns it; the record whose header it took is then reported as damage.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from typing import BinaryIO

import google_crc32c

from smlaunch.pipelines.formats.framing import END, Chunks, OnCorrupt, RecordError, write_encoded

__all__ = [
    "RecordError",
    "Reader",
    "encode_record",
    "masked_crc",
    "read_file",
    "read_records",
    "records",
    "write_records",
]

_MASK_DELTA = 0xA282EAD8


def matches(head: bytes) -> bool:
    """A TFRecord file starts with an 8-byte length and the masked CRC-32C of those 8 bytes."""
    return len(head) >= 12 and masked_crc(head[:8]) == struct.unpack("<I", head[8:12])[0]


_HEADER = struct.Struct("<QI")
_FOOTER = struct.Struct("<I")


def masked_crc(data: bytes | bytearray | memoryview) -> int:
    crc = google_crc32c.value(data if type(data) is bytes else bytes(data))
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def encode_record(data: bytes) -> bytes:
    length = struct.pack("<Q", len(data))
    return length + _FOOTER.pack(masked_crc(length)) + data + _FOOTER.pack(masked_crc(data))


def write_records(path: str | os.PathLike, records) -> int:
    """Write `records` (bytes) to `path`; returns the number written."""
    return write_encoded(path, records, encode_record)


def read_records(stream: BinaryIO, source: str = "<stream>", on_corrupt: OnCorrupt | None = None) -> Iterator[bytes]:
    """Yield each record's data from `stream`, verifying both CRCs. `on_corrupt(error)` returning
    true skips a damaged region (one call per region) instead of raising."""
    return records(Reader(stream, source, on_corrupt))


def records(reader: Reader) -> Iterator[bytes]:
    """`read_records` over a reader the caller holds: while a record is yielded, `reader.offset`
    is the stream offset just past it (where a resumed read seeks to: `formats.PositionedRecords`)."""
    buf, view = reader.buf, reader.view
    crc, header, footer = google_crc32c.value, _HEADER.unpack_from, _FOOTER.unpack_from
    known_length = known_crc = -1
    while True:
        pos, end = reader.pos, reader.end
        # The hot loop: records wholly in the buffer with both CRCs good, masking inlined
        # (0xA282EAD8 is _MASK_DELTA); the length's 8 bytes are rebuilt from the int, cheaper than
        # copying them out, and a length and CRC equal to the pair just verified need no CRC again
        # (fixed-size records skip it). Anything else goes to the slow path, which checks it all.
        while pos + 16 <= end:
            length, length_crc = header(buf, pos)
            stop = pos + 12 + length
            if stop + 4 > end:
                break
            if length != known_length or length_crc != known_crc:
                c = crc(length.to_bytes(8, "little"))
                if (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF != length_crc:
                    break
                known_length, known_crc = length, length_crc
            data = view[pos + 12 : stop].tobytes()
            c = crc(data)
            if (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF != footer(buf, stop)[0]:
                break
            reader.pos = pos = stop + 4
            yield data
        reader.pos = pos
        data = reader.slow()
        if data is END:
            return
        if data is not None:
            yield data


class Reader(Chunks):
    def slow(self):
        """The record at `pos`, which straddles chunks or is damaged: its data, None when it was
        damaged and skipped, END when the stream ends."""
        offset = self.offset
        have = self.fill(12)
        if have < 12:
            if have:
                self.corrupt(f"truncated record header at byte {offset}")
            return END
        length, length_crc = _HEADER.unpack_from(self.buf, self.pos)
        if masked_crc(length.to_bytes(8, "little")) != length_crc:
            self.corrupt(f"bad length CRC in record at byte {offset}")
            return None if self.resync() else END
        limit = self.left(offset + 16)
        if length > limit:
            self.corrupt(f"record at byte {offset} claims {length} bytes, more than the {limit} left")
            return END
        self.pos += 12
        data = self.take(length)
        if len(data) < length or self.fill(4) < 4:
            self.corrupt(f"truncated record at byte {offset}")
            return END
        self.pos += 4
        if masked_crc(data) != _FOOTER.unpack_from(self.buf, self.pos - 4)[0]:
            self.corrupt(f"bad data CRC in record at byte {offset}")
            return None
        return data

    def resync(self) -> bool:
        """Move `pos` past a bad length CRC to the next offset holding a header whose length CRC
        verifies and whose length fits what is left; False when the stream ends first. The cheap
        length test rejects almost every offset before a CRC is computed."""
        start = self.pos + 1
        while True:
            for i in range(start, self.end - 11):
                length, length_crc = _HEADER.unpack_from(self.buf, i)
                if length <= self.left(self.base + i + 16) and masked_crc(length.to_bytes(8, "little")) == length_crc:
                    self.pos = i
                    return True
            self.pos = max(start, self.end - 11)  # the offsets not tried yet: keep them, read on
            have = self.end - self.pos
            if self.fill(have + 1) <= have:
                self.pos = self.end
                return False
            start = self.pos


def read_file(path: str | os.PathLike, on_corrupt: OnCorrupt | None = None) -> Iterator[bytes]:
    with open(path, "rb") as f:
        yield from read_records(f, source=str(path), on_corrupt=on_corrupt)
