"""The SageMaker Python SDK recipes of docs/sagemaker.md, run as written with the real SDKs.

Each recipe (v2's `PyTorch` estimator, v3's `ModelTrainer`) runs in its own virtual environment
(`make sdk-venvs`: the two majors are one distribution, `sagemaker`, with incompatible pins) in a
fresh clone staged by the page's own command, against moto's server on 127.0.0.1 as S3, STS and
SageMaker. The CreateTrainingJob body the SDK sent is then held against the request
`sm-launch submit --dry-run` builds for the same config, field by field where the two must agree,
and the code the SDK uploaded is run on a simulated data host the way that SDK's job would run it
(v2: the image's training toolkit; v3: the SDK's own script driver), with `sm-launch plan`.

Two environment settings stand in for what moto lacks, not for anything a user sets: telemetry is
opted out (the SDKs send it to an AWS bucket this machine cannot reach) and v3's role check is
skipped (moto has no iam:SimulatePrincipalPolicy).
"""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from smlaunch.launcher.cli import main
from support.sm_hosts import fake_host, host_env, run_toolkit

ROOT = Path(__file__).resolve().parents[3]
BUCKET = "amzn-s3-demo-bucket"  # the recipes' placeholder, a bucket on the moto server here
SDK_MANAGED = {"code", "sm_drivers"}  # channels v3 adds for its own driver


def recipe_blocks() -> dict[str, str]:
    """The staging command and the two recipes, as docs/sagemaker.md has them."""
    text = (ROOT / "docs" / "sagemaker.md").read_text()
    section = text[text.index("### With the SageMaker Python SDK") :]
    section = section[: section.index("\n### ", 5)]
    blocks = re.findall(r"```(\w+)\n(.*?)```", section, re.S)
    found = {"stage": next(code for lang, code in blocks if lang == "bash" and "git archive" in code)}
    for major in ("v2", "v3"):
        found[major] = next(code for lang, code in blocks if code.startswith(f"# SageMaker Python SDK {major}:"))
    return found


def sdk_python(major: str) -> Path:
    python = ROOT / ".venv-sdk" / major / "bin" / "python"
    assert python.is_file(), f"{python} missing: `make sdk-venvs` installs SDK {major} there (`make test` does)"
    return python


def run_recipe(aws, tmp_path: Path, major: str) -> dict:
    """Stage a fresh clone with the page's command, run the recipe, return the request the SDK sent."""
    python = sdk_python(major)
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True, timeout=120)
    blocks = recipe_blocks()
    subprocess.run(["bash", "-euo", "pipefail", "-c", blocks["stage"]], cwd=clone, check=True, timeout=120)
    try:
        aws.s3.create_bucket(Bucket=BUCKET)
    except aws.s3.exceptions.BucketAlreadyOwnedByYou:
        pass
    sdk_config = tmp_path / "sdk-config.yaml"
    sdk_config.write_text("SchemaVersion: '1.0'\nSageMaker:\n  PythonSDK:\n    Modules:\n      TelemetryOptOut: true\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # moto's endpoint and throwaway keys
    env.update(
        SAGEMAKER_USER_CONFIG_OVERRIDE=str(sdk_config),
        SAGEMAKER_VALIDATE_ROLE="false",
        SAGEMAKER_SUPPRESS_V2_WARNING="1",
    )
    ran = subprocess.run(
        [str(python), "-c", blocks[major]], cwd=clone, env=env, capture_output=True, text=True, timeout=300
    )
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    (request,) = aws.create_requests()
    return request


def dry_run(capsys) -> dict:
    code = main(
        [
            "submit",
            str(ROOT / "configs" / "hetero.yaml"),
            "--dry-run",
            "--job-name",
            "dry-sdk",
            "--set",
            "sagemaker.entry=toolkit",
            "--set",
            f"sagemaker.bucket={BUCKET}",
        ]
    )
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


def job_shape(request: dict) -> dict:
    """What must agree between the SDK's request and ours: everything but names, S3 keys and the entry."""
    algorithm = request["AlgorithmSpecification"]
    channels = {}
    for c in request["InputDataConfig"]:
        if c["ChannelName"] in SDK_MANAGED:
            continue
        s3 = c["DataSource"]["S3DataSource"]
        channels[c["ChannelName"]] = (
            c.get("InputMode", algorithm["TrainingInputMode"]),
            s3["S3DataType"],
            s3["S3DataDistributionType"],
            s3.get("InstanceGroupNames"),
        )
    environment = dict(request["Environment"])
    token = environment.pop("SMLAUNCH_RAY_TOKEN")
    for key, default in (("SMLAUNCH_COMMAND", "run"), ("SMLAUNCH_PIP_INSTALL", "auto")):  # the entry's defaults
        if environment.get(key) == default:
            del environment[key]
    return {
        "image": algorithm["TrainingImage"],
        "input_mode": algorithm["TrainingInputMode"],
        "metrics": sorted((m["Name"], m["Regex"]) for m in algorithm["MetricDefinitions"]),
        "groups": sorted(
            (g["InstanceGroupName"], g["InstanceType"], g["InstanceCount"])
            for g in request["ResourceConfig"]["InstanceGroups"]
        ),
        "volume_gb": request["ResourceConfig"]["VolumeSizeInGB"],
        "channels": channels,
        "role": request["RoleArn"],
        "stopping": request["StoppingCondition"],
        "spot": request.get("EnableManagedSpotTraining", False),
        "checkpoint_local": request["CheckpointConfig"]["LocalPath"],
        "checkpoint_bucket": request["CheckpointConfig"]["S3Uri"].split("/")[2],
        "output_bucket": request["OutputDataConfig"]["S3OutputPath"].split("/")[2],
        "environment": environment,
        "token_chars": 43 if token == "<generated, 43 chars>" else len(token),
        "config_hyperparameter": request["HyperParameters"].get("config"),
    }


def test_the_v2_recipe_builds_the_submitted_job_and_its_code_plans_under_the_toolkit(aws, capsys, tmp_path):
    request = run_recipe(aws, tmp_path, "v2")
    ours = dry_run(capsys)
    shape, expected = job_shape(request), job_shape(ours)
    assert shape.pop("config_hyperparameter") == json.dumps("configs/hetero.yaml")  # JSON-encoded by v2
    expected.pop("config_hyperparameter")
    assert shape == expected
    assert [m["Name"] for m in request["AlgorithmSpecification"]["MetricDefinitions"]] == [
        m["Name"] for m in ours["AlgorithmSpecification"]["MetricDefinitions"]
    ]
    hp = {k: json.loads(v) for k, v in request["HyperParameters"].items()}
    assert hp["sagemaker_program"] == "smlaunch/launcher/sm_entry.py"
    assert hp["sagemaker_submit_directory"].startswith(f"s3://{BUCKET}/smlaunch/code/")

    # the uploaded source dir, on a data host, under the real toolkit; a tuner's value (raw) and one
    # as v2 encodes it override the config, its own key and a non-config one do not
    request["Environment"]["SMLAUNCH_COMMAND"] = "plan"
    request["HyperParameters"].update(
        {
            "trainer.learning_rate": "0.0123",
            "trainer.batch_size": json.dumps(6),
            "_tuning_objective_metric": "validation:accuracy",
            "epochs": "3",
        }
    )
    tree, group = fake_host(tmp_path / "hosts", request, "algo-2")
    assert group == "data_group"
    ran = run_toolkit(aws, request, tree)
    assert "every dependency is installed; the shipped code goes on PYTHONPATH" in ran.stdout
    assert "exec sm-launch plan " + str(tree / "code" / "configs" / "hetero.yaml") in ran.stdout
    assert "SageMaker job: this host is algo-2 (worker, data_group)" in ran.stdout
    assert "head: algo-1 (train_group, ml.g5.xlarge) at algo-1:6379" in ran.stdout
    assert "hyperparameters: trainer.learning_rate=0.0123, trainer.batch_size=6 (as --set" in ran.stdout
    assert "hyperparameters: ignoring epochs (not a dotted config key" in ran.stdout
    assert "global batch: 6 = 6 x 1 worker" in ran.stdout and "learning rate 0.0123" in ran.stdout


def test_the_v3_recipe_builds_the_submitted_job_and_its_code_plans_under_the_sdk_driver(aws, capsys, tmp_path):
    request = run_recipe(aws, tmp_path, "v3")
    ours = dry_run(capsys)
    shape, expected = job_shape(request), job_shape(ours)
    assert shape.pop("config_hyperparameter") == "configs/hetero.yaml"  # v3 sends strings as they are
    expected.pop("config_hyperparameter")
    assert shape == expected
    groups = ["train_group", "data_group"]
    managed = {
        c["ChannelName"]: c["DataSource"]["S3DataSource"]
        for c in request["InputDataConfig"]
        if c["ChannelName"] in SDK_MANAGED
    }
    assert {name: s3["InstanceGroupNames"] for name, s3 in managed.items()} == {"code": groups, "sm_drivers": groups}
    assert request["AlgorithmSpecification"]["ContainerEntrypoint"] == ["/bin/bash"]

    # the uploaded code and drivers, on a data host, as sm_train.sh runs them; v3 sends values as strings
    request["HyperParameters"]["trainer.learning_rate"] = "0.0123"
    tree, group = fake_host(tmp_path / "hosts", request, "algo-2")
    assert group == "data_group"
    for name, s3 in managed.items():
        bucket, prefix = s3["S3Uri"][len("s3://") :].split("/", 1)
        for key in aws.keys(prefix, bucket=bucket):
            target = tree / "input" / "data" / name / key[len(prefix) :].lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            aws.s3.download_file(bucket, key, str(target))
    drivers, code = tree / "input" / "data" / "sm_drivers", tree / "input" / "data" / "code"
    entry = json.loads((drivers / "sourcecode.json").read_text())["entry_script"]
    assert (code / entry).is_file() and (code / "configs" / "hetero.yaml").is_file()
    # environment.py exports these two from sourcecode.json and hyperparameters.json; the driver reads no others
    env = host_env(
        request,
        tree,
        SM_ENTRY_SCRIPT=entry,
        SM_HPS=json.dumps(request["HyperParameters"]),
        SMLAUNCH_COMMAND="plan",
        TRAINING_JOB_NAME=request["TrainingJobName"],
    )
    ran = subprocess.run(
        [sys.executable, str(drivers / "distributed_drivers" / "basic_script_driver.py")],
        cwd=code,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = ran.stdout + ran.stderr
    assert ran.returncode == 0, out[-3000:]
    assert "every dependency is installed; the shipped code goes on PYTHONPATH" in out
    assert "exec sm-launch plan " + str(code / "configs" / "hetero.yaml") in out
    assert "SageMaker job: this host is algo-2 (worker, data_group)" in out
    assert "head: algo-1 (train_group, ml.g5.xlarge) at algo-1:6379" in out
    assert "hyperparameters: trainer.learning_rate=0.0123 (as --set" in out and "learning rate 0.0123" in out
