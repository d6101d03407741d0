"""What a file looks like from its first bytes, so a wrong `record_format` fails at `plan` time.

A folder of PNGs, a WebDataset tar or a Parquet file handed to a TFRecord channel used to pass
`plan` and fail minutes later inside a read task with "bad length CRC in record at byte 0". Each
framed format has a self-checking start: a TFRecord file begins with an 8-byte length and the
masked CRC-32C of those 8 bytes, a RecordIO file with the magic 0xCED7230A. Anything else is named
by its well-known signature (PNG, JPEG, tar, Parquet, gzip, ...) so the message can say what the
file is instead of what it is not.
"""

from __future__ import annotations

from smlaunch.pipelines.formats import CHANNEL_FORMATS, LOOKS_LIKE
from smlaunch.pipelines.formats.image_folder import IMAGE_SIGNATURES

HEAD_BYTES = 512
"""Enough for every signature below (a tar header's `ustar` sits at byte 257)."""

_SIGNATURES = [(0, signature, name) for signature, name in IMAGE_SIGNATURES] + [
    (0, b"PAR1", "a Parquet file"),
    (0, b"\x1f\x8b", "a gzip file"),
    (0, b"PK\x03\x04", "a ZIP archive"),
    (0, b"\x28\xb5\x2f\xfd", "a zstd file"),
    (257, b"ustar", "a tar archive (a WebDataset shard?)"),
    (0, b"\x93NUMPY", "a NumPy .npy file"),
]


def matches(head: bytes, record_format: str) -> bool:
    """True when `head` (a file's first bytes) starts like a file of `record_format` (text and
    whole files, which have no framing, always)."""
    looks_like = LOOKS_LIKE.get(record_format)
    return looks_like is None or looks_like(head)


def suggestion(head: bytes) -> str:
    """`; did you mean record_format: X?` when `head` starts like a format smlaunch reads, else ``."""
    for spec in sorted(CHANNEL_FORMATS.values(), key=lambda spec: spec.layout != "images"):  # images first
        if head and LOOKS_LIKE[spec.name](head):
            return f"; did you mean record_format: {spec.name}?"
    return ""


def describe(head: bytes) -> str:
    """A few words saying what `head` looks like: `a PNG image`, `text`, `empty`, ..."""
    if not head:
        return "empty"
    for offset, signature, name in _SIGNATURES:
        if head[offset : offset + len(signature)] == signature:
            return name
    for spec in CHANNEL_FORMATS.values():
        if spec.layout == "records" and LOOKS_LIKE[spec.name](head):
            return f"a {spec.name} file"
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
