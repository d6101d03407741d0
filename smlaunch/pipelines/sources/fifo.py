"""SageMaker Pipe mode, reader side: one FIFO per channel per epoch, read once, in order.

SageMaker (or `pipelines.agent` locally) creates `/opt/ml/input/data/<channel>_<epoch>` and
writes that epoch's data into it; the reader opens `<channel>_0`, reads to the end (or closes
early), then opens `<channel>_1`, and so on (../shared/notes/sagemaker.md §5). A FIFO has one
reader and no seek. Waits are bounded: the FIFO must appear, and a writer must connect, within
`timeout_s`; otherwise the error names the FIFO. The open does not block: the FIFO is opened
non-blocking and `poll` waits for the writer (Linux reports nothing on a FIFO no writer has
opened yet), then the descriptor is made blocking for the reads.
"""

from __future__ import annotations

import fcntl
import os
import select
import stat
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from smlaunch.errors import DataError

DEFAULT_TIMEOUT_S = 120.0
READ_BUFFER = 1 << 20
POLL_FIRST_S, POLL_MAX_S = 0.001, 0.05
"""Waiting for a FIFO: poll fast at first (it usually appears within milliseconds), then back off."""


def fifo_path(data_dir: str | os.PathLike, channel: str, epoch: int | str) -> Path:
    """The FIFO of `channel`'s `epoch` (a placeholder such as "<epoch>" in a message where it is unknown)."""
    return Path(data_dir) / f"{channel}_{epoch}"


@contextmanager
def open_epoch(
    data_dir: str | os.PathLike, channel: str, epoch: int, timeout_s: float = DEFAULT_TIMEOUT_S
) -> Iterator[BinaryIO]:
    """The epoch's FIFO opened for reading, once a writer is connected; closed on exit."""
    path = fifo_path(data_dir, channel, epoch)
    deadline = time.monotonic() + timeout_s
    pause = POLL_FIRST_S
    while not path.exists():
        if time.monotonic() >= deadline:
            raise DataError(
                f"channel '{channel}': Pipe-mode FIFO {path} for epoch {epoch} did not appear within {timeout_s:.0f} s"
            )
        time.sleep(pause)
        pause = min(pause * 2, POLL_MAX_S)
    if not stat.S_ISFIFO(path.stat().st_mode):
        raise DataError(f"channel '{channel}': {path} is not a FIFO; is the channel in File mode rather than Pipe?")
    with open_fifo(
        path, deadline, f"channel '{channel}': no writer connected to {path} (epoch {epoch}) within {timeout_s:.0f} s"
    ) as stream:
        yield stream


@contextmanager
def open_fifo(path: str | os.PathLike, deadline: float, timeout_message: str) -> Iterator[BinaryIO]:
    """A FIFO opened for reading once a writer connects, `DataError(timeout_message)` if none has by
    `deadline` (time.monotonic); closed on exit."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        if not poller.poll(max(0.0, deadline - time.monotonic()) * 1000):
            raise DataError(timeout_message)
        os.set_blocking(fd, True)
        _grow_pipe(fd)
        stream = os.fdopen(fd, "rb", buffering=READ_BUFFER)
    except BaseException:
        os.close(fd)
        raise
    with stream:
        yield stream


def _grow_pipe(fd: int) -> None:
    """Ask for a 1 MiB pipe buffer (Linux F_SETPIPE_SZ; the default 64 KiB means a context switch
    per 64 KiB); refused above /proc/sys/fs/pipe-max-size, which is harmless."""
    try:
        fcntl.fcntl(fd, getattr(fcntl, "F_SETPIPE_SZ", 1031), READ_BUFFER)
    except OSError:
        pass


class PipeEpochs:
    """Epoch after epoch of one channel on this host: epoch N+1 opens only after N closed."""

    def __init__(
        self, data_dir: str | os.PathLike, channel: str, first_epoch: int = 0, timeout_s: float = DEFAULT_TIMEOUT_S
    ):
        self.data_dir = data_dir
        self.channel = channel
        self.next_epoch = first_epoch
        self.timeout_s = timeout_s
        self._open = False

    @contextmanager
    def next(self) -> Iterator[BinaryIO]:
        if self._open:
            raise RuntimeError(f"channel '{self.channel}': epoch {self.next_epoch} is still open")
        self._open = True
        try:
            with open_epoch(self.data_dir, self.channel, self.next_epoch, self.timeout_s) as stream:
                try:
                    yield stream
                finally:  # consumed, fully or not: SageMaker moves on to the next FIFO
                    self.next_epoch += 1
        finally:
            self._open = False
