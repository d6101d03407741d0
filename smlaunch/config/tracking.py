"""The `tracking:` section: the job's MLflow run (issue 81, `launcher.tracking`)."""

from __future__ import annotations

import re

from pydantic import Field, field_validator

from smlaunch.config.base import StrictModel

SAGEMAKER_MLFLOW_ARN = re.compile(r"^arn:aws[a-z\-]*:sagemaker:[a-z0-9\-]+:\d{12}:mlflow-(tracking-server|app)/\S+$")


class MlflowConfig(StrictModel):
    """Where the run is tracked and what it is called (`docs/tracking.md`)."""

    uri: str = Field(min_length=1)
    """The tracking store: a SQLite file (`runs/mlflow.db`, or `sqlite:///abs/path.db`), an MLflow
    server (`http(s)://host:5000`), or a SageMaker managed MLflow tracking server's ARN (the job's
    image needs `pip install smlaunch[sagemaker-mlflow]`). A relative path is from where sm-launch
    runs."""
    experiment: str = Field(default="smlaunch", min_length=1, max_length=250)
    """The MLflow experiment, created if missing."""
    run_name: str | None = Field(default=None, max_length=250)
    """The run's name; default: the job's (a SageMaker job's name, else `<job>-<timestamp>`). A resume
    reopens the run by its id, kept beside the checkpoints, never by its name."""
    tags: dict[str, str] = {}
    """Tags on the run (last write wins on a resume)."""
    log_model: bool = False
    """Upload `model.pt` as an artifact when the job ends."""

    @field_validator("uri")
    @classmethod
    def _uri(cls, value: str) -> str:
        if value.startswith(("sqlite:///", "http://", "https://")) or SAGEMAKER_MLFLOW_ARN.match(value):
            return value
        if value.startswith("arn:"):
            raise ValueError(
                f"{value!r}: not a SageMaker MLflow ARN "
                "(arn:aws:sagemaker:<region>:<account>:mlflow-tracking-server/<name>)"
            )
        if "://" in value or value.startswith("file:"):
            raise ValueError(
                f"{value!r}: expected a SQLite file (runs/mlflow.db, sqlite:///...), an http(s):// server or "
                "a SageMaker MLflow ARN (MLflow's file store is deprecated and refused by MLflow 3.13 on)"
            )
        if not value.endswith((".db", ".sqlite", ".sqlite3")):
            raise ValueError(f"{value!r}: a local store is a SQLite file: name it *.db (e.g. runs/mlflow.db)")
        return value


class TrackingConfig(StrictModel):
    mlflow: MlflowConfig | None = None
    """One MLflow run per job: the config as dotted params, step and validation metrics with their
    global step, the report and plots as artifacts; resumed runs reopen it (`docs/tracking.md`)."""
