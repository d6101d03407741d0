"""What every framed record format shares: the error type, bounded reads, writing a file.

A record's length field comes from the data, so it is never trusted for an allocation: a file's
remaining size bounds it, a pipe's `MAX_RECORD_BYTES` does, and reads grow only with the bytes
that really arrive.
"""

from __future__ import annotations

import io
import os
from typing import BinaryIO, Callable, Iterable

from smlaunch.errors import DataError

MAX_RECORD_BYTES = 1 << 31
"""Upper bound on one record when the stream's size is unknown (a FIFO): 2 GiB."""
_CHUNK = 4 << 20


class RecordError(DataError):
    """A record is corrupt or truncated; the message names the source and byte offset."""


def size_left(stream: BinaryIO) -> int | None:
    """Bytes left in a file or in-memory buffer; None for a pipe, whose size is unknown."""
    if isinstance(stream, io.BytesIO):
        return len(stream.getbuffer()) - stream.tell()
    try:
        return os.fstat(stream.fileno()).st_size - stream.tell() if stream.seekable() else None
    except (OSError, io.UnsupportedOperation, AttributeError):
        return None


def read_exact(stream: BinaryIO, length: int) -> bytes:
    """Up to `length` bytes, fewer only at the end of the stream. Reads in 4 MiB chunks, so a
    corrupt length field on a pipe costs memory only for bytes that really arrive."""
    if length <= _CHUNK:
        return stream.read(length)
    parts, left = [], length
    while left:
        part = stream.read(min(left, _CHUNK))
        if not part:
            break
        parts.append(part)
        left -= len(part)
    return b"".join(parts)


def write_encoded(path: str | os.PathLike, records: Iterable[bytes], encode: Callable[[bytes], bytes]) -> int:
    """Write each record framed by `encode`; returns the number written."""
    count = 0
    with open(path, "wb") as f:
        for record in records:
            f.write(encode(record))
            count += 1
    return count
