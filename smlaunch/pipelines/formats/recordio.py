"""RecordIO framing (MXNet/dmlc, SageMaker's `RecordWrapperType: RecordIO`): reader and writer.

    part   := magic:uint32 | lrecord:uint32 | data[length] | zero padding to 4 bytes
    magic  = 0xCED7230A ; lrecord = cflag << 29 | length ; cflag 0 whole, 1 first, 2 middle, 3 last

As dmlc-core writes it, a payload is split wherever the magic occurs 4-byte aligned in it, that
occurrence dropped; its reader puts the magic back between parts, so a payload comes back byte
for byte (../shared/notes/sagemaker.md §5.3; the TF extension's newer reader does not restore it,
which we do not follow). Little-endian, as on every SageMaker host. A bad magic, a part out of
sequence, a truncated record or a length larger than what is left raises `RecordError` naming the
source and byte offset, before anything is allocated.
"""

from __future__ import annotations

import os
import struct
from typing import BinaryIO, Iterator

from smlaunch.pipelines.formats.framing import MAX_RECORD_BYTES, RecordError, read_exact, size_left, write_encoded

MAGIC = 0xCED7230A
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
    cuts = [i for i in range(0, len(data) - 3, 4) if data[i:i + 4] == _MAGIC_BYTES]
    if not cuts:
        return _part(WHOLE, data)
    pieces, start = [], 0
    for cut in cuts:
        pieces.append(data[start:cut])
        start = cut + 4
    pieces.append(data[start:])
    flags = [FIRST] + [MIDDLE] * (len(pieces) - 2) + [LAST]
    return b"".join(_part(flag, piece) for flag, piece in zip(flags, pieces))


def write_records(path: str | os.PathLike, records) -> int:
    return write_encoded(path, records, encode_record)


def read_records(stream: BinaryIO, source: str = "<stream>") -> Iterator[bytes]:
    """Yield each logical record of `stream`, multipart records joined with their magic restored."""
    remaining = size_left(stream)
    offset = 0
    pending: list[bytes] | None = None
    record_start = 0
    while True:
        header = stream.read(_HEADER.size)
        if not header:
            if pending is not None:
                raise RecordError(f"{source}: multipart record at byte {record_start} has no last part")
            return
        if len(header) < _HEADER.size:
            raise RecordError(f"{source}: truncated record header at byte {offset}")
        magic, lrecord = _HEADER.unpack(header)
        if magic != MAGIC:
            raise RecordError(f"{source}: byte {offset} does not start with the RecordIO magic "
                              f"0x{MAGIC:08X} (found 0x{magic:08X})")
        cflag, length = lrecord >> 29, lrecord & _LENGTH_MASK
        padded = length + (-length % 4)
        limit = (remaining - offset - _HEADER.size) if remaining is not None else MAX_RECORD_BYTES
        if padded > limit:
            padding = f" ({padded} with padding)" if padded != length else ""
            raise RecordError(f"{source}: record at byte {offset} claims {length} bytes{padding}, more than "
                              f"the {max(limit, 0)} left")
        body = read_exact(stream, padded)
        if len(body) < padded:
            raise RecordError(f"{source}: truncated record at byte {offset}")
        data = body[:length]
        if cflag == WHOLE or cflag == FIRST:
            if pending is not None:
                raise RecordError(f"{source}: part at byte {offset} starts a record before the one at "
                                  f"byte {record_start} ended")
            if cflag == WHOLE:
                yield data
            else:
                pending, record_start = [data], offset
        else:
            if pending is None:
                raise RecordError(f"{source}: {'middle' if cflag == MIDDLE else 'last'} part at byte {offset} "
                                  "without a first part")
            pending.append(data)
            if cflag == LAST:
                yield _MAGIC_BYTES.join(pending)
                pending = None
        offset += _HEADER.size + padded


def read_file(path: str | os.PathLike) -> Iterator[bytes]:
    with open(path, "rb") as f:
        yield from read_records(f, source=str(path))
