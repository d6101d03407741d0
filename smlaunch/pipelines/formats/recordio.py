"""RecordIO framing (MXNet/dmlc, SageMaker's `RecordWrapperType: RecordIO`): reader and writer.

    part   := magic:uint32 | lrecord:uint32 | data[length] | zero padding to 4 bytes
    magic  = 0xCED7230A ; lrecord = cflag << 29 | length ; cflag 0 whole, 1 first, 2 middle, 3 last

As dmlc-core writes it, a payload is split wherever the magic occurs 4-byte aligned in it, that
occurrence dropped; its reader puts the magic back between parts, so a payload comes back byte
for byte (../shared/notes/sagemaker.md §5.3; the TF extension's newer reader does not restore it,
which we do not follow). Little-endian, as on every SageMaker host. A bad magic, a part out of
sequence, a truncated record or a length larger than what is left raises `RecordError` naming the
source and byte offset, before anything is allocated.

With `on_corrupt`, damage is skipped instead. A bad magic or a part out of sequence drops the
record in progress and resynchronises on the next aligned magic that starts a record, as dmlc's
reader does; a truncated or oversized record ends the stream, as nothing after it can be trusted.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from typing import BinaryIO

from smlaunch.pipelines.formats.framing import END, Chunks, OnCorrupt, RecordError, write_encoded

__all__ = [
    "FIRST",
    "LAST",
    "MAGIC",
    "MIDDLE",
    "Reader",
    "RecordError",
    "WHOLE",
    "encode_record",
    "read_file",
    "read_records",
    "records",
    "write_records",
]

MAGIC = 0xCED7230A


def matches(head: bytes) -> bool:
    """A RecordIO file starts with the magic."""
    return len(head) >= 8 and struct.unpack("<I", head[:4])[0] == MAGIC


_MAGIC_BYTES = struct.pack("<I", MAGIC)
_HEADER = struct.Struct("<II")
_LENGTH_MASK = (1 << 29) - 1
WHOLE, FIRST, MIDDLE, LAST = 0, 1, 2, 3


def _part(cflag: int, data: bytes | memoryview) -> bytes:
    if len(data) > _LENGTH_MASK:
        raise ValueError(f"RecordIO part of {len(data)} bytes exceeds the 29-bit length field")
    pad = -len(data) % 4
    return _HEADER.pack(MAGIC, (cflag << 29) | len(data)) + bytes(data) + b"\0" * pad


def encode_record(data: bytes) -> bytes:
    """One logical record, split into parts at each 4-byte-aligned magic in `data` (dmlc's rule)."""
    cuts = [i for i in range(0, len(data) - 3, 4) if data[i : i + 4] == _MAGIC_BYTES]
    if not cuts:
        return _part(WHOLE, data)
    pieces, start = [], 0
    for cut in cuts:
        pieces.append(data[start:cut])
        start = cut + 4
    pieces.append(data[start:])
    flags = [FIRST] + [MIDDLE] * (len(pieces) - 2) + [LAST]
    return b"".join(_part(flag, piece) for flag, piece in zip(flags, pieces, strict=False))


def write_records(path: str | os.PathLike, records) -> int:
    return write_encoded(path, records, encode_record)


def read_records(stream: BinaryIO, source: str = "<stream>", on_corrupt: OnCorrupt | None = None) -> Iterator[bytes]:
    """Yield each logical record of `stream`, multipart records joined with their magic restored.
    `on_corrupt(error)` returning true skips a damaged region (one call per region) instead of
    raising."""
    return records(Reader(stream, source, on_corrupt))


def records(reader: Reader) -> Iterator[bytes]:
    """`read_records` over a reader the caller holds: while a record is yielded, `reader.offset`
    is the stream offset just past it (past its last part's padding)."""
    buf, view, header = reader.buf, reader.view, _HEADER.unpack_from
    while True:
        pos, end = reader.pos, reader.end
        if reader.pending is None:
            # The hot loop: whole (single-part) records wholly in the buffer. An lrecord above
            # _LENGTH_MASK has a non-zero cflag; that, a bad magic or a record not all read yet
            # goes to the slow path.
            while pos + 8 <= end:
                magic, lrecord = header(buf, pos)
                stop = pos + 8 + lrecord
                after = stop + (-lrecord & 3)
                if magic != MAGIC or lrecord > _LENGTH_MASK or after > end:
                    break
                data = view[pos + 8 : stop].tobytes()
                reader.pos = pos = after
                yield data
        reader.pos = pos
        data = reader.slow()
        if data is END:
            return
        if data is not None:
            yield data


class Reader(Chunks):
    pending: list[bytes] | None = None
    record_start = 0

    def slow(self):
        """The part at `pos`: a record's data once complete, None after a part of a record still
        pending or a damaged region skipped, END when the stream ends."""
        offset = self.offset
        have = self.fill(_HEADER.size)
        if have < _HEADER.size:
            if have:
                self.corrupt(f"truncated record header at byte {offset}")
            elif self.pending is not None:
                self.corrupt(f"multipart record at byte {self.record_start} has no last part")
            return END
        magic, lrecord = _HEADER.unpack_from(self.buf, self.pos)
        if magic != MAGIC:
            self.corrupt(f"byte {offset} does not start with the RecordIO magic 0x{MAGIC:08X} (found 0x{magic:08X})")
            return self.resync(4)
        cflag, length = lrecord >> 29, lrecord & _LENGTH_MASK
        if (cflag in (WHOLE, FIRST)) == (self.pending is not None):
            if cflag in (WHOLE, FIRST):  # this part is sound: the damage is the record left pending
                self.corrupt(f"part at byte {offset} starts a record before the one at byte {self.record_start} ended")
                self.pending = None
                return None
            self.corrupt(f"{'middle' if cflag == MIDDLE else 'last'} part at byte {offset} without a first part")
            return self.resync(4)
        padded = length + (-length % 4)
        limit = self.left(offset + _HEADER.size)
        if padded > limit:
            padding = f" ({padded} with padding)" if padded != length else ""
            self.corrupt(f"record at byte {offset} claims {length} bytes{padding}, more than the {limit} left")
            return END
        self.pos += _HEADER.size
        data = self.take(length)
        if len(data) < length or self.fill(padded - length) < padded - length:
            self.corrupt(f"truncated record at byte {offset}")
            return END
        self.pos += padded - length
        if cflag == WHOLE:
            return data
        if cflag == FIRST:
            self.pending, self.record_start = [data], offset
            return None
        assert self.pending is not None, "a middle or last part without a first part returned above"
        self.pending.append(data)
        if cflag == MIDDLE:
            return None
        data, self.pending = _MAGIC_BYTES.join(self.pending), None
        return data

    def resync(self, skip: int):
        """Drop the pending record and move `pos` to the next part that starts a record (magic,
        then flag whole or first) a multiple of 4 bytes after the damage, as dmlc-core's
        FindNextRecordIOHead does: payloads hold no aligned magic, so that is the next header.
        None once there, END when the stream ends first."""
        self.pending = None
        start = self.pos + skip
        while True:
            last = self.end - _HEADER.size  # the last offset with a whole header in the buffer
            found = self.buf.find(_MAGIC_BYTES, start, last + 4)
            while found >= 0:
                if (found - start) % 4 == 0 and _HEADER.unpack_from(self.buf, found)[1] >> 29 in (WHOLE, FIRST):
                    self.pos = found
                    return None
                found = self.buf.find(_MAGIC_BYTES, found + 1, last + 4)
            # the aligned offsets not tried yet: keep them, read on
            self.pos = start if last < start else start + ((last - start) // 4 + 1) * 4
            have = self.end - self.pos
            if self.fill(have + 1) <= have:
                self.pos = self.end
                return END
            start = self.pos


def read_file(path: str | os.PathLike, on_corrupt: OnCorrupt | None = None) -> Iterator[bytes]:
    with open(path, "rb") as f:
        yield from read_records(f, source=str(path), on_corrupt=on_corrupt)
