"""What every framed record format shares: the error type, bounded reads, the chunked reader, writing.

A record's length field comes from the data, so it is never trusted for an allocation: a file's
remaining size bounds it, a pipe's `MAX_RECORD_BYTES` does, and reads grow only with the bytes
that really arrive.

Readers take the stream in big chunks (`Chunks`) and slice records out of them: one read per
4 MiB instead of three reads per record, which is what made small records slow. The chunks land
in one reused bytearray: a fresh 4 MiB `bytes` per read costs page faults whenever the consumer
keeps records alive (halving Pipe throughput in the bench), and a record straddling two chunks
costs only moving its head to the front. Each record is then copied once into its own `bytes`:
it must be immutable, and `google_crc32c.value` takes only `bytes`, not a memoryview.
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable, Iterable
from typing import BinaryIO

from smlaunch.errors import DataError

MAX_RECORD_BYTES = 1 << 31
"""Upper bound on one record when the stream's size is unknown (a FIFO): 2 GiB."""
CHUNK = 4 << 20
END = object()
"""Returned by a reader's slow path when the stream ends (cleanly, or after damage it skipped)."""


class RecordError(DataError):
    """A record is corrupt or truncated; the message names the source and byte offset."""


OnCorrupt = Callable[[RecordError], bool]


def size_left(stream: BinaryIO) -> int | None:
    """Bytes left in a file or in-memory buffer; None for a pipe, whose size is unknown. A seekable
    stream without a descriptor may say its size in an int `size` (FastFile's lazy objects do)."""
    if isinstance(stream, io.BytesIO):
        return len(stream.getbuffer()) - stream.tell()
    try:
        size = getattr(stream, "size", None)
        if isinstance(size, int) and stream.seekable():
            return size - stream.tell()
        return os.fstat(stream.fileno()).st_size - stream.tell() if stream.seekable() else None
    except (OSError, io.UnsupportedOperation, AttributeError):
        return None


def _reader(stream: BinaryIO) -> Callable[[int], bytes]:
    """`read1` where there is one: it never fills the stream's own buffer, which would make the
    next read a short one of leftovers (and every record after it straddle chunks)."""
    return getattr(stream, "read1", None) or stream.read


def _readinto(stream: BinaryIO) -> Callable[[memoryview], int | None]:
    for name in ("readinto1", "readinto"):  # readinto1 first: it does not wait for a full buffer
        if hasattr(stream, name):
            return getattr(stream, name)
    read = _reader(stream)

    def readinto(view: memoryview) -> int:
        data = read(len(view))
        view[: len(data)] = data
        return len(data)

    return readinto


def read_exact(stream: BinaryIO, length: int) -> bytes:
    """Up to `length` bytes, fewer only at the end of the stream. Reads at most 4 MiB at a time, so
    a corrupt length field on a pipe costs memory only for bytes that really arrive; loops, so
    short reads (a FIFO's) are not mistaken for the end."""
    read, parts, left = _reader(stream), [], length
    while left:
        part = read(min(left, CHUNK))
        if not part:
            break
        parts.append(part)
        left -= len(part)
    return parts[0] if len(parts) == 1 else b"".join(parts)


class Chunks:
    """A stream read ahead into a reused buffer: `buf[pos:end]` is unread, `base` is the stream
    offset of `buf[0]` (a file's offset; on a pipe, counted from where reading started). A format's reader slices whole
    records out of `buf` in its own loop and calls its slow path for anything else.

    `readinto1` returns what is available (a FIFO's short reads included) rather than waiting for
    a full chunk, so records are yielded as soon as they arrive.
    """

    def __init__(self, stream: BinaryIO, source: str, on_corrupt: OnCorrupt | None):
        self.stream, self.source, self.on_corrupt = stream, source, on_corrupt
        self.readinto = _readinto(stream)
        left = size_left(stream)
        # A file may be read from an offset (a resumed epoch seeks past what was consumed):
        # offsets, in errors and in `offset`, are the file's own.
        start = 0 if left is None else stream.tell()
        self.size = None if left is None else start + left
        # A small file gets a small buffer: zeroing 4 MiB would cost more than reading a few records.
        self.buf = bytearray(CHUNK if left is None else min(CHUNK, max(4096, left)))
        self.view = memoryview(self.buf)
        self.pos = self.end = 0
        self.base = start

    @property
    def offset(self) -> int:
        return self.base + self.pos

    def left(self, offset: int) -> int:
        """The most bytes that can follow `offset`: the rest of a file, `MAX_RECORD_BYTES` on a pipe."""
        return MAX_RECORD_BYTES if self.size is None else max(self.size - offset, 0)

    def fill(self, n: int) -> int:
        """Make `n` (at most the buffer's size) bytes from `pos` available, reading ahead as far as
        the buffer and the stream allow; returns the bytes available, fewer than `n` only at the end."""
        have = self.end - self.pos
        if have >= n:
            return have
        if self.pos:  # move the unread tail to the front: the read gets all the room
            self.view[:have] = self.view[self.pos : self.end]
            self.base, self.pos, self.end = self.base + self.pos, 0, have
        while self.end - self.pos < n:
            got = self.readinto(self.view[self.end :])
            if not got:
                break
            self.end += got
        return self.end - self.pos

    def take(self, n: int) -> bytes:
        """The next `n` bytes as a record (fewer only at the end). One bigger than the buffer is
        read past it with `read_exact`, so a length field bounded by `left` still allocates only
        what arrives."""
        have = self.fill(min(n, len(self.buf)))
        if have >= n:
            data = self.view[self.pos : self.pos + n].tobytes()
            self.pos += n
            return data
        data = self.view[self.pos : self.end].tobytes() + read_exact(self.stream, n - have)
        self.base, self.pos, self.end = self.base + self.pos + len(data), 0, 0
        return data

    def corrupt(self, message: str) -> None:
        """Raise `message` as a `RecordError` naming the source, unless `on_corrupt` returns True
        for it; then the caller skips the damaged region."""
        error = RecordError(f"{self.source}: {message}")
        if self.on_corrupt is None or not self.on_corrupt(error):
            raise error


def write_encoded(path: str | os.PathLike, records: Iterable[bytes], encode: Callable[[bytes], bytes]) -> int:
    """Write each record framed by `encode`; returns the number written."""
    count = 0
    with open(path, "wb") as f:
        for record in records:
            f.write(encode(record))
            count += 1
    return count
