"""The job's MLflow run, fed as the head's progress thread receives the steps (issue 81).

One run per job. It is created once and its id kept beside the checkpoints (`RUN_FILE`), so a
resume (a spot restart, a re-submitted job with the same checkpoint prefix) reopens it; a worker
group restarted inside the job is the same driver and the same run. Neither repeats a step: the
store sends no point at or under its metric's last step (`store.LAST_STEP_TAG`).

Tracking never blocks or breaks training. The progress thread only appends to the run folder's
journal (`journal.jsonl`, every point, param and artifact, in order) and puts the same on a
bounded queue (`QUEUE_ITEMS`): when the queue is full the item is dropped and counted, never
waited for. One thread of its own opens the run and sends. A store that cannot be reached at the
start, or fails later, ends the sending with one warning, and the job trains on untracked;
`sm-launch track --replay RUN_DIR` sends the journal afterwards. At the end the thread gets
`DRAIN_S` to send what is queued, the artifacts and the status (FINISHED, FAILED, or KILLED on a
stop), inside SageMaker's 120 s between SIGTERM and SIGKILL.

What is logged: the resolved config as dotted params (`trainer.learning_rate`), the step records'
numbers every `trainer.log_every` steps and at the last, with their global step (loss, lr, grad_norm, images_per_sec,
data_wait_pct, a user's loss numbers and loop reports), each validation's metrics as
`validation_<name>`, the system facts as tags (instance groups, world size, precision, SageMaker
job), and at the end report.json, the report's plots and, with `log_model`, model.pt.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import threading
import time
from pathlib import Path

log = logging.getLogger("smlaunch")
QUEUE_ITEMS = 10_000
"""Items (a step's points, a validation's, a batch of params) waiting to be sent: hours of steps
at `trainer.log_every`, and a few MB at most."""
DRAIN_S = 10.0
BATCH_S = 1.0
"""The sender gathers what came within this long into one request."""
RUN_FILE = "mlflow_run.json"
JOURNAL = "journal.jsonl"
STEP_KEYS = {"loss": "loss", "lr": "lr", "grad_norm": "grad_norm", "images_per_s": "images_per_sec"}


def metric_key(name: str) -> str:
    """A metric, param or tag key MLflow takes: alphanumerics, `_ - . :` and spaces. MLflow allows `/`
    too, but not where the key would change as a path (`run.s3_seed.s3://bucket/`, a key of a dict in
    the config, has `//` and a trailing `/`), and a refused key fails its whole request."""
    return "".join(c if c.isalnum() or c in "_-.: " else "_" for c in str(name))[:250]


def flat_params(tree, prefix: str = "") -> dict[str, str]:
    """The config as dotted keys (`trainer.learning_rate`, `pipeline.ops.0.name`) and string values."""
    items: list[tuple]
    if isinstance(tree, dict):
        items = list(tree.items())
    elif isinstance(tree, list):
        items = list(enumerate(tree))
    else:
        return {prefix: json.dumps(tree) if not isinstance(tree, str) else tree}
    out: dict[str, str] = {}
    for key, value in items:
        out.update(flat_params(value, f"{prefix}.{metric_key(str(key))}" if prefix else metric_key(str(key))))
    return out


def step_points(record: dict) -> list[tuple[str, float, int]]:
    """A step record's numbers as `(key, value, step)`."""
    step = int(record["step"])
    values = {name: record[field] for field, name in STEP_KEYS.items() if record.get(field) is not None}
    if record.get("step_time_s"):
        values["data_wait_pct"] = 100 * record["data_wait_s"] / record["step_time_s"]
    values.update({f"lr_{name}": rate for name, rate in (record.get("lrs") or {}).items()})
    values.update(record.get("metrics") or {})
    return [(metric_key(k), float(v), step) for k, v in values.items() if isinstance(v, (int, float))]


def validation_points(result: dict) -> list[tuple[str, float, int]]:
    from smlaunch.launcher.report.live_events import validation_metrics

    step = int(result["step"])
    return [(metric_key(f"validation_{k}"), float(v), step) for k, v in validation_metrics(result).items()]


class Journal:
    """The run folder's record of what was tracked, in order: what `track --replay` sends."""

    def __init__(self, path: Path):
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115 - kept open for the run
        self._lock = threading.Lock()  # the progress thread writes, and the sender its run's id

    def write(self, kind: str, **fields) -> None:
        line = json.dumps({"kind": kind, **fields}, separators=(",", ":")) + "\n"
        with self._lock:
            if not self._file.closed:  # a sender still opening the run when the job ended: nothing to add
                self._file.write(line)
                self._file.flush()

    def close(self) -> None:
        with self._lock:
            self._file.close()


class MlflowTracker:
    """A view of the progress thread (`step`, `validation`, `flush_if_due`, `close`) that feeds the
    MLflow run through a bounded queue and a thread of its own."""

    NAME = "MLflow tracking"

    def __init__(self, cfg, journal: Path, run_file: str, run_name: str, resume: bool, log_every: int):
        self.cfg, self.run_file, self.run_name, self.resume = cfg, run_file, run_name, resume
        self.log_every = log_every
        self.journal = Journal(journal)
        self.queue: queue.Queue = queue.Queue(maxsize=QUEUE_ITEMS)
        self.dropped = 0
        self.sent = 0
        self.off = threading.Event()
        """Set once sending failed: the journal alone records from then."""
        self.run_id: str | None = None
        self._last: dict | None = None
        self._thread = threading.Thread(target=self._send, name="smlaunch-mlflow", daemon=True)

    def start(self, params: dict[str, str], tags: dict[str, str]) -> MlflowTracker:
        self.journal.write("start", uri=self.cfg.uri, experiment=self.cfg.experiment, run_name=self.run_name)
        self._put("params", params=params, tags=tags)
        self._thread.start()
        return self

    # the progress thread's view
    def step(self, record: dict) -> None:
        logged = record["step"] % self.log_every == 0 or record["step"] == 1
        if logged:
            self._put("points", points=step_points(record))
        self._last = None if logged else record  # the run's last step is logged at its end, whatever its number

    def validation(self, result: dict) -> None:
        self._put("points", points=validation_points(result))

    def flush_if_due(self) -> None:
        """Nothing to flush here: the sender's thread sends within `BATCH_S` of each item."""

    def close(self) -> None:
        """The run ends at `finish`, once the report and its plots are written, not when the steps do."""

    def _put(self, kind: str, **fields) -> None:
        self.journal.write(kind, **fields)
        if self.off.is_set():
            return
        try:
            self.queue.put_nowait((kind, fields))
        except queue.Full:
            self.dropped += 1

    def finish(self, status: str, artifacts: list[Path], deadline_s: float = DRAIN_S) -> None:
        """Send what is queued, the artifacts and `status` within `deadline_s`; what is left is in
        the journal, and one line says how to send it."""
        if self._last is not None:
            self._put("points", points=step_points(self._last))
        for path in artifacts:
            self.journal.write("artifact", path=str(path))
        self.journal.write("end", status=status)
        if not self.off.is_set():
            try:
                self.queue.put(("end", {"status": status, "artifacts": [str(p) for p in artifacts]}), timeout=1)
            except queue.Full:
                self.dropped += 1
        self._thread.join(timeout=deadline_s)
        left = self._thread.is_alive()
        if left and not self.off.is_set():
            log.warning(
                f"tracking: the MLflow run did not take everything within {deadline_s:g} s "
                f"({self.queue.qsize()} items left); `sm-launch track --replay {self.journal.path}` sends them"
            )
        if self.dropped:
            log.warning(
                f"tracking: {self.dropped} items dropped from the full queue (the store was slower than the "
                f"steps); the journal has them: `sm-launch track --replay {self.journal.path}`"
            )
        self.journal.close()

    # the sender
    def _send(self) -> None:
        from smlaunch.launcher.tracking.store import MlflowStore

        try:
            store = MlflowStore(self.cfg.uri)
            kept = _read_run_file(self.run_file) if self.resume else None
            reopened = store.open(self.cfg.experiment, self.run_name, kept, dict(self.cfg.tags))
            self.run_id = store.run_id
            if not reopened:
                _write_run_file(self.run_file, {"run_id": store.run_id, "uri": store.uri})
            self.journal.write("run", run_id=store.run_id, reopened=reopened)
            log.info(
                f"tracking: MLflow run {store.run_id} ({'reopened' if reopened else 'new'}) in experiment "
                f"{self.cfg.experiment!r} at {store.uri}"
            )
        except Exception as exc:  # any: the job trains on untracked
            return self._fail("could not open the run", exc)
        while True:
            kind, fields = self.queue.get()
            batch: list[tuple[str, dict]] = [(kind, fields)]
            until = time.monotonic() + BATCH_S
            while kind != "end" and time.monotonic() < until:
                try:
                    kind, fields = self.queue.get(timeout=max(0.0, until - time.monotonic()))
                except queue.Empty:
                    break
                batch.append((kind, fields))
            try:
                ended = _deliver(store, batch, self.cfg.log_model)
            except Exception as exc:  # any: the job trains on untracked
                return self._fail("a request failed", exc)
            self.sent += len(batch)
            if ended:
                return

    def _fail(self, what: str, exc: Exception) -> None:
        self.off.set()
        message = " ".join(str(exc).split())[:300]
        log.warning(
            f"tracking: MLflow at {self.cfg.uri}: {what} ({type(exc).__name__}: {message}); training goes on "
            f"untracked, and `sm-launch track --replay {self.journal.path}` sends the run later"
        )
        while not self.queue.empty():  # nothing more is sent: free the queue
            self.queue.get_nowait()


def _deliver(store, batch: list[tuple[str, dict]], log_model: bool) -> bool:
    """One gathered batch to the store; True once it held the end."""
    points, params, tags, end = [], {}, {}, None
    for kind, fields in batch:
        if kind == "points":
            points += [tuple(p) for p in fields["points"]]
        elif kind == "params":
            params.update(fields["params"])
            tags.update(fields["tags"])
        elif kind == "end":
            end = fields
    store.log(points, params, tags)
    if end is None:
        return False
    for path in map(Path, end["artifacts"]):
        if path.name == "model.pt" and not log_model:
            continue
        if path.exists():
            store.artifact(path, "model" if path.name == "model.pt" else None)
    store.terminate(end["status"])
    return True


def _read_run_file(where: str) -> str | None:
    text = _read_text(where)
    return json.loads(text).get("run_id") if text else None


def _write_run_file(where: str, value: dict) -> None:
    text = json.dumps(value)
    if where.startswith("s3://"):
        bucket, key = where[len("s3://") :].split("/", 1)
        from smlaunch.pipelines.s3_client import s3_client

        s3_client().put_object(Bucket=bucket, Key=key, Body=text.encode())
        return
    Path(where).parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(f"{where}.tmp{os.getpid()}")
    tmp.write_text(text)
    tmp.replace(where)


def _read_text(where: str) -> str | None:
    if where.startswith("s3://"):
        bucket, key = where[len("s3://") :].split("/", 1)
        from smlaunch.pipelines.s3_client import s3_client

        try:
            return s3_client().get_object(Bucket=bucket, Key=key)["Body"].read().decode()
        except Exception:  # absent: a new run
            return None
    path = Path(where)
    return path.read_text() if path.is_file() else None
