"""After submit (issue 23, item 4): `sm-launch status`, `stop`, `logs [--follow]` and `report --job`
against moto's SageMaker, CloudWatch Logs and S3 on 127.0.0.1.

Moto runs in this process here, because its SageMaker has no StopTrainingJob and keeps every job
`Completed`: the stand-in gets a StopTrainingJob that does what the service does first (the job
goes to `Stopping`), and a test moves a job's status as the service would."""

from __future__ import annotations

import io
import json
import tarfile
import time

import boto3
import pytest
import requests

from smlaunch.launcher.cli import main
from smlaunch.launcher.sagemaker import job_client
from smlaunch.pipelines.sources.local_s3 import LocalS3
from support.constructed_runs import constructed_report
from support.ports import free_port

JOB = "hetero-1"


@pytest.fixture
def cloud(monkeypatch):
    from moto.core.responses import EmptyResult
    from moto.sagemaker.responses import SageMakerResponse
    from moto.server import ThreadedMotoServer

    def stop_training_job(self):
        job = self.sagemaker_backend.training_jobs[self._get_param("TrainingJobName")]
        job.training_job_status = job.secondary_status = "Stopping"
        return EmptyResult()

    monkeypatch.setattr(SageMakerResponse, "stop_training_job", stop_training_job, raising=False)
    port = free_port()
    server = ThreadedMotoServer("127.0.0.1", port, verbose=False)
    server.start()
    requests.post(f"http://127.0.0.1:{port}/moto-api/reset", timeout=10)  # moto's state is per process
    for key, value in LocalS3.environment().items():
        monkeypatch.setenv(key, value) if value is not None else monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    sagemaker = boto3.client("sagemaker")
    sagemaker.create_training_job(
        TrainingJobName=JOB,
        AlgorithmSpecification={"TrainingImage": "image", "TrainingInputMode": "File"},
        RoleArn="arn:aws:iam::123456789012:role/sm",
        OutputDataConfig={"S3OutputPath": "s3://out-bucket/jobs/"},
        ResourceConfig={"InstanceCount": 2, "InstanceType": "ml.g5.xlarge", "VolumeSizeInGB": 30},
        StoppingCondition={"MaxRuntimeInSeconds": 3600},
    )
    from moto.sagemaker.models import sagemaker_backends

    job = sagemaker_backends["123456789012"]["us-east-1"].training_jobs[JOB]
    job.training_job_status, job.secondary_status = "InProgress", "Training"
    logs = boto3.client("logs")
    logs.create_log_group(logGroupName=job_client.LOG_GROUP)
    for host in ("algo-1", "algo-2"):
        logs.create_log_stream(logGroupName=job_client.LOG_GROUP, logStreamName=f"{JOB}/{host}-1763900000")
    yield job, logs
    server.stop()


NOW_MS = int(time.time() * 1000)  # CloudWatch refuses events older than 14 days


def put(logs, host: str, *events: tuple[int, str]) -> None:
    """Events at NOW_MS + t milliseconds."""
    logs.put_log_events(
        logGroupName=job_client.LOG_GROUP,
        logStreamName=f"{JOB}/{host}-1763900000",
        logEvents=[{"timestamp": NOW_MS + t, "message": m} for t, m in events],
    )


def test_status_and_stop_name_the_job_and_a_second_stop_is_one_line(cloud, capsys):
    assert main(["status", JOB]) == 0
    out = capsys.readouterr().out
    assert f"{JOB}: InProgress (Training)" in out
    assert f"output (report): s3://out-bucket/jobs/{JOB}/output/output.tar.gz" in out

    assert main(["stop", JOB]) == 0
    assert f"{JOB}: Stopping; SageMaker sends SIGTERM to every host" in capsys.readouterr().out
    assert main(["stop", JOB]) == 1
    assert capsys.readouterr().err.strip().splitlines() == [
        f"sm-launch: error: StopTrainingJob {JOB}: the job is already Stopping"
    ]
    assert main(["status", "no-such-job"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "DescribeTrainingJob no-such-job: ValidationException" in err[0]


def test_logs_merge_every_hosts_stream_in_time_order_and_follow_ends_with_the_job(cloud, capsys):
    job, logs = cloud
    put(logs, "algo-2", (1_000, "head up"), (3_000, "step=1 loss=2.3"))
    put(logs, "algo-1", (2_000, "algo-1 joining head algo-2"))
    assert main(["logs", JOB]) == 0
    assert [line for line in capsys.readouterr().out.splitlines() if line.startswith("[")] == [
        "[algo-2] head up",
        "[algo-1] algo-1 joining head algo-2",
        "[algo-2] step=1 loss=2.3",
    ]

    lines, polls = [], []

    def next_poll(_):  # while the follower waits, the job writes more and then ends
        polls.append(1)
        if len(polls) == 1:
            put(logs, "algo-2", (4_000, "step=2 loss=2.1"))
        else:
            put(logs, "algo-1", (5_000, "algo-1: head algo-2 finished the job"))
            job.training_job_status = "Completed"

    from smlaunch.launcher.sagemaker.job_client import clients, follow_logs

    sagemaker, logs_client, _ = clients(None)
    assert follow_logs(sagemaker, logs_client, JOB, lines.append, follow=True, sleep=next_poll) == "Completed"
    assert lines == [
        "[algo-2] head up",
        "[algo-1] algo-1 joining head algo-2",
        "[algo-2] step=1 loss=2.3",
        "[algo-2] step=2 loss=2.1",
        "[algo-1] algo-1: head algo-2 finished the job",
    ]  # each once


def test_report_reads_a_jobs_output_from_s3(cloud, configs, tmp_path, capsys):
    report, _ = constructed_report(configs, tmp_path / "run", compute_s=0.02, wait_s=0.14, chain_s_per_row=0.01)
    report.pop("path", None)
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w:gz") as tar:  # what SageMaker uploads: every host's output/data
        data = json.dumps(report).encode()
        info = tarfile.TarInfo("report.json")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    s3 = boto3.client("s3")
    s3.create_bucket(Bucket="out-bucket")
    s3.put_object(Bucket="out-bucket", Key=f"jobs/{JOB}/output/output.tar.gz", Body=archive.getvalue())

    assert main(["report", "--job", JOB, "--into", str(tmp_path / "got")]) == 0
    assert "verdict: input-bound" in capsys.readouterr().out
    assert (tmp_path / "got" / "summary.md").is_file() and (tmp_path / "got" / "throughput.png").is_file()
    assert main(["report", f"s3://out-bucket/jobs/{JOB}/output/output.tar.gz", "--into", str(tmp_path / "uri")]) == 0
    assert (tmp_path / "uri" / "report.json").is_file()
    assert main(["report", "s3://out-bucket/jobs/nope/output/output.tar.gz", "--into", str(tmp_path / "x")]) == 1
    assert "GetObject s3://out-bucket/jobs/nope/output/output.tar.gz" in capsys.readouterr().err
