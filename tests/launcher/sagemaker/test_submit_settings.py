"""The settings real accounts need (issue 23, item 2): encryption keys, network isolation, traffic
encryption, retries, a warm pool and live TensorBoard output, sent to moto's SageMaker server on
127.0.0.1 and checked against botocore's model; the config rules they bring, refused before
anything is sent. The moto fixtures are in conftest.py, the helpers in `test_submit.py`."""

import json
import subprocess
import sys

import pytest
from test_submit import VPC, sets, submit

from smlaunch.config.instance_types import has_local_storage
from smlaunch.launcher.sagemaker.request_check import validate_request
from smlaunch.launcher.sagemaker.training_job import CODE_CHANNEL, TARBALL, TENSORBOARD_LOCAL_PATH
from support.sm_hosts import fake_host, host_env

KEY_ARN = "arn:aws:kms:us-east-1:111122223333:key/1234abcd-12ab-34cd-56ef-1234567890ab"


def test_account_settings_reach_the_request_and_an_isolated_toolkit_job_gets_its_code_by_channel(aws, capsys, tmp_path):
    pytest.importorskip("sagemaker_training")
    code, out, err = submit(
        aws,
        capsys,
        *sets(
            "sagemaker.entry=toolkit",
            "sagemaker.command=plan",
            "sagemaker.install_package=false",
            "sagemaker.enable_network_isolation=true",
            "sagemaker.enable_inter_container_traffic_encryption=true",
            f"sagemaker.vpc={VPC}",
            f"sagemaker.volume_kms_key={KEY_ARN}",
            "sagemaker.output_kms_key=alias/ml-output",
            "sagemaker.retry_strategy={maximum_retry_attempts: 2}",
            "sagemaker.keep_alive_period_s=600",
            f"sagemaker.tensorboard_s3_uri=s3://{aws.bucket}/tensorboard/",
            "cluster.instance_groups.0.instance_type=ml.p3.2xlarge",
        ),
        job="acct-1",
    )  # p3: no instance store
    assert code == 0, err
    (request,) = aws.create_requests()  # as moto's server received and accepted it
    assert validate_request(request) == []
    resources = request["ResourceConfig"]
    assert (resources["VolumeKmsKeyId"], resources["KeepAlivePeriodInSeconds"]) == (KEY_ARN, 600)
    assert request["OutputDataConfig"]["KmsKeyId"] == "alias/ml-output"
    assert request["EnableNetworkIsolation"] is True and request["EnableInterContainerTrafficEncryption"] is True
    assert request["RetryStrategy"] == {"MaximumRetryAttempts": 2}
    assert request["TensorBoardOutputConfig"] == {
        "S3OutputPath": f"s3://{aws.bucket}/tensorboard/",
        "LocalPath": TENSORBOARD_LOCAL_PATH,
    }
    # isolated, the toolkit cannot download its source: it comes by a channel, as the SDK does it
    submitted = f"/opt/ml/input/data/{CODE_CHANNEL}/{TARBALL}"
    assert json.loads(request["HyperParameters"]["sagemaker_submit_directory"]) == submitted
    assert CODE_CHANNEL in [c["ChannelName"] for c in request["InputDataConfig"]]

    tree, group = fake_host(tmp_path, request, "algo-2")
    channel = tree / "input" / "data" / CODE_CHANNEL
    channel.mkdir(parents=True, exist_ok=True)
    aws.s3.download_file(aws.bucket, f"smlaunch/acct-1/code/{TARBALL}", str(channel / TARBALL))
    hyperparameters = tree / "input" / "config" / "hyperparameters.json"  # the stand-in tree is not /opt/ml
    hyperparameters.write_text(hyperparameters.read_text().replace("/opt/ml", str(tree)))
    toolkit = (
        "from sagemaker_training import entry_point, environment\nenv = environment.Environment()\n"
        "entry_point.run(uri=env.module_dir, user_entry_point=env.user_entry_point, "
        "args=env.to_cmd_args(), env_vars=env.to_env_vars())\n"
    )
    # no S3 to be had: a closed port stands for the isolated network
    env = host_env(
        request,
        tree,
        S3_ENDPOINT_URL="http://127.0.0.1:9",
        AWS_ENDPOINT_URL="http://127.0.0.1:9",
        AWS_REGION="us-east-1",
        SM_STUDIO_LOCAL_MODE="true",
        TRAINING_JOB_NAME="acct-1",
    )
    ran = subprocess.run(
        [sys.executable, "-c", toolkit], env=env, capture_output=True, text=True, timeout=120, cwd=tree.parent
    )
    assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr[-2000:]
    assert "SageMaker job: this host is algo-2 (worker, data_group)" in ran.stdout


@pytest.mark.parametrize(
    "overrides, expected",
    [
        (
            [f"sagemaker.volume_kms_key={KEY_ARN}"],
            "sagemaker.volume_kms_key: train_group (ml.g5.xlarge) use local NVMe storage",
        ),
        (
            ["sagemaker.enable_network_isolation=true", "sagemaker.install_package=true"],
            "sagemaker: enable_network_isolation: the hosts cannot reach PyPI to install the package; set "
            "install_package: auto or false",
        ),
        (
            [
                "sagemaker.enable_network_isolation=true",
                "sagemaker.install_package=false",
                "model.pretrained=s3://b/w.pt",
            ],
            "model.pretrained: under sagemaker.enable_network_isolation the hosts cannot download s3://b/w.pt",
        ),
        (
            ["sagemaker.retry_strategy={maximum_retry_attempts: 31}"],
            "sagemaker.retry_strategy.maximum_retry_attempts: Input should be less than or equal to 30",
        ),
        (
            ["sagemaker.keep_alive_period_s=7200"],
            "sagemaker.keep_alive_period_s: Input should be less than or equal to 3600",
        ),
        (["sagemaker.output_kms_key=key with spaces"], "sagemaker.output_kms_key: String should match pattern"),
        (["sagemaker.tensorboard_s3_uri=/local/tb"], "sagemaker.tensorboard_s3_uri: String should match pattern"),
    ],
)
def test_settings_that_the_service_would_refuse_are_one_line_before_anything_is_sent(aws, capsys, overrides, expected):
    code, out, err = submit(aws, capsys, *sets(*overrides), job="bad-2")
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("sm-launch: error: "), err
    assert expected in lines[0]
    assert aws.recorded() == [] and out == ""


@pytest.mark.parametrize(
    "instance_type, local",
    [
        ("ml.g5.xlarge", True),
        ("ml.p4d.24xlarge", True),
        ("ml.c5d.4xlarge", True),
        ("ml.m6id.large", True),
        ("ml.g4dn.xlarge", True),
        ("ml.p3.2xlarge", False),
        ("ml.c5.4xlarge", False),
        ("ml.m5.large", False),
        ("ml.g4ad.4xlarge", True),
        ("ml.p6-b200.48xlarge", True),
        ("ml.trn1.32xlarge", True),
    ],
)
def test_instance_types_with_local_storage_are_known(instance_type, local):
    assert has_local_storage(instance_type) is local
