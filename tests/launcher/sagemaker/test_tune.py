"""`sm-launch tune` (issue 81): the heterogeneous job as a CreateHyperParameterTuningJob request that
botocore's own SageMaker model accepts, its objective read from the job's real validation line, its
ranges checked against the config; created and shown against moto's server; a trial's checkpoints
kept apart from the other trials'."""

import json
import re
from pathlib import Path

import pytest

from smlaunch.cluster.host_tree import write_host_tree
from smlaunch.launcher.cli import main
from smlaunch.launcher.job.train_progress import validation_line
from smlaunch.launcher.sagemaker.request_check import validate_request
from smlaunch.launcher.sagemaker.tuning import parse_range, trial_overrides

ROOT = Path(__file__).resolve().parents[3]
HETERO = str(ROOT / "configs" / "hetero.yaml")
RANGES = [
    "--range",
    "trainer.learning_rate=1e-4:1e-2:log",
    "--range",
    "trainer.batch_size=16:64",
    "--range",
    "trainer.optimizer=adamw,sgd",
]


def tune(aws, capsys, *extra: str) -> tuple[int, str, str]:
    code = main(["tune", HETERO, "--set", f"sagemaker.bucket={aws.bucket}", *extra])
    out, err = capsys.readouterr()
    return code, out, err


def test_the_dry_run_is_a_valid_tuning_request_with_both_groups_and_a_regex_that_reads_the_job(aws, capsys):
    code, out, err = tune(aws, capsys, "--objective", "validation:accuracy", *RANGES, "--dry-run", "--job-name", "t-1")
    assert code == 0, err
    assert "InstanceGroups in a tuning job's ResourceConfig" in err and "unverified" in err
    request = json.loads(out)
    assert aws.recorded() == []
    definition = request["TrainingJobDefinition"]
    definition["Environment"]["SMLAUNCH_RAY_TOKEN"] = "x" * 43
    assert validate_request(request, "CreateHyperParameterTuningJob") == []
    assert [g["InstanceGroupName"] for g in definition["ResourceConfig"]["InstanceGroups"]] == [
        "train_group",
        "data_group",
    ]
    routed = {
        c["ChannelName"]: c["DataSource"]["S3DataSource"].get("InstanceGroupNames")
        for c in definition["InputDataConfig"]
    }
    assert routed["train"] == ["data_group"]
    assert json.loads(definition["StaticHyperParameters"]["sagemaker_program"]) == "smlaunch_entry.py"
    assert "ContainerEntrypoint" not in definition["AlgorithmSpecification"]  # a tuning definition has none
    config = request["HyperParameterTuningJobConfig"]
    assert config["HyperParameterTuningJobObjective"] == {"Type": "Maximize", "MetricName": "validation:accuracy"}
    ranges = config["ParameterRanges"]
    assert ranges["IntegerParameterRanges"] == [
        {"Name": "trainer.batch_size", "MinValue": "16", "MaxValue": "64", "ScalingType": "Auto"}
    ]
    assert ranges["ContinuousParameterRanges"][0]["ScalingType"] == "Logarithmic"
    assert ranges["CategoricalParameterRanges"] == [{"Name": "trainer.optimizer", "Values": ["adamw", "sgd"]}]
    # the objective's definition reads the line the job's head prints, once, and no rank's copy
    (regex,) = [
        m["Regex"]
        for m in definition["AlgorithmSpecification"]["MetricDefinitions"]
        if m["Name"] == "validation:accuracy"
    ]
    line = validation_line({"step": 200, "epoch": 2, "accuracy": 0.9125, "top5": 0.99, "loss": 0.31})
    log = (
        f"step=200 loss=0.3 images_per_sec=80.0 data_wait_pct=1.0\n{line}\n(RayTrainWorker pid=7, ip=10.0.0.2) {line}\n"
    )
    assert re.findall(regex, log) == ["0.9125"]
    assert len(definition["AlgorithmSpecification"]["MetricDefinitions"]) <= 40


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--range", "trainer.colour=1:2"], "trainer.colour: unknown key; valid keys: batch_size"),
        (["--range", "trainer.batch_size=1.5:4"], "trainer.batch_size: Input should be a valid integer"),
        (["--range", "trainer.optimizer=adamw,lion"], "trainer.optimizer: Input should be 'adamw' or 'sgd'"),
        (["--range", "trainer.learning_rate=0:1:log"], "a log range needs LOW > 0"),
        (["--range", "learning_rate=0.1:1"], "with a dotted config KEY"),
    ],
)
def test_a_range_the_config_would_refuse_is_one_line_before_anything_is_sent(aws, capsys, extra, message):
    code, out, err = tune(aws, capsys, "--objective", "validation:accuracy", *extra, "--dry-run")
    assert code == 2 and message in err and err.count("\n") == 1, err
    assert aws.recorded() == []


def test_an_objective_the_job_does_not_print_is_refused_naming_those_it_does(aws, capsys):
    code, out, err = tune(aws, capsys, "--objective", "validation:f1", *RANGES, "--dry-run")
    assert code != 0 and "--objective 'validation:f1' is no metric the job prints; it prints train:step" in err


def test_created_against_the_local_stand_in_and_its_status_shows_the_job(aws, capsys):
    code, out, err = tune(aws, capsys, "--objective", "validation:loss", *RANGES, "--job-name", "t-2")
    assert code == 0, err
    created = [
        json.loads(e["body"])
        for e in aws.recorded()
        if {k.lower(): v for k, v in e["headers"].items()}.get("x-amz-target")
        == "SageMaker.CreateHyperParameterTuningJob"
    ]
    assert (
        len(created) == 1
        and created[0]["HyperParameterTuningJobConfig"]["HyperParameterTuningJobObjective"]["Type"] == "Minimize"
    )
    assert any(k.endswith("t-2/code/sourcedir.tar.gz") for k in aws.keys("smlaunch/t-2/"))
    code = main(["tune", "--status", "t-2"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "tuning job t-2: " in out and "Bayesian, Minimize validation:loss" in out, out
    # moto answers ListTrainingJobsForHyperParameterTuningJob with a 500: the line says so, the rest shows
    assert "trials: not listed (" in out and "best: " in out


def test_the_trials_table_best_first_with_their_values_and_failure_reasons():
    """The trial table from the service's own response shapes (botocore's Stubber checks them against
    the SageMaker model; moto does not implement the listing)."""
    import datetime

    import boto3
    from botocore.stub import Stubber

    from smlaunch.launcher.sagemaker.tuning_status import tuning_status

    client = boto3.client("sagemaker", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    now = datetime.datetime(2026, 12, 6, tzinfo=datetime.UTC)
    trial = lambda name, status, value, lr, reason=None: {  # noqa: E731
        "TrainingJobName": name,
        "TrainingJobArn": f"arn:aws:sagemaker:us-east-1:111122223333:training-job/{name}",
        "CreationTime": now,
        "TrainingJobStatus": status,
        "TunedHyperParameters": {"trainer.learning_rate": lr},
        **(
            {"FinalHyperParameterTuningJobObjectiveMetric": {"MetricName": "validation:accuracy", "Value": value}}
            if value is not None
            else {}
        ),
        **({"FailureReason": reason} if reason else {}),
    }
    with Stubber(client) as stub:
        stub.add_response(
            "describe_hyper_parameter_tuning_job",
            {
                "HyperParameterTuningJobName": "t-3",
                "HyperParameterTuningJobArn": "arn:aws:sagemaker:us-east-1:111122223333:hyper-parameter-tuning-job/t-3",
                "HyperParameterTuningJobConfig": {
                    "Strategy": "Random",
                    "HyperParameterTuningJobObjective": {"Type": "Maximize", "MetricName": "validation:accuracy"},
                    "ResourceLimits": {"MaxParallelTrainingJobs": 2},
                },
                "HyperParameterTuningJobStatus": "InProgress",
                "CreationTime": now,
                "TrainingJobStatusCounters": {"Completed": 2, "InProgress": 1, "NonRetryableError": 1},
                "ObjectiveStatusCounters": {"Succeeded": 2},
                "BestTrainingJob": trial("t-3-002", "Completed", 0.93, "0.003"),
            },
        )
        stub.add_response(
            "list_training_jobs_for_hyper_parameter_tuning_job",
            {
                "TrainingJobSummaries": [
                    trial("t-3-002", "Completed", 0.93, "0.003"),
                    trial("t-3-001", "Completed", 0.88, "0.0001"),
                    trial("t-3-004", "Failed", None, "0.05", "AlgorithmError: loss is nan"),
                ]
            },
        )
        lines = tuning_status("t-3", client=client)
    assert lines[0] == (
        "tuning job t-3: InProgress; Random, Maximize validation:accuracy; trials: Completed 2, InProgress 1, "
        "NonRetryableError 1"
    )
    assert lines[1:] == [
        "  t-3-002: Completed; validation:accuracy=0.93; trainer.learning_rate=0.003",
        "  t-3-001: Completed; validation:accuracy=0.88; trainer.learning_rate=0.0001",
        "  t-3-004: Failed (AlgorithmError: loss is nan); validation:accuracy=-; trainer.learning_rate=0.05",
        "best: t-3-002 validation:accuracy=0.93 trainer.learning_rate=0.003",
    ]


def test_a_trial_keeps_its_checkpoints_and_mlflow_run_under_its_own_job_name(tmp_path, monkeypatch):
    from smlaunch.launcher.commands.job import load_job

    groups = [
        {"instance_group_name": "train_group", "instance_type": "ml.g5.xlarge", "hosts": ["algo-1"]},
        {"instance_group_name": "data_group", "instance_type": "ml.c5.4xlarge", "hosts": ["algo-2"]},
    ]
    tree = write_host_tree(tmp_path / "opt/ml", "algo-2", groups, {"train": "File", "validation": "File"})
    (tree / "input/config/hyperparameters.json").write_text(
        json.dumps({"_tuning_objective_metric": "validation:loss", "trainer.learning_rate": "0.004"})
    )
    monkeypatch.setenv("SAGEMAKER_BASE_DIR", str(tree))
    monkeypatch.setenv("TRAINING_JOB_NAME", "t-2-003-abc")
    monkeypatch.setenv("SMLAUNCH_RAY_TOKEN", "x" * 64)

    class Failure:
        def at(self, *a, **k):
            pass

    class Args:
        config, overrides = HETERO, []

    job = load_job(Args(), Failure())
    assert job.cfg.trainer.checkpoint_dir == f"{tree}/checkpoints/t-2-003-abc"
    assert job.cfg.trainer.learning_rate == 0.004
    assert trial_overrides({"trainer.x": 1}, "job", None, "/opt/ml/checkpoints") == {}  # not a trial
    assert parse_range("trainer.epochs=1:5").kind == "Integer" and parse_range("trainer.x=0.1:1").kind == "Continuous"
