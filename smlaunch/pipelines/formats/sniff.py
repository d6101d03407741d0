"""What a file looks like from its first bytes, so a wrong `record_format` fails at `plan` time.

A folder of PNGs, a WebDataset tar or a Parquet file handed to a TFRecord channel used to pass
`plan` and fail minutes later inside a read task with "bad length CRC in record at byte 0". Each
framed format has a self-checking start: a TFRecord file begins with an 8-byte length and the
masked CRC-32C of those 8 bytes, a RecordIO file with the magic 0xCED7230A. Anything else is named
by its well-known signature (PNG, JPEG, tar, Parquet, gzip, ...) so the message can say what the
file is instead of what it is not.
"""

from __future__ import annotations

import struct

HEAD_BYTES = 512
"""Enough for every signature below (a tar header's `ustar` sits at byte 257)."""

_SIGNATURES = [
    (0, b"\x89PNG\r\n\x1a\n", "a PNG image"),
    (0, b"\xff\xd8\xff", "a JPEG image"),
    (0, b"GIF8", "a GIF image"),
    (0, b"BM", "a BMP image"),
    (0, b"RIFF", "a WebP image"),
    (0, b"II*\x00", "a TIFF image"),
    (0, b"MM\x00*", "a TIFF image"),
    (0, b"PAR1", "a Parquet file"),
    (0, b"\x1f\x8b", "a gzip file"),
    (0, b"PK\x03\x04", "a ZIP archive"),
    (0, b"\x28\xb5\x2f\xfd", "a zstd file"),
    (257, b"ustar", "a tar archive (a WebDataset shard?)"),
    (0, b"\x93NUMPY", "a NumPy .npy file"),
]


def matches(head: bytes, record_format: str) -> bool:
    """True when `head` (a file's first bytes) starts like a file of `record_format`."""
    if record_format == "tfrecord":
        from smlaunch.pipelines.formats.tfrecord import masked_crc

        return len(head) >= 12 and masked_crc(head[:8]) == struct.unpack("<I", head[8:12])[0]
    if record_format == "recordio":
        from smlaunch.pipelines.formats.recordio import MAGIC

        return len(head) >= 8 and struct.unpack("<I", head[:4])[0] == MAGIC
    if record_format == "parquet":
        return head[:4] == b"PAR1"
    if record_format == "webdataset":
        return head[257:262] == b"ustar"
    if record_format == "image_folder":
        return any(head[:len(sig)] == sig for _, sig, name in _SIGNATURES if name.endswith("image")) or \
            head[8:12] == b"WEBP"
    return True  # text and whole files have no framing to check


def suggestion(head: bytes) -> str:
    """`; did you mean record_format: X?` when `head` starts like a format smlaunch reads, else ``."""
    for record_format in ("image_folder", "parquet", "webdataset", "tfrecord", "recordio"):
        if head and matches(head, record_format):
            return f"; did you mean record_format: {record_format}?"
    return ""


def describe(head: bytes) -> str:
    """A few words saying what `head` looks like: `a PNG image`, `text`, `empty`, ..."""
    if not head:
        return "empty"
    for offset, signature, name in _SIGNATURES:
        if head[offset:offset + len(signature)] == signature:
            return name
    for record_format in ("tfrecord", "recordio"):
        if matches(head, record_format):
            return f"a {record_format} file"
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError:
        return "binary data of no format smlaunch knows"
    stripped = text.lstrip()
    if stripped.startswith(("{", "[")):
        return "JSON (an augmented manifest needs attribute_names)"
    return "text"


def read_head(path) -> bytes:
    with open(path, "rb") as f:
        return f.read(HEAD_BYTES)
