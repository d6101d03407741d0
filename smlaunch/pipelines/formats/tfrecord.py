"""TFRecord framing: reader and writer, both CRCs verified.

    record := length:uint64 | masked_crc32c(length bytes):uint32 | data | masked_crc32c(data):uint32

all little-endian, CRC-32C masked as TensorFlow does (../shared/notes/sagemaker.md §5.4). A corrupt
or truncated record raises `RecordError` naming the source and the byte offset of the record; a
length field larger than what is left of a file is refused before anything is allocated.
"""

from __future__ import annotations

import os
import struct
from typing import BinaryIO, Iterator

import google_crc32c

from smlaunch.pipelines.formats.framing import (MAX_RECORD_BYTES, RecordError, read_exact, size_left,
                                                write_encoded)

_MASK_DELTA = 0xA282EAD8
_HEADER = struct.Struct("<QI")
_FOOTER = struct.Struct("<I")


def masked_crc(data: bytes | memoryview) -> int:
    crc = google_crc32c.value(bytes(data))
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def encode_record(data: bytes) -> bytes:
    length = struct.pack("<Q", len(data))
    return length + _FOOTER.pack(masked_crc(length)) + data + _FOOTER.pack(masked_crc(data))


def write_records(path: str | os.PathLike, records) -> int:
    """Write `records` (bytes) to `path`; returns the number written."""
    return write_encoded(path, records, encode_record)


def read_records(stream: BinaryIO, source: str = "<stream>") -> Iterator[bytes]:
    """Yield each record's data from `stream`, verifying both CRCs."""
    remaining = size_left(stream)
    offset = 0
    while True:
        header = stream.read(_HEADER.size)
        if not header:
            return
        if len(header) < _HEADER.size:
            raise RecordError(f"{source}: truncated record header at byte {offset}")
        length, length_crc = _HEADER.unpack(header)
        if masked_crc(header[:8]) != length_crc:
            raise RecordError(f"{source}: bad length CRC in record at byte {offset}")
        limit = (remaining - offset - _HEADER.size - 4) if remaining is not None else MAX_RECORD_BYTES
        if length > limit:
            raise RecordError(f"{source}: record at byte {offset} claims {length} bytes, "
                              f"more than the {max(limit, 0)} left")
        data = read_exact(stream, length)
        footer = stream.read(4)
        if len(data) < length or len(footer) < 4:
            raise RecordError(f"{source}: truncated record at byte {offset}")
        if _FOOTER.unpack(footer)[0] != masked_crc(data):
            raise RecordError(f"{source}: bad data CRC in record at byte {offset}")
        yield data
        offset += _HEADER.size + length + 4


def read_file(path: str | os.PathLike) -> Iterator[bytes]:
    with open(path, "rb") as f:
        yield from read_records(f, source=str(path))
