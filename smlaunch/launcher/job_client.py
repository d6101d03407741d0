"""After `submit`: a training job's status, its logs, a stop, and its output, from the user's machine.

Everything goes through boto3 (the region from `--region`, else boto3's own lookup), and a service
error becomes one line naming the job. Logs: SageMaker writes each host's stdout to CloudWatch,
group `/aws/sagemaker/TrainingJobs`, one stream per host named `<job>/algo-N-<epoch seconds>`;
they are read together with FilterLogEvents (which interleaves streams by time) and each line is
labelled with its host. Following ends once the job has ended and the last lines are read, so it
never outlives the job (whose MaxRuntime bounds it).
"""

from __future__ import annotations

import tarfile
import time
from pathlib import Path
from typing import Callable, Iterator

from smlaunch.errors import UserError

LOG_GROUP = "/aws/sagemaker/TrainingJobs"
ENDED = ("Completed", "Failed", "Stopped")
FOLLOW_POLL_S = 5.0


def _call(what: str, job: str, fn, **kwargs):
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        return fn(**kwargs)
    except ClientError as exc:
        error = exc.response.get("Error", {})
        raise UserError(f"{what} {job}: {error.get('Code', 'error')}: {error.get('Message') or exc}") from None
    except BotoCoreError as exc:
        raise UserError(f"{what} {job}: {exc}") from None


def clients(region: str | None):
    import boto3

    session = boto3.session.Session(region_name=region)
    return session.client("sagemaker"), session.client("logs"), session.client("s3")


def describe(sagemaker, job: str) -> dict:
    return _call("DescribeTrainingJob", job, sagemaker.describe_training_job, TrainingJobName=job)


def status_lines(d: dict) -> list[str]:
    """The job in a few lines: status, the secondary status and its message, hosts, times, why it failed."""
    lines = [f"{d['TrainingJobName']}: {d['TrainingJobStatus']} ({d.get('SecondaryStatus', '-')})"]
    transitions = d.get("SecondaryStatusTransitions") or []
    if transitions and transitions[-1].get("StatusMessage"):
        lines.append(f"  {transitions[-1]['Status']}: {transitions[-1]['StatusMessage']}")
    resources = d.get("ResourceConfig") or {}
    groups = resources.get("InstanceGroups") or ([{"InstanceGroupName": "-", "InstanceType": resources.get("InstanceType"),
                                                   "InstanceCount": resources.get("InstanceCount")}] if resources else [])
    if groups:
        lines.append("  hosts: " + ", ".join(f"{g['InstanceGroupName']} {g['InstanceCount']} x {g['InstanceType']}"
                                             for g in groups))
    times = [(k, d[k]) for k in ("TrainingStartTime", "TrainingEndTime") if d.get(k)]
    if times:
        lines.append("  " + ", ".join(f"{k.removeprefix('Training').removesuffix('Time').lower()} {v:%Y-%m-%d %H:%M:%S %Z}"
                                      for k, v in times))
    if d.get("BillableTimeInSeconds") is not None:
        lines.append(f"  billable: {d['BillableTimeInSeconds']} s of {d.get('TrainingTimeInSeconds', '?')} s")
    if d.get("FailureReason"):
        lines.append(f"  failure: {d['FailureReason']}")
    if (d.get("ModelArtifacts") or {}).get("S3ModelArtifacts"):
        lines.append(f"  model: {d['ModelArtifacts']['S3ModelArtifacts']}")
    lines.append(f"  output (report): {output_uri(d)}")
    return lines


def output_uri(d: dict) -> str:
    """Where SageMaker puts /opt/ml/output/data of every host: `<S3OutputPath>/<job>/output/output.tar.gz`."""
    return f"{d['OutputDataConfig']['S3OutputPath'].rstrip('/')}/{d['TrainingJobName']}/output/output.tar.gz"


def stop(sagemaker, job: str) -> dict:
    """StopTrainingJob on a running job; SageMaker then sends SIGTERM to every host (checkpoint, exit 143)."""
    d = describe(sagemaker, job)
    if d["TrainingJobStatus"] in ENDED or d["TrainingJobStatus"] == "Stopping":
        raise UserError(f"StopTrainingJob {job}: the job is already {d['TrainingJobStatus']}")
    _call("StopTrainingJob", job, sagemaker.stop_training_job, TrainingJobName=job)
    return describe(sagemaker, job)


def host_of(stream: str, job: str) -> str:
    """`<job>/algo-2-1700000000` -> `algo-2`."""
    name = stream.removeprefix(f"{job}/")
    head, _, tail = name.rpartition("-")
    return head if tail.isdigit() and head else name


def log_lines(logs, job: str, start_ms: int = 0) -> Iterator[tuple[int, str, str]]:
    """(timestamp ms, host, message) of every host's stream from `start_ms`, in time order."""
    kwargs = {"logGroupName": LOG_GROUP, "logStreamNamePrefix": f"{job}/", "startTime": start_ms, "interleaved": True}
    events = []
    while True:
        page = _call("FilterLogEvents", job, logs.filter_log_events, **kwargs)
        events += page.get("events", [])
        if not page.get("nextToken") or not page.get("events"):
            break
        kwargs["nextToken"] = page["nextToken"]
    for e in sorted(events, key=lambda e: (e["timestamp"], e.get("ingestionTime", 0))):
        yield e["timestamp"], host_of(e["logStreamName"], job), e["message"].rstrip("\n")


def follow_logs(sagemaker, logs, job: str, emit: Callable[[str], None], follow: bool,
                poll_s: float = FOLLOW_POLL_S, sleep=time.sleep) -> str:
    """Print every line once, labelled `[algo-N]`; with `follow`, until the job has ended. Returns its status."""
    seen: set[tuple[int, str, str]] = set()
    start_ms = 0
    while True:
        status = describe(sagemaker, job)["TrainingJobStatus"]  # read before the lines: none after it is missed
        for event in log_lines(logs, job, start_ms):
            if event not in seen:
                seen.add(event)
                emit(f"[{event[1]}] {event[2]}")
                start_ms = max(start_ms, event[0])
        if not follow or status in ENDED:
            return status
        sleep(poll_s)


def fetch_output(s3, uri: str, into: Path) -> Path:
    """Download a job's `output.tar.gz` (every host's /opt/ml/output/data) and unpack it under `into`."""
    if not uri.startswith("s3://") or "/" not in uri[5:]:
        raise UserError(f"{uri}: expected s3://bucket/key of a job's output.tar.gz")
    bucket, key = uri[5:].split("/", 1)
    if not key.endswith(".tar.gz"):
        key = key.rstrip("/") + "/output.tar.gz"
    into.mkdir(parents=True, exist_ok=True)
    archive = into / "output.tar.gz"
    _call("GetObject", f"s3://{bucket}/{key}", s3.download_file, Bucket=bucket, Key=key, Filename=str(archive))
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="data")
    archive.unlink()
    return into
