"""A channel's listing on one host: the task `listing.list_channel` runs on each receiving host.

The task is a Ray streaming generator: it yields `("progress", files seen)` at least every
`TICK_S` while it advances, and `("done", answer)` last, so the driver can tell a slow listing
(1.28 million files) from a stuck one (a hung mount) without a fixed timeout.

What makes a large folder quick to list, measured on a 1000-class folder of 1,281,167 small
JPEGs (2-core VM, warm cache; BENCHMARKS.md, scale_listing):

* no `stat` per file: `os.scandir` knows files from folders without one, and a walk that also
  read each size took 6.2 s against 1.0 s. A folder's files get the mean size of up to
  `SIZE_SAMPLE` files stat'ed evenly through it: sizes feed the read tasks' size estimates, and
  the image reader reads one listed size and reads on whenever a file's length differs
  (`read_task.folder_files`), so a guessed size costs it at most one more `read`, never bytes.
  A FastFile view's sizes are the object store's, exact.
* image folders filtered by extension while walking, and each class's folder noted, so the
  driver never parses a million paths to find the classes;
* the answer packed (`FileList`): one string and two arrays to pickle and ship.

Parquet footers (row groups, rows, the label's statistics) are read by a pool of threads: on
FastFile each is ranged GETs, and pyarrow and the socket release the GIL while waiting. The host's
rows are answered as one sum, not per file: all an epoch's length needs (`train_spec.listed_rows`).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from smlaunch.errors import DataError
from smlaunch.pipelines.formats import CHANNEL_FORMATS
from smlaunch.pipelines.sources.file_list import FileList

TICK_S = 0.5
"""Longest gap between two progress reports while the listing advances."""
SIZE_SAMPLE = 1024
"""Files stat'ed to estimate the size of a walked folder's files."""
FOOTER_THREADS = 16


def list_on_host(opt_ml, channel: str, record_format: str, label: str | None):
    """Yield progress, then this host's answer: `files` (a `FileList`), and for image folders the
    top-level `folders` and the `imaged` ones (holding an image), for Parquet `row_groups`, `rows`
    (the sum of its files' footers' row counts) and `max_label`. An absent or empty channel
    directory answers no files."""
    from smlaunch.pipelines.sources.channels import channel_dir
    from smlaunch.pipelines.sources.fastfile import read_view

    yield "progress", 0
    directory = channel_dir(opt_ml, channel)
    if not directory.is_dir():
        raise DataError(f"channel '{channel}': {directory} does not exist on this host")
    answer: dict = {
        "files": FileList.of([]),
        "folders": [],
        "imaged": [],
        "row_groups": {},
        "rows": 0,
        "max_label": None,
    }
    view = read_view(directory)
    if view is not None:
        answer["files"] = _view_files(view[1], record_format, answer)
    else:
        rels: list[str] = []
        yield from _walk(directory, record_format, rels, answer)
        answer["files"] = FileList.of(rels, _mean_size(directory, rels))
    yield "progress", len(answer["files"])
    if CHANNEL_FORMATS[record_format].layout == "row_groups" and len(answer["files"]):
        source = None if view is None else view[0]
        yield from _footers(directory, source, channel, answer, label)
    yield "done", answer


def _view_files(objects: FileList, record_format: str, answer: dict) -> FileList:
    """The view's objects that are the format's data (`Format.is_data`); for class folders, the
    folders and the ones holding data noted."""
    spec = CHANNEL_FORMATS[record_format]
    keep = [i for i, rel in enumerate(objects.rels()) if spec.is_data(rel)]
    picked = (
        objects
        if len(keep) == len(objects)
        else FileList.of([objects[i][0] for i in keep], objects.sizes[keep].tolist())
    )
    if spec.layout == "images":
        answer["folders"] = sorted({rel.split("/")[0] for rel in objects.rels() if "/" in rel})
        answer["imaged"] = sorted({rel.split("/")[0] for rel in picked.rels()})
    return picked


def _walk(directory: Path, record_format: str, rels: list[str], answer: dict):
    """Append the channel's files under `directory` to `rels`, in the order `os.walk` gives with
    sorted names (a folder's files, then its subfolders'); hidden names skipped, links to folders
    not followed (as `os.walk`). Yields progress every `TICK_S`."""
    spec = CHANNEL_FORMATS[record_format]
    data_names, classes = spec.data_names, spec.layout == "images"
    stack = [("", str(directory))]
    imaged: set[str] = set()
    last = time.monotonic()
    while stack:
        prefix, path = stack.pop()
        names, folders = [], []
        with os.scandir(path) as entries:
            for entry in entries:
                name = entry.name
                if name[0] == ".":
                    continue
                if entry.is_dir():
                    if not entry.is_symlink():
                        folders.append(name)
                else:
                    names.append(name)
        names.sort()
        names = data_names(prefix, names)
        if classes and names:
            imaged.add(prefix[: prefix.index("/")])
        rels.extend([prefix + n for n in names])
        folders.sort(reverse=True)
        stack.extend((prefix + f + "/", f"{path}/{f}") for f in folders)
        if classes and not prefix:
            answer["folders"] = sorted(folders)
        if time.monotonic() - last >= TICK_S:
            last = time.monotonic()
            yield "progress", len(rels)
    answer["imaged"] = sorted(imaged)


def _mean_size(directory: Path, rels: list[str]) -> list[int] | int:
    """Each file's size when there are at most `SIZE_SAMPLE`, else the mean of that many spread
    evenly through the folder, for every file (see the module's docstring)."""
    if len(rels) <= SIZE_SAMPLE:
        return [os.stat(directory / rel).st_size for rel in rels]
    step = len(rels) / SIZE_SAMPLE
    sample = [os.stat(directory / rels[int(i * step)]).st_size for i in range(SIZE_SAMPLE)]
    return round(sum(sample) / len(sample))


def _footers(directory: Path, source, channel: str, answer: dict, label: str | None):
    """Fill `row_groups`, `rows` and `max_label` from every Parquet file's footer, `FOOTER_THREADS` at a
    time; yields progress as footers arrive. Results do not depend on the order they arrive in."""
    from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

    from smlaunch.pipelines.formats.parquet import describe
    from smlaunch.pipelines.sources.fastfile import open_channel_file

    files = answer["files"]
    sizes = None if source is None else dict(files)  # a view's sizes are exact: no request for them

    def one(rel: str):
        with open_channel_file(directory, rel, None if source is None else (source, sizes)) as stream:
            try:
                return describe(stream, f"{directory}/{rel}", label)
            except DataError as exc:
                raise DataError(f"channel '{channel}': {exc}") from None

    results = {}
    with ThreadPoolExecutor(min(FOOTER_THREADS, len(files)), thread_name_prefix="footer") as pool:
        pending = {pool.submit(one, rel): rel for rel in files.rels()}
        while pending:
            done, _ = wait(pending, timeout=TICK_S, return_when=FIRST_COMPLETED)
            for future in done:
                results[pending.pop(future)] = future.result()
            if done:
                yield "progress", len(files) + len(results)
    answer["row_groups"] = {rel: results[rel][0] for rel in files.rels()}
    answer["rows"] = sum(rows for _, rows, _ in results.values())
    largest = [results[rel][2] for rel in files.rels()]
    answer["max_label"] = None if None in largest else max(largest)
