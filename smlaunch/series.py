"""Bounded series: a run of any length keeps a fixed number of buckets, not a record per step.

A day at 10 steps/s is 864,000 step records; kept whole they made report.json hundreds of MB,
a plot with a bar per step and a TensorBoard file of millions of scalars. So records are folded
into at most `capacity` buckets of `width` consecutive records each. When the buckets overflow,
adjacent pairs merge and the width doubles (the classic fixed-size "merge on overflow"
downsampler: every bucket always covers the same number of records, except the newest, which
is filling). Each step bucket keeps count, sum, min and max per field, so means and totals are
exact (the summary's images/s is the same as from every record) and spikes stay visible as
maxima. `StepLog` also keeps the first `HEAD` records (the warm-up the summary leaves out), the
last `tail` records exactly (what a person scrolls to, what short runs and their tests read)
and per-epoch totals (the advisor's epoch length).

No library fits: `tsdownsample` and LTTB pick points from a finished array (no streaming, no
sums); pandas' resample needs every record in memory first.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

CAPACITY = 1024
"""Buckets kept: between CAPACITY / 2 and CAPACITY after the first merge; ample for a plot."""
TAIL = 2000
"""Latest step records kept exactly."""
HEAD = 5
"""First step records kept exactly: the warm-up `launcher.report.job_report` leaves out of throughput."""
FIELDS = ("loss", "step_time_s", "data_wait_s", "images_per_s", "images")
"""Per-bucket sums, minima and maxima; `images` is images_per_s x step_time_s (a step's images)."""


class Buckets:
    """Records folded into at most `capacity` buckets of `width` records each, oldest first.

    `new(record)` makes a one-record bucket (holding its count under "n"); `merge(a, b)` joins two
    adjacent buckets, a before b. Example:
        >>> b = Buckets(4, new=lambda r: {"n": 1, "s": r},
        ...             merge=lambda a, c: {"n": a["n"] + c["n"], "s": a["s"] + c["s"]})
        >>> for i in range(10): b.add(i)
        >>> [x["s"] for x in b.items], b.width
        ([6, 22, 17], 4)
    """

    def __init__(self, capacity: int, new, merge, width: int = 1, items: list | None = None):
        if capacity < 2:
            raise ValueError(f"capacity={capacity}: at least 2 buckets are needed to merge pairs")
        self.capacity, self.new, self.merge, self.width = capacity, new, merge, width
        self.items: list[dict] = list(items or [])

    def add(self, record) -> None:
        if self.items and self.items[-1]["n"] < self.width:
            self.items[-1] = self.merge(self.items[-1], self.new(record))
        else:
            self.items.append(self.new(record))
        if len(self.items) > self.capacity:
            items = self.items
            self.items = [
                self.merge(items[i], items[i + 1]) if i + 1 < len(items) else items[i] for i in range(0, len(items), 2)
            ]
            self.width *= 2


def step_bucket(record: dict) -> dict:
    values = {f: record[f] for f in FIELDS[:-1]}
    values["images"] = record["images_per_s"] * record["step_time_s"]
    return {
        "first_step": record["step"],
        "step": record["step"],
        "first_t": record.get("t"),
        "t": record.get("t"),
        "epoch": record["epoch"],
        "n": 1,
        "sum": values,
        "min": dict(values),
        "max": dict(values),
    }


def merge_steps(a: dict, b: dict) -> dict:
    return {
        "first_step": a["first_step"],
        "step": b["step"],
        "first_t": a["first_t"],
        "t": b["t"],
        "epoch": b["epoch"],
        "n": a["n"] + b["n"],
        "sum": {f: a["sum"][f] + b["sum"][f] for f in FIELDS},
        "min": {f: min(a["min"][f], b["min"][f]) for f in FIELDS},
        "max": {f: max(a["max"][f], b["max"][f]) for f in FIELDS},
    }


def bucket_mean(bucket: dict) -> dict:
    """A step bucket as one step record (means; `step` and `t` of its last step), for plots and
    TensorBoard, which draw a bucket where they drew a step."""
    n = bucket["n"]
    return {
        "step": bucket["step"],
        "t": bucket["t"],
        "epoch": bucket["epoch"],
        "loss": bucket["sum"]["loss"] / n,
        "step_time_s": bucket["sum"]["step_time_s"] / n,
        "data_wait_s": bucket["sum"]["data_wait_s"] / n,
        "images_per_s": bucket["sum"]["images_per_s"] / n,
    }


class StepLog:
    """Rank 0's record of every step of a run, in bounded memory (see the module docstring)."""

    def __init__(self, tail: int = TAIL, capacity: int = CAPACITY):
        self.count = 0
        self.head: list[dict] = []
        self.recent: deque[dict] = deque(maxlen=tail)
        self.buckets = Buckets(capacity, step_bucket, merge_steps)
        self.epochs: dict[int, dict] = {}

    def add(self, record: dict) -> None:
        self.count += 1
        if len(self.head) < HEAD:
            self.head.append(record)
        self.recent.append(record)
        self.buckets.add(record)
        totals = self.epochs.setdefault(record["epoch"], {"n": 0, "step_time_s": 0.0, "images": 0.0})
        totals["n"] += 1
        totals["step_time_s"] += record["step_time_s"]
        totals["images"] += record["images_per_s"] * record["step_time_s"]

    @property
    def last(self) -> dict | None:
        return self.recent[-1] if self.recent else None

    def to_dict(self) -> dict:
        return {
            "count": self.count,
            "width": self.buckets.width,
            "capacity": self.buckets.capacity,
            "tail": self.recent.maxlen,
            "head": self.head,
            "buckets": self.buckets.items,
            "epochs": [{"epoch": e, **t} for e, t in sorted(self.epochs.items())],
        }

    @classmethod
    def from_dict(cls, data: dict, recent: Iterable[dict] = ()) -> StepLog:
        """What `to_dict` wrote, with the exact latest records (a report's "steps") beside it."""
        log = cls(tail=data["tail"], capacity=data["capacity"])
        log.count, log.head = data["count"], list(data["head"])
        log.recent.extend(recent)
        log.buckets.width, log.buckets.items = data["width"], list(data["buckets"])
        log.epochs = {e["epoch"]: {k: v for k, v in e.items() if k != "epoch"} for e in data["epochs"]}
        return log

    @classmethod
    def from_report(cls, report: dict) -> StepLog:
        """A run's log from its report (or the trainer's result): "step_series" with the exact
        "steps" beside it, or, in one written before step series existed, "steps" alone."""
        if report.get("step_series"):
            return cls.from_dict(report["step_series"], report["steps"])
        return cls.from_steps(report["steps"])

    @classmethod
    def from_steps(cls, steps: list[dict], tail: int = TAIL) -> StepLog:
        """From plain step records (a report written before step series existed, a test's run)."""
        log = cls(tail=max(tail, len(steps)))
        for record in steps:
            log.add(record)
        return log

    def steady(self) -> dict:
        """Totals over the steps after the warm-up (`HEAD` steps; all of them in a run of at most
        2 x HEAD steps), overall and per epoch: what throughput and the advisor's rates divide."""
        cut = self.head if self.count > 2 * HEAD else []
        epochs = {e: dict(t) for e, t in self.epochs.items()}
        totals = {f: sum(b["sum"][f] for b in self.buckets.items) for f in ("step_time_s", "data_wait_s", "images")}
        totals["n"] = self.count - len(cut)
        for record in cut:
            images = record["images_per_s"] * record["step_time_s"]
            totals["step_time_s"] -= record["step_time_s"]
            totals["data_wait_s"] -= record["data_wait_s"]
            totals["images"] -= images
            e = epochs[record["epoch"]]
            e["n"] -= 1
            e["step_time_s"] -= record["step_time_s"]
            e["images"] -= images
        totals["epochs"] = {e: t for e, t in epochs.items() if t["n"] > 0}
        return totals


def merge_samples(a: dict, b: dict) -> dict:
    """Two adjacent host samples (`cluster.sampler`) as one: every number the count-weighted mean
    ("n" counts the samples folded in), per-GPU lists element by element (a GPU that NVML could not
    read, None, leaves its element to the other side)."""
    na, nb = a.get("n", 1), b.get("n", 1)
    out = {"n": na + nb}
    for key, va in a.items():
        vb = b.get(key)
        if key == "n" or vb is None:
            continue
        if isinstance(va, list):
            out[key] = [_mean2(x, na, y, nb) for x, y in zip(va, vb, strict=False)]
        else:
            out[key] = round((va * na + vb * nb) / (na + nb), 3)
    return out


def _mean2(x, nx, y, ny):
    if x is None or y is None:
        return y if x is None else x
    return round((x * nx + y * ny) / (nx + ny), 3)
