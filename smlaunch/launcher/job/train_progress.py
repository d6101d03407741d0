"""The trainer's progress on the launcher's console, drawn from the relay's events.

Rank 0 posts a record per optimizer step, each validation result and its notes to the relay
(`smlaunch.cluster.run_relay`); this thread drains it twice a second and shows:

* a progress display: step / total, images/s and data wait over the last `WINDOW` steps, the
  loss, and the ETA from the recent step time (a tqdm bar on a terminal, a plain line every 30 s
  otherwise);
* the metric lines, every `trainer.log_every` steps and at step 1, in the exact form
  `sm-launch submit`'s MetricDefinitions read from a SageMaker job's stdout:
  `step=<n> loss=<x> images_per_sec=<x> data_wait_pct=<x> lr=<x> grad_norm=<x>`, and
  `validation step=<n> epoch=<n> accuracy=<x> loss=<x>`;
* notes and warnings the workers sent;
* the same scalars to its views, as they come: TensorBoard events (`live_events`) and the MLflow
  run (`tracking.tracker`), where the job has them.

Printed here, on the driver, the lines carry no Ray prefix and no colour codes, wherever stdout goes.
"""

from __future__ import annotations

import collections
import logging
import threading

from smlaunch.console import Progress
from smlaunch.launcher.report.live_events import validation_metrics

log = logging.getLogger("smlaunch.train")
POLL_S = 0.5
WINDOW = 20
"""Steps the rates on the progress display average over."""


def metric_line(record: dict) -> str:
    """The step's line; a user's loss's own numbers (`task.loss`) follow as `name=value`. Your own
    loop's (`trainer.loop`): `step=N` and what it reported, then the measured rate and data wait."""
    if record.get("loop"):
        wait = 100 * record["data_wait_s"] / record["step_time_s"] if record["step_time_s"] else 0
        return (
            f"step={record['step']} "
            + "".join(f"{k}={v:.6g} " for k, v in record["metrics"].items())
            + f"images_per_sec={record['images_per_s']:.1f} data_wait_pct={wait:.1f}"
        )
    extra = "".join(f" {name}={value:.6g}" for name, value in (record.get("metrics") or {}).items())
    if "lr" in record:  # the built-in loop's recipe: the rate the step used, the norm before clipping
        norm = record["grad_norm"]
        rates = "".join(f" lr_{name}={rate:.6g}" for name, rate in (record.get("lrs") or {}).items())
        extra = f" lr={record['lr']:.6g} grad_norm={'inf' if norm is None else f'{norm:.6g}'}{rates}" + extra
        extra += f" skipped={record['skipped_steps']}" if record.get("skipped_steps") else ""
    return (
        f"step={record['step']} loss={record['loss']:.4f} images_per_sec={record['images_per_s']:.1f} "
        f"data_wait_pct={100 * record['data_wait_s'] / record['step_time_s'] if record['step_time_s'] else 0:.1f}"
        + extra
    )


def validation_line(result: dict) -> str:
    return f"validation step={result['step']} epoch={result['epoch']} " + " ".join(
        f"{name}={value:.4f}" for name, value in validation_metrics(result).items()
    )


class _TrainBar(Progress):
    def __init__(self, total: int | None, initial: int):
        super().__init__("train", total=total, unit="step", initial=initial)
        self.recent: collections.deque = collections.deque(maxlen=WINDOW)

    def step(self, record: dict) -> None:
        self.recent.append(record)
        step_s = sum(r["step_time_s"] for r in self.recent)
        images = sum(r["images_per_s"] * r["step_time_s"] for r in self.recent)
        wait = sum(r["data_wait_s"] for r in self.recent)
        loss = f"loss {record['loss']:.3f}, " if not record.get("loop") or "loss" in record["metrics"] else ""
        self.describe(
            f"{images / step_s if step_s else 0:.0f} images/s, data wait {100 * wait / step_s if step_s else 0:.0f} %, "
            f"{loss}epoch {record['epoch']}"
        )
        self.update(record["step"] - self.n)

    def eta_s(self) -> float | None:
        if not self.total or not self.recent:
            return None
        per_step = sum(r["step_time_s"] for r in self.recent) / len(self.recent)
        return max(0, self.total - self.n) * per_step


class TrainProgress:
    """Context manager around `fit`: drains the relay on a thread until the body returns."""

    def __init__(self, relay, total_steps: int | None, initial_step: int, log_every: int, views=(), on_step=None):
        self.relay, self.log_every, self.on_step = relay, log_every, on_step
        self.views = [v for v in views if v is not None]
        """What else each step record and validation result go to, with `step`, `validation`,
        `flush_if_due` and `close`: TensorBoard's events (`live_events`), the MLflow run (`tracking`)."""
        self.bar = _TrainBar(total_steps, initial_step)
        self._stop = threading.Event()
        self._lock = threading.Lock()  # one drain at a time: the progress thread's, or the fit watcher's
        self.loop_ranks: list[dict] = []
        """Each rank's measurements of your own loop (`trainers.user_loop.Meter.rank_summary`)."""
        self.fatal: dict | None = None
        """A rank's user error (bad data, a weights file that does not fit): no restart mends it."""
        self._thread = threading.Thread(target=self._run, name="smlaunch-train-progress", daemon=True)
        self.last_step = initial_step

    def __enter__(self) -> TrainProgress:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=15)
        with self._lock:
            self._drain(final=True)
        self.bar.close()
        self._write_events("close")

    def _run(self) -> None:
        while not self._stop.wait(POLL_S):
            with self._lock:
                self._drain()
            self.bar.tick()
            self._write_events("flush_if_due")

    def posted_error(self) -> dict | None:
        """The error a rank posted (`trainers.failures`), the relay read now: the fit's watcher asks
        as the run ends, when the last drain may have come before the rank's post."""
        with self._lock:
            self._drain()
        return self.fatal

    def _write_events(self, what: str, *args) -> None:
        """Each view is a view: a failed write (a full disk) turns that one off, never the progress
        thread, which must go on passing the ranks' fatal errors to `fit`."""
        for view in list(self.views):
            try:
                getattr(view, what)(*args)
            except Exception as exc:  # any: a view
                name = getattr(view, "NAME", type(view).__name__)
                log.warning(f"{name} off for the rest of the run: {type(exc).__name__}: {exc}")
                self.views.remove(view)

    def _drain(self, final: bool = False) -> None:
        import ray

        try:
            events = ray.get(self.relay.drain.remote(), timeout=10 if not final else 30)
        except Exception as exc:  # the console misses lines; the report still has every step
            log.debug("could not read the progress relay: %s", exc)
            return
        for event in events:
            self.handle(event)

    def handle(self, event: dict) -> None:
        kind = event.get("kind")
        if kind == "step":
            self.last_step = event["step"]
            self.bar.step(event)
            if event["step"] % self.log_every == 0 or event["step"] == 1:
                log.info(metric_line(event))
            self._write_events("step", event)
            if self.on_step is not None:  # the elastic data hosts' loop (`cluster.autoscale.controller`)
                self.on_step(event)
        elif kind == "validation":
            log.info(validation_line(event))
            self._write_events("validation", event)
        elif kind == "resumed":  # also a worker group restarted after a crash: the bar steps back
            self.last_step = event["step"]
            self.bar.update(event["step"] - self.bar.n)
            log.info(event["text"])
        elif kind == "note":
            log.info(event["text"])
        elif kind == "warning":
            log.warning(event["text"])
        elif kind == "loop_rank":
            self.loop_ranks.append(event)
        elif kind == "fatal" and self.fatal is None:  # an error no restart mends: `fit` ends the job
            self.fatal = _with_traceback_logged(event)


def _with_traceback_logged(event: dict) -> dict:
    """A rank's fatal error whose traceback came with it (a bug, not bad input): the traceback goes
    to the run's log, and the line says where it is; the console gets the line alone."""
    trace = event.get("traceback")
    if not trace:
        return event
    from smlaunch.console import log_file

    log.debug("rank %s failed:\n%s", event.get("rank"), trace)
    where = log_file()
    return {**event, "text": event["text"] + (f" (traceback in {where})" if where else "")}
