"""What a File, FastFile or file-system channel holds, listed on the hosts that receive it.

Listing happens once per run, before the datasets are built, on the receiving hosts themselves
(on SageMaker a GPU head may not receive a channel at all; `host_listing` is the hosts' part).
Besides the files it gathers what the trainer needs before the first step and a read task
cannot know alone:

* image folders: the class names, from every host's listing (under ShardedByS3Key a host may
  hold no image of some class, and labels must mean the same on every host);
* Parquet: each file's row groups (the unit of parallel reading), each host's rows (the sum of its
  footers' row counts: an epoch's length, which `trainer.epochs` decays the learning rate over) and
  the largest label in the column statistics, so `model.num_classes` can come from the data without
  a pass over it. Rows are kept as one int a host, not per file or row group: all the length needs.

There is no fixed timeout: 1.28 million files take seconds, a slow mount minutes. Each host
reports progress while it lists, and a listing fails only when a host makes none for `STALL_S`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from smlaunch.cluster.labels import host_selector
from smlaunch.errors import DataError
from smlaunch.pipelines.formats import CHANNEL_FORMATS

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
    rows: dict[str, int] = field(default_factory=dict)
    """Parquet: receiving host (as in `files`) -> rows in its files, from their footers."""
    classes: list[str] | None = None
    """Image folders: the sorted class names."""
    max_label: int | None = None
    """Parquet: the largest label in the statistics (None when a file has none)."""

    @property
    def num_classes(self) -> int | None:
        if self.classes is not None:
            return len(self.classes)
        return None if self.max_label is None else self.max_label + 1


def list_channel(channel, roots: dict[str, str | None], stall_s: float = STALL_S, here: bool = False) -> ChannelListing:
    """List `channel` on its hosts (under ShardedByS3Key each; else the first stands for all),
    showing progress; fails when a host's listing advances for none of `stall_s` seconds.
    `here`: the hosts' directories are on this machine (the local simulated cluster), so they are
    listed by threads of this process, which needs no cluster: a local run lists while its
    cluster starts (`launcher.local.run`)."""
    sharded = channel.distribution == "ShardedByS3Key" and channel.file_system is None
    hosts = list(channel.hosts) if sharded else [channel.hosts[0]]
    args = {h: (roots[h], channel.name, channel.record_format, channel.fields[1]) for h in hosts}
    answers = _collect(channel.name, _ThreadStreams(args) if here else _RayStreams.start(args), stall_s)
    spec = CHANNEL_FORMATS[channel.record_format]
    files = {h: a["files"] for h, a in answers.items() if len(a["files"])}
    if not files:
        raise DataError(f"channel '{channel.name}': no {spec.files} on {', '.join(hosts)}")
    listing = ChannelListing(files)
    if spec.layout == "images":
        listing.classes = _classes(channel.name, answers)
    if spec.layout == "row_groups":
        for answer in answers.values():
            listing.row_groups.update(answer["row_groups"])
        listing.rows = {h: int(answers[h]["rows"]) for h in files}
        labels = [a["max_label"] for a in answers.values() if len(a["files"])]
        listing.max_label = None if None in labels else int(max(labels))
    return listing


def _collect(channel: str, streams, stall_s: float) -> dict:
    """Each host's answer from its lister's stream (`host_listing.list_on_host`), with a progress
    line; a host whose count of files stays put for `stall_s` fails the listing in one line."""
    from smlaunch.console import Progress

    seen = {host: (-1, time.monotonic()) for host in streams.hosts}  # files seen, when that count last grew
    answers: dict[str, dict] = {}
    with Progress(f"listing channel '{channel}'", unit="file", leave=False) as bar:
        try:
            while len(answers) < len(seen):
                for host, (kind, value) in streams.events(channel, timeout_s=min(1.0, stall_s)):
                    if kind == "done":
                        answers[host] = value
                    elif value > seen[host][0]:
                        bar.update(value - max(seen[host][0], 0))
                        seen[host] = (value, time.monotonic())
                bar.tick()
                now = time.monotonic()
                for host in seen:
                    if host not in answers and now - seen[host][1] > stall_s:
                        count = max(seen[host][0], 0)
                        raise DataError(
                            f"channel '{channel}': listing on host {host} made no progress for "
                            f"{stall_s:g} s ({count:,} files seen); is its channel directory on a "
                            "mount that stopped answering, or is the host gone?"
                        )
        finally:
            streams.cancel()
    return answers


class _RayStreams:
    """Each host's lister as a Ray streaming task pinned to the host (`host_listing.list_on_host`)."""

    def __init__(self, streams: dict):
        """`streams`: host -> its lister's stream (`start`)."""
        self.hosts = list(streams)
        self.pending = {stream: host for host, stream in streams.items()}

    @classmethod
    def start(cls, args: dict[str, tuple]) -> _RayStreams:
        import ray

        from smlaunch.pipelines.sources.host_listing import list_on_host

        lister = ray.remote(list_on_host)
        return cls(
            {
                h: lister.options(
                    num_returns="streaming", num_cpus=0, max_retries=0, label_selector=host_selector(h)
                ).remote(*a)
                for h, a in args.items()
            }
        )

    def events(self, channel: str, timeout_s: float) -> list[tuple[str, tuple]]:
        """The next `(host, (kind, value))` items, waiting at most `timeout_s` for one."""
        import ray

        ready, _ = ray.wait(list(self.pending), num_returns=1, timeout=timeout_s)
        out = []
        for stream in ready:
            host = self.pending[stream]
            item = _next(channel, host, stream)
            if item[0] == "done":
                del self.pending[stream]
            out.append((host, item))
        return out

    def cancel(self) -> None:
        """End the listers still running: a stuck one must not stay blocked on its host."""
        import ray

        for stream in self.pending:
            try:
                ray.cancel(stream, force=True)
            except Exception:
                pass


class _ThreadStreams:
    """Each host's lister run by a thread of this process, on directories this machine holds."""

    def __init__(self, args: dict[str, tuple]):
        import queue
        import threading

        self.hosts = list(args)
        self.items: queue.Queue = queue.Queue()
        for host, a in args.items():
            threading.Thread(target=self._list, args=(host, a), name=f"list-{host}", daemon=True).start()

    def _list(self, host: str, args: tuple) -> None:
        from smlaunch.pipelines.sources.host_listing import list_on_host

        try:
            for item in list_on_host(*args):
                self.items.put((host, item))
        except Exception as exc:  # handed to the caller's thread, which raises it in one line
            self.items.put((host, ("error", exc)))

    def events(self, channel: str, timeout_s: float) -> list[tuple[str, tuple]]:
        import queue

        try:
            out = [self.items.get(timeout=timeout_s)]
        except queue.Empty:
            return []
        while not self.items.empty():
            out.append(self.items.get_nowait())
        for host, (kind, value) in out:
            if kind == "error":
                raise _failed(channel, host, value) from None
        return out

    def cancel(self) -> None:
        """A thread blocked on a mount cannot be ended; it is a daemon and goes with the process."""


def _next(channel: str, host: str, stream):
    """The stream's next `(kind, value)`; the lister's error as one line naming channel and host."""
    import ray

    try:
        return ray.get(next(stream))
    except StopIteration:
        raise DataError(f"channel '{channel}': the listing on host {host} ended without an answer") from None
    except ray.exceptions.RayTaskError as exc:
        cause = getattr(exc, "cause", None)
        raise _failed(channel, host, cause if cause is not None else exc) from None


def _failed(channel: str, host: str, cause: BaseException) -> DataError:
    """A lister's error as one line naming the channel and the host."""
    if isinstance(cause, DataError):
        text = str(cause)
        return DataError(text if host in text else f"{text} (host {host})")
    lines = str(cause).strip().splitlines()
    return DataError(
        f"channel '{channel}': listing on host {host} failed: {type(cause).__name__}: {lines[-1] if lines else ''}"
    )


def _classes(channel: str, answers: dict) -> list[str]:
    """The classes every host's images name; a class folder without an image on any host is an error."""
    imaged = {name for answer in answers.values() for name in answer["imaged"]}
    folders = {name for answer in answers.values() for name in answer["folders"]}
    empty = sorted(folders - imaged)
    if empty:
        raise DataError(
            f"channel '{channel}': class folder {', '.join(empty)} holds no image (extensions: jpg, "
            "jpeg, png, ppm, bmp, pgm, tif, tiff, webp); torchvision's ImageFolder refuses it too, as it "
            "would shift every label after it"
        )
    return sorted(imaged)
