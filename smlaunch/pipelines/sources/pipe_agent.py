"""A local stand-in for SageMaker's Pipe-mode agent: feeds `<channel>_<epoch>` FIFOs.

The official tools offer no Pipe mode off SageMaker (sagemaker-tensorflow-extensions #47). This
plays the platform's part for one channel on one host: for each epoch it creates a new FIFO
`<data_dir>/<channel>_<epoch>`, waits (bounded) for a reader, streams the channel's objects into it
in order (shuffled per epoch when a seed is given, as `ShuffleConfig` does), closes it, removes
it, and goes on with the next epoch. A reader that closes early ends that epoch, as on SageMaker.
Objects come from a local folder or from S3 through boto3 (any endpoint, e.g. a local moto
server). With `ShardedByS3Key` host i of n gets every n-th object; with `FullyReplicated` every
host gets all of them. `RecordWrapperType: RecordIO` wraps each object as one RecordIO record.
`sm-launch agent` runs it alone, for any Pipe-mode program.
"""

from __future__ import annotations

import errno
import os
import random
import threading
import time
from pathlib import Path

from smlaunch.errors import DataError
from smlaunch.pipelines.formats.recordio import encode_record
from smlaunch.pipelines.sources.fifo import POLL_FIRST_S, POLL_MAX_S, fifo_path
from smlaunch.pipelines.sources.objects import ChannelObject

READER_WAIT_S = 120.0


class PipeAgent:
    """Feeds `epochs` FIFOs of one channel; run it in a thread (`start`) or in the foreground (`run`)."""

    def __init__(
        self,
        data_dir: str | os.PathLike,
        channel: str,
        objects: list[ChannelObject],
        epochs: int,
        seed: int | None = None,
        record_wrapper: str = "None",
        reader_wait_s: float = READER_WAIT_S,
    ):
        self.data_dir = Path(data_dir)
        self.channel = channel
        self.objects = objects
        self.epochs = epochs
        self.seed = seed
        self.record_wrapper = record_wrapper
        self.reader_wait_s = reader_wait_s
        self.error: BaseException | None = None
        self.bytes_written = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def order(self, epoch: int) -> list[ChannelObject]:
        objects = list(self.objects)
        if self.seed is not None:
            random.Random(self.seed * 1_000_003 + epoch).shuffle(objects)
        return objects

    def run(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        for epoch in range(self.epochs):
            if self._stop.is_set():
                return
            path = fifo_path(self.data_dir, self.channel, epoch)
            os.mkfifo(path)
            try:
                self._feed(path, epoch)
            finally:
                path.unlink(missing_ok=True)

    def _feed(self, path: Path, epoch: int) -> None:
        fd = self._open_writer(path, epoch)
        if fd is None:
            return
        try:
            for obj in self.order(epoch):
                payload = obj.read()
                if self.record_wrapper == "RecordIO":
                    payload = iter([encode_record(b"".join(payload))])
                for chunk in payload:
                    view = memoryview(chunk)
                    while view:
                        view = view[os.write(fd, view) :]
                    self.bytes_written += len(chunk)
                    if self._stop.is_set():
                        return
        except BrokenPipeError:
            pass  # the reader closed early: that epoch is over
        finally:
            os.close(fd)

    def _open_writer(self, path: Path, epoch: int) -> int | None:
        """Wait (bounded) for the reader; a FIFO's non-blocking write-open fails until one exists."""
        deadline = time.monotonic() + self.reader_wait_s
        pause = POLL_FIRST_S
        while not self._stop.is_set():
            try:
                fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
                os.set_blocking(fd, True)
                return fd
            except OSError as exc:
                if exc.errno != errno.ENXIO:
                    raise
            if time.monotonic() >= deadline:
                raise DataError(
                    f"agent: no reader opened {path} (channel '{self.channel}', epoch {epoch}) within "
                    f"{self.reader_wait_s:.0f} s"
                )
            time.sleep(pause)
            pause = min(pause * 2, POLL_MAX_S)
        return None

    def start(self) -> PipeAgent:
        def target():
            try:
                self.run()
            except BaseException as exc:  # reported by `stop`
                self.error = exc

        self._thread = threading.Thread(target=target, name=f"pipe-agent-{self.channel}", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        if self.error is not None:
            raise self.error
