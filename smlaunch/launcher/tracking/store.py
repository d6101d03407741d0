"""The MLflow side of tracking: the one module that imports mlflow (issue 81).

`MlflowClient`, never the fluent API: the fluent run is a thread-local whose `atexit` hook marks it
FINISHED, whatever ended the process (../shared/notes/tracking.md, section 1). Every call names its
run. The client's HTTP retries default to 7 with a 120 s timeout ("~4 minutes"); a job must not wait
that on a dead server, so this process asks for `HTTP_RETRIES` and `HTTP_TIMEOUT_S` unless the user's
environment says otherwise.

What a run keeps that MLflow cannot tell: each metric's highest step it holds, as the tag
`LAST_STEP_TAG` (JSON, key -> step), written in the same `log_batch` request as the points it counts
(one request, one transaction in MLflow's SQL store). A resumed job repeats the steps since its last
checkpoint; a point at or under its metric's step is not sent again (MLflow appends a point per
call and deletes none). Per metric, since a validation at step N comes after step N's own numbers.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import time
from pathlib import Path

HTTP_RETRIES = "1"
HTTP_TIMEOUT_S = "5"
LAST_STEP_TAG = "sm-launch.last_step"
MAX_METRICS = 1000
MAX_PARAMS = 100
MAX_PARAM_VALUE = 6000
"""MLflow's limits per `log_batch` and on a param's value (`mlflow/utils/validation.py`)."""


def tracking_uri(value: str) -> str:
    """The store's URI: a bare `*.db` path becomes `sqlite:///<absolute path>`."""
    if value.startswith(("sqlite:///", "http://", "https://", "arn:")):
        return value
    return "sqlite:///" + str(Path(value).expanduser().resolve())


class MlflowStore:
    """One run of one tracking store, through `MlflowClient` with short retries."""

    def __init__(self, uri: str):
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", HTTP_RETRIES)
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", HTTP_TIMEOUT_S)
        from mlflow import MlflowClient

        for name in ("mlflow", "alembic"):  # their INFO lines (a new store's migrations) are not the job's
            logging.getLogger(name).setLevel(logging.WARNING)
        self.uri = tracking_uri(uri)
        if self.uri.startswith("arn:") and importlib.util.find_spec("sagemaker_mlflow") is None:
            raise RuntimeError(
                "a SageMaker MLflow ARN needs the sagemaker-mlflow plugin in the job's image: "
                "pip install 'smlaunch[sagemaker-mlflow]'"
            )
        if self.uri.startswith("sqlite:///"):
            Path(self.uri[len("sqlite:///") :]).parent.mkdir(parents=True, exist_ok=True)
        self.client = MlflowClient(tracking_uri=self.uri)
        self.run_id: str | None = None
        self.last_steps: dict[str, int] = {}
        self.params: dict[str, str] = {}

    def open(self, experiment: str, run_name: str, run_id: str | None, tags: dict[str, str]) -> bool:
        """Reopen `run_id` (RUNNING again) or create a run; True if it was reopened."""
        if run_id is not None:
            run = self.client.get_run(run_id)
            self.client.update_run(run_id, status="RUNNING")
            self.run_id = run_id
            self.last_steps = json.loads(run.data.tags.get(LAST_STEP_TAG, "{}"))
            self.params = dict(run.data.params)
            if tags:
                self.log(tags=tags)
            return True
        found = self.client.get_experiment_by_name(experiment)
        experiment_id = (
            found.experiment_id
            if found is not None
            else self.client.create_experiment(experiment, artifact_location=self._artifact_root(experiment))
        )
        self.run_id = self.client.create_run(experiment_id, run_name=run_name, tags=tags).info.run_id
        return False

    def log(
        self,
        metrics: list[tuple[str, float, int]] = (),  # type: ignore[assignment]
        params: dict[str, str] | None = None,
        tags: dict[str, str] | None = None,
    ) -> int:
        """Send `(key, value, step)` points above the run's last step, params not yet set (a value
        that differs from the run's becomes the tag `param_changed.<key>`: MLflow keeps a param's first
        value) and tags, in requests within MLflow's limits; the points left out as already there."""
        from mlflow.entities import Metric, Param, RunTag

        assert self.run_id is not None
        now = int(time.time() * 1000)
        fresh = [(k, v, s) for k, v, s in metrics if s > self.last_steps.get(k, -1)]
        new_params, changed = {}, {}
        for key, value in (params or {}).items():
            value = value[:MAX_PARAM_VALUE]
            if key not in self.params:
                new_params[key] = value
            elif self.params[key] != value:
                changed[f"param_changed.{key}"] = value
        fresh.sort(key=lambda point: point[2])
        for i in range(0, len(fresh), MAX_METRICS):  # each request carries the step it reaches
            chunk = fresh[i : i + MAX_METRICS]
            reached = {**self.last_steps, **{k: s for k, _, s in chunk}}
            self.client.log_batch(
                self.run_id,
                metrics=[Metric(k, float(v), now, s) for k, v, s in chunk],
                tags=[RunTag(LAST_STEP_TAG, json.dumps(reached, separators=(",", ":")))],
            )
            self.last_steps = reached
        items = list(new_params.items())
        for i in range(0, len(items), MAX_PARAMS):
            self.client.log_batch(self.run_id, params=[Param(k, v) for k, v in items[i : i + MAX_PARAMS]])
        tag_items = list({**(tags or {}), **changed}.items())
        for i in range(0, len(tag_items), MAX_PARAMS):
            self.client.log_batch(self.run_id, tags=[RunTag(k, v) for k, v in tag_items[i : i + MAX_PARAMS]])
        self.params.update(new_params)
        return len(metrics) - len(fresh)

    def _artifact_root(self, experiment: str) -> str | None:
        """A SQLite store's artifacts beside it (`<store>-artifacts/<experiment>`): MLflow's default is
        `./mlruns` under whatever folder the job ran from. A server chooses its own."""
        if not self.uri.startswith("sqlite:///"):
            return None
        db = Path(self.uri[len("sqlite:///") :])
        return (db.parent / f"{db.stem}-artifacts" / "".join(c if c.isalnum() else "_" for c in experiment)).as_uri()

    def artifact(self, path: str | Path, folder: str | None = None) -> None:
        assert self.run_id is not None
        self.client.log_artifact(self.run_id, str(path), folder)

    def terminate(self, status: str) -> None:
        """FINISHED, FAILED or KILLED, set explicitly."""
        assert self.run_id is not None
        self.client.set_terminated(self.run_id, status=status)
