"""TensorBoard events written while the job trains, not only when it ends.

The head's progress thread (`train_progress.TrainProgress`) hands every step record and validation
result here as it drains them. On SageMaker the directory is the TensorBoardOutputConfig's
LocalPath (`training_job.TENSORBOARD_LOCAL_PATH`), which the service syncs to S3 while the job
runs, so TensorBoard on the S3 URI shows the loss within seconds; locally it is the run's
`output/data/tensorboard`. The file's name ends in `.live`: the report written at the end
(`render._tensorboard`) then adds only what it alone knows (CPU/GPU per host) in a file of its
own instead of writing the steps a second time.

A day at 10 steps/s would be 2.6 million scalars in the live file (about 150 MB), so past
`LIVE_POINTS` steps a point stands for the mean of `stride` steps, the stride doubling each time
the steps seen double: `LIVE_POINTS / 2` more points per doubling, about 20,000 points for a day.
"""

from __future__ import annotations

import time
from pathlib import Path

LIVE_SUFFIX = ".live"
FLUSH_S = 5
"""At most this long between a step and its event reaching the file (and SageMaker's sync)."""
LIVE_POINTS = 4096
"""Steps the live file holds one by one before it holds means of 2, 4, 8, ... steps."""


def wait_pct(record: dict) -> float:
    return 100 * record["data_wait_s"] / record["step_time_s"] if record["step_time_s"] else 0.0


class LiveEvents:
    """train/loss, train/images_per_s, train/data_wait_pct per step; validation/accuracy and
    validation/loss per validation; any other scalar through `scalar`.

    Written synchronously with tensorboardX's `EventsWriter` (its `SummaryWriter` queues events to a
    thread, and its flush does not wait for that queue), flushed at most `FLUSH_S` after a write
    (`flush_if_due`), at each validation and at close.
    """

    NAME = "TensorBoard events"

    def __init__(self, directory: str | Path, suffix: str = LIVE_SUFFIX, thin: bool | None = None):
        from tensorboardX.event_file_writer import EventsWriter

        Path(directory).mkdir(parents=True, exist_ok=True)
        self._writer = EventsWriter(str(Path(directory) / "events"), suffix)
        self._flushed, self._dirty = time.monotonic(), False
        self._thin = suffix == LIVE_SUFFIX if thin is None else thin  # the report's file is bounded already
        self._seen = 0
        self._pending: dict | None = None

    def scalar(self, tag: str, value: float, step: int, walltime: float | None = None) -> None:
        from tensorboardX.proto.event_pb2 import Event
        from tensorboardX.summary import scalar

        self._writer.write_event(Event(summary=scalar(tag, value), step=step, wall_time=walltime or time.time()))
        self._dirty = True
        self.flush_if_due()

    def step(self, record: dict) -> None:
        """A step's scalars; on a thinned (live) file, a point once `stride` steps are in."""
        if self._thin:
            from smlaunch.series import bucket_mean, merge_steps, step_bucket

            self._seen += 1
            stride = 1 << ((self._seen - 1) // LIVE_POINTS).bit_length()
            bucket = step_bucket(record)
            pending = bucket if self._pending is None else merge_steps(self._pending, bucket)
            if pending["n"] < stride:
                self._pending = pending
                return
            record, self._pending = bucket_mean(pending), None
        self._write_step(record)

    def _write_step(self, record: dict) -> None:
        loss = () if record.get("loop") else (("train/loss", record["loss"]),)  # a loop's loss is in its metrics
        for tag, value in (
            *loss,
            ("train/images_per_s", record["images_per_s"]),
            ("train/data_wait_pct", wait_pct(record)),
            *((f"train/{name}", value) for name, value in (record.get("metrics") or {}).items()),
        ):
            self.scalar(tag, value, record["step"], record.get("t"))

    def validation(self, result: dict) -> None:
        for name, value in validation_metrics(result).items():
            self.scalar(f"validation/{name}", value, result["step"])
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
        """Closes the file, with the steps of a stride not yet full as one last point."""
        from smlaunch.series import bucket_mean

        if self._pending is not None:
            self._write_step(bucket_mean(self._pending))
            self._pending = None
        self._writer.close()


NOT_METRICS = ("kind", "step", "epoch", "rows", "t")


def validation_metrics(result: dict) -> dict:
    """A validation result's metrics (classification: accuracy, loss; a user's: what `task.evaluate` returns)."""
    return {k: v for k, v in result.items() if k not in NOT_METRICS and isinstance(v, (int, float))}
