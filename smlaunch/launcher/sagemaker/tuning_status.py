"""`sm-launch tune --status NAME`: a tuning job's state, its trials and the best one.

`DescribeHyperParameterTuningJob` gives the job's status, its trial counters and the best training
job; `ListTrainingJobsForHyperParameterTuningJob` (100 a page, best objective first) gives each
trial's tuned hyperparameters, objective, status and failure reason.
"""

from __future__ import annotations

from smlaunch.errors import UserError

MAX_TRIALS_SHOWN = 100


def tuning_status(name: str, region: str | None = None, client=None) -> list[str]:
    """The lines to show: the job, then a row per trial (best first), then the best."""
    from botocore.exceptions import BotoCoreError, ClientError

    if client is None:
        import boto3

        client = boto3.session.Session(region_name=region).client("sagemaker")
    try:
        job = client.describe_hyper_parameter_tuning_job(HyperParameterTuningJobName=name)
    except (BotoCoreError, ClientError) as exc:
        raise UserError(f"tune --status {name}: {' '.join(str(exc).split())}") from None
    config = job.get("HyperParameterTuningJobConfig", {})
    objective = config.get("HyperParameterTuningJobObjective", {})
    counts = job.get("TrainingJobStatusCounters", {})
    lines = [
        f"tuning job {name}: {job.get('HyperParameterTuningJobStatus')}; {config.get('Strategy')}, "
        f"{objective.get('Type')} {objective.get('MetricName')}; trials: "
        + ", ".join(f"{k} {v}" for k, v in counts.items() if v)
        + (f"; failed: {job['FailureReason']}" if job.get("FailureReason") else "")
    ]
    trials: list[dict] = []
    try:
        pages = {"HyperParameterTuningJobName": name, "SortBy": "FinalObjectiveMetricValue", "MaxResults": 100}
        while len(trials) < MAX_TRIALS_SHOWN:
            page = client.list_training_jobs_for_hyper_parameter_tuning_job(**pages)
            trials += page.get("TrainingJobSummaries", [])
            if not page.get("NextToken"):
                break
            pages["NextToken"] = page["NextToken"]
    except (BotoCoreError, ClientError) as exc:
        lines.append(f"trials: not listed ({' '.join(str(exc).split())[:200]})")
    for trial in trials:
        final = trial.get("FinalHyperParameterTuningJobObjectiveMetric") or {}
        value = final.get("Value")
        tuned = " ".join(f"{k}={v}" for k, v in sorted((trial.get("TunedHyperParameters") or {}).items()))
        reason = f" ({trial['FailureReason']})" if trial.get("FailureReason") else ""
        lines.append(
            f"  {trial.get('TrainingJobName')}: {trial.get('TrainingJobStatus')}{reason}; "
            f"{objective.get('MetricName')}={'-' if value is None else f'{value:.6g}'}; {tuned}"
        )
    best = job.get("BestTrainingJob")
    if best:
        final = best.get("FinalHyperParameterTuningJobObjectiveMetric") or {}
        tuned = " ".join(f"{k}={v}" for k, v in sorted((best.get("TunedHyperParameters") or {}).items()))
        lines.append(f"best: {best.get('TrainingJobName')} {final.get('MetricName')}={final.get('Value')} {tuned}")
    return lines
