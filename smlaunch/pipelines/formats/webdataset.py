"""WebDataset shards: tar files whose members `<key>.<ext>` group into samples, read as a stream.

The convention is the `webdataset` package's (`base_plus_ext` and `group_by_keys`): a member's
key is its path up to the first dot of its file name, the rest is the extension, lower-cased;
consecutive members with one key form one sample (`{"__key__": key, "jpg": ..., "cls": ...}`).
Reading never seeks: tarfile's stream mode (`r|`) walks the members in order, so a FastFile
object is fetched sequentially and a Pipe-mode FIFO, which carries a channel's shards back to
back, is read as it arrives. `ignore_zeros` lets it walk past each shard's end-of-archive blocks
into the next shard, as GNU tar's `--ignore-zeros` does for concatenated archives.

A damaged archive (a bad header checksum, a member cut short) raises `RecordError` naming the
shard and the byte offset of the member, which the channel's corrupt-record policy may skip:
the rest of that shard cannot be framed, so reading resumes at the next shard (File, FastFile)
or ends the stream (Pipe).
"""

from __future__ import annotations

import tarfile
from typing import BinaryIO, Iterator

from smlaunch.pipelines.formats.tfrecord import RecordError

Sample = dict[str, bytes]


def split_name(name: str) -> tuple[str, str] | None:
    """`dir/abc.seg.png` -> (`dir/abc`, `seg.png`); None for a member without an extension."""
    directory, _, base = name.rpartition("/")
    stem, dot, ext = base.partition(".")
    if not dot or not stem or not ext:
        return None
    return (f"{directory}/{stem}" if directory else stem), ext.lower()


def iter_samples(stream: BinaryIO, source: str) -> Iterator[tuple[int, Sample]]:
    """(byte offset of the sample's first member, sample) for each sample of the tar stream(s)."""
    key, sample, start = None, {}, 0
    try:
        with tarfile.open(fileobj=stream, mode="r|", ignore_zeros=True) as archive:
            for member in archive:
                if not member.isfile():
                    continue
                parts = split_name(member.name)
                if parts is None or parts[0].rpartition("/")[2].startswith("."):
                    continue  # no extension, or hidden (macOS `._x.jpg`): not part of a sample
                data = archive.extractfile(member).read()
                if len(data) != member.size:
                    raise RecordError(f"{source}: member {member.name} at byte {member.offset} is cut short "
                                      f"({len(data)} of {member.size} bytes)")
                if parts[0] != key:
                    if sample:
                        yield start, sample
                    key, sample, start = parts[0], {"__key__": parts[0].encode()}, member.offset
                sample[parts[1]] = data
    except tarfile.TarError as exc:
        raise RecordError(f"{source}: not a readable tar archive near byte {_position(stream, start)} ({exc})") from None
    except EOFError as exc:
        raise RecordError(f"{source}: the tar archive ends inside a member after byte {start} ({exc})") from None
    if sample:
        yield start, sample


def pick(sample: Sample, names: str) -> bytes | None:
    """The first of the `;`-separated extensions `names` that the sample has."""
    for name in names.split(";"):
        value = sample.get(name.strip().lower())
        if value is not None:
            return value
    return None


def _position(stream: BinaryIO, fallback: int) -> int:
    try:
        return stream.tell()
    except (OSError, ValueError):  # a FIFO cannot tell
        return fallback
