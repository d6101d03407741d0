"""What one read task of a File or FastFile channel does, on the host holding its files: open each
unit (a file, or a Parquet row group) where the channel's delivery put it (a host's
`/opt/ml/input/data/<channel>`, or a FastFile view that fetches from S3 on first read), turn its
records into samples (`pipelines.rows`), and yield blocks of checked rows with their positions.
The tasks are planned by `file_reader.ChannelDatasource`, which hands each its units.
"""

from __future__ import annotations

import itertools
import os
from contextlib import contextmanager
from typing import cast

import numpy as np
import pyarrow as pa
import ray
import ray.data

from smlaunch.cluster.labels import host_selector, this_host
from smlaunch.cluster.plan import ChannelPlan
from smlaunch.errors import DataError
from smlaunch.pipelines.formats import CHANNEL_FORMATS
from smlaunch.pipelines.order import PIECE_ROWS
from smlaunch.pipelines.rows import folder_tables, row_blocks, unit_samples
from smlaunch.pipelines.sources.channels import channel_dir
from smlaunch.pipelines.sources.fastfile import open_channel_file, view_source
from smlaunch.pipelines.sources.host_loss import host_alive, sharded_lost_error
from smlaunch.pipelines.sources.read_priority import behind_the_chain
from smlaunch.pipelines.sources.units import LazyUnits, PackedUnits

DEFAULT_BLOCK_BYTES = 128 * 2**20
"""Ray Data's target block size when the context sets none."""


def target_block_bytes() -> int:
    """The job's target block size, from the context Ray Data plans and reads in (`use_block_size`)."""
    return ray.data.DataContext.get_current().target_max_block_size or DEFAULT_BLOCK_BYTES


def read_units(
    channel: ChannelPlan,
    holder: str | None,
    units: PackedUnits | LazyUnits,
    roots: dict[str, str | None],
    classes,
    num_classes,
):
    units = units.resolve() if isinstance(units, LazyUnits) else units
    host = this_host()
    # Ray Data sets the job's context in this task, not in a task it starts: the block size goes on as an argument.
    block_bytes = target_block_bytes()
    if holder is not None and host != holder:
        # The holder's files are on no other host: if it is gone (this is a retry after it died),
        # a task pinned to it would wait forever; say so instead. The streaming task is not
        # retried (`max_retries=0`) because this task, retried by Ray Data, starts it again.
        if not host_alive(holder):
            raise sharded_lost_error(channel.name, holder, roots.get(holder), _files(units))
        stream = ray.remote(read_here).options(
            num_returns="streaming", num_cpus=0, max_retries=0, label_selector=host_selector(holder)
        )
        try:
            # num_returns="streaming" makes `remote` return a generator of refs; Ray's stub says one ref.
            refs = cast(
                "ray.ObjectRefGenerator",
                stream.remote(channel, holder, units, roots, classes, num_classes, block_bytes),
            )
            for ref in refs:
                yield ray.get(ref)
        except (
            ray.exceptions.RayActorError,
            ray.exceptions.ObjectLostError,
            ray.exceptions.WorkerCrashedError,
            ray.exceptions.NodeDiedError,
        ):
            if not host_alive(holder):
                raise sharded_lost_error(channel.name, holder, roots.get(holder), _files(units)) from None
            raise
        return
    yield from read_here(channel, host, units, roots, classes, num_classes, block_bytes)


def _files(units) -> list[str]:
    return list(dict.fromkeys(rel for rel, _, _ in units))


def read_here(
    channel: ChannelPlan, host: str | None, units, roots: dict[str, str | None], classes, num_classes, block_bytes: int
):
    """`units`' rows in Arrow tables of about `block_bytes` (Ray Data's target block size, which
    its output buffer would merge the rows into anyway: `rows.row_blocks`), each row with its
    position (`pipelines.order`); in a resumed epoch, without the rows drawn before: a record
    file is entered past its drawn head where the checkpoint knows the offset (`seeks`), and the
    rows drawn after it are dropped before they are decoded. The files are read at a lower CPU
    priority than the chain's (`read_priority`)."""
    if host is None or host not in roots:
        raise DataError(
            f"channel '{channel.name}': read task landed on host {host}, which does not "
            f"receive the channel (hosts: {sorted(roots)})"
        )
    directory = channel_dir(roots[host], channel.name)
    samples = _samples(channel, directory, host, units, classes, num_classes, block_bytes)
    seeks = getattr(units, "seeks", None) or {}
    blocks = behind_the_chain(
        row_blocks(
            channel,
            samples,
            num_classes,
            block_bytes,
            positions=True,
            starts={unit: first for unit, (first, _) in seeks.items()},
        )
    )
    drawn = getattr(units, "drawn", None)
    if not drawn:
        yield from blocks
        return
    from smlaunch.pipelines.order import LAST, UNIT_SHIFT

    skip = np.concatenate([(unit << UNIT_SHIFT) | np.asarray(ordinals, np.int64) for unit, ordinals in drawn.items()])
    for table in blocks:
        keep = ~np.isin(table.column("pos").to_numpy() & ~LAST, skip)
        yield table if keep.all() else table.filter(keep)


@contextmanager
def folder_files(directory):
    """`read(rel, size)`: a file's bytes under `directory`, opened relative to the directory's
    descriptor, read in one `read` of the `size` it was listed with.

    An image folder is many small files, and resolving each one's full path
    (`/opt/ml/input/data/<channel>/<class>/<file>`) was most of opening it: `openat` on the
    channel directory did 2.3x the files per second of `open(path).read()` in a bare loop over
    20,000 small files (BENCHMARKS.md, formats). Taking the size from the listing instead of an
    `fstat` before each read was another 182k -> 240k files/s of 700 bytes. Any other length
    than the listed one (the file changed since, or a file system that returns short reads, as
    some FUSE mounts do) reads on to the end of the file, so nothing is cut off."""
    base = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)

    def read(rel: str, size: int) -> bytes:
        fd = os.open(rel, os.O_RDONLY | os.O_CLOEXEC, dir_fd=base)
        try:
            data = os.read(fd, size + 1)
            if len(data) == size:
                return data
            parts = [data]
            while chunk := os.read(fd, 1 << 20):
                parts.append(chunk)
            return b"".join(parts)
        finally:
            os.close(fd)

    try:
        yield read
    finally:
        os.close(base)


def _samples(channel: ChannelPlan, directory, host: str, units, classes, num_classes, block_bytes: int):
    """The samples of `units`, each tagged with its unit's place for `row_blocks(positions=True)`;
    `channel.open_units` units read at a time, a sample of each in turn (`order.interleave`)."""
    from smlaunch.pipelines.order import interleave

    # Lazily: a task of 640,000 image files took 0.3 s to unpack into tuples before its first block.
    places = getattr(units, "places", None)
    places = itertools.count() if places is None else places.tolist()
    spec = CHANNEL_FORMATS[channel.record_format]
    source = view_source(directory)  # a FastFile view's source only: the task's files and sizes are in `units`
    view = (
        None
        if source is None
        else (source, None if spec.layout == "row_groups" else {rel: size for rel, _, size in units})
    )

    def unreadable(rel: str, exc: OSError) -> DataError:
        return DataError(f"channel '{channel.name}': cannot open {directory}/{rel} on {host}: {exc.strerror or exc}")

    def opened(rel: str):
        try:
            return open_channel_file(directory, rel, view)
        except OSError as exc:
            raise unreadable(rel, exc) from None

    if spec.layout == "images":
        sizes = ((rel, size, place) for (rel, _, size), place in zip(units, places, strict=False))
        files = _folder_images(directory, sizes, classes, opened if view is not None else None, unreadable)
        yield from folder_tables(files, num_classes, block_bytes, f"{directory}/", positions=True)
        return
    open_units = getattr(units, "open_units", 1)
    piece = PIECE_ROWS if open_units > 1 else None
    seeks = getattr(units, "seeks", None) or {}
    yield from interleave(
        (
            _unit_samples(
                channel, opened, f"{directory}/{rel}", rel, group, place, num_classes, piece, seeks.get(place)
            )
            for (rel, group, _), place in zip(units, places, strict=False)
        ),
        open_units,
    )


def _unit_samples(
    channel: ChannelPlan,
    opened,
    source: str,
    rel: str,
    group,
    place: int,
    num_classes,
    piece,
    seek: tuple[int, int] | None = None,
):
    """One unit's samples (a file, or a Parquet row group), tagged `(place, last)`, a record
    file's `(place, last, end, sample)` (`blocks.UnitPositions`); checked tables cut into `piece`
    rows when units are interleaved. `seek`: (first ordinal, `order.seek_point`) where a resumed
    read enters the file. The file is opened when the first sample is asked for and closed after
    the last."""
    from smlaunch.pipelines.order import split_seek

    with opened(rel) as stream:
        offset, first = 0, 0
        if seek is not None:
            offset, skipped = split_seek(seek[1])
            first = seek[0] + skipped
            stream.seek(offset)
        items = unit_samples(channel, stream, source, group, num_classes, offset, first)
        held = _END
        held_tag: tuple | None = None
        n = first - 1
        for end, item in items:
            if piece and isinstance(item, pa.Table) and item.num_rows > piece:
                for start in range(0, item.num_rows, piece):
                    if held is not _END:
                        yield held_tag, held
                    held, held_tag = item.slice(start, piece), (place, False)
                continue
            if held is not _END:
                yield held_tag, held
            n += 1
            held, held_tag = item, ((place, False) if isinstance(item, pa.Table) else (place, False, end, n))
        if held is not _END:
            yield (place, True), held


_END = object()


def _folder_images(directory, units, classes, opened, unreadable):
    """(rel, bytes, label, place) of an image folder's files, `units` as (rel, listed size, place)
    (the listing holds class images only); `opened`: a FastFile view's opener (objects fetched on
    demand), else files are read from disk."""
    label = {name: index for index, name in enumerate(classes)}
    if opened is not None:
        for rel, _, place in units:
            with opened(rel) as stream:
                yield rel, stream.read(), label[rel[: rel.index("/")]], place
        return
    with folder_files(directory) as read:
        for rel, size, place in units:
            try:
                data = read(rel, size)
            except OSError as exc:
                raise unreadable(rel, exc) from None
            yield rel, data, label[rel[: rel.index("/")]], place
