"""WebDataset shards: tar files whose members `<key>.<ext>` group into samples, read as a stream.

The convention is the `webdataset` package's (`base_plus_ext` and `group_by_keys`): a member's
key is its path up to the first dot of its file name, the rest is the extension, lower-cased;
consecutive members with one key form one sample (`{"__key__": key, "jpg": ..., "cls": ...}`).
Reading never seeks: the members are walked in order (`tar_stream`), so a FastFile
object is fetched sequentially and a Pipe-mode FIFO, which carries a channel's shards back to
back, is read as it arrives, past each shard's end-of-archive blocks into the next shard.

A damaged archive (a bad header checksum, a member cut short) raises `RecordError` naming the
shard and the byte offset of the member, which the channel's corrupt-record policy may skip:
the rest of that shard cannot be framed, so reading resumes at the next shard (File, FastFile)
or ends the stream (Pipe).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import BinaryIO

from smlaunch.pipelines.formats.tar_stream import iter_members

Sample = dict[str, bytes]


def matches(head: bytes) -> bool:
    """A tar archive's first header holds `ustar` at byte 257."""
    return head[257:262] == b"ustar"


def split_name(name: str) -> tuple[str, str] | None:
    """`dir/abc.seg.png` -> (`dir/abc`, `seg.png`); None for a member without an extension."""
    directory, _, base = name.rpartition("/")
    stem, dot, ext = base.partition(".")
    if not dot or not stem or not ext:
        return None
    return (f"{directory}/{stem}" if directory else stem), ext.lower()


def iter_samples(stream: BinaryIO, source: str) -> Iterator[tuple[int, Sample]]:
    """(byte offset of the sample's first member, sample) for each sample of the tar stream(s)."""
    for start, _, sample in iter_spans(stream, source):
        yield start, sample


def iter_spans(stream: BinaryIO, source: str, start: int = 0) -> Iterator[tuple[int, int | None, Sample]]:
    """(offset of the sample's first member, offset of the next sample's or None for the last,
    sample) for each sample of a stream standing at offset `start`: a sample is known whole only
    when the next one begins, which is where a read resumed after it starts."""
    key: str | None = None
    sample: Sample = {}
    first = 0
    for offset, name, data in iter_members(stream, source, start):
        parts = split_name(name)
        if parts is None or parts[0].rpartition("/")[2].startswith("."):
            continue  # no extension, or hidden (macOS `._x.jpg`): not part of a sample
        if parts[0] != key:
            if sample:
                yield first, offset, sample
            key, sample, first = parts[0], {"__key__": parts[0].encode()}, offset
        sample[parts[1]] = data
    if sample:
        yield first, None, sample


def pick(sample: Sample, names: str) -> bytes | None:
    """The first of the `;`-separated extensions `names` that the sample has."""
    for name in names.split(";"):
        value = sample.get(name.strip().lower())
        if value is not None:
            return value
    return None
