"""Record formats of SageMaker channels, behind one public function: `iter_records`.

    from smlaunch.pipelines.formats import iter_records
    for record in iter_records("train/part-0.rec", "recordio"):
        ...

Formats: `tfrecord` (both CRCs verified), `recordio` (dmlc framing, multipart records joined),
`text` (one record per line, newline removed, a final unterminated line kept, as the TF
extension's TextLine reader does) and `whole` (the whole file is one record: folders of JPEGs in
File or FastFile mode). Corruption raises `RecordError` naming the source and byte offset.
"""

from __future__ import annotations

import os
from typing import BinaryIO, Iterator

from smlaunch.pipelines.formats import recordio, tfrecord
from smlaunch.pipelines.formats.tfrecord import RecordError

FORMATS = ("tfrecord", "recordio", "text", "whole")

__all__ = ["FORMATS", "RecordError", "iter_records"]


def iter_records(source: str | os.PathLike | BinaryIO, format: str, name: str | None = None) -> Iterator[bytes]:
    """Each record of a file path or an open binary stream (a FIFO works), in `format`."""
    if format not in FORMATS:
        raise ValueError(f"unknown record format {format!r}; formats: {', '.join(FORMATS)}")
    if isinstance(source, (str, os.PathLike)):
        with open(source, "rb") as stream:
            yield from iter_records(stream, format, str(source))
        return
    label = name or getattr(source, "name", "<stream>")
    if format == "tfrecord":
        yield from tfrecord.read_records(source, str(label))
    elif format == "recordio":
        yield from recordio.read_records(source, str(label))
    elif format == "text":
        for line in source:
            yield line[:-1] if line.endswith(b"\n") else line
    else:
        yield source.read()
