"""TensorBoard events written while the job trains, not only when it ends.

The head's progress thread (`train_progress.TrainProgress`) hands every step record and validation
result here as it drains them. On SageMaker the directory is the TensorBoardOutputConfig's
LocalPath (`training_job.TENSORBOARD_LOCAL_PATH`), which the service syncs to S3 while the job
runs, so TensorBoard on the S3 URI shows the loss within seconds; locally it is the run's
`output/data/tensorboard`. The file's name ends in `.live`: the report written at the end
(`render._tensorboard`) then adds only what it alone knows (CPU/GPU per host) in a file of its
own instead of writing the steps a second time.
"""

from __future__ import annotations

import time
from pathlib import Path

LIVE_SUFFIX = ".live"
FLUSH_S = 5
"""At most this long between a step and its event reaching the file (and SageMaker's sync)."""


def wait_pct(record: dict) -> float:
    return 100 * record["data_wait_s"] / record["step_time_s"] if record["step_time_s"] else 0.0


class LiveEvents:
    """train/loss, train/images_per_s, train/data_wait_pct per step; validation/accuracy and
    validation/loss per validation; any other scalar through `scalar`.

    Written synchronously with tensorboardX's `EventsWriter` (its `SummaryWriter` queues events to a
    thread, and its flush does not wait for that queue), flushed at most `FLUSH_S` after a write
    (`flush_if_due`), at each validation and at close.
    """

    def __init__(self, directory: str | Path, suffix: str = LIVE_SUFFIX):
        from tensorboardX.event_file_writer import EventsWriter

        Path(directory).mkdir(parents=True, exist_ok=True)
        self._writer = EventsWriter(str(Path(directory) / "events"), suffix)
        self._flushed, self._dirty = time.monotonic(), False

    def scalar(self, tag: str, value: float, step: int, walltime: float | None = None) -> None:
        from tensorboardX.proto.event_pb2 import Event
        from tensorboardX.summary import scalar

        self._writer.write_event(Event(summary=scalar(tag, value), step=step, wall_time=walltime or time.time()))
        self._dirty = True
        self.flush_if_due()

    def step(self, record: dict) -> None:
        for tag, value in (("train/loss", record["loss"]), ("train/images_per_s", record["images_per_s"]),
                           ("train/data_wait_pct", wait_pct(record))):
            self.scalar(tag, value, record["step"], record.get("t"))

    def validation(self, result: dict) -> None:
        self.scalar("validation/accuracy", result["accuracy"], result["step"])
        self.scalar("validation/loss", result["loss"], result["step"])
        self.flush()

    def flush_if_due(self) -> None:
        """Flush if something was written and the last flush is `FLUSH_S` old; the progress thread
        calls this every poll, so a burst of steps before a stall is on disk within `FLUSH_S`."""
        if self._dirty and time.monotonic() - self._flushed >= FLUSH_S:
            self.flush()

    def flush(self) -> None:
        self._writer.flush()
        self._flushed, self._dirty = time.monotonic(), False

    def close(self) -> None:
        self._writer.close()
