"""What a File, FastFile or file-system channel holds, listed on the hosts that receive it.

Listing happens once per run, before the datasets are built, on the receiving hosts themselves
(on SageMaker a GPU head may not receive a channel at all; `host_listing` is the hosts' part).
Besides the files it gathers what the trainer needs before the first step and a read task
cannot know alone:

* image folders: the class names, from every host's listing (under ShardedByS3Key a host may
  hold no image of some class, and labels must mean the same on every host);
* Parquet: each file's row groups (the unit of parallel reading) and the largest label in the
  column statistics, so `model.num_classes` can come from the data without a pass over it.

There is no fixed timeout: 1.28 million files take seconds, a slow mount minutes. Each host
reports progress while it lists, and a listing fails only when a host makes none for `STALL_S`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Sequence

from smlaunch.cluster.plan import host_selector
from smlaunch.errors import DataError

STALL_S = 120.0
"""A host whose listing advances by not one file for this long is stuck (a hung mount, a lost host)."""
Files = Sequence[tuple[str, int]]
"""(relative path, size) pairs: a `file_list.FileList` from a listing, iterating as tuples."""


@dataclass
class ChannelListing:
    files: dict[str, Files]
    """Receiving host -> (relative path, size) of what it holds (one host stands for all when every
    host holds everything). Sizes of a walked image folder are estimates (`host_listing`)."""
    row_groups: dict[str, int] = field(default_factory=dict)
    """Parquet: relative path -> row groups."""
    classes: list[str] | None = None
    """Image folders: the sorted class names."""
    max_label: int | None = None
    """Parquet: the largest label in the statistics (None when a file has none)."""

    @property
    def num_classes(self) -> int | None:
        if self.classes is not None:
            return len(self.classes)
        return None if self.max_label is None else self.max_label + 1


def list_channel(channel, roots: dict[str, str | None], stall_s: float = STALL_S) -> ChannelListing:
    """List `channel` on its hosts (under ShardedByS3Key each; else the first stands for all),
    showing progress; fails when a host's listing advances for none of `stall_s` seconds."""
    import ray

    from smlaunch.pipelines.sources.host_listing import list_on_host

    sharded = channel.distribution == "ShardedByS3Key" and channel.file_system is None
    hosts = list(channel.hosts) if sharded else [channel.hosts[0]]
    lister = ray.remote(list_on_host)
    streams = {h: lister.options(num_returns="streaming", num_cpus=0, max_retries=0,
                                 label_selector=host_selector(h)).remote(
        roots[h], channel.name, channel.record_format, channel.fields[1]) for h in hosts}
    answers = _collect(channel.name, streams, stall_s)
    files = {h: a["files"] for h, a in answers.items() if len(a["files"])}
    if not files:
        raise DataError(f"channel '{channel.name}': no {_what(channel.record_format)} on {', '.join(hosts)}")
    listing = ChannelListing(files)
    if channel.record_format == "image_folder":
        listing.classes = _classes(channel.name, answers)
    if channel.record_format == "parquet":
        for answer in answers.values():
            listing.row_groups.update(answer["row_groups"])
        labels = [a["max_label"] for a in answers.values() if len(a["files"])]
        listing.max_label = None if None in labels else int(max(labels))
    return listing


def _collect(channel: str, streams: dict, stall_s: float) -> dict:
    """Each host's answer from its lister's stream (`host_listing.list_on_host`), with a progress
    line; a host whose count of files stays put for `stall_s` fails the listing in one line."""
    import ray

    from smlaunch.console import Progress

    pending = {stream: host for host, stream in streams.items()}
    seen = {host: (-1, time.monotonic()) for host in streams}  # files seen, when that count last grew
    answers = {}
    with Progress(f"listing channel '{channel}'", unit="file", leave=False) as bar:
        try:
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1, timeout=min(1.0, stall_s))
                for stream in ready:
                    host = pending[stream]
                    kind, value = _next(channel, host, stream)
                    if kind == "done":
                        answers[host] = value
                        del pending[stream]
                    elif value > seen[host][0]:
                        bar.update(value - max(seen[host][0], 0))
                        seen[host] = (value, time.monotonic())
                bar.tick()
                now = time.monotonic()
                for host in pending.values():
                    if now - seen[host][1] > stall_s:
                        count = max(seen[host][0], 0)
                        raise DataError(f"channel '{channel}': listing on host {host} made no progress for "
                                        f"{stall_s:g} s ({count:,} files seen); is its channel directory on a "
                                        "mount that stopped answering, or is the host gone?")
        finally:
            for stream in pending:  # a stuck lister: end it, do not leave it blocked on its host
                try:
                    ray.cancel(stream, force=True)
                except Exception:
                    pass
    return answers


def _next(channel: str, host: str, stream):
    """The stream's next `(kind, value)`; the lister's error as one line naming channel and host."""
    import ray

    try:
        return ray.get(next(stream))
    except StopIteration:
        raise DataError(f"channel '{channel}': the listing on host {host} ended without an answer") from None
    except ray.exceptions.RayTaskError as exc:
        cause = getattr(exc, "cause", None)
        if isinstance(cause, DataError):
            text = str(cause)
            raise DataError(text if host in text else f"{text} (host {host})") from None
        lines = str(cause if cause is not None else exc).strip().splitlines()
        raise DataError(f"channel '{channel}': listing on host {host} failed: {type(cause or exc).__name__}: "
                        f"{lines[-1] if lines else ''}") from None


def _what(record_format: str) -> str:
    return {"image_folder": "images in class folders", "parquet": "Parquet files",
            "webdataset": "tar shards"}.get(record_format, "files")


def _classes(channel: str, answers: dict) -> list[str]:
    """The classes every host's images name; a class folder without an image on any host is an error."""
    imaged = {name for answer in answers.values() for name in answer["imaged"]}
    folders = {name for answer in answers.values() for name in answer["folders"]}
    empty = sorted(folders - imaged)
    if empty:
        raise DataError(f"channel '{channel}': class folder {', '.join(empty)} holds no image (extensions: jpg, "
                        "jpeg, png, ppm, bmp, pgm, tif, tiff, webp); torchvision's ImageFolder refuses it too, as it "
                        "would shift every label after it")
    return sorted(imaged)
