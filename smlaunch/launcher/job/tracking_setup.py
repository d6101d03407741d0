"""The job's MLflow run from its config and plan (`tracking.mlflow`): started before training, a view
of the progress thread while it runs (`launcher.tracking.tracker`)."""

from __future__ import annotations

import os
from pathlib import Path

from smlaunch.launcher.tracking.tracker import JOURNAL, RUN_FILE, MlflowTracker, flat_params, metric_key


def start_tracking(cfg, plan, resume_from: str | None) -> MlflowTracker | None:
    """The job's MLflow run started (sending on its own thread), or None without `tracking.mlflow`."""
    mlflow = cfg.tracking.mlflow
    if mlflow is None:
        return None
    from smlaunch.config.shown import shown_config
    from smlaunch.launcher.job.plan_text import planned_precision
    from smlaunch.launcher.job.train_spec import checkpoint_dir, output_root

    run_name = mlflow.run_name or os.environ.get("TRAINING_JOB_NAME") or Path(plan.run_dir).name
    groups: dict[str, list] = {}
    for host in plan.hosts:
        groups.setdefault(host.group, []).append(host.instance_type)
    tags = {
        "system.job": cfg.job,
        "system.instance_groups": "; ".join(f"{g}: {len(t)} x {t[0]}" for g, t in groups.items()),
        "system.world_size": str(plan.train_workers),
        "system.resumed_from": resume_from or "",
        **({"sagemaker.training_job": os.environ["TRAINING_JOB_NAME"]} if os.environ.get("TRAINING_JOB_NAME") else {}),
    }
    if not cfg.trainer.loop:
        tags["system.precision"] = planned_precision(cfg, plan)[0]
    tags = {metric_key(k): v for k, v in {**tags, **mlflow.tags}.items()}
    tracker = MlflowTracker(
        mlflow,
        Path(output_root(plan)) / "output" / "data" / "tracking" / JOURNAL,
        f"{checkpoint_dir(cfg, plan).rstrip('/')}/{RUN_FILE}",
        run_name,
        resume=cfg.trainer.resume,
        log_every=cfg.trainer.log_every,
    )
    return tracker.start(flat_params(shown_config(cfg)), tags)
