"""The members of tar archives read as one forward stream: the framing under WebDataset shards.

Why not `tarfile`: its stream mode walks about 21k members/s on one core of the 2-core VM (three
members per WebDataset sample, so 6-7k samples/s, the webdataset package's own reader included),
which made the tar framing, not the records, the cost of a WebDataset channel
(BENCHMARKS.md, formats). The layout is fixed by POSIX (`pax`): 512-byte headers with octal
fields, data padded to 512 bytes, two or more zero blocks at the end. This reader handles what
tar writers put in shards:

* ustar / POSIX headers (the `prefix` field of long paths), GNU headers;
* pax extended headers (`x`: `path` and `size`, which Python's `tarfile` and so webdataset's
  `TarWriter` write before every member whose mtime is fractional), global pax headers (`g`,
  skipped), GNU long names (`L`) and long link names (`K`);
* base-256 sizes (members of 8 GiB and more);
* zero blocks anywhere: Pipe mode concatenates a channel's shards, end blocks included, into one
  stream, and reading goes on past them as GNU tar's `--ignore-zeros` does.

Only regular files (`0`, NUL, `7`) are yielded; directories, links and devices are passed over.
What cannot be framed raises `RecordError` naming the source and the byte offset of the header:
a bad header checksum (`tarfile` with `ignore_zeros` would skip such a block and read the member's
data as headers), a sparse member, an archive that ends inside a header or a member.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from typing import BinaryIO, TypedDict

from smlaunch.pipelines.formats.tfrecord import RecordError

BLOCK = 512
CHUNK = 1 << 20
ZERO = bytes(BLOCK)
REGULAR = frozenset(b"0\x007")
LINKS_AND_DEVICES = frozenset(b"123456")
"""Member types whose size field says nothing about data following them (as `tarfile` reads them)."""
X_PAX, G_GLOBAL, L_LONGNAME, S_SPARSE = b"xgLS"
NEXT_MEMBER = frozenset(b"xLK")
"""Headers that describe the member after them (pax, GNU long name and link name)."""
USTAR = b"ustar\x0000"


class _Extra(TypedDict, total=False):
    """What pax and GNU long-name headers say of the member after them."""

    path: str
    size: int
    sparse: bool


def iter_members(stream: BinaryIO, source: str, at: int = 0) -> Iterator[tuple[int, str, bytes]]:
    """(byte offset of the member's first header, path, data) of each regular file in the stream,
    which stands at offset `at` (a resumed read seeks to a sample's first header).

    The offset is where the member's headers start, its pax or GNU long-name header if it has
    one, as `tarfile`'s `TarInfo.offset` gives it. The stream is read in chunks of up to `CHUNK`
    bytes (one `read` per chunk, not per header and member: on a FIFO each is a system call), and
    a member is yielded as soon as its bytes have arrived."""
    buf, pos, base = b"", 0, at  # base: the stream offset of buf[0]
    start = None
    extra: _Extra = {}
    while True:
        if pos + BLOCK > len(buf):
            buf, pos, base = _refill(stream, buf, pos, base, BLOCK)
        offset = base + pos
        header = buf[pos : pos + BLOCK]
        if len(header) < BLOCK:
            if not header.strip(b"\0"):
                return  # the end, or end-of-archive padding cut short: nothing of a member is lost
            raise RecordError(
                f"{source}: the tar archive ends inside a header at byte {offset} ({len(header)} of {BLOCK} bytes)"
            )
        pos += BLOCK
        if header == ZERO:
            continue
        if start is None:
            start = offset
        kind, name, size = _parse_header(header, source, offset)
        if kind in LINKS_AND_DEVICES:
            size = 0
        elif kind not in NEXT_MEMBER and kind != G_GLOBAL:  # a pax path or size is the member's, not a header's
            name, size = extra.get("path", name), extra.get("size", size)
        padded = size + (-size % BLOCK)
        if pos + padded > len(buf):
            buf, pos, base = _refill(stream, buf, pos, base, padded)
        data = buf[pos : pos + size]
        if len(data) < size:
            raise RecordError(f"{source}: member {name} at byte {start} is cut short ({len(data)} of {size} bytes)")
        pos = min(pos + padded, len(buf))  # the last member's padding may be missing, as tarfile allows
        if kind == X_PAX:
            extra.update(_pax_records(data, source, offset))
        elif kind == L_LONGNAME:
            extra["path"] = data.split(b"\0", 1)[0].decode("utf-8", "replace")
        elif kind == G_GLOBAL:
            start = None  # describes the archive, not the next member
        elif kind == S_SPARSE or extra.get("sparse"):
            raise RecordError(
                f"{source}: member {name} at byte {start} is a GNU sparse file, which a shard "
                "cannot hold; write the shard without --sparse"
            )
        elif kind not in NEXT_MEMBER:
            first, start, extra = start, None, {}
            if kind in REGULAR:
                yield first, name, data


def _refill(stream: BinaryIO, buf: bytes, pos: int, base: int, need: int) -> tuple[bytes, int, int]:
    """(buffer, position, base) with at least `need` bytes from the position on, or all that is left."""
    parts = [buf[pos:]]
    have = len(parts[0])
    read = getattr(stream, "read1", stream.read)  # what has arrived, without waiting for a whole chunk
    while have < need:
        chunk = read(max(CHUNK, need - have))
        if not chunk:
            break
        parts.append(chunk)
        have += len(chunk)
    return b"".join(parts), 0, base + pos


def _parse_header(header: bytes, source: str, offset: int) -> tuple[int, str, int]:
    """(type flag, path, size) of one header block, after checking its checksum."""
    try:
        stored = int(header[148:156].split(b"\0", 1)[0].strip(), 8)  # an empty field is no checksum: ValueError
        size = _number(header[124:136])
    except ValueError:
        raise RecordError(f"{source}: not a tar header at byte {offset} (its number fields are not octal)") from None
    # The checksum is the sum of the header's bytes with its own field read as spaces. Adler-32's
    # low half is 1 + that sum modulo 65521, computed in C: 0.3 us a header where `sum()` took
    # 2.2 us, a fifth of the whole walk. A damaged header passes only if its sum moved by a
    # multiple of 65521 (the sum of a header is at most 130,560). On a mismatch the exact sums
    # decide, the signed one too (old tars summed signed chars, and `tarfile` accepts it).
    field = sum(header[148:156])
    if (stored + field - 8 * 32 + 1) % 65521 != zlib.adler32(header) & 0xFFFF:
        computed = sum(header) - field + 8 * 32
        signed = computed - 256 * sum(1 for b in header[:148] + header[156:] if b > 127)
        if stored != signed:
            raise RecordError(
                f"{source}: bad tar header checksum at byte {offset} (stored {stored}, computed {computed})"
            )
    name = header[:100].split(b"\0", 1)[0]
    if header[257:265] == USTAR and header[345] != 0:
        name = header[345:500].split(b"\0", 1)[0] + b"/" + name
    return header[156], name.decode("utf-8", "replace"), size


def _number(field: bytes) -> int:
    """An octal header field, or a base-256 one (first byte 0x80: sizes of 8 GiB and more)."""
    if field[0] & 0x80:
        return int.from_bytes(field[1:], "big")
    digits = field.split(b"\0", 1)[0].strip()
    return int(digits, 8) if digits else 0


def _pax_records(data: bytes, source: str, offset: int) -> _Extra:
    """`path` and `size` of a pax extended header (`<length> <key>=<value>\\n` records), and
    `sparse` if it describes a GNU sparse file (`GNU.sparse.*` keys)."""
    found: _Extra = {}
    pos = 0
    while pos < len(data) and data[pos] != 0:
        space = data.find(b" ", pos)
        try:
            if space <= pos:
                raise ValueError
            length = int(data[pos:space])
            if length <= space - pos or pos + length > len(data):
                raise ValueError
            key, _, value = data[space + 1 : pos + length - 1].partition(b"=")
            if key == b"path":
                found["path"] = value.decode("utf-8", "replace")
            elif key == b"size":
                found["size"] = int(value)
            elif key.startswith(b"GNU.sparse."):
                found["sparse"] = True
        except ValueError:
            raise RecordError(f"{source}: bad pax extended header at byte {offset}") from None
        pos += length
    return found
