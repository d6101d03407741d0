"""`sm-launch submit` against a real HTTP endpoint: moto's server on 127.0.0.1 plays S3 and SageMaker.

Moto's recorder keeps the raw body of every request the server receives, so the tests check the
CreateTrainingJob request as it went over the wire, that the tarball and data landed in S3, and
that a refused config or a --dry-run sent nothing at all. The shipped entry is then run for real
against a fake /opt/ml: the container entrypoint line as is, and the entry script under the
sagemaker-training toolkit (which downloads the tarball from the same server). No Ray, no GPU.
"""

import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

from smlaunch.launcher.cli import main
from smlaunch.launcher.sagemaker.request_check import validate_request
from smlaunch.launcher.sagemaker.training_job import CODE_CHANNEL, TARBALL
from support.sm_hosts import fake_host, host_env, run_toolkit

ROOT = Path(__file__).resolve().parents[3]
HETERO = str(ROOT / "configs" / "hetero.yaml")


def submit(aws, capsys, *extra: str, job: str) -> tuple[int, str, str]:
    code = main(["submit", HETERO, "--job-name", job, "--set", f"sagemaker.bucket={aws.bucket}", *extra])
    out, err = capsys.readouterr()
    return code, out, err


def sets(*overrides: str) -> list[str]:
    return [x for o in overrides for x in ("--set", o)]


def shipped_config(aws, job: str, tmp_path: Path) -> dict:
    """The config in a submitted job's tarball, as its hosts read it."""
    tarball = tmp_path / f"{job}.tar.gz"
    aws.s3.download_file(aws.bucket, f"smlaunch/{job}/code/sourcedir.tar.gz", str(tarball))
    with tarfile.open(tarball) as tar:
        return yaml.safe_load(tar.extractfile("smlaunch-config.yaml").read())


def test_dry_run_prints_the_request_as_json_and_sends_nothing(aws, capsys):
    code, out, err = submit(aws, capsys, "--dry-run", job="dry-1")
    assert code == 0, err
    request = json.loads(out)
    assert aws.recorded() == []  # no upload, no API call, not even a listing
    assert request["Environment"]["SMLAUNCH_RAY_TOKEN"] == "<generated, 43 chars>"
    request["Environment"]["SMLAUNCH_RAY_TOKEN"] = "x" * 43
    assert validate_request(request) == []
    groups = [g["InstanceGroupName"] for g in request["ResourceConfig"]["InstanceGroups"]]
    assert groups == ["train_group", "data_group"]
    routed = {
        c["ChannelName"]: c["DataSource"]["S3DataSource"]["InstanceGroupNames"] for c in request["InputDataConfig"]
    }
    assert routed == {"train": ["data_group"], "validation": ["data_group"], CODE_CHANNEL: groups}
    assert (
        request["InputDataConfig"][0]["DataSource"]["S3DataSource"]["S3Uri"]
        == f"s3://{aws.bucket}/smlaunch/dry-1/data/train/"
    )
    assert request["AlgorithmSpecification"]["ContainerEntrypoint"][:2] == ["/bin/sh", "-c"]
    assert request["CheckpointConfig"] == {
        "S3Uri": f"s3://{aws.bucket}/smlaunch/dry-1/checkpoints/",
        "LocalPath": "/opt/ml/checkpoints",
    }


def test_container_submit_uploads_creates_the_job_and_its_entrypoint_runs(aws, capsys, tmp_path):
    code, out, err = submit(
        aws, capsys, "--set", "sagemaker.command=plan", "--set", "sagemaker.tags={team: vision}", job="box-1"
    )
    assert code == 0, err
    (request,) = aws.create_requests()
    assert validate_request(request) == []
    puts = [e["url"] for e in aws.recorded() if e["method"] == "PUT"]
    assert any("box-1/code/sourcedir.tar.gz" in url for url in puts)  # the recorder sees the uploads too
    token = request["Environment"]["SMLAUNCH_RAY_TOKEN"]
    assert len(token) >= 32 and token not in out + err
    assert request["Environment"]["SMLAUNCH_COMMAND"] == "plan" and request["Tags"] == [
        {"Key": "team", "Value": "vision"}
    ]
    assert "HyperParameters" not in request
    assert all(c["DataSource"]["S3DataSource"]["InstanceGroupNames"] for c in request["InputDataConfig"])
    assert {m["Name"] for m in request["AlgorithmSpecification"]["MetricDefinitions"]} >= {
        "train:loss",
        "validation:accuracy",
    }
    import boto3  # the same server answers DescribeTrainingJob

    sagemaker = boto3.client("sagemaker", endpoint_url=aws.endpoint)
    assert sagemaker.describe_training_job(TrainingJobName="box-1")["TrainingJobName"] == "box-1"

    keys = aws.keys("smlaunch/box-1/")
    assert "smlaunch/box-1/code/sourcedir.tar.gz" in keys
    assert any(k.startswith("smlaunch/box-1/data/train/") and k.endswith(".tfrecord") for k in keys)
    assert any(k.startswith("smlaunch/box-1/data/validation/") for k in keys)

    tree, group = fake_host(tmp_path, request, "algo-1")
    assert group == "train_group"
    code_dir = tree / "input" / "data" / CODE_CHANNEL
    code_dir.mkdir(parents=True)
    aws.s3.download_file(aws.bucket, "smlaunch/box-1/code/sourcedir.tar.gz", str(code_dir / "sourcedir.tar.gz"))
    with tarfile.open(code_dir / "sourcedir.tar.gz") as tar:
        names = tar.getnames()
        shipped = yaml.safe_load(tar.extractfile("smlaunch-config.yaml").read())
    assert {"pyproject.toml", "README.md", "smlaunch_entry.py", "smlaunch/launcher/cli.py"} <= set(names)
    assert not any("__pycache__" in n for n in names)
    assert shipped["channels"]["train"]["source"] == "builtin:digits/train"  # classes and rows, as locally
    assert shipped["trainer"]["steps"] == 300 and shipped["sagemaker"]["command"] == "plan"

    argv = request["AlgorithmSpecification"]["ContainerEntrypoint"] + request["AlgorithmSpecification"].get(
        "ContainerArguments", []
    )
    ran = subprocess.run(argv, env=host_env(request, tree), capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr[-2000:]
    assert (tree / "code" / "smlaunch" / "launcher" / "cli.py").is_file()
    # install_package: auto, and this Python has every dependency: nothing installed, no network
    assert request["Environment"]["SMLAUNCH_PIP_INSTALL"] == "auto"
    assert "every dependency is installed; the shipped code goes on PYTHONPATH" in ran.stdout
    assert "pip install" not in ran.stdout
    assert "SageMaker job: this host is algo-1 (head, train_group)" in ran.stdout
    assert "train: File tfrecord (FullyReplicated, new order each epoch (seed 0)" in ran.stdout
    assert "from builtin:digits/train -> /opt/ml/input/data/train on algo-2" in ran.stdout
    assert token not in ran.stdout + ran.stderr


def test_toolkit_submit_runs_the_entry_script_under_the_training_toolkit(aws, capsys, tmp_path):
    pytest.importorskip("sagemaker_training")
    code, out, err = submit(
        aws,
        capsys,
        "--set",
        "sagemaker.entry=toolkit",
        "--set",
        "sagemaker.command=plan",
        "--set",
        "sagemaker.install_package=false",
        "--set",
        "sagemaker.spot=true",
        job="kit-1",
    )
    assert code == 0, err
    (request,) = aws.create_requests()
    assert validate_request(request) == []
    assert "ContainerEntrypoint" not in request["AlgorithmSpecification"]
    assert [c["ChannelName"] for c in request["InputDataConfig"]] == ["train", "validation"]
    hp = request["HyperParameters"]
    assert json.loads(hp["sagemaker_program"]) == "smlaunch_entry.py"
    assert json.loads(hp["sagemaker_submit_directory"]) == f"s3://{aws.bucket}/smlaunch/kit-1/code/sourcedir.tar.gz"
    assert request["EnableManagedSpotTraining"] is True
    assert request["StoppingCondition"] == {"MaxRuntimeInSeconds": 7200, "MaxWaitTimeInSeconds": 14400}

    tree, group = fake_host(tmp_path, request, "algo-2")
    assert group == "data_group"
    ran = run_toolkit(aws, request, tree)
    assert (tree / "code" / "smlaunch_entry.py").is_file()  # unpacked by the toolkit
    assert "SageMaker job: this host is algo-2 (worker, data_group)" in ran.stdout
    assert "head: algo-1 (train_group, ml.g5.xlarge) at algo-1:6379" in ran.stdout


FSX = "{type: FSxLustre, id: fs-0123456789abcdef0, directory: /fsx/digits/train}"
EFS = "{type: EFS, id: fs-12345678, directory: /digits/val, access_mode: rw}"
VPC = "{subnets: [subnet-0a1b2c3d, subnet-4e], security_group_ids: [sg-0123abcd]}"
SIX_GROUPS = "[" + ", ".join(f"{{name: g{i}, instance_type: ml.g5.xlarge}}" for i in range(6)) + "]"


@pytest.mark.parametrize(
    "overrides, expected",
    [
        ([f"cluster.instance_groups={SIX_GROUPS}"], "cluster.instance_groups: List should have at most 5 items"),
        (["channels.train.instance_groups=[nope]"], "channels.train.instance_groups: no instance group 'nope'"),
        (
            [
                "channels.train.source=s3://b/train.manifest",
                "channels.train.input_mode=FastFile",
                "channels.train.record_format=recordio",
                "channels.train.attribute_names=[source-ref, class]",
            ],
            "channels.train: input_mode: FastFile reads an S3 prefix only",
        ),
        (
            ["channels.train.source=s3://b/train.manifest", "channels.train.input_mode=Pipe"],
            "channels.train: source s3://b/train.manifest looks like a manifest; set s3_data_type",
        ),
        (
            [
                "channels.train.source=s3://b/train.manifest",
                "channels.train.input_mode=Pipe",
                "channels.train.s3_data_type=AugmentedManifestFile",
            ],
            "channels.train: attribute_names: source s3://b/train.manifest is an augmented manifest",
        ),
        (
            [f"channels.train.file_system={FSX}", "channels.train.source=/data/train", "model.num_classes=10"],
            "channels.train.file_system: SageMaker mounts FSxLustre fs-0123456789abcdef0 only inside a VPC",
        ),
        (["model.pretrained=/no/such/weights.pt"], "model.pretrained: /no/such/weights.pt does not exist"),
        (
            ["channels.validation.source=/nonexistent/val.manifest", "channels.validation.s3_data_type=ManifestFile"],
            "channels.validation.source: /nonexistent/val.manifest does not exist (a ManifestFile)",
        ),
        (
            ["cluster.instance_groups.1.instance_count=0"],
            "cluster.instance_groups.1.instance_count: Input should be greater than or equal to 1",
        ),
        (["cluster.instance_groups=[]"], "cluster.instance_groups: List should have at least 1 item"),
        (
            ["cluster.instance_groups.0.instance_type=ml.q9.huge"],
            "cluster.instance_groups.0.instance_type: 'ml.q9.huge' is not a SageMaker training instance type",
        ),
        (
            ["cluster.instance_groups.1.instance_type=ml.c5.large"],
            "cluster.instance_groups.1.instance_type: 'ml.c5.large' is not a SageMaker training instance type",
        ),
        (
            [
                "channels.train.source=/data/train.jsonl",
                "channels.train.input_mode=Pipe",
                "model.num_classes=10",
                "channels.train.record_format=recordio",
                "channels.train.attribute_names=[source-ref, class]",
            ],
            "channels.train.source: a local augmented manifest cannot be submitted",
        ),
        (
            ["channels.train.source=/nonexistent/folder", "model.num_classes=10"],
            "channels.train.source: /nonexistent/folder is not a directory (it does not exist)",
        ),
        ([f"channels.{CODE_CHANNEL}.source=builtin:digits/train"], f"channels.{CODE_CHANNEL}: the name is taken"),
        (["sagemaker.spot=true", "sagemaker.max_wait_s=60"], "sagemaker: max_wait_s (60) must be >= max_run_s (7200)"),
        (["sagemaker.max_wait_s=9000"], "sagemaker: max_wait_s (MaxWaitTimeInSeconds) is for spot jobs only"),
        (
            ["sagemaker.environment={SMLAUNCH_RAY_TOKEN: abc}"],
            "sagemaker.environment: Value error, SMLAUNCH_RAY_TOKEN is set",
        ),
        (["sagemaker.regoin=eu-west-1"], "sagemaker.regoin: unknown key; valid keys: image_uri, role_arn, bucket"),
        (["sagemaker=null"], "sagemaker: section missing; submit needs sagemaker.image_uri"),
    ],
)
def test_bad_config_is_refused_in_one_line_before_anything_is_sent(aws, capsys, overrides, expected):
    code, out, err = submit(aws, capsys, *[x for o in overrides for x in ("--set", o)], job="bad-1")
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("sm-launch: error: "), err
    assert expected.replace("Value error, ", "") in lines[0]
    assert aws.recorded() == [] and out == ""


def test_a_local_folder_channel_is_uploaded_and_the_shipped_config_points_at_it(aws, capsys, tmp_path):
    from tfrecord import TFRecordWriter

    folder = tmp_path / "shards"
    (folder / "sub").mkdir(parents=True)
    for name in ("a.tfrecord", "sub/b.tfrecord"):  # written by the `tfrecord` package, as users' shards are
        writer = TFRecordWriter(str(folder / name))
        writer.write({"image/class/label": (1, "int")})
        writer.close()
    code, out, err = submit(aws, capsys, "--set", f"channels.validation.source={folder}", job="dir-1")
    assert code == 0, err
    prefix = "smlaunch/dir-1/data/validation/"
    assert sorted(aws.keys(prefix)) == [prefix + "a.tfrecord", prefix + "sub/b.tfrecord"]
    (request,) = aws.create_requests()
    assert request["InputDataConfig"][1]["DataSource"]["S3DataSource"]["S3Uri"] == f"s3://{aws.bucket}/{prefix}"
    shipped = shipped_config(aws, "dir-1", tmp_path)
    assert shipped["channels"]["validation"]["source"] == f"s3://{aws.bucket}/{prefix}"
    assert f"channel validation: 2 files from {folder}" in out


@pytest.mark.parametrize(
    "entry,code", [("container", "model"), ("toolkit", "model"), ("container", "loop"), ("toolkit", "loop")]
)
def test_a_user_s_project_ships_in_the_tarball_and_each_host_finds_its_functions(
    aws, capsys, tmp_path, monkeypatch, entry, code
):
    """Submitted from the user's project folder (tests/support/byo_project): its modules ship under
    `user_code/` without the channel data beside them, its venv or caches; on a host (`plan`, under
    the container entrypoint and under the training toolkit), the factory, the loss and the map op
    (`code="model"`), or the user's own Ray Train loop (`code="loop"`, issue 55), are found by name
    in that copy alone."""
    if entry == "toolkit":
        pytest.importorskip("sagemaker_training")
    from support.byo import copy_project, project_module

    folder = copy_project(tmp_path)
    frame = project_module(folder, "regression").make_frame(40, seed=0)
    for split in ("train", "validation"):
        (folder / "data" / split).mkdir(parents=True)
        frame.to_parquet(folder / "data" / split / "part-0.parquet", index=False)
    (folder / "__pycache__").mkdir(exist_ok=True)
    (folder / "__pycache__" / "x.pyc").write_bytes(b"0")
    fields = "{x1: x1, x2: x2, x3: x3, x4: x4, y: y}"
    monkeypatch.chdir(folder)  # where the user runs sm-launch
    job = f"byo-{entry}-{code}"
    uses = (
        [
            "model={factory: 'regression:mlp', params: {inputs: 4}}",
            "task={loss: 'regression:mse', evaluate: 'regression:metrics'}",
        ]
        if code == "model"
        else [
            "model=null",
            "task=null",
            # a trainer section of the loop's: the built-in loop's keys would be refused beside it
            "trainer={loop: 'ray_loop:train_func', loop_config: {lr: 0.05, batch_size: 8}, steps: 300}",
        ]
    )
    status, out, err = submit(
        aws,
        capsys,
        *sets(
            "sagemaker.command=plan",
            f"sagemaker.entry={entry}",
            "sagemaker.install_package=false",
            *uses,
            "pipeline.ops=[{op: map, function: 'regression:stack_features'}]",
            *[
                f"channels.{split}={{source: {folder / 'data' / split}, record_format: parquet, fields: {fields}}}"
                for split in ("train", "validation")
            ],
        ),
        job=job,
    )
    assert status == 0, err
    (request,) = aws.create_requests()
    tree, _ = fake_host(tmp_path, request, "algo-1")
    tarball = tmp_path / "sourcedir.tar.gz"
    aws.s3.download_file(aws.bucket, f"smlaunch/{job}/code/sourcedir.tar.gz", str(tarball))
    with tarfile.open(tarball) as tar:
        shipped = sorted(n for n in tar.getnames() if n.startswith("user_code/"))
    assert shipped == [
        "user_code/ray_loop.py",
        "user_code/regression.py",
        "user_code/segmentation.py",
        "user_code/train.py",
    ], shipped
    monkeypatch.chdir(tmp_path)  # not the project folder: only the shipped copy can answer on the host
    if entry == "toolkit":
        ran = run_toolkit(aws, request, tree)
    else:
        code_dir = tree / "input" / "data" / CODE_CHANNEL
        code_dir.mkdir(parents=True)
        (code_dir / "sourcedir.tar.gz").write_bytes(tarball.read_bytes())
        argv = request["AlgorithmSpecification"]["ContainerEntrypoint"] + request["AlgorithmSpecification"].get(
            "ContainerArguments", []
        )
        ran = subprocess.run(argv, env=host_env(request, tree), capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr[-2000:]
    user_code = tree / "code" / "user_code"
    if code == "model":
        assert f"model: regression:mlp(inputs=4) on every rank, imported from {user_code}" in ran.stdout
    else:
        assert (
            f"loop: ray_loop:train_func(config) on each of 1 Ray Train worker, imported from {user_code}" in ran.stdout
        ), ran.stdout[-2000:]


def test_a_missing_bucket_is_one_line_and_exit_1(aws, capsys):
    code = main(["submit", HETERO, "--job-name", "gone-1", "--set", "sagemaker.bucket=no-such-bucket-here"])
    err = capsys.readouterr().err
    assert code == 1
    (line,) = err.strip().splitlines()
    assert line.startswith("sm-launch: error: upload to s3://no-such-bucket-here/smlaunch/gone-1/data/train/")
    assert "NoSuchBucket" in line and aws.create_requests() == []


def test_validate_request_names_each_problem_on_its_own_line(configs):
    from smlaunch.config import load_config
    from smlaunch.launcher.sagemaker.training_job import build_training_job_request

    request = build_training_job_request(load_config(configs / "hetero.yaml"), "ok-1", "t" * 43, "us-east-1")
    assert validate_request(request) == []
    groups = request["ResourceConfig"]["InstanceGroups"]
    groups.extend({"InstanceGroupName": f"g{i}", "InstanceType": "ml.c5.xlarge", "InstanceCount": 1} for i in range(4))
    del request["RoleArn"]
    request["ResourceConfig"]["VolumeSizeInGB"] = "30"
    request["InputDataConfig"][0]["DataSource"]["S3DataSource"]["InstanceGroupNames"] = ["ghost"]
    request["InputDataConfig"][1]["DataSource"]["S3DataSource"].pop("InstanceGroupNames")
    request["InputDataConfig"][1]["InputMode"] = "FastFile"
    request["InputDataConfig"][1]["DataSource"]["S3DataSource"]["S3DataType"] = "AugmentedManifestFile"
    request.update(
        EnableManagedSpotTraining=True, StoppingCondition={"MaxRuntimeInSeconds": 100, "MaxWaitTimeInSeconds": 50}
    )
    request["InputDataConfig"].append(
        {
            "ChannelName": "fsx",
            "InputMode": "Pipe",
            "DataSource": {
                "S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": "s3://b/x/"},
                "FileSystemDataSource": {
                    "FileSystemId": "fs-12345678",
                    "FileSystemAccessMode": "ro",
                    "FileSystemType": "EFS",
                    "DirectoryPath": "/",
                },
            },
        }
    )
    errors = validate_request(request)
    expected = [
        'Missing required parameter in input: "RoleArn"',
        "Invalid type for parameter ResourceConfig.VolumeSizeInGB",
        "ResourceConfig.InstanceGroups: 6 items, the service allows at most 5",
        "ResourceConfig.InstanceGroups: 6 groups, a job may have at most 5",
        "InputDataConfig train: InstanceGroupNames names 'ghost'",
        "InputDataConfig validation: FastFile needs S3DataType S3Prefix",
        "InputDataConfig validation: an AugmentedManifestFile needs AttributeNames",
        "InputDataConfig: InstanceGroupNames must be on every channel or none",
        "StoppingCondition: MaxWaitTimeInSeconds (50) must be >= MaxRuntimeInSeconds (100)",
        "InputDataConfig fsx: DataSource takes one of S3DataSource, FileSystemDataSource, not several",
        "InputDataConfig fsx: a FileSystemDataSource needs InputMode File, not Pipe",
        "InputDataConfig fsx: a FileSystemDataSource needs VpcConfig",
    ]
    for text in expected:
        assert sum(text in e for e in errors) == 1, (text, errors)
    assert all("\n" not in e for e in errors)


def test_cli_import_stays_free_of_boto3_torch_and_ray():
    code = (
        "import sys\nfrom smlaunch.launcher.cli import main\ntry:\n    main(['submit', '--help'])\n"
        "except SystemExit:\n    pass\nprint(sorted(m for m in ('boto3', 'botocore', 'torch', 'ray') if m in "
        "sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "--dry-run" in out.stdout and out.stdout.strip().endswith("[]")


def test_file_system_channels_are_mounted_in_the_vpc_and_nothing_is_uploaded_for_them(aws, capsys, tmp_path):
    code, out, err = submit(
        aws,
        capsys,
        *sets(
            f"sagemaker.vpc={VPC}",
            "sagemaker.command=plan",
            "sagemaker.install_package=false",
            f"channels.train.file_system={FSX}",
            "channels.train.source=/data/train",
            "model.num_classes=10",
            f"channels.validation.file_system={EFS}",
            "channels.validation.source=/data/validation",
        ),
        job="fs-1",
    )
    assert code == 0, err  # the stand-in folders do not exist here, and nothing looks for them
    (request,) = aws.create_requests()
    assert validate_request(request) == []
    assert request["VpcConfig"] == {"SecurityGroupIds": ["sg-0123abcd"], "Subnets": ["subnet-0a1b2c3d", "subnet-4e"]}
    channels = {c["ChannelName"]: c for c in request["InputDataConfig"]}
    assert channels["train"] == {
        "ChannelName": "train",
        "InputMode": "File",
        "DataSource": {
            "FileSystemDataSource": {
                "FileSystemId": "fs-0123456789abcdef0",
                "FileSystemAccessMode": "ro",
                "FileSystemType": "FSxLustre",
                "DirectoryPath": "/fsx/digits/train",
            }
        },
    }
    efs = channels["validation"]["DataSource"]["FileSystemDataSource"]
    assert (efs["FileSystemType"], efs["FileSystemAccessMode"], efs["DirectoryPath"]) == ("EFS", "rw", "/digits/val")
    assert channels[CODE_CHANNEL]["DataSource"]["S3DataSource"]["InstanceGroupNames"] == ["train_group", "data_group"]
    assert aws.keys("smlaunch/fs-1/") == ["smlaunch/fs-1/code/sourcedir.tar.gz"]
    assert "channel train: mounted from FSxLustre fs-0123456789abcdef0:/fsx/digits/train (ro), nothing uploaded" in out
    shipped = shipped_config(aws, "fs-1", tmp_path)["channels"]
    assert shipped["train"]["source"] == "/data/train"  # the local stand-in: hosts read the mount
    assert shipped["train"]["file_system"] == {**yaml.safe_load(FSX), "access_mode": "ro"}
    tree, _ = fake_host(tmp_path, request, "algo-2")  # a data host: it reads the mounts
    (tree / "input" / "data" / CODE_CHANNEL).mkdir(parents=True)
    aws.s3.download_file(
        aws.bucket, f"smlaunch/fs-1/code/{TARBALL}", str(tree / "input" / "data" / CODE_CHANNEL / TARBALL)
    )
    ran = subprocess.run(
        request["AlgorithmSpecification"]["ContainerEntrypoint"],
        env=host_env(request, tree),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr[-2000:]
    assert "SageMaker job: this host is algo-2 (worker, data_group)" in ran.stdout
    assert "from /data/train -> /opt/ml/input/data/train on algo-2" in ran.stdout


def test_manifests_in_s3_are_named_as_given(aws, capsys):
    manifest = f"s3://{aws.bucket}/lists/validation.manifest"
    code, out, err = submit(
        aws,
        capsys,
        "--dry-run",
        *sets(
            f"channels.validation.source={manifest}",
            "channels.validation.s3_data_type=ManifestFile",
            "channels.train.source=s3://b/train.manifest",
            "channels.train.input_mode=Pipe",
            "channels.train.record_format=recordio",
            "channels.train.attribute_names=[source-ref, class]",
            "model.num_classes=10",
        ),
        job="man-dry-1",
    )
    assert code == 0, err
    request = json.loads(out)
    request["Environment"]["SMLAUNCH_RAY_TOKEN"] = "x" * 43
    assert aws.recorded() == [] and validate_request(request) == []
    channels = {c["ChannelName"]: c for c in request["InputDataConfig"]}
    validation = channels["validation"]["DataSource"]["S3DataSource"]
    assert (validation["S3DataType"], validation["S3Uri"]) == ("ManifestFile", manifest)
    assert "RecordWrapperType" not in channels["validation"]  # a tfrecord channel's objects arrive as they are
    train = channels["train"]["DataSource"]["S3DataSource"]
    assert (train["S3DataType"], train["AttributeNames"]) == ("AugmentedManifestFile", ["source-ref", "class"])
    assert channels["train"]["RecordWrapperType"] == "RecordIO"


def test_a_local_manifest_file_is_uploaded_and_the_channel_points_at_it(aws, capsys, tmp_path):
    body = json.dumps([{"prefix": f"s3://{aws.bucket}/shards/"}, "a.tfrecord", "sub/b.tfrecord"]).encode()
    (tmp_path / "val.manifest").write_bytes(body)
    weights = f"s3://{aws.bucket}/models/w.pth"
    code, out, err = submit(
        aws,
        capsys,
        *sets(
            f"channels.validation.source={tmp_path / 'val.manifest'}",
            "channels.validation.s3_data_type=ManifestFile",
            f"model.pretrained={weights}",
        ),
        job="man-1",
    )
    assert code == 0, err
    key = "smlaunch/man-1/data/validation/val.manifest"
    assert aws.keys("smlaunch/man-1/data/validation/") == [key]  # the list only: its objects are already in S3
    assert aws.s3.get_object(Bucket=aws.bucket, Key=key)["Body"].read() == body
    (request,) = aws.create_requests()
    assert validate_request(request) == []
    validation = request["InputDataConfig"][1]["DataSource"]["S3DataSource"]
    assert (validation["S3DataType"], validation["S3Uri"]) == ("ManifestFile", f"s3://{aws.bucket}/{key}")
    shipped = shipped_config(aws, "man-1", tmp_path)
    assert shipped["model"]["pretrained"] == weights  # an s3:// value is named as given
    assert (shipped["channels"]["validation"]["source"], shipped["channels"]["validation"]["s3_data_type"]) == (
        f"s3://{aws.bucket}/{key}",
        "ManifestFile",
    )


@pytest.mark.parametrize(
    "manifest, expected",
    [
        ([{"prefix": "/home/me/shards/"}, "a.tfrecord"], "a local manifest's objects must already be in S3"),
        ({"prefix": "s3://b/x/"}, "is not a ManifestFile: expected a JSON list"),
        ([{"prefix": "s3://b/x/"}], "lists no objects after its prefix"),
    ],
)
def test_a_local_manifest_that_cannot_be_submitted_is_refused(aws, capsys, tmp_path, manifest, expected):
    path = tmp_path / "val.manifest"
    path.write_text(json.dumps(manifest))
    code, out, err = submit(
        aws,
        capsys,
        *sets(f"channels.validation.source={path}", "channels.validation.s3_data_type=ManifestFile"),
        job="man-bad-1",
    )
    assert code == 2, err
    (line,) = err.strip().splitlines()
    assert line.startswith(f"sm-launch: error: channels.validation.source: {path}") and expected in line
    assert aws.recorded() == [] and out == ""


def test_local_pretrained_weights_are_uploaded_and_the_shipped_config_names_them(aws, capsys, tmp_path):
    weights = tmp_path / "resnet10t.safetensors"
    weights.write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}      ")
    code, out, err = submit(aws, capsys, *sets(f"model.pretrained={weights}"), job="pre-1")
    assert code == 0, err
    uri = f"s3://{aws.bucket}/smlaunch/pre-1/pretrained/resnet10t.safetensors"
    assert aws.s3.get_object(Bucket=aws.bucket, Key=uri[6 + len(aws.bucket) :])["Body"].read() == weights.read_bytes()
    assert shipped_config(aws, "pre-1", tmp_path)["model"]["pretrained"] == uri
