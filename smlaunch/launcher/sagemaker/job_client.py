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
from collections.abc import Callable
from pathlib import Path

from smlaunch.errors import UserError

LOG_GROUP = "/aws/sagemaker/TrainingJobs"
ENDED = ("Completed", "Failed", "Stopped")
FOLLOW_POLL_S = 5.0
LATE_S = 60
"""How late (by timestamp) a host's line may reach CloudWatch and still be shown when following."""


def _call(what: str, job: str, fn, **kwargs):
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        return fn(**kwargs)
    except (ClientError, BotoCoreError) as exc:
        raise _one_line(what, job, exc) from None


def _one_line(what: str, job: str, exc: Exception) -> UserError:
    error = getattr(exc, "response", {}).get("Error", {})
    if error:
        return UserError(f"{what} {job}: {error.get('Code', 'error')}: {error.get('Message') or exc}")
    return UserError(f"{what} {job}: {exc}")


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
    groups = resources.get("InstanceGroups") or (
        [
            {
                "InstanceGroupName": "-",
                "InstanceType": resources.get("InstanceType"),
                "InstanceCount": resources.get("InstanceCount"),
            }
        ]
        if resources
        else []
    )
    if groups:
        lines.append(
            "  hosts: "
            + ", ".join(f"{g['InstanceGroupName']} {g['InstanceCount']} x {g['InstanceType']}" for g in groups)
        )
    times = [(k, d[k]) for k in ("TrainingStartTime", "TrainingEndTime") if d.get(k)]
    if times:
        lines.append(
            "  "
            + ", ".join(
                f"{k.removeprefix('Training').removesuffix('Time').lower()} {v:%Y-%m-%d %H:%M:%S %Z}" for k, v in times
            )
        )
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


def log_events(logs, job: str, start_ms: int = 0) -> list[dict]:
    """Every host's events from `start_ms` on, in time order; none yet if the log group or the job's
    streams do not exist yet (a job that has just been submitted)."""
    from botocore.exceptions import BotoCoreError, ClientError

    kwargs = {"logGroupName": LOG_GROUP, "logStreamNamePrefix": f"{job}/", "startTime": start_ms}
    events = []
    try:
        for page in logs.get_paginator("filter_log_events").paginate(**kwargs):  # an empty page may still go on
            events += page.get("events", [])
    except (ClientError, BotoCoreError) as exc:
        if getattr(exc, "response", {}).get("Error", {}).get("Code") == "ResourceNotFoundException":
            return []
        raise _one_line("FilterLogEvents", job, exc) from None
    return sorted(events, key=lambda e: (e["timestamp"], e.get("ingestionTime", 0), e.get("eventId", "")))


def follow_logs(
    sagemaker,
    logs,
    job: str,
    emit: Callable[[str], None],
    follow: bool,
    poll_s: float = FOLLOW_POLL_S,
    sleep=time.sleep,
) -> str:
    """Print every line once, labelled `[algo-N]`; with `follow`, until the job has ended. Returns its status.

    Each poll asks again from `LATE_S` before the newest line seen, since a slower host's lines
    arrive later with earlier timestamps; events are told apart by their id, and ids older than
    that window are forgotten, so memory stays bounded however long the job runs."""
    seen: dict[str, int] = {}
    start_ms = 0
    while True:
        status = describe(sagemaker, job)["TrainingJobStatus"]  # read before the lines: none after it is missed
        for e in log_events(logs, job, max(0, start_ms - LATE_S * 1000)):
            key = e.get("eventId") or f"{e['logStreamName']}/{e['timestamp']}/{e['message']}"
            if key in seen:
                continue
            seen[key] = e["timestamp"]
            emit(f"[{host_of(e['logStreamName'], job)}] {e['message'].rstrip(chr(10))}")
            start_ms = max(start_ms, e["timestamp"])
        if not follow or status in ENDED:
            return status
        horizon = start_ms - 2 * LATE_S * 1000
        seen = {k: t for k, t in seen.items() if t >= horizon}
        sleep(poll_s)


def fetch_output(s3, uri: str, into: Path) -> Path:
    """Download a job's `output.tar.gz` (every host's /opt/ml/output/data) and unpack it under `into`."""
    if not uri.startswith("s3://") or "/" not in uri[5:]:
        raise UserError(f"{uri}: expected s3://bucket/key of a job's output.tar.gz")
    bucket, key = uri[5:].split("/", 1)
    if not key.endswith(".tar.gz"):
        key = key.rstrip("/") + "/output.tar.gz"
    import tempfile

    into.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="smlaunch-output-") as tmp:
        archive = Path(tmp) / "output.tar.gz"
        _call("GetObject", f"s3://{bucket}/{key}", s3.download_file, Bucket=bucket, Key=key, Filename=str(archive))
        with tarfile.open(archive) as tar:
            _extract(tar, into)
    return into


def _extract(tar: tarfile.TarFile, into: Path) -> None:
    """Regular files and folders only, each inside `into` (tarfile's `data` filter where Python has it)."""
    if hasattr(tarfile, "data_filter"):
        tar.extractall(into, filter="data")
        return
    root = into.resolve()
    for member in tar.getmembers():
        target = (root / member.name).resolve()
        if not (member.isfile() or member.isdir()) or (target != root and root not in target.parents):
            raise UserError(f"{member.name}: not a plain file inside the job's output; not unpacked")
        tar.extract(member, root)
