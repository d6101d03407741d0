"""Your own Ray Train loop (`trainer.loop`), run as written, measured from around it.

The loop calls Ray's API and nothing of ours (`ray.train.get_dataset_shard`, `iter_torch_batches`,
`ray.train.report`, `get_checkpoint`, `get_preemption_info`). What the built-in loop measures from
inside, this module measures at the two calls every loop makes, by wrapping them in this worker
process before the loop's module is imported:

* `get_dataset_shard(name)` returns the shard behind a thin wrapper (`MeasuredShard`): its
  batches lose the chain's bookkeeping columns (id, positions, host, chain seconds), so the rows
  hold the channel's fields only and `iter_torch_batches()` works as is; their host column is
  counted first (rows by host: did the data hosts make them?); and the time the loop waits in the
  iterator's `next` is the data wait, measured where the loop takes its batches;
* `report(metrics, checkpoint=...)` goes to Ray as called; on rank 0 it also becomes a step record
  for the launcher's progress bar, metric lines and report (the loop's own `step`, else the count
  of reports; rows and data wait since the previous report).

A loop that never takes a shard or never reports still runs; its report then says so. An error in
the loop becomes one line naming the rank, the function and the loop's own frame, posted to the
launcher before Ray Train's restarts would repeat it.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from smlaunch.config.columns import BOOKKEEPING_COLUMNS


class Meter:
    """One rank's measurements of the loop: rows by host, data wait, reports."""

    def __init__(self, rank: int, world: int, host_names: tuple[str, ...], console):
        self.rank, self.world, self.hosts, self.console = rank, world, list(host_names) + ["unknown"], console
        self.lock = threading.Lock()
        self.host_rows = [0] * len(self.hosts)
        self.rows: dict[str, int] = {}  # shard name -> rows the loop took
        self.wait_s = 0.0
        self.epochs = 0  # passes over the train shard begun
        self.reports = 0
        self.step = 0
        self.since = {"t": time.perf_counter(), "rows": 0, "wait": 0.0}
        from smlaunch.series import StepLog

        self.steps = StepLog()
        self.checkpoints = 0
        self.first_batch_at: float | None = None

    def count_hosts(self, hosts) -> None:
        import numpy as np

        counts = np.bincount(
            np.clip(np.asarray(hosts, dtype=np.int64), 0, len(self.hosts) - 1), minlength=len(self.hosts)
        )
        with self.lock:
            self.host_rows = [a + int(b) for a, b in zip(self.host_rows, counts, strict=False)]

    def timed(self, iterable, name: str):
        """The batches of `iterable`, the time spent waiting for each counted as data wait."""
        if name == "train":
            self.epochs += 1
        it = iter(iterable)
        while True:
            started = time.perf_counter()
            try:
                batch = next(it)
            except StopIteration:
                return
            finally:
                self.wait_s += time.perf_counter() - started
            if self.first_batch_at is None:
                self.first_batch_at = time.time()
            self.rows[name] = self.rows.get(name, 0) + _rows(batch)
            yield batch

    def on_report(self, metrics: dict, checkpoint) -> None:
        """Rank 0: the report as a step record (every rank counts reports, so a step is the same on all)."""
        self.reports += 1
        self.checkpoints += checkpoint is not None
        given = metrics.get("step") if isinstance(metrics, dict) else None
        self.step = int(given) if isinstance(given, (int, float)) and not isinstance(given, bool) else self.reports
        if self.rank != 0:
            return
        now, rows = time.perf_counter(), self.rows.get("train", 0)
        span = max(now - self.since["t"], 1e-9)
        numbers = {
            k: float(v)
            for k, v in (metrics or {}).items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and k not in ("step", "epoch")
        }
        epoch = metrics.get("epoch") if isinstance(metrics.get("epoch"), int) else max(self.epochs, 1)
        record = {
            "step": self.step,
            "t": round(time.time(), 3),
            "epoch": epoch,
            "loss": round(numbers["loss"], 6) if "loss" in numbers else 0.0,
            "step_time_s": round(span, 5),
            "data_wait_s": round(self.wait_s - self.since["wait"], 5),
            # rank 0's rows, times the ranks: the shards are equal within a batch
            "images_per_s": round(self.world * (rows - self.since["rows"]) / span, 2),
            "metrics": numbers,
            "loop": True,
        }
        self.since = {"t": now, "rows": rows, "wait": self.wait_s}
        self.steps.add(record)
        self.console.put("step", **record)

    def close(self) -> None:
        """A loop that never reported is still timed: its whole run as one record (rank 0)."""
        if self.reports == 0 and self.rank == 0 and self.rows:
            self.on_report({}, None)
            self.reports = 0

    def rank_summary(self) -> dict:
        return {
            "rank": self.rank,
            "host_rows": dict(zip(self.hosts, self.host_rows, strict=False)),
            "rows": dict(self.rows),
            "data_wait_s": round(self.wait_s, 4),
            "reports": self.reports,
        }


def _rows(batch) -> int:
    if isinstance(batch, dict) and batch:
        first = next(iter(batch.values()))
        return len(first) if hasattr(first, "__len__") else 0
    return len(batch) if hasattr(batch, "__len__") else 0


def _strip_table(table, meter: Meter):
    """A pyarrow table without the chain's columns, its host column counted first."""
    names = table.column_names
    if "host" in names:
        meter.count_hosts(table.column("host").to_numpy())
    return table.drop_columns([c for c in BOOKKEEPING_COLUMNS if c in names])


def _strip_dict(batch: dict, meter: Meter) -> dict:
    if "host" in batch:
        meter.count_hosts(batch["host"])
    return {k: v for k, v in batch.items() if k not in BOOKKEEPING_COLUMNS}


class MeasuredShard:
    """A `DataIterator` whose batches hold only the channel's fields, timed as they are taken.
    Anything else the loop asks of it (`stats`, `materialize`, ...) is the shard's own."""

    def __init__(self, inner, name: str, meter: Meter):
        self._inner, self._name, self._meter = inner, name, meter

    def iter_torch_batches(self, *, collate_fn=None, dtypes=None, device="auto", **kwargs):
        import torch
        from ray.data.collate_fn import ArrowBatchCollateFn, DefaultCollateFn, PandasBatchCollateFn

        meter = self._meter
        if collate_fn is None:
            from ray.train.torch import get_device

            where = torch.device(get_device() if device == "auto" else device)
            collate_fn = DefaultCollateFn(dtypes=dtypes, combine_chunks=where.type == "cpu")
        elif dtypes is not None:
            raise ValueError("collate_fn cannot be used with dtypes")
        user = collate_fn

        class Stripping(ArrowBatchCollateFn):
            def __call__(self, table):
                table = _strip_table(table, meter)
                if isinstance(user, PandasBatchCollateFn):
                    return user(table.to_pandas())
                if isinstance(user, ArrowBatchCollateFn):
                    return user(table)
                return user({c: table.column(c).to_numpy(zero_copy_only=False) for c in table.column_names})  # numpy

        batches = self._inner.iter_torch_batches(collate_fn=Stripping(), device=device, **kwargs)
        return meter.timed(batches, self._name)

    def iter_batches(self, **kwargs):
        def stripped():
            for batch in self._inner.iter_batches(**kwargs):
                yield _strip_dict(batch, self._meter) if isinstance(batch, dict) else batch

        return self._meter.timed(stripped(), self._name)

    def __getattr__(self, name):
        return getattr(self._inner, name)


def _patch(meter: Meter):
    """Ray's `get_dataset_shard` and `report`, wrapped in this process; returns the undo."""
    import ray.train
    import ray.train.v2.api.train_fn_utils as fn_utils

    shard, report = fn_utils.get_dataset_shard, fn_utils.report

    def get_dataset_shard(dataset_name=None):
        return MeasuredShard(shard(dataset_name), dataset_name or "train", meter)

    def measured_report(metrics, checkpoint=None, *args, **kwargs):
        meter.on_report(metrics, checkpoint)
        return report(metrics, checkpoint, *args, **kwargs)

    # Any: both modules' functions are replaced, which their declared types do not allow.
    patched: tuple[Any, ...] = (ray.train, fn_utils)
    for module in patched:
        module.get_dataset_shard, module.report = get_dataset_shard, measured_report

    def undo() -> None:
        for module in patched:
            module.get_dataset_shard, module.report = shard, report

    return undo


def error_line(exc: BaseException, rank: int, function: str) -> str:
    """One line: the rank, the loop, the loop's own deepest frame (not Ray's or ours) and the error.
    The loop's frames are those under the folder its module was imported from (on a SageMaker host
    or a cluster, the copy the job shipped, not the folder sm-launch was started in), or under the
    code folder (`user_code.place_in_user_code`)."""
    from smlaunch.user_code import error_text, place_in_user_code

    place = place_in_user_code(exc, {"trainer.loop": function})
    where = f" at {place[1]}" if place else ""
    return f"trainer.loop {function} failed on rank {rank}{where}: {error_text(exc)}"


def run_user_loop(spec) -> dict:
    """One rank: the user's loop under the meter; rank 0 returns what the report needs."""
    import ray.train

    from smlaunch.cluster.run_relay import EventSender, send_event
    from smlaunch.user_code import resolve

    context = ray.train.get_context()
    rank, world = context.get_world_rank(), context.get_world_size()
    phase_marks = {"train_workers_up": time.time()}
    console = EventSender(enabled=rank == 0)
    meter = Meter(rank, world, spec.host_names, console)
    undo = _patch(meter)
    found = ray.train.get_checkpoint()
    if found is not None:
        console.put("note", text=f"trainer.loop: ray.train.get_checkpoint() gives {found.path} (trainer.resume)")
    try:
        returned = resolve(spec.trainer.loop, "trainer.loop")(dict(spec.trainer.loop_config))
    except Exception as exc:  # ends the job at once, unless a restart can mend it (`trainers.failures`)
        from smlaunch.trainers.failures import end_job_for

        line = error_line(exc, rank, spec.trainer.loop)
        if not end_job_for(exc, rank, lambda _: (line, True)):
            raise
        from smlaunch.errors import UserError

        raise UserError(line) from None
    finally:
        undo()
        send_event("loop_rank", wait_s=5, **meter.rank_summary())
    meter.close()
    console.flush(wait=True)
    if meter.first_batch_at:
        phase_marks["first_batch"] = meter.first_batch_at
    return {
        "steps": list(meter.steps.recent),
        "step_series": meter.steps.to_dict(),
        "validation": [],
        "final_step": meter.step,
        "epochs": meter.epochs,
        "epochs_complete": meter.epochs,
        "phase_marks": phase_marks,
        "host_rows": {},
        "loop": {"reports": meter.reports, "checkpoints": meter.checkpoints, "returned": _plain(returned)},
    }


def _plain(value):
    """The loop's return value where JSON can hold it, else its repr."""
    import json

    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return repr(value)[:200]


def keep_final_checkpoint(result, model_dir: str) -> dict:
    """Rank 0's return, and the loop's last reported checkpoint copied to the model directory
    (`/opt/ml/model` on SageMaker, which uploads it as the job's model)."""
    out = dict(result.return_value or {})
    checkpoint = result.checkpoint
    if checkpoint is not None:
        import os

        os.makedirs(model_dir, exist_ok=True)
        checkpoint.to_directory(model_dir)
        out.setdefault("loop", {})["final_checkpoint"] = checkpoint.path
    return out


def merge_rank_summaries(summaries: list[dict]) -> dict:
    """Rows by host over every rank's summary (`Meter.rank_summary`)."""
    rows: dict[str, int] = {}
    for summary in summaries:
        for host, n in summary["host_rows"].items():
            rows[host] = rows.get(host, 0) + n
    return {host: n for host, n in rows.items() if n}
