"""FastFile mode: a channel's objects as files whose bytes are fetched on first read.

On SageMaker a FastFile channel is a read-only mount at `/opt/ml/input/data/<channel>`: the job
starts after a listing, without downloading, and bytes stream from S3 as they are read
(../shared/notes/sagemaker.md §4). Locally there is no such mount, so `write_view` leaves a
small view file in the host's channel directory: the source and the object list, nothing else.
`open_channel_file` and `list_channel_files` understand both: a real directory (File mode, or a
SageMaker FastFile mount) is read as files; a view is read through `LazyObject`, which does one
ranged read of `BLOCK` bytes at a time, only when the reader asks for them. Start-up is then one
listing whatever the dataset's size, as on SageMaker.
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import BinaryIO

from smlaunch.pipelines.sources.file_list import FileList
from smlaunch.pipelines.sources.objects import ObjectSource

VIEW_FILE = ".smlaunch-fastfile.json"
BLOCK = 8 << 20
"""Largest ranged read: large enough that per-request latency is amortised over sequential reads."""
FIRST_FETCH = 256 << 10
"""First ranged read of an object; each next one doubles up to `BLOCK` (as mountpoint-s3's
prefetcher ramps up), so the first record arrives after one short request however big the object."""


def write_view(directory: str | os.PathLike, source: ObjectSource, objects) -> Path:
    """Expose `objects` of `source` ((relative key, size) pairs) in `directory`, fetching nothing.

    The view is two lines: the source, then the keys and sizes. A read task needs only the
    first (its own files and sizes come with it), so it never parses the channel's object list:
    1.28 million objects are tens of MB of JSON, and every read task parsed them all."""
    target = Path(directory)
    target.mkdir(parents=True, exist_ok=True)
    path = target / VIEW_FILE
    tmp = path.with_suffix(".tmp")
    pairs = objects if isinstance(objects, FileList) else FileList.from_pairs(objects)
    with open(tmp, "w") as f:
        f.write(json.dumps({"source": source.uri, "endpoint_url": source.endpoint_url}) + "\n")
        json.dump([list(pairs.rels()), pairs.sizes.tolist()], f)
    tmp.replace(path)
    return path


def view_source(directory: str | os.PathLike) -> ObjectSource | None:
    """The source of the view in `directory` (its first line only), or None when it is a plain directory."""
    path = Path(directory) / VIEW_FILE
    if not path.is_file():
        return None
    with open(path) as f:
        head = json.loads(f.readline())
    return ObjectSource(head["source"], head.get("endpoint_url"))


def read_view(directory: str | os.PathLike) -> tuple[ObjectSource, FileList] | None:
    """The view in `directory` (its source and every object), or None when it is a plain directory."""
    path = Path(directory) / VIEW_FILE
    if not path.is_file():
        return None
    with open(path) as f:
        head = json.loads(f.readline())
        keys, sizes = json.loads(f.read())
    return ObjectSource(head["source"], head.get("endpoint_url")), FileList.of(keys, sizes)


class LazyObject(io.RawIOBase):
    """One object of a FastFile view as a seekable raw file: nothing is fetched until `readinto`."""

    def __init__(self, source: ObjectSource, key: str, size: int):
        super().__init__()
        self.source, self.key, self.size = source, key, size
        self.name = f"{source.uri.rstrip('/')}/{key}"
        self.position = 0
        self.window = FIRST_FETCH
        self.fetches = 0
        self.bytes_fetched = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        want = min(len(buffer), self.size - self.position, self.window)
        if want <= 0:
            return 0
        data = self.source.read_range(self.key, self.position, want)
        self.window = min(self.window * 2, BLOCK)
        buffer[: len(data)] = data
        self.position += len(data)
        self.fetches += 1
        self.bytes_fetched += len(data)
        return len(data)

    def readall(self) -> bytes:
        """The rest of the object in windows; RawIOBase's own would issue one GET per 8 KiB."""
        chunks = []
        while self.position < self.size:
            chunk = bytearray(min(self.window, self.size - self.position))
            got = self.readinto(chunk)
            if got == 0:
                break
            chunks.append(bytes(chunk[:got]))
        return b"".join(chunks)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.position, io.SEEK_END: self.size}[whence]
        self.position = max(0, base + offset)
        self.window = FIRST_FETCH  # a jump starts a new sequential run
        return self.position

    def tell(self) -> int:
        return self.position


class LazyFile(io.BufferedReader):
    """A buffered `LazyObject`; `size` lets record readers bound a length field as for a real file."""

    def __init__(self, raw: LazyObject):
        super().__init__(raw, buffer_size=BLOCK)
        self.size = raw.size
        self._name = raw.name  # `self.raw` is typed as any raw stream, which need not have a name

    @property
    def name(self) -> str:
        return self._name


_NO_VIEW = object()


def open_channel_file(directory: str | os.PathLike, rel: str, view=_NO_VIEW) -> BinaryIO:
    """Open a channel file for reading: a real file, or the lazy object a FastFile view names.

    A reader of many files passes `view`, read once: `(source, sizes)`, `sizes` a mapping or
    sequence of (rel, size) pairs for the files it may open (a read task's own; parsing the view
    per file made a FastFile folder of small images quadratic, 4,000 files: 131 rows/s), or None
    to ask the source for the size (one request per file: what a reader that knows only a share
    of a file's size, as a Parquet row group's, does)."""
    if view is _NO_VIEW:
        view = read_view(directory)
    if view is None:
        return open(os.path.join(directory, rel), "rb")
    source, objects = view
    if objects is None:
        size = source.size(rel)
    else:
        size = (objects if isinstance(objects, Mapping) else dict(objects)).get(rel)
    if size is None:
        raise FileNotFoundError(f"{directory}/{rel}: not in the channel's FastFile view")
    return LazyFile(LazyObject(source, rel, size))
