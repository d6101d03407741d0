"""Where a run's start and end go: its phases, as seconds since the command started.

Users pay the start-up on every try of a config, so the report and the run's summary say what it
was spent on: the cluster coming up, the channels listed, the train workers up, the first epoch's
data asked for (before the model is built, so that Ray Data starts while the model builds), the
model built, the first batch, the first and last steps, the final validation, the report, the teardown. The
marks come from two processes, the driver and rank 0 (on a SageMaker job, on the head host too),
so they are wall-clock times (`time.time()`), and each phase is the mark less the command's own
start: the creation time of this process, which includes Python's start and smlaunch's imports.
"""

from __future__ import annotations

import time

ORDER = (
    "cluster_up",
    "listed",
    "train_workers_up",
    "data_asked",
    "model_built",
    "first_batch",
    "first_step",
    "last_step",
    "final_validation",
    "report",
    "teardown",
)
"""The marks in the order a run passes them; the driver sets `cluster_up`, `listed`, `report`
(report.json written; its plots are drawn during the teardown) and `teardown`, rank 0 the others
(`trainers.loop`)."""

WORDS = {
    "cluster_up": "cluster up",
    "listed": "listed",
    "train_workers_up": "train workers up",
    "data_asked": "data asked",
    "model_built": "model built",
    "first_batch": "first batch",
    "first_step": "first step",
    "last_step": "last step",
    "final_validation": "final validation",
    "report": "report",
    "teardown": "teardown",
}


def command_started() -> float:
    """When this process was created (`time.time()` scale): the user's command, as they timed it."""
    import psutil

    try:
        return psutil.Process().create_time()
    except (psutil.Error, OSError):  # no /proc: the job body's own start stands in for it
        return time.time()


def mark(marks: dict, name: str) -> None:
    """Record `name` now, unless it is already recorded (first batch, first step: the first one counts)."""
    marks.setdefault(name, time.time())


def phases(marks: dict, since: float) -> dict[str, float]:
    """Seconds from `since` to each mark that was recorded, in `ORDER`."""
    return {name: round(marks[name] - since, 2) for name in ORDER if name in marks}


def phase_line(phases_s: dict[str, float]) -> str:
    """One console line: `phases (s after the command): cluster up 5.1, listed 5.2, ...`."""
    return "phases (s after the command): " + ", ".join(f"{WORDS[n]} {s:.1f}" for n, s in phases_s.items())
