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
from pathlib import Path
from typing import BinaryIO

from smlaunch.pipelines.sources.objects import ObjectSource

VIEW_FILE = ".smlaunch-fastfile.json"
BLOCK = 8 << 20
"""Largest ranged read: large enough that per-request latency is amortised over sequential reads."""
FIRST_FETCH = 256 << 10
"""First ranged read of an object; each next one doubles up to `BLOCK` (as mountpoint-s3's
prefetcher ramps up), so the first record arrives after one short request however big the object."""


def write_view(directory: str | os.PathLike, source: ObjectSource, objects: list[tuple[str, int]]) -> Path:
    """Expose `objects` of `source` (relative key, size) in `directory`, fetching nothing."""
    target = Path(directory)
    target.mkdir(parents=True, exist_ok=True)
    path = target / VIEW_FILE
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"source": source.uri, "endpoint_url": source.endpoint_url,
                               "objects": [[key, size] for key, size in objects]}))
    tmp.replace(path)
    return path


def read_view(directory: str | os.PathLike) -> tuple[ObjectSource, list[tuple[str, int]]] | None:
    """The view in `directory`, or None when it is a plain directory."""
    path = Path(directory) / VIEW_FILE
    if not path.is_file():
        return None
    view = json.loads(path.read_text())
    return ObjectSource(view["source"], view.get("endpoint_url")), [(k, s) for k, s in view["objects"]]


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
        buffer[:len(data)] = data
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

    @property
    def name(self) -> str:
        return self.raw.name


_NO_VIEW = object()


def open_channel_file(directory: str | os.PathLike, rel: str, view=_NO_VIEW) -> BinaryIO:
    """Open a channel file for reading: a real file, or the lazy object a FastFile view names.
    A reader of many files passes `view` (`read_view(directory)`, read once): parsing the view per
    file made a FastFile folder of small images quadratic (4,000 files: 131 rows/s)."""
    if view is _NO_VIEW:
        view = read_view(directory)
    if view is None:
        return open(os.path.join(directory, rel), "rb")
    source, objects = view
    sizes = objects if isinstance(objects, dict) else dict(objects)
    size = sizes.get(rel)
    if size is None:
        raise FileNotFoundError(f"{directory}/{rel}: not in the channel's FastFile view")
    return LazyFile(LazyObject(source, rel, size))
