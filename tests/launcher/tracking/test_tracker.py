"""The job's MLflow run against a real SQLite store, read back with MLflow's own client (issue 81):
one run, dotted params, a loss history with one point per step, the validation's metrics, the
artifacts, the status; a resume reopens the run and repeats no step; a store that cannot be reached
costs the job nothing, and the journal sends the run later."""

import json
import logging
import socket
import threading

import pytest
from mlflow import MlflowClient

from smlaunch.config.tracking import MlflowConfig
from smlaunch.launcher.tracking import tracker as tracking
from smlaunch.launcher.tracking.replay import replay
from smlaunch.launcher.tracking.tracker import MlflowTracker, flat_params


def record(step: int, loss: float) -> dict:
    return {
        "step": step,
        "epoch": 0,
        "loss": loss,
        "images_per_s": 100.0,
        "step_time_s": 0.5,
        "data_wait_s": 0.05,
        "lr": 1e-3,
        "grad_norm": float("inf"),
        "metrics": {"mae": loss / 2},
    }


def job(tmp_path, uri: str, steps, resume: bool = False, status: str = "FINISHED") -> MlflowTracker:
    """A job's tracking as `run_job` drives it: params, then steps and a validation, then the end."""
    cfg = MlflowConfig(uri=uri, experiment="exp", tags={"team": "vision"})
    run = MlflowTracker(
        cfg, tmp_path / "out/tracking/journal.jsonl", str(tmp_path / "ckpt/mlflow_run.json"), "job-1", resume, 1
    )
    run.start(
        flat_params(
            {
                "trainer": {"learning_rate": 0.01, "steps": 6},
                "pipeline": {"ops": [{"name": "resize"}]},
                "run": {"s3_seed": {"s3://bucket/": "builtin:digits"}},  # a key MLflow would refuse as it is
            }
        ),
        {"system.world_size": "2"},
    )
    for n in steps:
        run.step(record(n, 1.0 / n))
    run.validation({"kind": "validation", "step": steps[-1], "epoch": 0, "accuracy": 0.5, "loss": 0.25})
    report = tmp_path / "out/report.json"
    report.write_text("{}")
    run.finish(status, [report, tmp_path / "out/model/model.pt"])
    return run


def test_a_job_is_one_run_with_dotted_params_each_step_once_and_a_resume_reopens_it(tmp_path):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    first = job(tmp_path, uri, [1, 2, 3, 4], status="KILLED")  # a spot stop at step 4, its checkpoint at 2
    second = job(tmp_path, uri, [3, 4, 5, 6], resume=True)  # resumed from step 2: steps 3 and 4 again
    assert first.run_id == second.run_id and not first.dropped and not second.dropped
    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("exp").experiment_id])
    assert len(runs) == 1
    run = runs[0]
    assert run.info.status == "FINISHED" and run.info.run_name == "job-1"
    assert run.data.params["trainer.learning_rate"] == "0.01" and run.data.params["pipeline.ops.0.name"] == "resize"
    assert run.data.params["run.s3_seed.s3:__bucket_"] == "builtin:digits"
    assert run.data.tags["team"] == "vision" and run.data.tags["system.world_size"] == "2"
    losses = client.get_metric_history(run.info.run_id, "loss")
    assert [m.step for m in losses] == [1, 2, 3, 4, 5, 6]  # strictly increasing: none twice
    assert [m.value for m in losses][-1] == pytest.approx(1 / 6)
    assert [m.step for m in client.get_metric_history(run.info.run_id, "mae")] == [1, 2, 3, 4, 5, 6]
    validation = client.get_metric_history(run.info.run_id, "validation_accuracy")
    assert [(m.step, m.value) for m in validation] == [(4, 0.5), (6, 0.5)]  # at step 4 once, though 4 came twice
    assert client.get_metric_history(run.info.run_id, "data_wait_pct")[0].value == pytest.approx(10.0)
    assert [a.path for a in client.list_artifacts(run.info.run_id)] == ["report.json"]  # model.pt: log_model off
    assert (tmp_path / f"mlflow-artifacts/exp/{run.info.run_id}/artifacts/report.json").is_file()  # beside the store
    assert json.loads((tmp_path / "ckpt/mlflow_run.json").read_text())["run_id"] == run.info.run_id


def test_an_unreachable_store_costs_the_job_one_warning_and_replay_sends_the_run_later(tmp_path, caplog):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with caplog.at_level(logging.WARNING, logger="smlaunch"):
        run = job(tmp_path, f"http://127.0.0.1:{port}", [1, 2, 3])
    warnings = [r.getMessage() for r in caplog.records if "tracking:" in r.getMessage()]
    assert len(warnings) == 1 and "training goes on untracked" in warnings[0] and "track --replay" in warnings[0]
    assert run.off.is_set() and run.run_id is None
    uri = f"sqlite:///{tmp_path}/later.db"
    sent = replay(str(tmp_path / "out"), uri)
    assert sent["points"] > 0 and sent["skipped"] == 0 and sent["status"] == "FINISHED"
    client = MlflowClient(uri)
    assert [m.step for m in client.get_metric_history(sent["run_id"], "loss")] == [1, 2, 3]
    assert client.get_run(sent["run_id"]).data.params["trainer.steps"] == "6"
    again = replay(str(tmp_path / "out"), uri)  # the same run again: nothing twice
    assert again["run_id"] == sent["run_id"] and again["points"] == 0
    assert [m.step for m in client.get_metric_history(sent["run_id"], "loss")] == [1, 2, 3]


def test_a_users_loop_reports_are_tracked_as_the_built_in_loops_numbers_are():
    from smlaunch.launcher.tracking.tracker import step_points

    loop = {
        "step": 5,
        "loop": True,
        "metrics": {"acc": 0.5, "epoch": 1},
        "images_per_s": 10.0,
        "step_time_s": 1.0,
        "data_wait_s": 0.1,
    }
    assert sorted(step_points(loop)) == [
        ("acc", 0.5, 5),
        ("data_wait_pct", 10.0, 5),
        ("epoch", 1.0, 5),
        ("images_per_sec", 10.0, 5),
    ]


def test_a_full_queue_drops_and_counts_never_waits(tmp_path, monkeypatch):
    monkeypatch.setattr(tracking, "QUEUE_ITEMS", 3)
    held = threading.Event()
    monkeypatch.setattr(tracking.MlflowTracker, "_send", lambda self: held.wait(30))  # a store that hangs
    cfg = MlflowConfig(uri=f"sqlite:///{tmp_path}/m.db")
    run = MlflowTracker(cfg, tmp_path / "j.jsonl", str(tmp_path / "id.json"), "r", False, 1).start({}, {})
    for n in range(1, 11):
        run.step(record(n, 1.0))  # returns at once: the queue is full from the third
    assert run.dropped == 8 and run.queue.qsize() == 3
    lines = (tmp_path / "j.jsonl").read_text().splitlines()
    assert sum('"kind":"points"' in line for line in lines) == 10  # the journal has every one
    held.set()


def test_the_plan_says_where_the_run_goes_and_an_arn_without_its_plugin_is_one_warning(configs, tmp_path, caplog):
    from smlaunch.config import load_config
    from smlaunch.launcher.job.plan_text import tracking_line

    arn = "arn:aws:sagemaker:us-east-1:111122223333:mlflow-tracking-server/team"
    cfg = load_config(configs / "tiny.yaml", [f"tracking.mlflow.uri={arn}"])
    assert tracking_line(cfg) == (
        f"tracking: MLflow at {arn}, experiment 'smlaunch', the run named after the job; a resume reopens it (its "
        "id beside the checkpoints); the image needs pip install 'smlaunch[sagemaker-mlflow]'"
    )
    with caplog.at_level(logging.WARNING, logger="smlaunch"):
        run = job(tmp_path, arn, [1, 2])
    (line,) = [r.getMessage() for r in caplog.records if "tracking:" in r.getMessage()]
    assert "needs the sagemaker-mlflow plugin" in line and run.off.is_set()
    with pytest.raises(Exception, match="a local store is a SQLite file"):
        load_config(configs / "tiny.yaml", ["tracking.mlflow.uri=runs/mlruns"])
