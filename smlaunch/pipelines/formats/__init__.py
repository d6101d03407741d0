"""Record formats of SageMaker channels: a reader module per format, each with how its files look
from their first bytes (`LOOKS_LIKE`, for the sniffer), and the record reader behind one public
function, `iter_records`. What each format is (`CHANNEL_FORMATS`) is the config's table
(`smlaunch.config.formats`), re-exported here.

    from smlaunch.pipelines.formats import iter_records
    for record in iter_records("train/part-0.rec", "recordio"):
        ...

Formats: `tfrecord` (both CRCs verified), `recordio` (dmlc framing, multipart records joined),
`text` (one record per line, newline removed, a final unterminated line kept, as the TF
extension's TextLine reader does) and `whole` (the whole file is one record: folders of JPEGs in
File or FastFile mode). Corruption raises `RecordError` naming the source and byte offset, unless
the caller chose to skip it (`max_corrupted`, `on_corrupt`): a large dataset with one bad record
should not have to stop a long job.

`PositionedRecords` reads a file from an offset and says where each record ends: what a resumed
epoch seeks to instead of reading its consumed records again (`sources.file_reader`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import BinaryIO

from smlaunch.config.formats import CHANNEL_FORMATS, Format
from smlaunch.pipelines.formats import image_folder, parquet, recordio, tfrecord, webdataset
from smlaunch.pipelines.formats.tfrecord import RecordError

LOOKS_LIKE: dict[str, Callable[[bytes], bool]] = {
    module.__name__.rsplit(".", 1)[1]: module.matches
    for module in (tfrecord, recordio, image_folder, webdataset, parquet)
}
"""A channel format -> whether a file's first bytes (`sniff.HEAD_BYTES`) look like it: each reader
module's `matches`, one per format of `CHANNEL_FORMATS`."""

FORMATS = ("tfrecord", "recordio", "text", "whole")
"""What `iter_records` reads: the framed formats, lines, and a file as one record."""

__all__ = ["CHANNEL_FORMATS", "FORMATS", "LOOKS_LIKE", "Format", "PositionedRecords", "RecordError", "iter_records"]


def iter_records(
    source: str | os.PathLike | BinaryIO,
    format: str,
    name: str | None = None,
    *,
    max_corrupted: int = 0,
    on_corrupt: Callable[[RecordError], bool] | None = None,
) -> Iterator[bytes]:
    """Each record of a file path or an open binary stream (a FIFO works), in `format`.

    A damaged region (a bad CRC or magic, a part out of sequence, a truncated tail) raises its
    `RecordError`, unless `on_corrupt(error)` returns True: then it is skipped and reading goes
    on. `max_corrupted=N` skips up to N regions and raises on the next. `text` and `whole` have
    no framing to damage and ignore both. Arguments are checked here, before the first record.
    """
    if format not in FORMATS:
        raise ValueError(f"unknown record format {format!r}; formats: {', '.join(FORMATS)}")
    if not isinstance(max_corrupted, int) or max_corrupted < 0:
        raise ValueError(f"max_corrupted must be a count >= 0, not {max_corrupted!r}")
    if max_corrupted and on_corrupt is not None:
        raise ValueError("give max_corrupted or on_corrupt, not both")
    if max_corrupted:
        allowed = [max_corrupted]

        def on_corrupt(error: RecordError) -> bool:
            allowed[0] -= 1
            return allowed[0] >= 0

    return _records(source, format, name, on_corrupt)


def _records(source, format: str, name: str | None, on_corrupt) -> Iterator[bytes]:
    if isinstance(source, (str, os.PathLike)):
        with open(source, "rb") as stream:
            yield from _read(stream, format, str(name or source), on_corrupt)
    else:
        yield from _read(source, format, str(name or getattr(source, "name", "<stream>")), on_corrupt)


def _read(stream: BinaryIO, format: str, label: str, on_corrupt) -> Iterator[bytes]:
    if format == "tfrecord":
        return tfrecord.read_records(stream, label, on_corrupt)
    if format == "recordio":
        return recordio.read_records(stream, label, on_corrupt)
    if format == "text":
        return (line[:-1] if line.endswith(b"\n") else line for line in stream)
    return iter([stream.read()])


class PositionedRecords:
    """The records of a seekable `stream` from where it stands, in `format`, with `end`: the file
    offset just past the last record yielded (after a skipped damaged region, past it too), so a
    read that stops after any record can start again there. `iter_records`' rules otherwise."""

    def __init__(self, stream: BinaryIO, format: str, name: str, on_corrupt=None):
        if format not in FORMATS:
            raise ValueError(f"unknown record format {format!r}; formats: {', '.join(FORMATS)}")
        self.stream, self.format, self.name, self.on_corrupt = stream, format, name, on_corrupt
        self.end = stream.tell()

    def __iter__(self) -> Iterator[bytes]:
        if self.format in ("tfrecord", "recordio"):
            module = tfrecord if self.format == "tfrecord" else recordio
            reader = module.Reader(self.stream, self.name, self.on_corrupt)
            for record in module.records(reader):
                self.end = reader.offset
                yield record
            return
        if self.format == "text":
            for line in self.stream:
                self.end += len(line)
                yield line[:-1] if line.endswith(b"\n") else line
            return
        data = self.stream.read()
        self.end += len(data)
        yield data
