"""TensorBoard events while the job trains (issue 23, item 2: TensorBoardOutputConfig syncs what is
on disk, so the events must be there before the job ends), and the report's events after them."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from tensorboardX.proto.event_pb2 import Event

from smlaunch.launcher.job.train_progress import TrainProgress
from smlaunch.launcher.report.job_report import write_report
from smlaunch.launcher.report.live_events import LIVE_SUFFIX, LiveEvents
from smlaunch.pipelines.formats import iter_records
from support.constructed_runs import constructed_report


def scalars(directory: Path) -> Counter:
    """(tag, step) -> how many times it was written, over every events file in `directory`."""
    seen: Counter = Counter()
    for path in directory.glob("events.out.tfevents.*"):
        with open(path, "rb") as f:
            for record in iter_records(f, "tfrecord", str(path)):
                event = Event.FromString(record)
                seen.update((v.tag, event.step) for v in event.summary.value)
    return seen


def step(n: int) -> dict:
    return {
        "kind": "step",
        "step": n,
        "t": 1_700_000_000.0 + n,
        "epoch": 1,
        "loss": 2.0 / n,
        "step_time_s": 0.1,
        "data_wait_s": 0.01,
        "images_per_s": 320.0,
    }


def test_steps_are_on_disk_while_training_goes_on_and_the_report_adds_only_the_hosts(configs, tmp_path):
    directory = tmp_path / "output" / "data" / "tensorboard"
    progress = TrainProgress(relay=None, total_steps=100, initial_step=0, log_every=50, views=[LiveEvents(directory)])
    for n in range(1, 11):
        progress.handle(step(n))
    progress.handle({"kind": "validation", "step": 10, "epoch": 1, "accuracy": 0.5, "loss": 1.2})
    # the writer is still open (the job trains on): a validation flushes, so everything so far is readable
    live = scalars(directory)
    assert {("train/loss", n) for n in range(1, 11)} <= set(live)
    assert live[("validation/accuracy", 10)] == 1 and live[("train/data_wait_pct", 10)] == 1
    progress.views[0].close()

    report, _ = constructed_report(configs, tmp_path / "run", compute_s=0.02, wait_s=0.14, chain_s_per_row=0.01)
    write_report(report, directory.parent)
    write_report(report, directory.parent)  # rendered twice (e.g. `sm-launch report`): still no doubles
    after = scalars(directory)
    assert len(list(directory.glob(f"*{LIVE_SUFFIX}"))) == 1
    assert all(count == 1 for count in after.values()), [k for k, c in after.items() if c > 1][:5]
    assert any(tag.startswith("hosts/") for tag, _ in after)  # what only the report knows
    assert {k for k in after if k[0].startswith("train/")} == {k for k in live if k[0].startswith("train/")}


def test_without_live_events_the_report_writes_every_step(configs, tmp_path):
    report, _ = constructed_report(configs, tmp_path, compute_s=0.02, wait_s=0.14, chain_s_per_row=0.01)
    write_report(report, tmp_path / "out")
    seen = scalars(tmp_path / "out" / "tensorboard")
    assert {("train/loss", s["step"]) for s in report["steps"]} <= set(seen)


def test_a_failing_events_writer_turns_tensorboard_off_not_the_progress(tmp_path):
    class Full:
        def step(self, record):
            raise OSError(28, "No space left on device")

    progress = TrainProgress(relay=None, total_steps=10, initial_step=0, log_every=5, views=[Full()])
    progress.handle(step(1))  # no exception: the thread that passes fatal errors on must survive
    progress.handle({"kind": "fatal", "text": "bad record"})
    assert progress.views == [] and progress.fatal == {"kind": "fatal", "text": "bad record"}


def test_a_long_run_writes_a_bounded_number_of_points_each_the_mean_of_its_steps(tmp_path, monkeypatch):
    import math

    import pytest

    from smlaunch.launcher.report import live_events

    monkeypatch.setattr(live_events, "LIVE_POINTS", 8)
    events = LiveEvents(tmp_path)
    for n in range(1, 1001):
        events.step(step(n))
    events.close()
    points: dict[int, float] = {}
    for path in tmp_path.glob("events.out.tfevents.*"):
        with open(path, "rb") as f:
            for record in iter_records(f, "tfrecord", str(path)):
                event = Event.FromString(record)
                points.update((event.step, v.simple_value) for v in event.summary.value if v.tag == "train/loss")
    # 8 steps one by one, then 4 more points per doubling of the steps seen, and the last partial stride
    assert len(points) <= 8 + 4 * math.ceil(math.log2(1000 / 8)) + 1 and max(points) == 1000
    first = 0
    for last in sorted(points):
        mean = sum(2.0 / n for n in range(first + 1, last + 1)) / (last - first)
        assert points[last] == pytest.approx(mean, rel=1e-5)
        first = last
